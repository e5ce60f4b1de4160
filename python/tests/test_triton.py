"""progcache.triton against the real Triton (PyPI), no GPU needed: every
kernel is compiled for sm_90 with the ptxas inside Triton's wheel. Each test
runs its compiles in fresh processes (python/tests/triton_child.py) and
counts Triton's own compiles through Triton's compilation listener."""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install triton)")

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "triton_child.py")
KERNELS = os.path.join(HERE, "..", "..", "examples", "triton", "kernels.py")


class Env:
    """One machine's worth of directories: a progcache root and a Triton
    cache directory, each fresh unless shared on purpose."""

    def __init__(self, tmp_path, name="a", root=None, **extra):
        self.triton_dir = str(tmp_path / f"triton-{name}")
        self.root = root or str(tmp_path / f"root-{name}")
        self.extra = extra

    def env(self):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("TRITON_") or k.startswith("PROGCACHE_"):
                del e[k]
        e.update({"TRITON_CACHE_DIR": self.triton_dir, "PROGCACHE_DIR": self.root,
                  "TRITON_HOME": os.path.dirname(self.triton_dir), "TRITON_DEFAULT_FP_FUSION": "1"})
        e.update(self.extra)
        return e

    def popen(self, kernels, manager="progcache", **spec):
        spec.update({"kernels": kernels, "manager": manager})
        return subprocess.Popen([sys.executable, CHILD, json.dumps(spec)], env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, kernels, manager="progcache", **spec):
        p = self.popen(kernels, manager, **spec)
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])


def k(name, **constexprs):
    return [name, constexprs]


def store_entries(root, memos=False):
    """Entry files of the Triton store under a progcache root: its kernels'
    (and, with ``memos``, the warm-start memo's too, which is on wherever
    progcache's manager is Triton's)."""
    out = []
    base = os.path.join(root, "triton")
    for dirpath, dirnames, files in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != "locks"]
        for f in files:
            if len(f) == 62:  # <root>/triton/v<n>/<2 hex>/<62 hex>
                path = os.path.join(dirpath, f)
                with open(path, "rb") as fh:
                    memo = re.search(rb'"kind": ?"(key-memo|triton-tool-memo)"', fh.read()) is not None
                if memos or not memo:
                    out.append(path)
    return out


def files_of(result):
    """{kernel: {child file: sha256}} without the group file, whose content
    names paths of one directory."""
    return {r["name"]: {c: h for c, h in r["files"].items() if not c.startswith("__grp__")}
            for r in result["kernels"]}


# ---------------------------------------------------------------- served

def test_a_kernel_compiled_in_one_process_is_served_to_the_next_without_a_compile(tmp_path):
    first = Env(tmp_path, "a").run([k("softmax")])
    assert first["compiles"] == 1
    # One compile, one miss (the look again under the compile lock counts none).
    assert first["stats"]["misses"] == 1 and first["stats"]["hits"] == 0, first["stats"]
    assert len(store_entries(str(tmp_path / "root-a"))) == 1  # the whole group: one entry
    # Another process with an empty TRITON_CACHE_DIR and the same progcache root.
    second = Env(tmp_path, "b", root=str(tmp_path / "root-a")).run([k("softmax")])
    assert second["compiles"] == 0 and second["hits"] == 1
    # The backend's stats() carry the telemetry every progcache cache reports
    # (this process's: one hit, its bytes and its timed lookup).
    st = second["stats"]
    assert st["hit_rate"] == 1.0 and st["bytes_read"] > 0
    assert st["get_samples"] >= 1 and st["get_p99_ns"] >= st["get_p50_ns"] > 0
    assert second["kernels"][0]["dir"].startswith(str(tmp_path / "triton-b"))
    assert files_of(second) == files_of(first)
    # A third process, same TRITON_CACHE_DIR: answered by the materialised
    # copy, and counted as the hit it is (no bytes read from the store).
    third = Env(tmp_path, "b", root=str(tmp_path / "root-a")).run([k("softmax")])
    assert third["compiles"] == 0 and third["stats"]["hits"] == 1 and third["stats"]["misses"] == 0, third["stats"]
    assert third["stats"]["bytes_read"] == 0, third["stats"]  # nothing read from the store
    assert files_of(third) == files_of(first)
    # The root's statistics, as `progcache stats` shows them: three processes
    # served or compiled one kernel each, one miss and two hits.
    cli = os.path.abspath(os.environ.get("PROGCACHE_CLI") or os.path.join(HERE, "..", "..", "build", "progcache"))
    if os.access(cli, os.X_OK):
        shown = json.loads(subprocess.run([cli, "--dir", str(tmp_path / "root-a"), "stats", "--json"],
                                          capture_output=True, text=True, check=True).stdout)
        assert (shown["root"]["hits"], shown["root"]["misses"]) == (2, 1), shown["root"]


def test_selected_through_tritons_knobs_it_serves_the_next_process(tmp_path):
    # triton.knobs.cache.manager_class = progcache.triton.CacheManager, no
    # TRITON_CACHE_MANAGER in the environment.
    first = Env(tmp_path, "a").run([k("layer_norm")], manager="knobs")
    assert first["compiles"] == 1 and first["stats"]["puts"] == 1, first["stats"]
    assert len(store_entries(str(tmp_path / "root-a"))) == 1
    second = Env(tmp_path, "b", root=str(tmp_path / "root-a")).run([k("layer_norm")], manager="knobs")
    assert second["compiles"] == 0 and second["hits"] == 1 and second["stats"]["hits"] == 1
    assert files_of(second) == files_of(first)


def test_a_changed_constexpr_or_kernel_body_is_compiled_again(tmp_path):
    root = str(tmp_path / "root")
    assert Env(tmp_path, "a", root=root).run([k("vector_add")])["compiles"] == 1
    assert Env(tmp_path, "b", root=root).run([k("vector_add", BLOCK=512)])["compiles"] == 1
    edited = tmp_path / "kernels_edited.py"
    with open(KERNELS) as f:
        src = f.read()
    assert "x + y, mask=mask" in src
    edited.write_text(src.replace("x + y, mask=mask", "x - y, mask=mask"))
    changed = Env(tmp_path, "c", root=root).run([k("vector_add")], module=str(edited))
    assert changed["compiles"] == 1
    # And the unchanged kernel is still a hit.
    assert Env(tmp_path, "d", root=root).run([k("vector_add")])["compiles"] == 0


def test_every_file_of_a_served_group_equals_a_cacheless_compile(tmp_path):
    kernels = [k(n) for n in ("vector_add", "softmax", "matmul", "layer_norm", "attention")]
    root = str(tmp_path / "root")
    assert Env(tmp_path, "a", root=root).run(kernels)["compiles"] == 5
    served = Env(tmp_path, "b", root=root).run(kernels)
    assert served["compiles"] == 0
    own = Env(tmp_path, "own").run(kernels, manager="triton")
    assert own["compiles"] == 5
    assert files_of(served) == files_of(own)
    for r in served["kernels"]:
        assert set(r["files"]) == {f"{r['name']}.{ext}"
                                   for ext in ("source", "ttir", "ttgir", "llir", "ptx", "cubin", "json")}


def test_the_store_is_compressed_unless_said_otherwise_and_serves_the_same_files(tmp_path):
    """Where PROGCACHE_COMPRESSION is not set, Triton's entries are written
    with zstd (as the nvcc launcher's are): the groups take a fraction of
    their bytes on disk, and a served group is the same files."""
    kernels = [k(n) for n in ("vector_add", "softmax", "matmul", "layer_norm", "attention")]
    packed, plain = str(tmp_path / "packed"), str(tmp_path / "plain")
    first = Env(tmp_path, "a", root=packed).run(kernels)
    assert first["compiles"] == 5
    assert Env(tmp_path, "b", root=plain, PROGCACHE_COMPRESSION="off").run(kernels)["compiles"] == 5
    on_disk = {r: sum(os.path.getsize(p) for p in store_entries(r)) for r in (packed, plain)}
    assert 0 < on_disk[packed] * 3 < on_disk[plain], on_disk
    for root in (packed, plain):
        served = Env(tmp_path, f"served-{os.path.basename(root)}", root=root).run(kernels)
        assert served["compiles"] == 0 and served["hits"] == 5
        assert files_of(served) == files_of(first)


# ---------------------------------------------------------------- damage

def _damage(path, how, other=None):
    data = open(path, "rb").read()
    if how == "flip":
        i = len(data) // 2
        data = data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:]
    elif how == "truncate":
        data = data[:len(data) // 3]
    elif how == "plant":  # another kernel's entry under this key
        data = open(other, "rb").read()
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["flip", "truncate", "plant"])
def test_a_damaged_truncated_or_planted_entry_is_a_miss_and_a_recompile(tmp_path, how):
    root = str(tmp_path / "root")
    both = [k("softmax"), k("vector_add")]
    good = Env(tmp_path, "a", root=root).run(both)
    entries = store_entries(root)
    assert len(entries) == 2
    for i, path in enumerate(entries):
        saved = open(path, "rb").read()
        _damage(path, how, other=entries[1 - i])
        # A fresh TRITON_CACHE_DIR, so only the store can answer.
        r = Env(tmp_path, f"damaged{i}", root=root).run(both)
        assert r["compiles"] == 1, r  # the damaged one, and only it, compiled again
        assert files_of(r) == files_of(good)
        with open(path, "wb") as f:
            f.write(saved)


def test_an_entry_of_another_triton_version_is_a_miss(tmp_path):
    root = str(tmp_path / "root")
    Env(tmp_path, "a", root=root).run([k("softmax")])
    # Rewrite the entry as another Triton would have: same key, its version.
    code = f"""
import json, os, sys
os.environ['PROGCACHE_DIR'] = {root!r}
import progcache.triton as pt
from progcache import _core
st = _core.open_file_store(os.path.join({root!r}, 'triton'), None, None)
import glob
n = 0
for key_hex in sys.argv[1:]:
    found = st.get_entry(bytes.fromhex(key_hex))
    meta = json.loads(found[0]); meta['triton'] = '3.0.0'
    st.put_entry(bytes.fromhex(key_hex), json.dumps(meta), found[1]); n += 1
print(n)
"""
    keys = [os.path.basename(os.path.dirname(p)) + os.path.basename(p) for p in store_entries(root)]
    out = subprocess.run([sys.executable, "-c", code, *keys], env=Env(tmp_path, "x", root=root).env(),
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
    assert Env(tmp_path, "b", root=root).run([k("softmax")])["compiles"] == 1


@pytest.mark.parametrize("how", ["remove", "truncate", "replace", "stamp"])
def test_a_group_torn_on_disk_is_not_served(tmp_path, how):
    root = str(tmp_path / "root")
    env = Env(tmp_path, "a", root=root)
    good = env.run([k("softmax"), k("matmul")])
    d = good["kernels"][0]["dir"]
    cubin = os.path.join(d, "softmax.cubin")
    if how == "remove":
        os.unlink(cubin)
    elif how == "truncate":
        with open(cubin, "r+b") as f:
            f.truncate(100)
    elif how == "replace":  # another kernel's cubin, written in place
        other = open(os.path.join(good["kernels"][1]["dir"], "matmul.cubin"), "rb").read()
        with open(cubin, "wb") as f:
            f.write(other)
    elif how == "stamp":  # Triton's own group file, without progcache's record
        with open(os.path.join(d, "__grp__softmax.json"), "w") as f:
            json.dump({"child_paths": {"softmax.cubin": cubin}}, f)
    again = env.run([k("softmax")])
    # Served again, whole and right: from the entry, re-materialised.
    assert again["compiles"] == 0
    assert files_of(again)["softmax"] == files_of(good)["softmax"]
    assert again["stats"]["hits"] == 1
    # With the entry gone as well, Triton compiles: never the torn group.
    for p in store_entries(root):
        os.unlink(p)
    os.unlink(cubin)
    assert env.run([k("softmax")])["compiles"] == 1


# ---------------------------------------------------------------- limits

def test_the_byte_cap_holds_on_disk(tmp_path):
    cap = 500_000  # above the largest group (the attention kernel, about 0.4 MB)
    root = str(tmp_path / "root")
    kernels = [k(n) for n in ("vector_add", "softmax", "matmul", "layer_norm", "attention")]
    # Uncompressed, so that the five do not fit (compressed, they would).
    r = Env(tmp_path, "a", root=root, PROGCACHE_MAX_SIZE=f"{cap}B", PROGCACHE_COMPRESSION="off").run(kernels)
    assert r["compiles"] == 5
    on_disk = sum(os.path.getsize(p) for p in store_entries(root))
    assert 0 < on_disk <= cap, on_disk
    # The five groups together are about 0.86 MB: the cap evicted, and what
    # stays is still served.
    assert len(store_entries(root)) < 5


def test_eight_processes_compiling_one_new_kernel_compile_it_once(tmp_path):
    root = str(tmp_path / "root")
    start = time.time() + 8.0  # past every child's import of Triton
    procs = [Env(tmp_path, f"p{i}", root=root).popen([k("attention", BLOCK_N=32)], start_at=start)
             for i in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["compiles"] for r in results) == 1, [r["compiles"] for r in results]
    assert len({r["kernels"][0]["cubin"] for r in results}) == 1
    # One compile, one miss; the seven that waited for it were served: hits.
    cli = os.path.abspath(os.environ.get("PROGCACHE_CLI") or os.path.join(HERE, "..", "..", "build", "progcache"))
    if os.access(cli, os.X_OK):
        shown = json.loads(subprocess.run([cli, "--dir", root, "stats", "--json"], capture_output=True, text=True,
                                          check=True).stdout)
        assert (shown["root"]["misses"], shown["root"]["hits"]) == (1, 7), shown["root"]


# ---------------------------------------------------------------- remote

def test_two_cache_roots_sharing_one_redis(tmp_path, redis_url):
    a = Env(tmp_path, "a", PROGCACHE_REMOTE=redis_url).run([k("layer_norm")])
    assert a["compiles"] == 1
    b = Env(tmp_path, "b", PROGCACHE_REMOTE=redis_url).run([k("layer_norm")])
    assert b["compiles"] == 0
    assert files_of(b) == files_of(a)


def test_triton_remote_cache_manager_over_progcache_backend(tmp_path, redis_url):
    a = Env(tmp_path, "a", PROGCACHE_REMOTE=redis_url).run([k("softmax")], manager="remote")
    assert a["compiles"] == 1
    b = Env(tmp_path, "b", PROGCACHE_REMOTE=redis_url).run([k("softmax")], manager="remote")
    assert b["compiles"] == 0
    assert files_of(b) == files_of(a)


def test_a_dead_redis_costs_a_miss_and_nothing_more(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens
    env = Env(tmp_path, "a", PROGCACHE_REMOTE=f"redis://127.0.0.1:{port}?timeout=200")
    t0 = time.monotonic()
    assert env.run([k("softmax")])["compiles"] == 1
    assert env.run([k("softmax")])["compiles"] == 0  # the local tiers still serve
    assert time.monotonic() - t0 < 120


def test_an_unusable_triton_cache_dir_still_compiles(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where TRITON_CACHE_DIR should be")
    env = Env(tmp_path, "a")
    env.triton_dir = str(blocker)
    r = env.run([k("vector_add")])
    assert r["compiles"] == 1
    own = Env(tmp_path, "own").run([k("vector_add")], manager="triton")
    assert files_of(r) == files_of(own)


# ---------------------------------------------------------------- absent Triton

def test_import_without_triton_says_what_to_install(tmp_path):
    code = "import sys; sys.modules['triton'] = None\ntry:\n import progcache.triton\nexcept ImportError as e:\n print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install" in out and "triton" in out, out


def test_an_unsupported_triton_version_says_what_is_needed(tmp_path):
    code = ("import triton; triton.__version__ = '2.3.1'\ntry:\n import progcache.triton\n"
            "except ImportError as e:\n print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "2.3.1" in out and "triton>=3.2,<4" in out, out


# ---------------------------------------------------------------- triton_key memo

KEY_PROBE = """
import json, os, sys, time
import progcache.triton as pt
import triton
from triton.runtime import cache
home = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and os.path.abspath(args[0]).startswith(home):
        opened.append(args[0])
t = time.perf_counter()
sys.addaudithook(hook)
memo = cache.triton_key()
took = time.perf_counter() - t
hashed = len(opened)
real = cache.triton_key.__wrapped__()
import triton.runtime.autotuner as at
print(json.dumps({"memo": memo, "real": real, "took": took, "hashed": hashed,
                  "everywhere": at.triton_key is cache.triton_key,
                  "memoised": getattr(cache.triton_key, "_progcache_memo", False)}))
"""


def _key_probe(env, pythonpath=None):
    e = env.env()
    e["PROGCACHE_TRITON_WARM_START"] = "1"
    if pythonpath:
        e["PYTHONPATH"] = pythonpath + os.pathsep + e.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", KEY_PROBE], env=e, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def needs_unique_mount_ids(tmp_path):
    from progcache import _core
    if _core.memo_identities([str(tmp_path)])[0] is None:
        pytest.skip("this kernel gives no unique mount ID (Linux 6.8 and later do): nothing is memoised here")


def test_the_memoised_triton_key_is_tritons_and_replaces_every_holder(tmp_path):
    needs_unique_mount_ids(tmp_path)
    env = Env(tmp_path, "a")
    first = _key_probe(env)
    assert first["memoised"] and first["everywhere"]
    assert first["memo"] == first["real"]
    second = _key_probe(env)
    assert second["memo"] == second["real"] == first["real"]
    assert first["hashed"] > 0 and second["hashed"] == 0  # the second process read none of Triton's files


@pytest.mark.parametrize("warm_start", ["1", "default", "0"])
def test_the_warm_start_variable_alone_spares_even_the_first_compile_hashing_triton(tmp_path, warm_start):
    needs_unique_mount_ids(tmp_path)
    # Only variables: no enable(), no import of progcache.triton before
    # Triton's first compile (Triton computes triton_key() before it loads
    # its cache manager); progcache-autoload.pth arms the memo. "default":
    # TRITON_CACHE_MANAGER alone, which turns the memo on; "0" turns it off.
    extra = {"TRITON_CACHE_MANAGER": "progcache.triton:CacheManager"}
    if warm_start != "default":
        extra["PROGCACHE_TRITON_WARM_START"] = warm_start
    env = Env(tmp_path, "a", **extra)
    first = env.run([k("vector_add")])
    assert first["compiles"] == 1 and first["libtriton_reads"] >= 1
    second = env.run([k("vector_add")])
    assert second["compiles"] == 0
    if warm_start != "0":
        assert second["libtriton_reads"] == 0  # the memo answered triton_key(); libtriton.so was not hashed
    else:
        assert second["libtriton_reads"] >= 1  # the control: with the memo off Triton hashes it again
    # The memo's lookups are no kernel's: the root counts one miss and one
    # hit for one kernel compiled and then served, memo or not.
    cli = os.path.abspath(os.environ.get("PROGCACHE_CLI") or os.path.join(HERE, "..", "..", "build", "progcache"))
    if os.access(cli, os.X_OK):
        shown = json.loads(subprocess.run([cli, "--dir", env.root, "stats", "--json"], capture_output=True, text=True,
                                          check=True).stdout)
        assert (shown["root"]["hits"], shown["root"]["misses"]) == (1, 1), shown["root"]


@pytest.mark.parametrize("variable", ["PROGCACHE_TRITON_WARM_START", "TRITON_CACHE_MANAGER"])
def test_the_warm_start_variable_costs_nothing_to_a_process_without_triton(tmp_path, variable):
    value = "1" if variable == "PROGCACHE_TRITON_WARM_START" else "progcache.triton:CacheManager"
    e = Env(tmp_path, "a", **{variable: value}).env()
    out = subprocess.run([sys.executable, "-c", "import sys; print(sorted(m for m in sys.modules if m.startswith(('progcache', 'triton'))))"],
                         env=e, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _triton_copy(tmp_path):
    """A copy of the installed Triton package made of hard links, so a file
    of it can be replaced without touching the installed one."""
    src = os.path.dirname(triton.__file__)
    dst = tmp_path / "site" / "triton"
    os.makedirs(dst.parent)
    try:
        subprocess.run(["cp", "-al", src, str(dst)], check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("cannot hard-link a copy of Triton here (another filesystem)")
    return dst


def _replace(path, data):
    os.unlink(path)  # never write through the hard link into the installed file
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("edit", ["compiler", "backend", "language", "frontend", "libtriton", "new_module", "version"])
def test_editing_any_file_triton_hashes_changes_the_memoised_key(tmp_path, edit):
    needs_unique_mount_ids(tmp_path)
    copy = _triton_copy(tmp_path)
    # Linking changed every file's ctime: no memo is kept for files changed
    # within the last two seconds (progcache/_triton_key.py).
    time.sleep(2.2)
    env = Env(tmp_path, "a")
    before = _key_probe(env, str(copy.parent))
    assert before["memo"] == before["real"]
    hit = _key_probe(env, str(copy.parent))
    assert hit["memo"] == before["real"] and hit["hashed"] == 0  # memo hit
    if edit == "compiler":
        path = copy / "compiler" / "code_generator.py"
    elif edit == "backend":
        path = copy / "backends" / "nvidia" / "compiler.py"
    elif edit == "language":
        path = copy / "language" / "math.py"
    elif edit == "frontend":
        path = copy / "runtime" / "cache.py"
    elif edit == "libtriton":
        path = next((copy / "_C").glob("libtriton*.so"))
    if edit == "new_module":
        (copy / "language" / "added_by_test.py").write_text("X = 1\n")
    elif edit == "version":
        # triton_key() starts with the version the package set on import: a
        # file it never reads while it hashes.
        init = copy / "__init__.py"
        text = init.read_text()
        version = text.split("__version__ = '", 1)[1].split("'", 1)[0]
        _replace(init, text.replace(f"__version__ = '{version}'", f"__version__ = '{version}+edited'", 1).encode())
    else:
        data = path.read_bytes()
        _replace(path, data + (b"\n# edited\n" if path.suffix == ".py" else b"\0"))
    after = _key_probe(env, str(copy.parent))
    assert after["memo"] == after["real"]
    assert after["memo"] != before["memo"]
