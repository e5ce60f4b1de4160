"""progcache.tilelang against the real tilelang (PyPI), no GPU needed: kernels
are lowered, generated and compiled with nvcc for sm_90a in fresh processes
(python/tests/tilelang_child.py), which count tilelang's own code generation
and nvcc runs. Run by scripts/test-tilelang.sh (tilelang brings torch and
TVM: a separate environment)."""

import glob
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

tilelang = pytest.importorskip("tilelang", reason="tilelang is not installed: run bash scripts/test-tilelang.sh")

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "tilelang_child.py")
CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")
if not os.path.exists(os.path.join(CUDA, "bin", "nvcc")):
    pytest.skip(f"no nvcc under {CUDA}: tilelang cannot compile", allow_module_level=True)


class Env:
    def __init__(self, tmp_path, name="a", progcache=True, root=None, **extra):
        self.tl_dir = str(tmp_path / f"tilelang-{name}")
        self.root = root or str(tmp_path / f"root-{name}")
        self.progcache = progcache
        self.extra = extra

    def env(self):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "TILELANG_"))}
        e.update({"TILELANG_CACHE_DIR": self.tl_dir, "PROGCACHE_DIR": self.root})
        if self.progcache:
            e["PROGCACHE_TILELANG"] = "1"
        e.update(self.extra)
        return e

    def run(self, kernels, **spec):
        spec["kernels"] = kernels
        p = subprocess.run([sys.executable, CHILD, json.dumps(spec)], env=self.env(), capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        out["stderr"] = p.stderr
        return out


def k(name, **params):
    return [name, params]


def entries(root):
    out = []
    for dirpath, dirnames, files in os.walk(os.path.join(root, "tilelang")):
        dirnames[:] = [d for d in dirnames if d != "locks"]
        out += [os.path.join(dirpath, f) for f in files if len(f) == 62]
    return out


def files_of(result):
    return {r["name"]: r["files"] for r in result["kernels"]}


@pytest.mark.parametrize("backend", ["tvm_ffi", "cython"])
def test_a_kernel_compiled_in_one_process_is_served_to_the_next_with_no_codegen(tmp_path, backend):
    env = Env(tmp_path)
    first = env.run([k("vector_add")], backend=backend)
    assert first["progcache"] and first["codegen"] == 1
    # The kernel's whole file set is one entry; the other is the memo of the
    # compilers' identity (one per root).
    assert len(entries(env.root)) == 2
    shutil.rmtree(env.tl_dir)  # an empty TILELANG_CACHE_DIR: served from the store
    second = env.run([k("vector_add")], backend=backend)
    assert second["codegen"] == 0 and second["nvcc"] == 0
    assert files_of(second) == files_of(first)
    # The backend's stats() carry the telemetry every progcache cache reports.
    st = second["stats"]
    assert st["hits"] >= 1 and st["hit_rate"] > 0 and st["bytes_read"] > 0
    assert st["get_samples"] >= 1 and st["get_p99_ns"] >= st["get_p50_ns"] > 0
    third = env.run([k("vector_add")], backend=backend)  # the materialised copy
    assert third["codegen"] == 0 and files_of(third) == files_of(first)


def test_a_changed_kernel_is_compiled_again(tmp_path):
    env = Env(tmp_path)
    assert env.run([k("scale", factor=2.0)])["codegen"] == 1
    again = env.run([k("scale", factor=3.0), k("scale", factor=2.0)])
    assert again["codegen"] == 1
    assert len(entries(env.root)) == 3  # two kernels and the compilers' memo


def test_served_files_equal_what_tilelang_writes_without_progcache(tmp_path):
    own = Env(tmp_path, "own", progcache=False).run([k("vector_add"), k("scale")])
    assert not own["progcache"]
    env = Env(tmp_path)
    env.run([k("vector_add"), k("scale")])
    shutil.rmtree(env.tl_dir)
    served = env.run([k("vector_add"), k("scale")])
    assert served["codegen"] == 0
    for name, files in files_of(own).items():
        mine = files_of(served)[name]
        assert set(mine) == set(files)
        for f in ("device_kernel.cu", "host_kernel.cu", "params.json"):
            assert mine[f] == files[f], f


@pytest.mark.parametrize("how", ["flipped", "truncated", "planted"])
def test_a_damaged_truncated_or_planted_entry_is_a_miss_and_a_recompile(tmp_path, how):
    env = Env(tmp_path)
    first = env.run([k("vector_add"), k("scale")])
    by_size = sorted(entries(env.root), key=os.path.getsize)[1:]  # the kernels, not the compilers' memo
    victim = by_size[-1]
    data = open(victim, "rb").read()
    if how == "flipped":
        data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 1]) + data[len(data) // 2 + 1:]
    elif how == "truncated":
        data = data[:len(data) // 3]
    else:
        data = open(by_size[0], "rb").read()  # the other kernel's entry under this one's name
    os.chmod(victim, 0o600)
    with open(victim, "wb") as f:
        f.write(data)
    shutil.rmtree(env.tl_dir)
    again = env.run([k("vector_add"), k("scale")])
    assert again["codegen"] == 1  # the damaged one only
    assert files_of(again)["vector_add"]["device_kernel.cu"] == files_of(first)["vector_add"]["device_kernel.cu"]
    assert files_of(again)["scale"]["device_kernel.cu"] == files_of(first)["scale"]["device_kernel.cu"]


@pytest.mark.parametrize("how", ["removed", "truncated", "edited", "no_record"])
def test_a_materialised_directory_torn_on_disk_is_not_served(tmp_path, how):
    env = Env(tmp_path)
    first = env.run([k("vector_add")])
    d = first["kernels"][0]["dir"]
    if how == "removed":
        os.unlink(os.path.join(d, "params.json"))
    elif how == "truncated":
        p = os.path.join(d, "executable.so")
        os.truncate(p, os.path.getsize(p) // 2)
    elif how == "edited":
        p = os.path.join(d, "device_kernel.cu")
        with open(p, "r+b") as f:
            f.write(b"//")  # same size, new content
    else:
        os.unlink(os.path.join(d, ".progcache.json"))  # a directory progcache did not write
    again = env.run([k("vector_add")])
    assert again["codegen"] == 0  # written again from the entry
    assert files_of(again) == files_of(first)


def test_an_entry_of_another_tilelang_version_is_a_miss(tmp_path):
    env = Env(tmp_path)
    env.run([k("vector_add")])
    other = env.run([k("vector_add")], fake_version="0.1.99")
    assert other["codegen"] == 1


def test_the_byte_cap_holds_on_disk(tmp_path):
    cap = 100_000
    env = Env(tmp_path, PROGCACHE_MAX_SIZE=f"{cap}B")
    env.run([k("scale", factor=float(f)) for f in range(1, 6)])
    sizes = [os.path.getsize(p) for p in entries(env.root)]
    assert 0 < len(sizes) < 6 and sum(sizes) <= cap  # five kernels and a memo did not all fit


def test_a_toolkit_change_tilelang_does_not_key_on_is_compiled_again(tmp_path):
    # A CUDA_HOME whose nvcc reports another version: tilelang's own cache
    # serves the old kernel; progcache compiles it again.
    fake = tmp_path / "cuda"
    fake.mkdir()
    for name in os.listdir(CUDA):
        if name != "bin":
            os.symlink(os.path.join(CUDA, name), fake / name)
    (fake / "bin").mkdir()
    for name in os.listdir(os.path.join(CUDA, "bin")):
        if name != "nvcc":
            os.symlink(os.path.join(CUDA, "bin", name), fake / "bin" / name)
    nvcc = fake / "bin" / "nvcc"
    nvcc.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then {CUDA}/bin/nvcc --version; echo "a newer build"; '
                    f'exit 0; fi\nexec {CUDA}/bin/nvcc "$@"\n')
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    for progcache in (False, True):
        env = Env(tmp_path, "pc" if progcache else "own", progcache=progcache, CUDA_HOME=CUDA)
        assert env.run([k("vector_add")])["codegen"] == 1
        env.extra["CUDA_HOME"] = str(fake)
        moved = env.run([k("vector_add")])
        assert moved["codegen"] == (1 if progcache else 0)
        if progcache:
            assert moved["nvcc"] == 1  # tilelang's binary cache is keyed with the compiler too


def test_unsigned_entries_in_a_group_shared_root_are_never_loaded(tmp_path):
    env = Env(tmp_path, PROGCACHE_SHARING="group")
    env.run([k("vector_add")])
    shutil.rmtree(env.tl_dir)
    again = env.run([k("vector_add")])
    assert again["codegen"] == 1
    assert "not loaded from it" in again["stderr"] and "PROGCACHE_HMAC_KEY_FILE" in again["stderr"]


def test_with_signing_only_signed_entries_are_loaded(tmp_path):
    key = tmp_path / "hmac.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    unsigned = Env(tmp_path)
    unsigned.run([k("vector_add")])  # an unsigned entry, planted for the signed process
    signed = Env(tmp_path, "b", root=unsigned.root, PROGCACHE_HMAC_KEY_FILE=str(key), PROGCACHE_SHARING="group")
    assert signed.run([k("vector_add")])["codegen"] == 1  # refused, compiled, stored signed
    shutil.rmtree(signed.tl_dir)
    assert signed.run([k("vector_add")])["codegen"] == 0  # the signed entry is loaded


def test_two_roots_sharing_one_redis_with_signing(tmp_path, redis_url):
    key = tmp_path / "hmac.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    a = Env(tmp_path, "a", PROGCACHE_REMOTE=redis_url, PROGCACHE_HMAC_KEY_FILE=str(key))
    b = Env(tmp_path, "b", PROGCACHE_REMOTE=redis_url, PROGCACHE_HMAC_KEY_FILE=str(key))
    assert a.run([k("vector_add")])["codegen"] == 1
    served = b.run([k("vector_add")])
    assert served["codegen"] == 0
    unsigned = Env(tmp_path, "c", PROGCACHE_REMOTE=redis_url)
    refused = unsigned.run([k("vector_add")])
    assert refused["codegen"] == 1 and "PROGCACHE_REMOTE is not used" in refused["stderr"]


def test_progcache_disable_compiles_every_time(tmp_path):
    env = Env(tmp_path, PROGCACHE_DISABLE="1")
    assert env.run([k("vector_add")])["codegen"] == 1
    assert env.run([k("vector_add")])["codegen"] == 1
    assert entries(env.root) == []


def test_an_unsupported_tilelang_version_says_what_is_needed(tmp_path):
    code = "import tilelang; tilelang.__version__ = '0.1.5'; import progcache.tilelang"
    e = Env(tmp_path, progcache=False).env()
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    assert p.returncode != 0 and "tilelang>=0.1.15,<0.2" in p.stderr


def test_import_without_tilelang_says_what_to_install(tmp_path):
    code = "import sys; sys.modules['tilelang'] = None; import progcache.tilelang"
    p = subprocess.run([sys.executable, "-c", code], env=Env(tmp_path, progcache=False).env(), capture_output=True,
                       text=True)
    assert p.returncode != 0 and "pip install 'tilelang>=0.1.15,<0.2'" in p.stderr


def test_a_kernel_loaded_from_the_cache_runs_on_the_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: the load-and-launch path needs one")
    env = Env(tmp_path)
    env.run([k("vector_add"), k("matmul")])
    shutil.rmtree(env.tl_dir)
    served = env.run([k("vector_add"), k("matmul")], launch=True)
    assert served["codegen"] == 0
    assert served["launched"] == {"vector_add": True, "matmul": True}


# ---------------------------------------------------------------- progcache.KernelCache, tilelang's signature

def own_run(env, caches, steps, **spec):
    """Runs steps through progcache.KernelCache in a fresh process (tilelang's
    own cache and progcache.tilelang off); returns each step's counts."""
    spec["own"] = {"caches": caches, "steps": steps}
    return env.run([], **spec)


def store_files(d):
    out = []
    for dirpath, dirnames, files in os.walk(d):
        dirnames[:] = [x for x in dirnames if x != "locks"]
        out += [os.path.join(dirpath, f) for f in files if len(f) == 62]
    return out


def test_kernel_cache_cached_compiles_a_prim_func_once_and_serves_the_next_process(tmp_path):
    env = Env(tmp_path, progcache=False)
    own = str(tmp_path / "own")
    first = own_run(env, [{"dir": own}], [["cached", 0, "vector_add", {}], ["cached", 0, "vector_add", {}]])
    a, again = first["steps"]
    assert a["type"] == "JITKernel" and a["codegen"] == 1 and a["builds"] == 1 and a["errors"] == 0
    assert again["codegen"] == 1 and again["same_object"]  # the instance's memory
    assert len(store_files(own)) == 1  # one entry per kernel
    # tilelang's own cache was not written: the kernel lives in progcache's store.
    assert [d for d, _, _ in os.walk(env.tl_dir) if os.path.basename(os.path.dirname(d)) == "kernels"] == []
    shutil.rmtree(env.tl_dir)
    served = own_run(env, [{"dir": own}], [["cached", 0, "vector_add", {}]])["steps"][0]
    assert served["codegen"] == 0 and served["builds"] == 0 and served["type"] == "JITKernel"
    # The kernel served is the one tilelang compiles for the same arguments.
    plain = Env(tmp_path, "plain", progcache=False).run([k("vector_add")])
    assert served["source"] == a["source"] == plain["kernels"][0]["source"]
    other = own_run(env, [{"dir": own}], [["cached", 0, "vector_add", {"N": 8192}]])["steps"][0]
    assert other["codegen"] == 1  # another kernel is compiled


def test_kernel_cache_instances_are_separate_caches_not_a_singleton(tmp_path):
    env = Env(tmp_path, progcache=False)
    caches = [{"dir": str(tmp_path / "one")}, {"dir": str(tmp_path / "two")}]
    steps = own_run(env, caches, [["cached", 0, "scale", {}], ["cached", 1, "scale", {}], ["clear", 0],
                                  ["cached", 0, "scale", {}], ["cached", 1, "scale", {}]])["steps"]
    assert [s["codegen"] for s in steps] == [1, 2, 2, 3, 3]
    assert steps[2]["entries"] == 0 and steps[4]["same_object"]  # clear_cache() empties its own cache only


def test_kernel_cache_threads_and_processes_compile_a_new_kernel_once(tmp_path):
    env = Env(tmp_path, progcache=False)
    own = str(tmp_path / "own")
    t = own_run(env, [{"dir": own}], [["threads", 0, "vector_add", 4]])["steps"][0]
    assert t["codegen"] == 1 and t["results"] == 4 and t["distinct"] == 1
    own2 = str(tmp_path / "own2")
    spec = {"kernels": [], "own": {"caches": [{"dir": own2}], "steps": [["cached", 0, "vector_add", {}]]}}
    procs = [subprocess.Popen([sys.executable, CHILD, json.dumps(spec)], env=env.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    results = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    assert sum(r["codegen"] for r in results) == 1
    assert len({r["steps"][0]["source"] for r in results}) == 1


def test_kernel_cache_cap_holds_in_bytes_on_disk(tmp_path):
    env = Env(tmp_path, progcache=False)
    own = str(tmp_path / "own")
    cap = 100_000  # an entry is 40-50 KB compressed: room for two of the three
    own_run(env, [{"dir": own, "max_size_bytes": cap}],
            [["cached", 0, "vector_add", {}], ["cached", 0, "scale", {}], ["cached", 0, "vector_add", {"N": 8192}]])
    sizes = [os.path.getsize(f) for f in store_files(own)]
    assert 0 < len(sizes) < 3 and sum(sizes) <= cap


def test_kernel_cache_damaged_entry_is_a_miss_and_a_recompile(tmp_path):
    env = Env(tmp_path, progcache=False)
    own = str(tmp_path / "own")
    own_run(env, [{"dir": own}], [["cached", 0, "vector_add", {}]])
    (entry,) = store_files(own)
    with open(entry, "r+b") as f:
        f.truncate(os.path.getsize(entry) // 2)
    s = own_run(env, [{"dir": own}], [["cached", 0, "vector_add", {}]])["steps"][0]
    assert s["codegen"] == 1 and s["type"] == "JITKernel"


def test_kernel_cache_loads_nothing_unsigned_from_a_group_shared_store(tmp_path):
    key = tmp_path / "hmac.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    own = str(tmp_path / "shared")
    # An unsigned writer plants an entry in a store the group shares.
    own_run(Env(tmp_path, "w", progcache=False), [{"dir": own, "sharing": "group"}], [["cached", 0, "vector_add", {}]])
    unsigned = own_run(Env(tmp_path, "u", progcache=False), [{"dir": own, "sharing": "group"}],
                       [["cached", 0, "vector_add", {}]])
    assert unsigned["steps"][0]["codegen"] == 1
    assert "not loaded from it" in unsigned["stderr"] and "PROGCACHE_HMAC_KEY_FILE" in unsigned["stderr"]
    signed = Env(tmp_path, "s", progcache=False, PROGCACHE_HMAC_KEY_FILE=str(key))
    cfg = [{"dir": own, "sharing": "group"}]
    assert own_run(signed, cfg, [["cached", 0, "vector_add", {}]])["steps"][0]["codegen"] == 1  # refused, stored signed
    assert own_run(signed, cfg, [["cached", 0, "vector_add", {}]])["steps"][0]["codegen"] == 0  # signed: loaded


def test_kernel_cache_file_names_are_tilelangs():
    import progcache
    from tilelang.autotuner import param

    for name in ("DEVICE_KERNEL_PATH", "HOST_KERNEL_PATH", "EXECUTABLE_PATH", "KERNEL_LIB_PATH", "KERNEL_CUBIN_PATH",
                 "KERNEL_PY_PATH", "PARAMS_PATH"):
        assert getattr(progcache, name) == getattr(param, name), name
    from tilelang.cache.kernel_cache import KernelCache as TLKernelCache
    assert progcache.KernelCache.execution_backend == TLKernelCache.execution_backend
    import inspect
    ours = inspect.signature(progcache.KernelCache.cached).parameters
    theirs = inspect.signature(TLKernelCache.cached).parameters
    for name in ("func", "out_idx", "args", "target", "target_host", "execution_backend", "verbose", "pass_configs",
                 "compile_flags"):
        assert ours[name].kind == theirs[name].kind, name


# ---------------------------------------------------------------- trust and failures

@pytest.mark.parametrize("how", ["others-writable", "another-owner"])
def test_a_forged_kernel_in_a_cache_dir_others_could_write_is_never_loaded(tmp_path, how, request):
    from conftest import shared_dir
    honest = Env(tmp_path, "honest")
    good = honest.run([k("vector_add")])
    src = good["kernels"][0]["dir"]
    # The victim's TILELANG_CACHE_DIR sits in a directory someone else made
    # first, holding a forged copy of the kernel's directory whose record
    # matches the forged files.
    shared = shared_dir(tmp_path, how)
    victim = Env(tmp_path, "victim")
    victim.tl_dir = str(shared / "tilelang")
    forged = os.path.join(victim.tl_dir, os.path.relpath(src, honest.tl_dir))
    shutil.copytree(src, forged)
    with open(os.path.join(forged, "device_kernel.cu"), "ab") as f:
        f.write(b"\n// forged\n")
    # tilelang's own manifest and progcache's record, both made to match.
    man_path = os.path.join(forged, "manifest.json")
    man = json.load(open(man_path))
    for name in man["files"]:
        data = open(os.path.join(forged, name), "rb").read()
        man["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    with open(man_path, "w") as f:
        json.dump(man, f)
    rec_path = os.path.join(forged, ".progcache.json")
    rec = json.load(open(rec_path))
    for name in rec["files"]:
        st = os.stat(os.path.join(forged, name))
        rec["files"][name] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    with open(rec_path, "w") as f:
        json.dump(rec, f)
    if how == "another-owner":
        from conftest import chown_tree
        chown_tree(victim.tl_dir, request.getfixturevalue("second_uid"))
    r = victim.run([k("vector_add")])
    assert r["codegen"] == 1  # compiled, not loaded from the forged directory
    for f in ("device_kernel.cu", "host_kernel.cu", "params.json"):  # what a compile writes alike each time
        assert files_of(r)["vector_add"][f] == files_of(good)["vector_add"][f], f
    assert not r["kernels"][0]["dir"].startswith(str(shared))  # laid out privately instead
    assert "tilelang's cache directory" in r["stderr"], r["stderr"][-2000:]
    # The next process is served from the store, still not from the shared directory.
    again = victim.run([k("vector_add")])
    assert again["codegen"] == 0 and files_of(again) == files_of(r)


def test_an_unusable_root_or_setting_costs_a_warning_and_tilelang_compiles(tmp_path, request):
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    open_dir = tmp_path / "open-to-all"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    cases = {"a file": {"PROGCACHE_DIR": str(f)}, "others-writable": {"PROGCACHE_DIR": str(open_dir)},
             "impossible": {"PROGCACHE_DIR": str(f / "sub")}, "bad size": {"PROGCACHE_MAX_SIZE": "10Q"}}
    if os.geteuid() == 0:
        other = tmp_path / "someone-elses"
        other.mkdir(mode=0o700)
        os.chown(other, request.getfixturevalue("second_uid"), -1)
        cases["another owner"] = {"PROGCACHE_DIR": str(other)}
    for i, (name, extra) in enumerate(sorted(cases.items())):
        env = Env(tmp_path, f"c{i}", **extra)
        r = env.run([k("vector_add")])
        assert r["codegen"] == 1, name
        assert r["stderr"].count("progcache.tilelang:") == 1, (name, r["stderr"][-2000:])


def test_no_nvcc_output_is_taken_from_a_cache_dir_others_could_write(tmp_path):
    # tilelang caches nvcc's outputs under TILELANG_CACHE_DIR too: when that
    # directory is refused, none of it is read, and nothing planted there
    # reaches the user's store.
    honest = Env(tmp_path, "honest")
    honest.run([k("vector_add")])
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    planted = 0
    for meta in glob.glob(os.path.join(honest.tl_dir, "*", "cuda-binaries", "*", "metadata.json")):
        d = os.path.dirname(meta)
        dst = os.path.join(str(shared / "tilelang"), os.path.relpath(d, honest.tl_dir))
        shutil.copytree(d, dst)
        cubin = glob.glob(os.path.join(dst, "kernel.*"))[0]
        data = open(cubin, "rb").read() + b"PLANTED-CUBIN"
        with open(cubin, "wb") as f:
            f.write(data)
        m = json.load(open(os.path.join(dst, "metadata.json")))
        m.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        with open(os.path.join(dst, "metadata.json"), "w") as f:
            json.dump(m, f)
        planted += 1
    assert planted >= 1
    victim = Env(tmp_path, "victim")
    victim.tl_dir = str(shared / "tilelang")
    r = victim.run([k("vector_add")])
    assert r["nvcc"] == 1 and r["codegen"] == 1  # nvcc ran: the planted cubin was not taken
    # The kernel stored for the victim holds no planted byte: served to a
    # process with a private directory, it is nvcc's own.
    mine = Env(tmp_path, "mine", root=victim.root)
    again = mine.run([k("vector_add")])
    assert again["codegen"] == 0
    for d, _, files in os.walk(mine.tl_dir):
        for f in files:
            assert b"PLANTED-CUBIN" not in open(os.path.join(d, f), "rb").read(), f
