"""progcache.cupy against the real CuPy (PyPI cupy-cuda13x) and the real
NVRTC, without a GPU: kernels go through CuPy's own compile path in fresh
processes (python/tests/cupy_child.py), whose kernel cache backend calls are
recorded. The device's architecture query is given by the child (sm_90);
loading a cubin into a module needs a driver and fails after the backend has
answered, so cubin kernels are judged by what the backend was given and
answered, and LTO-IR kernels by what CuPy returned as well."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("cupy", reason="cupy is not installed (scripts/test.sh installs cupy-cuda13x)")

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "cupy_child.py")

SRC = r'''
#include "scale.h"
extern "C" __global__ void scale(float* a) { a[threadIdx.x] *= FACTOR; }
'''
PLAIN = r'''
extern "C" __global__ void twice(float* a) { a[threadIdx.x] *= 2.0f; }
'''


def nvrtc_works() -> bool:
    try:
        from cupy.cuda import compiler
        compiler._get_nvrtc_version()
        return True
    except Exception:
        return False


if not nvrtc_works():
    pytest.skip("CuPy cannot load NVRTC on this machine", allow_module_level=True)


def program(tmp_path, digest, ltoir, nvrtc=()):
    """What a payload is as a program: a cubin's bytes; an LTO-IR's cubin
    once linked by nvJitLink (an LTO-IR's bytes differ from one compile of
    the same source to the next; what they link to does not). The LTO-IR is
    linked by the nvJitLink beside the NVRTC that made it (a wheel's NVRTC
    makes LTO-IR an older toolkit's nvJitLink cannot read), in a process of
    its own (a process loads one nvJitLink)."""
    if not ltoir:
        return digest
    import glob
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROGCACHE_")}
    env["PROGCACHE_DISABLE"] = "1"
    for lib in nvrtc:
        beside = sorted(glob.glob(os.path.join(os.path.dirname(lib), "libnvJitLink.so*")))
        if beside:
            env["PROGCACHE_NVJITLINK"] = beside[0]
            break
    code = ("import hashlib, sys, progcache; data = open(sys.argv[1], 'rb').read(); "
            "print(hashlib.sha256(progcache.compile(data, code_type='ltoir', target='cubin', "
            "options=['-arch=sm_90']).code).hexdigest())")
    p = subprocess.run([sys.executable, "-c", code, os.path.join(str(tmp_path / "dump"), digest)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip()


def run(tmp_path, root, kernels, *, progcache=True, env=None, **spec):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "CUPY_"))}
    e.update({"PROGCACHE_DIR": str(root), "CUPY_CACHE_DIR": str(tmp_path / "cupy-own"),
              "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    if progcache:
        e["PROGCACHE_CUPY"] = "1"
    e.update(env or {})
    spec["kernels"] = kernels
    spec.setdefault("dump", str(tmp_path / "dump"))
    p = subprocess.run([sys.executable, CHILD, json.dumps(spec)], env=e, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["stderr"] = p.stderr
    return out


def kernel(source=PLAIN, ltoir=False, options=(), **extra):
    return dict(source=source, ltoir=ltoir, options=list(options), **extra)


def saved(out, i=0):
    return [s[2] for s in out["kernels"][i]["seen"] if s[0] == "save"]


def loaded(out, i=0):
    return [s[2] for s in out["kernels"][i]["seen"] if s[0] == "load" and s[2] is not None]


def fresh(tmp_path, k):
    """What CuPy compiles now for kernel k, with no cache at all."""
    out = run(tmp_path, tmp_path / "oracle", [k], env={"PROGCACHE_DISABLE": "1"})
    assert out["nvrtc_compiles"] == 1 and loaded(out) == []
    return saved(out)[0]


def entries(root):
    out = []
    for dirpath, dirnames, files in os.walk(os.path.join(str(root), "cupy")):
        dirnames[:] = [d for d in dirnames if d != "locks"]
        out += [os.path.join(dirpath, f) for f in files if len(f) == 62]
    return sorted(out)


@pytest.mark.parametrize("ltoir", [False, True], ids=["cubin", "ltoir"])
def test_a_second_process_is_served_what_a_fresh_compile_gives(tmp_path, ltoir):
    root = tmp_path / "root"
    k = kernel(ltoir=ltoir)
    first = run(tmp_path, root, [k])
    assert first["enabled"] is True and first["nvrtc_compiles"] == 1
    assert len(entries(root)) == 1
    # CuPy's own directory is not written: the kernel is in progcache's store.
    assert not os.path.isdir(tmp_path / "cupy-own") or os.listdir(tmp_path / "cupy-own") == []
    second = run(tmp_path, root, [k])
    assert second["nvrtc_compiles"] == 0, second
    assert loaded(second) == saved(first)
    assert program(tmp_path, loaded(second)[0], ltoir, second["nvrtc"]) == \
        program(tmp_path, fresh(tmp_path, k), ltoir, second["nvrtc"])
    assert second["stats"]["hits"] == 1 and second["stats"]["misses"] == 0
    # CuPy's preprocess of an empty file (its NVRTC version lines, part of
    # its kernel name) is answered from the root: the name is the one a
    # preprocess gives.
    assert first["preprocesses"] == 1 and second["preprocesses"] == 0
    assert second["stats"]["preprocess_remembered"] == 1
    assert [s[1] for s in second["kernels"][0]["seen"]] == [s[1] for s in first["kernels"][0]["seen"]][:1]
    if ltoir:
        assert second["kernels"][0]["returned"] == saved(first)[0]


def test_a_kernel_made_by_another_build_of_nvrtc_is_a_miss(tmp_path):
    """The key names the NVRTC CuPy loaded (a wheel's or the toolkit's,
    which need not be the one progcache would find) by its file's digest: a
    rebuild that reports the same version (here, CuPy's own NVRTC with one
    byte appended) is a miss, and CuPy's preprocess is run again."""
    import glob
    import shutil
    mine = run(tmp_path, tmp_path / "probe", [kernel()])["cupy_nvrtc"]
    assert mine is not None
    lib = tmp_path / "nvrtc" / os.path.basename(mine)
    lib.parent.mkdir()
    shutil.copy(mine, lib)
    for builtins in glob.glob(os.path.join(os.path.dirname(mine), "libnvrtc-builtins*.so*")):
        shutil.copy(builtins, lib.parent)
    root = tmp_path / "root"
    k = kernel(ltoir=True)
    first = run(tmp_path, root, [k], nvrtc=str(lib))
    assert str(lib) in first["nvrtc"] and first["nvrtc_compiles"] == 1
    again = run(tmp_path, root, [k], nvrtc=str(lib))
    assert again["nvrtc_compiles"] == 0 and again["preprocesses"] == 0
    with open(lib, "ab") as f:
        f.write(b"\0")
    rebuilt = run(tmp_path, root, [k], nvrtc=str(lib))
    assert rebuilt["nvrtc_compiles"] == 1, rebuilt
    assert rebuilt["preprocesses"] == 1 and rebuilt["stats"]["preprocess_remembered"] == 0


@pytest.mark.parametrize("damage", ["empty", "garbage", "planted", "fifo", "group_writable", "symlink"])
def test_a_damaged_or_planted_preprocess_memo_is_a_preprocess(tmp_path, damage):
    """The memo of CuPy's empty-file preprocess is read only as a whole
    memo of this user's (framed, checksummed, a regular file only its owner
    may write): anything else is a preprocess, as without progcache, and is
    replaced; CuPy's kernel name is never made from it."""
    root = tmp_path / "root"
    k = kernel()
    first = run(tmp_path, root, [k])
    memos = sorted((root / "cupy" / "preprocess").iterdir())
    assert len(memos) == 1
    memo = memos[0]
    good = memo.read_bytes()
    memo.unlink()
    if damage == "empty":
        memo.write_bytes(b"")
    elif damage == "garbage":
        memo.write_bytes(os.urandom(200))
    elif damage == "planted":  # comment lines, but not a memo progcache wrote
        memo.write_text("// Generated by someone else\n// Cuda compilation tools, release 13.0, V13.0.1\n")
    elif damage == "fifo":
        os.mkfifo(memo)
    elif damage == "group_writable":
        memo.write_bytes(good)
        memo.chmod(0o620)
    elif damage == "symlink":
        (tmp_path / "elsewhere").write_bytes(good)
        memo.symlink_to(tmp_path / "elsewhere")
    second = run(tmp_path, root, [k])
    assert second["preprocesses"] == 1 and second["stats"]["preprocess_remembered"] == 0, second
    assert second["nvrtc_compiles"] == 0  # the kernel itself is served: its name is the one a preprocess gives
    assert [s[1] for s in second["kernels"][0]["seen"]][:1] == [s[1] for s in first["kernels"][0]["seen"]][:1]
    # Replaced by a whole memo, which the next process reads.
    third = run(tmp_path, root, [k])
    assert third["preprocesses"] == 0 and third["stats"]["preprocess_remembered"] == 1


def test_a_header_changed_while_nvrtc_compiles_is_stored_under_no_key(tmp_path):
    """The lookup's key names the headers as they were before NVRTC read
    them; a header changed in between gives another key after the compile,
    and what was compiled cannot be told: stored under neither (made again
    after the compile and compared), so the old header is never served the
    new header's cubin."""
    inc = tmp_path / "inc"
    inc.mkdir()
    header = inc / "scale.h"
    header.write_text("#define FACTOR 2.0f\n")
    k = kernel(source=SRC, options=[f"-I{inc}"])
    root = tmp_path / "root"
    edited = run(tmp_path, root, [k], edit_during_compile={"path": str(header), "text": "#define FACTOR 3.0f\n"})
    assert edited["nvrtc_compiles"] == 1 and edited["stats"]["changed_while_compiling"] == 1, edited
    assert entries(root) == []
    header.write_text("#define FACTOR 2.0f\n")  # back as it was when the lookup was made
    back = run(tmp_path, root, [k])
    assert back["nvrtc_compiles"] == 1, back
    assert saved(back) == [fresh(tmp_path, k)]


def test_name_expressions_are_served_with_their_mangled_names(tmp_path):
    src = r'''
template<typename T> __global__ void fill(T* a) { a[threadIdx.x] = T(1); }
'''
    k = kernel(source=src, name_expressions=["fill<float>", "fill<int>"])
    root = tmp_path / "root"
    first = run(tmp_path, root, [k])
    second = run(tmp_path, root, [k])
    assert second["nvrtc_compiles"] == 0
    # The payload CuPy saved (its name-expression header and the cubin) is
    # what it is served, byte for byte.
    assert loaded(second) == saved(first) == [fresh(tmp_path, k)]


def test_an_edited_header_is_a_miss_never_a_stale_cubin(tmp_path):
    """CuPy's own key holds the source text, not the headers it includes:
    after an edit of scale.h it serves the old cubin. progcache's key holds
    every header the compile could read."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.h").write_text("#define FACTOR 2.0f\n")
    k = kernel(source=SRC, options=[f"-I{inc}"])
    root = tmp_path / "root"
    run(tmp_path, root, [k])
    (inc / "scale.h").write_text("#define FACTOR 3.0f\n")
    after = run(tmp_path, root, [k])
    assert after["nvrtc_compiles"] == 1, after
    assert saved(after) == [fresh(tmp_path, k)]
    # CuPy's own cache, for the record: served stale.
    own = tmp_path / "own"
    (inc / "scale.h").write_text("#define FACTOR 2.0f\n")
    a = run(own, root, [k], progcache=False, **{"import": False})
    (inc / "scale.h").write_text("#define FACTOR 3.0f\n")
    b = run(own, root, [k], progcache=False, **{"import": False})
    assert b["nvrtc_compiles"] == 0 and loaded(b) == saved(a) != [fresh(tmp_path, k)]


def test_a_header_created_earlier_in_the_search_path_is_a_miss(tmp_path):
    first_dir, second_dir = tmp_path / "i1", tmp_path / "i2"
    first_dir.mkdir()
    second_dir.mkdir()
    (second_dir / "scale.h").write_text("#define FACTOR 2.0f\n")
    k = kernel(source=SRC, options=[f"-I{first_dir}", f"-I{second_dir}"])
    root = tmp_path / "root"
    run(tmp_path, root, [k])
    (first_dir / "scale.h").write_text("#define FACTOR 5.0f\n")
    after = run(tmp_path, root, [k])
    assert after["nvrtc_compiles"] == 1
    assert saved(after) == [fresh(tmp_path, k)]


def test_an_edited_kernel_and_other_options_recompile(tmp_path):
    root = tmp_path / "root"
    run(tmp_path, root, [kernel()])
    for k in (kernel(source=PLAIN.replace("2.0f", "4.0f")), kernel(options=["-DX=1"])):
        out = run(tmp_path, root, [k])
        assert out["nvrtc_compiles"] == 1 and saved(out) == [fresh(tmp_path, k)]


@pytest.mark.parametrize("damage", ["torn", "flipped"])
def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path, damage):
    root = tmp_path / "root"
    k = kernel()
    run(tmp_path, root, [k])
    for path in entries(root):
        data = open(path, "rb").read()
        mid = len(data) // 2
        data = data[:mid] if damage == "torn" else data[:mid] + bytes([data[mid] ^ 0x5A]) + data[mid + 1:]
        with open(path, "wb") as f:
            f.write(data)
    again = run(tmp_path, root, [k])
    assert again["nvrtc_compiles"] == 1 and loaded(again) == []
    assert saved(again) == [fresh(tmp_path, k)]
    served = run(tmp_path, root, [k])
    assert served["nvrtc_compiles"] == 0 and loaded(served) == saved(again)


def test_off_compiles_and_stores_nothing(tmp_path):
    root = tmp_path / "root"
    for _ in range(2):
        out = run(tmp_path, root, [kernel()], env={"PROGCACHE_DISABLE": "1"})
        assert out["nvrtc_compiles"] == 1 and loaded(out) == []
    assert entries(root) == []
    assert not os.path.isdir(tmp_path / "cupy-own") or os.listdir(tmp_path / "cupy-own") == []


def test_a_compile_progcache_cannot_key_is_compiled_every_time_and_stored_nowhere(tmp_path):
    """A computed include (progcache's rule cannot follow one outside every
    -I directory) and a time macro: compiled every time, counted, stored
    neither in progcache nor in CuPy's own cache, whose key would serve the
    first after a header edit and the second with an old time."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.h").write_text("#define FACTOR 2.0f\n")
    computed = '#define HEADER "' + str(inc / "scale.h") + '"\n#include HEADER\n' + SRC.split("\n", 2)[2]
    timed = 'extern "C" __global__ void stamp(char* o) { const char t[] = __TIME__; o[0] = t[7]; }'
    root = tmp_path / "root"
    for src in (computed, timed):
        for _ in range(2):
            out = run(tmp_path, root, [kernel(source=src)])
            assert out["nvrtc_compiles"] == 1 and out["kernels"][0]["error"] in (None, "CUDARuntimeError"), out
            assert out["stats"]["uncacheable"] == 1 and loaded(out) == []  # one lookup, counted once
    assert entries(root) == []
    assert not os.path.isdir(tmp_path / "cupy-own") or os.listdir(tmp_path / "cupy-own") == []


def test_jitify_asked_for_by_an_option_is_never_keyed_as_plain_nvrtc():
    """CuPy turns jitify on itself for -DCUPY_USE_JITIFY; jitify reads
    headers of its own choosing: such a compile is never keyed."""
    import progcache.cupy as pc
    pc.reset()
    try:
        for call in ((PLAIN, ("-DCUPY_USE_JITIFY",), "90", False, False, "nvrtc"),
                     (PLAIN, (), "90", True, False, "nvrtc")):
            pc._local.call = call
            assert pc._our_key("k.cubin") == pc._UNCACHEABLE
        pc._local.call = (PLAIN, (), "90", False, False, "nvrtc")
        assert pc._our_key("k.cubin") not in (None, pc._UNCACHEABLE)
    finally:
        pc._local.call = None
        pc.reset()


def test_two_processes_compile_a_kernel_once(tmp_path):
    root = tmp_path / "root"
    go = tmp_path / "go"
    ks = [kernel(source=PLAIN.replace("2.0f", f"{i}.0f")) for i in range(6)]
    outs = [None, None]

    def child(i):
        outs[i] = run(tmp_path, root, ks, wait_for=str(go))

    threads = [threading.Thread(target=child, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(4)
    go.write_text("")
    for t in threads:
        t.join()
    assert outs[0]["nvrtc_compiles"] + outs[1]["nvrtc_compiles"] == len(ks), outs


def test_the_autoload_switch_alone_serves(tmp_path):
    root = tmp_path / "root"
    run(tmp_path, root, [kernel()], **{"import": False})
    second = run(tmp_path, root, [kernel()], **{"import": False})
    assert second["nvrtc_compiles"] == 0


def test_a_cupy_without_the_hook_warns_once_and_keeps_its_own_cache(tmp_path):
    root = tmp_path / "root"
    out = run(tmp_path, root, [kernel()], progcache=False, break_hook=True)
    assert out["enabled"] is False
    assert len([w for w in out["warnings"] if "CuPy keeps its own cache" in w]) == 1, out["warnings"]
    assert entries(root) == []
    assert os.listdir(tmp_path / "cupy-own")  # CuPy's own cache took it


def test_two_roots_share_kernels_through_the_remote_tier(tmp_path, redis_url):
    """A cubin is device code: shared through Redis like any program."""
    env = {"PROGCACHE_REMOTE": redis_url}
    k = kernel()
    first = run(tmp_path, tmp_path / "machine-a", [k], env=env)
    assert first["nvrtc_compiles"] == 1
    served = run(tmp_path, tmp_path / "machine-b", [k], env=env)
    assert served["nvrtc_compiles"] == 0, served
    assert loaded(served) == saved(first)


GPU_CHILD = r'''
import json, sys
import cupy
if sys.argv[1] == "1":
    import progcache.cupy as pc
    pc.enable()
k = cupy.RawKernel(r"""
extern "C" __global__ void axpb(float* y, const float* x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}""", "axpb")
x = cupy.arange(4096, dtype=cupy.float32)
y = cupy.zeros_like(x)
k((16,), (256,), (y, x, cupy.float32(3.0), cupy.float32(1.0), cupy.int32(4096)))
ok = bool(cupy.array_equal(y, 3.0 * x + 1.0))
stats = {k: v for k, v in pc.stats().items() if isinstance(v, int)} if sys.argv[1] == "1" else {}
print(json.dumps({"ok": ok, "stats": stats}))
'''


def gpu_for_cupy() -> str:
    """Why CuPy cannot launch a kernel here (empty where it can)."""
    if not os.path.exists("/dev/nvidiactl"):
        return "no NVIDIA GPU on this machine (/dev/nvidiactl is absent)"
    p = subprocess.run([sys.executable, "-c", "import cupy; print(cupy.cuda.runtime.getDeviceCount())"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or p.stdout.strip() in ("", "0"):
        return "CuPy sees no GPU: " + p.stderr.strip()[-300:]
    return ""


def test_on_a_gpu_a_raw_kernel_launched_from_a_served_cubin_is_correct(tmp_path):
    """On a GPU: a RawKernel compiled in one process is served to the next
    from progcache's store, launched, and computes what it must."""
    why = gpu_for_cupy()
    if why:
        pytest.skip(why)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "CUPY_"))}
    e.update({"PROGCACHE_DIR": str(tmp_path / "root"), "CUPY_CACHE_DIR": str(tmp_path / "cupy-own"),
              "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    outs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", GPU_CHILD, "1"], env=e, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = outs
    assert first["ok"] and first["stats"]["misses"] >= 1 and len(entries(tmp_path / "root")) >= 1
    assert second["ok"], "the served cubin computed something else"
    assert second["stats"]["hits"] >= 1 and second["stats"]["misses"] == 0, second
