"""progcache.torch against the real torch from PyPI, on the CPU: Inductor
generates C++ there, with the same FX graph and AOTAutograd caches as on a
GPU. Each "machine" is a progcache root plus empty Inductor, Triton and
temporary directories; every compile runs in a fresh process
(python/tests/torch_child.py), and what is asserted is what the user gets:
Inductor's own cache counters, the libraries it loads, and the model's output
against a compile without progcache."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: run bash scripts/test-torch.sh")

import progcache  # noqa: E402
import progcache.torch as pt  # noqa: E402

from torch_machine import Machine, cold, served  # noqa: E402


def test_a_new_machine_gets_the_whole_warm_start_and_the_same_libraries(tmp_path):
    m = Machine(tmp_path)
    first = cold(m)
    assert first["matches_eager"]
    # Compressed by default (zstd): the store holds the libraries and the
    # precompiled header the cold start wrote, and its graphs, in under a
    # third of the libraries' own bytes.
    stored = sum(os.path.getsize(p) for p in entry_files(m.root))
    assert 0 < stored * 3 < sum(len(d) for d in m.libraries().values()), stored
    m.wipe()
    warm = m.run()
    assert served(warm), warm
    assert warm["output"] == first["output"]
    from torch._inductor.cpu_vec_isa import VecISA

    if hasattr(VecISA, "_probe_load"):  # torch 2.15 (2.11 loads every probe, warm too)
        assert warm["progcache"]["probes_served"] > 0  # Inductor's instruction-set probes were not run again
    served_libs = m.libraries()
    assert served_libs
    # Inductor's precompiled header (about 150 MB) is left in the store: no
    # compile needed it.
    assert warm["progcache"]["cpp_deferred"] == 1
    assert not [p for p in served_libs if p.endswith(".gch")]
    # The oracle: the same compile without progcache, in the same (emptied)
    # places, writes byte for byte the libraries progcache served.
    m.wipe()
    oracle = m.run(env={"PROGCACHE_DISABLE": "1"})
    assert oracle["inductor"].get("fxgraph_cache_miss") == 1 and "progcache" not in oracle or \
        oracle["progcache"]["cpp_served"] == 0
    assert oracle["output"] == warm["output"]
    fresh = {p: d for p, d in m.libraries().items() if p.endswith(".so")}
    assert set(fresh) == set(served_libs)
    for path, data in fresh.items():
        assert served_libs[path] == data, path


def test_a_graph_without_cpu_code_is_served_without_picking_an_instruction_set(tmp_path):
    # A GPU-only graph generates no CPU code, and Inductor picks no vector
    # instruction set for it (compiling and loading a probe per set, seconds
    # each): a lookup must not pick one either. A matrix product alone is
    # such a graph on the CPU (Inductor hands it to ATen).
    m = Machine(tmp_path)
    first = m.run(model="mm")
    assert first["inductor"].get("fxgraph_cache_miss") == 1 and not first["isa_picked"], first
    m.wipe()
    warm = m.run(model="mm")
    assert warm["inductor"].get("fxgraph_cache_hit") == 1 and warm["aot"].get("autograd_cache_hit") == 1, warm
    assert not warm["isa_picked"], warm
    assert warm["output"] == first["output"] and warm["matches_eager"]
    # A graph with CPU code in the same root is still keyed by the set
    # picked (the next test breaks that on purpose).
    m.wipe()
    assert m.run()["inductor"].get("fxgraph_cache_miss") == 1
    m.wipe()
    again = m.run()
    assert served(again) and again["isa_picked"], again


def test_a_graph_generated_for_another_instruction_set_is_not_served(tmp_path):
    # Inductor writes the vector width into its C++; torch's key leaves the
    # instruction set it picked out (its caches are local to a machine).
    m = Machine(tmp_path)
    first = cold(m)
    m.wipe()
    other = m.run(env={"ATEN_CPU_CAPABILITY": "default"})
    assert other["inductor"].get("fxgraph_cache_miss") == 1, other
    assert other["matches_eager"]
    m.wipe()
    assert served(m.run()) and first["matches_eager"]


def test_disable_before_inductor_is_imported_holds(tmp_path):
    code = ("import torch, progcache.torch as pt; pt.disable(); import torch._inductor.codecache; "
            "from torch._inductor import cpp_builder, config; "
            "print(getattr(cpp_builder.CppBuilder.build, '_progcache', False), config.fx_graph_remote_cache)")
    env = Machine(tmp_path).env()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "None"]
    # A setting the user gave is kept.
    code = ("import torch, progcache.torch as pt; pt.enable(); from torch._inductor import config; "
            "print(config.fx_graph_remote_cache)")
    env["TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"] = "0"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False"]


def test_enable_in_code_works_without_the_variable(tmp_path):
    m = Machine(tmp_path, PROGCACHE_TORCH="0")
    first = m.run(enable=True)
    assert first["enabled"] is True and first["progcache"]["cpp_stored"] > 0
    m.wipe()
    assert served(m.run(enable=True))


def test_a_changed_model_shape_or_dtype_compiles_again(tmp_path):
    m = Machine(tmp_path)
    base = cold(m)
    for change in ({"model": "mlp-wide"}, {"batch": 24}, {"dtype": "float64"}):
        m.wipe()
        got = m.run(**change)
        assert got["inductor"].get("fxgraph_cache_miss") == 1, (change, got)
        assert got["matches_eager"], change
        assert got["output"] != base["output"], change
        if change == {"model": "mlp-wide"}:
            # A new kernel's compile names the precompiled header the store
            # holds: it is placed first, and the compile uses it.
            assert got["progcache"]["cpp_deferred"] == 1 and got["progcache"]["cpp_compiled"] > 0, got
            assert [p for p in m.libraries() if p.endswith(".gch")]
    # And the original is still served.
    m.wipe()
    assert served(m.run())
    # The precompiled header's entry evicted (the largest entry): a new
    # kernel's compile gets the header built as torch builds it.
    biggest = max(entry_files(m.root), key=os.path.getsize)
    assert os.path.getsize(biggest) > 10 << 20
    os.unlink(biggest)
    m.wipe()
    got = m.run(model="conv")
    assert got["matches_eager"] and got["progcache"]["cpp_compiled"] > 0
    assert [p for p in m.libraries() if p.endswith(".gch")]


def entry_files(root):
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, "torch")):
        out += [os.path.join(dirpath, f) for f in files
                if len(f) == 62 and all(c in "0123456789abcdef" for c in f)]
    return out


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_entry_is_a_miss_and_the_compile_is_right(tmp_path, damage):
    m = Machine(tmp_path)
    base = cold(m)
    files = entry_files(m.root)
    assert files, "no torch entries on disk"
    for f in files:
        data = bytearray(open(f, "rb").read())
        if damage == "flip":
            data[len(data) // 2] ^= 0xFF
        else:
            data = data[:len(data) // 2]
        with open(f, "wb") as fh:
            fh.write(data)
    m.wipe()
    got = m.run()
    assert got["inductor"].get("fxgraph_cache_miss") == 1, got
    assert got["progcache"]["cpp_served"] == 0 and got["progcache"]["cpp_compiled"] > 0
    assert got["output"] == base["output"] and got["matches_eager"]


def test_an_unsigned_redis_is_not_read_and_a_signed_one_serves_another_root(tmp_path, redis_url):
    # Unsigned: what another machine wrote there is host code nobody vouched for.
    writer = Machine(tmp_path, "writer", PROGCACHE_REMOTE=redis_url)
    cold(writer)
    reader = Machine(tmp_path, "reader", dirs=str(tmp_path / "dirs-writer"), PROGCACHE_REMOTE=redis_url)
    writer.wipe()
    got = reader.run()
    assert got["inductor"].get("fxgraph_cache_miss") == 1 and got["progcache"]["cpp_served"] == 0, got
    assert sum("host code" in w for w in got["warnings"]) == 1, got["warnings"]  # said once
    # Signed (one HMAC key on both): a second root is served by the first's
    # entries through Redis.
    key = tmp_path / "hmac.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    a = Machine(tmp_path, "a", PROGCACHE_REMOTE=redis_url, PROGCACHE_HMAC_KEY_FILE=str(key))
    first = a.run()
    assert first["progcache"]["cpp_stored"] > 0
    b = Machine(tmp_path, "b", dirs=str(tmp_path / "dirs-a"), PROGCACHE_REMOTE=redis_url,
                PROGCACHE_HMAC_KEY_FILE=str(key))
    a.wipe()
    got = b.run()
    assert served(got), got
    assert got["output"] == first["output"]
    # Planted: a writer without the key stores its own entries in the signed
    # Redis (a wider model, compiled first there); a reader with the key
    # rejects them (their signatures do not verify) and compiles.
    intruder = Machine(tmp_path, "intruder", PROGCACHE_REMOTE=redis_url)
    cold(intruder)
    intruder_wide = intruder.run(model="mlp-wide")
    c = Machine(tmp_path, "c", dirs=str(tmp_path / "dirs-intruder"), PROGCACHE_REMOTE=redis_url,
                PROGCACHE_HMAC_KEY_FILE=str(key))
    intruder.wipe()
    got = c.run(model="mlp-wide")
    assert got["inductor"].get("fxgraph_cache_miss") == 1 and got["progcache"]["cpp_served"] == 0, got
    assert got["output"] == intruder_wide["output"] and got["matches_eager"]


def test_a_group_root_without_a_key_is_not_read(tmp_path):
    owner = Machine(tmp_path, "owner", PROGCACHE_SHARING="group")
    first = owner.run()
    owner.wipe()
    got = owner.run()
    # Entries of a group-shared root may be another member's: not loaded.
    assert got["inductor"].get("fxgraph_cache_miss") == 1 and got["progcache"]["cpp_served"] == 0, got
    assert got["output"] == first["output"]
    assert sum("host code" in w for w in got["warnings"]) == 1, got["warnings"]  # said once


def test_a_dead_redis_and_an_unusable_root_cost_a_miss(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = Machine(tmp_path, "dead", PROGCACHE_REMOTE=f"redis://127.0.0.1:{port}?timeout=200")
    got = dead.run()
    assert got["matches_eager"]
    dead.wipe()
    assert served(dead.run())  # the local store still serves
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    bad = Machine(tmp_path, "bad", root=str(blocker))
    got = bad.run()
    assert got["matches_eager"] and got["inductor"].get("fxgraph_cache_miss") == 1
    assert sum("not used" in w for w in got["warnings"] + [got["stderr"]]) == 1, got


def test_a_full_disk_never_fails_a_compile(tmp_path):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a small tmpfs")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        m = Machine(tmp_path, root=str(small / "root"))
        first = m.run()  # most entries do not fit
        assert first["matches_eager"] and first["progcache"]["cpp_compiled"] > 0
        m.wipe()
        again = m.run()  # what fitted is served, the rest compiled
        assert again["matches_eager"] and again["output"] == first["output"]
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


# ------------------------------------------------- torch_key() from the memo

KEY_PROBE = r"""
import json, os, sys
import torch
import torch._inductor.codecache as cc  # PROGCACHE_TORCH turns progcache.torch on here
home = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].endswith(".py") and \
            os.path.abspath(args[0]).startswith(home):
        opened.append(args[0])
sys.addaudithook(hook)
if os.environ.get("SET_FIRST"):
    cc.torch_key.set(b"set by torch" * 2)
memo = cc.torch_key()
hashed = len(opened)
own = cc.torch_key.__wrapped__
own.clear()
print(json.dumps({"memo": memo.hex(), "real": own().hex(), "hashed": hashed, "torch": torch.__file__,
                  "memoised": getattr(cc.torch_key, "_progcache_memo", False)}))
"""


def _torch_key(m, site=None, **more):
    e = m.env(**more)
    if site:
        e["PYTHONPATH"] = site + os.pathsep + e.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", KEY_PROBE], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _replace(path, data):
    os.unlink(path)  # never write through the hard link into the installed file
    with open(path, "wb") as f:
        f.write(data)


def test_torch_key_from_the_memo_is_torchs_own_and_follows_every_file_it_hashes(tmp_path):
    from progcache import _core
    if _core.memo_identities([str(tmp_path)])[0] is None:
        pytest.skip("this kernel gives no unique mount ID (Linux 6.8 and later do): nothing is memoised here")
    # A copy of the installed torch made of hard links, so its files can be
    # replaced without touching the installed ones.
    src = os.path.dirname(torch.__file__)
    site = tmp_path / "site"
    site.mkdir()
    if subprocess.run(["cp", "-al", src, str(site / "torch")], capture_output=True).returncode != 0:
        pytest.skip("cannot hard-link a copy of torch here (another file system)")
    time.sleep(2.2)  # linking changed every file's ctime: nothing younger than two seconds is memoised
    m = Machine(tmp_path)
    first = _torch_key(m, str(site))
    assert first["torch"].startswith(str(site)) and first["memoised"]
    assert first["memo"] == first["real"] and first["hashed"] > 1000  # torch hashed its modules
    hit = _torch_key(m, str(site))
    assert hit["memo"] == first["real"] and hit["hashed"] == 0  # the memo answered: no module of torch read
    seen = {first["real"]}
    inductor = site / "torch" / "_inductor"
    for edit in ("module", "added", "extra"):
        if edit == "module":
            path = inductor / "codegen" / "cpp.py"
            _replace(path, path.read_bytes() + b"\n# edited\n")
        elif edit == "added":
            (inductor / "added_by_test.py").write_text("X = 1\n")
        else:
            path = inductor / "script.ld"
            _replace(path, path.read_bytes() + b"\n")
        after = _torch_key(m, str(site))
        assert after["memo"] == after["real"] and after["memo"] not in seen, edit
        seen.add(after["memo"])


ROUND_TRIP = r"""
import json, subprocess
import torch
import torch._inductor.codecache as cc
import torch._inductor.async_compile as ac
import triton.runtime.cache as tc
import triton.runtime.autotuner as at
import triton.knobs as tk
import progcache.torch as pt
before = (cc.torch_key, ac.torch_key if hasattr(ac, "torch_key") else None, tc.triton_key, at.triton_key)
assert pt.enable()
on = (cc.torch_key is not before[0], tc.triton_key is not before[2], at.triton_key is not before[3],
      tk.subprocess is not subprocess)
pt.disable()
after = (cc.torch_key, ac.torch_key if hasattr(ac, "torch_key") else None, tc.triton_key, at.triton_key)
print(json.dumps({"on": on, "back": [a is b for a, b in zip(before, after)], "subprocess": tk.subprocess is subprocess}))
"""


def test_disable_gives_torch_and_triton_their_own_key_functions_back(tmp_path):
    pytest.importorskip("triton")
    e = Machine(tmp_path).env()
    e.pop("PROGCACHE_TORCH")
    p = subprocess.run([sys.executable, "-c", ROUND_TRIP], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert all(got["on"]), got
    assert all(got["back"]) and got["subprocess"], got


def test_a_value_torch_sets_is_kept_over_the_memo(tmp_path):
    # torch's compile workers receive torch_key() from their parent through
    # its set(); the memo never replaces it, nor makes set() fail.
    m = Machine(tmp_path)
    _torch_key(m)
    got = _torch_key(m, SET_FIRST="1")
    assert bytes.fromhex(got["memo"]) == b"set by torch" * 2


# ----------------------------------------------------------- in this process


def test_unsupported_torch_is_said_once_and_changes_nothing(monkeypatch):
    pt.disable()
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    from torch._inductor import cpp_builder
    before = cpp_builder.CppBuilder.build
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert pt.enable() is False
        assert pt.enable() is False
    said = [w for w in caught if "not a release progcache.torch was tested with" in str(w.message)]
    assert len(said) <= 1  # once per process (it may have been said by an earlier test)
    assert cpp_builder.CppBuilder.build is before


def test_missing_torch_is_a_clear_import_error(tmp_path):
    code = "import sys; sys.modules['torch'] = None\ntry:\n import progcache.torch\nexcept ImportError as e:\n print(e)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if not k.startswith("PROGCACHE_TORCH")})
    assert "progcache.torch needs PyTorch" in p.stdout and "pip install torch" in p.stdout


def test_an_object_from_another_torch_is_a_miss(monkeypatch):
    pt.reset()
    pt.put_object("pt2:fx-graph-v1::k", b"graph")
    assert pt.get_object("pt2:fx-graph-v1::k") == b"graph"
    monkeypatch.setattr(torch, "__version__", torch.__version__ + ".other")
    assert pt.get_object("pt2:fx-graph-v1::k") is None


# ------------------------------------------- C++ builds: the manifest's rules


def _builder(src_dir, out_dir, includes):
    from torch._inductor.cpp_builder import CppBuilder, CppOptions
    opts = CppOptions(extra_flags=[f"-I{d}" for d in includes])
    return CppBuilder(name="unit", sources=[str(src_dir / "unit.cpp")], BuildOption=opts, output_dir=str(out_dir))


def _build(tmp_path, includes):
    """Builds unit.cpp through progcache.torch's wrapper; returns (served?,
    the library's bytes)."""
    # A file changed moments before a compile may have been changed during
    # it, as far as file times can tell: nothing read would be stored.
    time.sleep(0.1)
    before = pt.stats()["cpp_served"]
    b = _builder(tmp_path / "src", tmp_path / "out", includes)
    target = b.get_target_file_path()
    if os.path.exists(target):
        os.unlink(target)
    b.build()
    with open(target, "rb") as f:
        data = f.read()
    return pt.stats()["cpp_served"] > before, data


def _oracle(tmp_path, includes):
    pt.disable()
    try:
        return _build(tmp_path, includes)[1]
    finally:
        assert pt.enable()


def _compiled_anew(tmp_path, includes):
    """Whether the next build is compiled, not served, and equals a compile
    without progcache."""
    served_now, data = _build(tmp_path, includes)
    return not served_now and data == _oracle(tmp_path, includes)


@pytest.fixture
def cpp_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("PROGCACHE_DIR", str(tmp_path / "root"))
    pt.disable()
    pt.reset()
    assert pt.enable()
    (tmp_path / "src").mkdir()
    (tmp_path / "out").mkdir()
    first, second = tmp_path / "inc1", tmp_path / "inc2"
    first.mkdir()
    second.mkdir()
    (second / "value.h").write_text("#define VALUE 2\n")
    (tmp_path / "src" / "unit.cpp").write_text(
        '#include "value.h"\n'
        "#if __has_include(<extra.h>)\n#include <extra.h>\n#else\n#define EXTRA 0\n#endif\n"
        'extern "C" int value() { return VALUE + EXTRA; }\n')
    yield tmp_path, [first, second]
    pt.disable()


def test_a_cpp_build_is_served_only_while_every_header_and_search_place_holds(cpp_tree):
    tmp_path, includes = cpp_tree
    first, second = includes
    assert _build(tmp_path, includes)[0] is False
    served_now, data = _build(tmp_path, includes)
    assert served_now and data == _oracle(tmp_path, includes)
    # An edited header: compiled again, and equal to a compile without progcache.
    (second / "value.h").write_text("#define VALUE 3\n")
    assert _compiled_anew(tmp_path, includes)
    # A header created later where the compiler looks first.
    (first / "value.h").write_text("#define VALUE 4\n")
    assert _compiled_anew(tmp_path, includes)
    # A header that __has_include asked for and did not find, created later.
    (second / "extra.h").write_text("#define EXTRA 5\n")
    assert _compiled_anew(tmp_path, includes)
    assert _build(tmp_path, includes)[0]  # and now that is served
    # The source itself, edited at the same path.
    src = tmp_path / "src" / "unit.cpp"
    src.write_text(src.read_text().replace("VALUE + EXTRA", "VALUE * EXTRA"))
    assert _compiled_anew(tmp_path, includes)


def test_a_private_root_keeps_the_headers_digests_for_every_process_a_group_root_does_not(cpp_tree, monkeypatch):
    tmp_path, includes = cpp_tree
    if not progcache._core.keeps_digests_for_other_processes(str(includes[1] / "value.h")):
        pytest.skip("this kernel gives no unique mount ID (Linux 6.8 and later): no digest is kept for other processes")
    time.sleep(2.1)  # the headers settle: one changed within 2 s is never remembered by its identity
    assert _build(tmp_path, includes)[0] is False
    memo = tmp_path / "root" / "torch" / "header-digests.json"
    assert str(includes[1] / "value.h") in json.loads(memo.read_text())["files"]
    assert os.stat(memo).st_mode & 0o077 == 0
    # A group-shared root (signed, so its entries are read) keeps none:
    # another member could write the file.
    key = tmp_path / "hmac.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    monkeypatch.setenv("PROGCACHE_DIR", str(tmp_path / "group"))
    monkeypatch.setenv("PROGCACHE_SHARING", "group")
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key))
    pt.reset()
    assert _build(tmp_path, includes)[0] is False
    value = includes[1] / "value.h"
    value.write_bytes(value.read_bytes())  # the same bytes, a new identity: hashed again
    time.sleep(2.1)
    assert _build(tmp_path, includes)[0]
    assert (tmp_path / "group" / "torch" / "v1").is_dir()
    assert not (tmp_path / "group" / "torch" / "header-digests.json").exists()


def test_a_command_line_is_split_as_shlex_splits_it_without_ever_backtracking():
    import random
    import shlex

    words = ["g++", "-I/a b", "'q'", '"d"', "\\", "#", "x=1", "\u00e9", "\u00a0", "\x0b", "\x0c", "\u2003",
             " ", "  ", "\t", "\n", "\r"]
    rng = random.Random(0)
    for _ in range(20000):
        line = "".join(rng.choice(words) for _ in range(rng.randint(0, 8)))
        try:
            expected = shlex.split(line)
        except ValueError:
            with pytest.raises(ValueError):
                pt._split_command(line)
            continue
        assert pt._split_command(line) == expected, repr(line)
    # Runs of blanks before a quote (an expression that can split a run in
    # many ways tries every one before it fails): answered in a child with
    # a deadline, so that a regression fails instead of hanging.
    code = ("import progcache.torch as pt, shlex; line = 'g++' + ' a' * 3000 + '  ' * 3000 + ' \"x y\"'; "
            "assert pt._split_command(line) == shlex.split(line)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_cpp_build_with_an_option_it_cannot_key_is_not_cached(cpp_tree, monkeypatch):
    tmp_path, includes = cpp_tree
    monkeypatch.setenv("DEPENDENCIES_OUTPUT", str(tmp_path / "deps.d"))
    before = pt.stats()["cpp_not_cached"]
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is False
    assert pt.stats()["cpp_not_cached"] == before + 2
    monkeypatch.delenv("DEPENDENCIES_OUTPUT")
    # A linker option naming a file.
    obj = tmp_path / "extra.o"
    (tmp_path / "extra.cpp").write_text('extern "C" int extra() { return 1; }\n')
    subprocess.run(["g++", "-c", "-fPIC", str(tmp_path / "extra.cpp"), "-o", str(obj)], check=True)
    from torch._inductor.cpp_builder import CppBuilder, CppOptions
    for _ in range(2):
        b = CppBuilder(name="linked", sources=[str(tmp_path / "src" / "unit.cpp")],
                       BuildOption=CppOptions(extra_flags=[f"-I{d}" for d in includes] + [f"-Wl,{obj}"]),
                       output_dir=str(tmp_path / "out"))
        b.build()
    assert pt.stats()["cpp_not_cached"] == before + 4


def test_a_variable_the_linker_reads_is_keyed(cpp_tree, monkeypatch):
    tmp_path, includes = cpp_tree
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is True
    monkeypatch.setenv("LD_RUN_PATH", "/opt/somewhere")
    served_now, data = _build(tmp_path, includes)
    assert not served_now and data == _oracle(tmp_path, includes)
    assert b"/opt/somewhere" in data


def test_a_header_created_while_gcc_runs_is_never_stored_as_absent(cpp_tree, monkeypatch):
    tmp_path, includes = cpp_tree
    first, _ = includes
    from torch._inductor import cpp_builder
    real = cpp_builder.run_compile_cmd

    def compile_then_create(cmd, cwd):
        real(cmd, cwd)
        if not (first / "value.h").exists():
            (first / "value.h").write_text("#define VALUE 4\n")  # where g++ looks first

    monkeypatch.setattr(cpp_builder, "run_compile_cmd", compile_then_create)
    assert _build(tmp_path, includes)[0] is False
    monkeypatch.setattr(cpp_builder, "run_compile_cmd", real)
    assert _compiled_anew(tmp_path, includes)


def test_a_directory_where_a_header_could_be_is_not_a_header(cpp_tree):
    tmp_path, includes = cpp_tree
    first, _ = includes
    (first / "value.h").mkdir()  # g++ passes over a directory
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is True
    (first / "value.h").rmdir()
    (first / "value.h").write_text("#define VALUE 9\n")
    assert _compiled_anew(tmp_path, includes)


def test_a_dangling_link_where_a_header_could_be_is_not_a_header(cpp_tree):
    tmp_path, includes = cpp_tree
    first, _ = includes
    (first / "extra.h").symlink_to(tmp_path / "later.h")  # a link to nothing
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is True
    (tmp_path / "later.h").write_text("#define EXTRA 5\n")  # the link now leads to a header
    assert _compiled_anew(tmp_path, includes)


def _preprocess(tmp_path, name, text, includes):
    """Preprocesses ``text`` as torch checks its precompiled header (-E -P),
    from a directory of its own; returns (served?, output bytes)."""
    from torch._inductor.cpp_builder import CppBuilder, CppOptions
    d = tmp_path / name
    d.mkdir()
    (d / "header.hpp").write_text(text)
    time.sleep(0.1)
    before = pt.stats()["cpp_served"]
    b = CppBuilder(name=str(d / "header"), sources=str(d / "header.hpp"),
                   BuildOption=CppOptions(preprocessing=True, extra_flags=[f"-I{i}" for i in includes]))
    b.build()
    with open(b.get_target_file_path(), "rb") as f:
        return pt.stats()["cpp_served"] > before, f.read()


def test_preprocessing_from_a_random_directory_is_served_where_its_output_cannot_name_it(cpp_tree):
    tmp_path, includes = cpp_tree
    text = "#include <value.h>\nint v = VALUE;\n"
    assert _preprocess(tmp_path, "p1", text, includes)[0] is False
    served_now, data = _preprocess(tmp_path, "p2", text, includes)
    assert served_now and b"int v = 2;" in data
    pt.disable()
    try:
        assert _preprocess(tmp_path, "oracle", text, includes)[1] == data
    finally:
        assert pt.enable()
    # An input that spells its own path is never keyed without it.
    before = pt.stats()["cpp_not_cached"]
    named = "#include <value.h>\nconst char* f = __FILE__;\n"
    assert _preprocess(tmp_path, "p3", named, includes)[0] is False
    assert _preprocess(tmp_path, "p4", named, includes)[0] is False
    assert pt.stats()["cpp_not_cached"] == before + 2
    # A header with a time in it: nothing stored, every run preprocesses.
    (includes[1] / "value.h").write_text('#define VALUE 2\nconst char* when = __TIME__;\n')
    assert _preprocess(tmp_path, "p5", text, includes)[0] is False
    assert _preprocess(tmp_path, "p6", text, includes)[0] is False


def _precompile(tmp_path, includes, header, text, out):
    """Precompiles ``text`` as ``out`` (NAME.gch) with the options the build
    of unit.cpp compiles with, so that g++ takes it for NAME there."""
    (tmp_path / "pch-src").mkdir(exist_ok=True)
    src = tmp_path / "pch-src" / header
    src.write_text(text)
    argv = _builder(tmp_path / "src", tmp_path / "out", includes).get_command_line().split()
    keep, i = [], 1
    while i < len(argv):
        if argv[i] == "-o":
            i += 2
            continue
        if argv[i].startswith("-") and argv[i] != "-shared" and not argv[i].startswith(("-l", "-L", "-Wl,")):
            keep.append(argv[i])
        i += 1
    subprocess.run([argv[0], *keep, "-x", "c++-header", str(src), "-o", str(out)], check=True, capture_output=True)


def test_a_precompiled_header_made_where_gcc_looks_is_never_served_around(cpp_tree):
    # g++ looks for NAME.gch before NAME in every directory it searches, one
    # holding no NAME included, and its dependency list names neither.
    tmp_path, includes = cpp_tree
    first, _ = includes
    assert _build(tmp_path, includes)[0] is False
    served_now, before = _build(tmp_path, includes)
    assert served_now
    _precompile(tmp_path, includes, "value.h", "#define VALUE 7\n", first / "value.h.gch")
    oracle = _oracle(tmp_path, includes)
    assert oracle != before, "g++ did not take the precompiled header: the test proves nothing"
    served_now, data = _build(tmp_path, includes)
    assert not served_now and data == oracle
    # While one is there, nothing is stored: which g++ took is in no list.
    assert _build(tmp_path, includes)[0] is False
    # A directory of them, where g++ also looks (value.h.gch/any.gch).
    # Gone again: the first build's entry holds once more.
    (first / "value.h.gch").unlink()
    assert _build(tmp_path, includes) == (True, before)
    (first / "value.h.gch").mkdir()
    _precompile(tmp_path, includes, "value.h", "#define VALUE 8\n", first / "value.h.gch" / "a.gch")
    oracle = _oracle(tmp_path, includes)
    assert oracle != before, "g++ did not take the precompiled header directory: the test proves nothing"
    served_now, data = _build(tmp_path, includes)
    assert not served_now and data == oracle


def test_an_include_spelled_across_a_line_splice_is_followed_as_gcc_follows_it(cpp_tree):
    # g++ joins "#\" and the next line before it reads the directive; so
    # does the include lexer, and a header created later where that include
    # looks first is seen.
    tmp_path, includes = cpp_tree
    first, _ = includes
    (tmp_path / "src" / "unit.cpp").write_text(
        '#\\\ninclude "value.h"\n#define EXTRA 0\n'
        '/* a comment */ # /* inside */ include "other.h"\n'
        'extern "C" int value() { return VALUE + EXTRA + OTHER; }\n')
    (includes[1] / "other.h").write_text("#define OTHER 10\n")
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is True
    (first / "value.h").write_text("#define VALUE 4\n")
    assert _compiled_anew(tmp_path, includes)
    (first / "other.h").write_text("#define OTHER 20\n")
    assert _compiled_anew(tmp_path, includes)


def test_an_include_through_a_macro_is_never_stored(cpp_tree):
    # No place can be recorded for it: a header created later where it
    # looks first would go unseen.
    tmp_path, includes = cpp_tree
    (tmp_path / "src" / "unit.cpp").write_text(
        '#define PICK(x) #x\n#define NAME(x) PICK(x)\n#include NAME(value.h)\n'
        'extern "C" int value() { return VALUE; }\n')
    before = pt.stats()["cpp_stored"]
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is False
    assert pt.stats()["cpp_stored"] == before


def test_a_predefines_header_made_where_gcc_looks_for_it_is_never_served_around(cpp_tree):
    # g++ includes <stdc-predef.h> before the source's own text, found as an
    # angled include is: one made later in an -I directory is read instead.
    tmp_path, includes = cpp_tree
    first, _ = includes
    (tmp_path / "src" / "unit.cpp").write_text(
        '#ifndef PRE\n#define PRE 0\n#endif\nextern "C" int value() { return PRE; }\n')
    assert _build(tmp_path, includes)[0] is False
    served_now, before = _build(tmp_path, includes)
    assert served_now
    (first / "stdc-predef.h").write_text("#define PRE 7\n")
    oracle = _oracle(tmp_path, includes)
    assert oracle != before, "g++ did not read the header: the test proves nothing"
    served_now, data = _build(tmp_path, includes)
    assert not served_now and data == oracle


def test_a_header_made_in_a_cpath_directory_made_after_the_store_is_compiled(cpp_tree, monkeypatch):
    # g++ lists CPATH's directories only where they exist: one made after a
    # store, holding a header g++ now reads first, is still watched.
    tmp_path, includes = cpp_tree
    later = tmp_path / "later"
    monkeypatch.setenv("CPATH", str(later))
    assert _build(tmp_path, includes)[0] is False
    assert _build(tmp_path, includes)[0] is True
    later.mkdir()
    (later / "extra.h").write_text("#define EXTRA 40\n")  # what __has_include(<extra.h>) now finds
    assert _compiled_anew(tmp_path, includes)
