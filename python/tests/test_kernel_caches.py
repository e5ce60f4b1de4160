import json
import multiprocessing
import os
import shutil
import subprocess
import threading
import time

import pytest

import progcache
from progcache import CacheEntry, CacheKey, CubinCache, KernelCache


def test_cache_key_is_order_independent_and_typed():
    a = CacheKey("mod.gemm", (("BLOCK_M", 128), ("BLOCK_N", 64)), (((128, 64), "float16"),), "sm_90a")
    b = CacheKey("mod.gemm", {"BLOCK_N": 64, "BLOCK_M": 128}, [([128, 64], "float16")], "sm_90a")
    assert a.hash() == b.hash()
    assert len(a.hash()) == 32 and int(a.hash(), 16) >= 0  # pyptx's form: 32 hex digits
    assert len(a.digest()) == 32 and a.digest().hex().startswith(a.hash()) and a == b
    assert CacheKey("mod.gemm", {"BLOCK_M": "128", "BLOCK_N": 64}, [([128, 64], "float16")], "sm_90a").hash() != a.hash()
    assert CacheKey("mod.gemm", {"BLOCK_M": 128.0, "BLOCK_N": 64}, [([128, 64], "float16")], "sm_90a").hash() != a.hash()
    assert CacheKey("mod.gemm", {"BLOCK_M": True, "BLOCK_N": 64}, [([128, 64], "float16")], "sm_90a").hash() != \
        CacheKey("mod.gemm", {"BLOCK_M": 1, "BLOCK_N": 64}, [([128, 64], "float16")], "sm_90a").hash()
    assert CacheKey("mod.gemm", {}, [], "sm_80").hash() != CacheKey("mod.gemm", {}, [], "sm_90").hash()


def test_cache_key_refuses_to_stringify_unknown_types():
    class Opaque:
        pass

    with pytest.raises(TypeError, match="cannot put a Opaque"):
        CacheKey("f", {"x": Opaque()}, [], "sm_90")
    with pytest.raises(TypeError):
        CacheKey("f", {}, [((1.5,), "f32")], "sm_90")
    with pytest.raises(ValueError):
        CacheKey("f", (("a", 1), ("a", 2)), [], "sm_90")


def test_cubin_cache_memory_then_disk_one_atomic_entry(tmp_path):
    key = CacheKey("k", {"N": 4}, [((4,), "float32")], "sm_90")
    c = CubinCache(tmp_path / "pyptx")
    assert c.get(key) is None
    c.put(CacheEntry(key, ".version 8.0", b"\x7fELF-cubin", {"regs": 32, "smem": [0, 1]}))
    fresh = CubinCache(tmp_path / "pyptx")  # a new process would see the same
    e = fresh.get(key)
    assert e.ptx_source == ".version 8.0" and e.cubin_bytes == b"\x7fELF-cubin" and e.metadata == {"regs": 32, "smem": [0, 1]}
    files = [f for _, _, fs in os.walk(tmp_path / "pyptx" / "v1") for f in fs if len(f) == 62]
    assert len(files) == 1  # no sidecars
    with pytest.raises(TypeError, match="JSON"):
        c.put(CacheEntry(key, "", None, {"obj": object()}))
    c.clear()
    assert len(c) == 0 and c.get(key) is not None  # disk kept
    c.clear(disk=True)
    assert CubinCache(tmp_path / "pyptx").get(key) is None


def test_cubin_cache_membership_and_pyptx_cache_dir(tmp_path, monkeypatch):
    key = CacheKey("k", {"N": 8}, [], "sm_90")
    monkeypatch.setenv("PYPTX_CACHE_DIR", str(tmp_path / "from-env"))
    c = CubinCache()
    assert c.cache_dir == str(tmp_path / "from-env")
    assert key not in c
    c.put(CacheEntry(key, "ptx", b"\x7fELF"))
    assert key in c
    # Another process (a fresh cache on the same directory) sees it on disk.
    assert key in CubinCache()
    assert CacheKey("k", {"N": 9}, [], "sm_90") not in CubinCache()


def test_cubin_cache_without_disk(tmp_path):
    key = CacheKey("k", {}, [], "sm_90")
    c = CubinCache(tmp_path / "nodisk", enable_disk=False)
    c.put(CacheEntry(key, "ptx", None))
    assert c.get(key).cubin_bytes is None
    assert not (tmp_path / "nodisk").exists()


def test_global_cache(tmp_path):
    g = progcache.get_global_cache()
    assert g is progcache.get_global_cache()
    mine = CubinCache(tmp_path / "g")
    progcache.set_global_cache(mine)
    assert progcache.get_global_cache() is mine
    with pytest.raises(TypeError):
        progcache.set_global_cache(object())


def build_kernel(n, dtype="f32"):
    return {"kernel.cubin": b"\x7fELF" + bytes([n]), "host.cu": f"// {n} {dtype}"}, {"n": n, "dtype": dtype}


def test_kernel_cache_compiles_once_then_loads(tmp_path):
    kc = KernelCache(tmp_path / "kc")
    first = kc.cached(build_kernel, 7, dtype="f16")
    assert not first.from_cache and kc.builds == 1
    # One build, one miss (the look again under the build lock counts none).
    assert (kc._store.stats()["misses"], kc._store.stats()["hits"]) == (1, 0)
    again = kc.cached(build_kernel, 7, dtype="f16")
    assert again.from_cache and kc.builds == 1
    assert (kc._store.stats()["misses"], kc._store.stats()["hits"]) == (1, 1)
    assert again.artifacts == {"kernel.cubin": b"\x7fELF\x07", "host.cu": b"// 7 f16"}
    assert again.metadata == {"n": 7, "dtype": "f16"}
    assert kc.cached(build_kernel, 8, dtype="f16").from_cache is False
    assert kc.cached(build_kernel, 7, dtype="f16", target="sm_80").from_cache is False
    assert len(kc) == 3
    kc.clear_cache()
    assert len(kc) == 0


def test_kernel_cache_single_flight_threads(tmp_path):
    # Threads share the build in the process (the flight table), not by
    # taking turns on the lock file: with a lock timeout far shorter than
    # the build, a thread that waited on the lock would build again.
    kc = KernelCache(tmp_path / "kc", lock_timeout_s=0.01)
    calls = []

    def slow_build(n):
        calls.append(n)
        time.sleep(0.5)
        return {"k": bytes([n])}

    threads = [threading.Thread(target=kc.cached, args=(slow_build, 3)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [3]


def test_kernel_cache_threads_retry_a_build_that_failed_and_share_the_next(tmp_path):
    kc = KernelCache(tmp_path / "kc")
    calls = []
    gate = threading.Event()

    def flaky(n):
        calls.append(n)
        if len(calls) == 1:
            gate.wait(10)  # the other threads queue behind this build
            raise RuntimeError("the first build fails")
        return {"k": bytes([n])}

    results, errors = [], []

    def call():
        try:
            results.append(kc.cached(flaky, 5))
        except RuntimeError as e:
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    gate.set()
    for t in threads:
        t.join()
    # The failure is the leader's alone; the waiting threads build once more
    # and share that build.
    assert len(errors) == 1 and len(calls) == 2
    assert len(results) == 3 and all(r.artifacts == {"k": bytes([5])} for r in results)


def _child_build(root, queue):
    kc = KernelCache(root)
    r = kc.cached(build_kernel, 42)
    queue.put((kc.builds, r.artifacts["kernel.cubin"]))


def test_kernel_cache_single_flight_processes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_child_build, args=(str(tmp_path / "kc"), q)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join()
    assert sum(b for b, _ in results) == 1
    assert len({a for _, a in results}) == 1
    # One build, one miss; the three that waited for it were served: hits.
    stats = KernelCache(tmp_path / "kc")._store.stats()
    assert (stats["misses"], stats["hits"]) == (1, 3), stats


def test_kernel_cache_leaves_no_lock_files_and_a_held_lock_only_delays(tmp_path):
    kc = KernelCache(tmp_path / "kc", lock_timeout_s=0.3)
    for n in range(5):
        kc.cached(build_kernel, n)
    # The library's lock file is unlinked by its holder: none pile up.
    assert os.listdir(kc._locks_dir) == []
    # Another holder (here: this process, through the library) that never
    # lets go delays a build by the timeout, never stops it.
    key = kc.key_of(build_kernel, (9,), {}, "auto")
    held = progcache._core.LockFile(kc._locks_dir, key, 1.0, False)
    with pytest.raises(TimeoutError, match="lock"):
        progcache._core.LockFile(kc._locks_dir, key, 0.05, False)
    r = kc.cached(build_kernel, 9)
    assert not r.from_cache and r.artifacts["kernel.cubin"] == b"\x7fELF\x09"
    assert kc.cached(build_kernel, 9).from_cache
    held.release()
    assert os.listdir(kc._locks_dir) == []


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """The progcache command (skipped where it is not built), over a root of
    this test's own that the default caches use too."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.abspath(os.environ.get("PROGCACHE_CLI") or os.path.join(here, "..", "..", "build", "progcache"))
    if not os.access(path, os.X_OK):
        pytest.skip("the progcache CLI is not built (set PROGCACHE_CLI)")
    monkeypatch.setenv("PROGCACHE_DIR", str(tmp_path / "root"))
    monkeypatch.delenv("PYPTX_CACHE_DIR", raising=False)
    monkeypatch.delenv("PROGCACHE_REMOTE", raising=False)
    return path


def test_the_cli_sees_and_clears_the_kernel_caches_stores(cli):
    kc = KernelCache()
    kc.cached(build_kernel, 1)
    cubins = CubinCache()
    cubins.put(CacheEntry(CacheKey("f", {}, [], "sm_90"), ".version 8.0", b"\x7fELF cubin"))

    def cli_json(*args):
        out = subprocess.run([cli, *args, "--json"], capture_output=True, timeout=120, check=True)
        return json.loads(out.stdout)

    companions = {c["name"]: c for c in cli_json("stats")["companions"]}
    assert companions["kernels"]["entries"] == 1 and companions["pyptx"]["entries"] == 1
    listed = cli_json("ls")
    assert {e["store"] for e in listed} == {"kernels", "pyptx"}
    # Each named as a person knows it: the builder, the function and architecture.
    names = {e["store"]: (e["kind"], e["name"]) for e in listed}
    assert names["kernels"][0] == "kernel" and names["kernels"][1].endswith(".build_kernel"), names
    assert names["pyptx"] == ("pyptx cubin", "f (sm_90)"), names
    subprocess.run([cli, "clear"], check=True, timeout=120)
    assert all(c["entries"] == 0 for c in cli_json("stats")["companions"])
    assert not kc.cached(build_kernel, 1).from_cache  # cleared on disk, so built again


def test_a_lookup_served_from_memory_is_a_hit_in_the_roots_statistics(cli):
    # What the operator reads (the CLI's headline and the store's row)
    # counts every served lookup, those a cache answered from its memory too.

    def stats():
        out = subprocess.run([cli, "stats", "--json"], capture_output=True, timeout=120, check=True)
        return json.loads(out.stdout)

    # The tiered program cache: a miss, then two hits from its memory tier.
    tiered = progcache.TieredProgramCache()
    with pytest.raises(KeyError):
        tiered[b"k" * 32]
    tiered[b"k" * 32] = b"program"
    assert tiered[b"k" * 32] == b"program" and tiered[b"k" * 32] == b"program"
    tiered.close()
    s = stats()
    assert (s["hits"], s["misses"]) == (2, 1), s
    assert (s["root"]["hits"], s["root"]["misses"]) == (2, 1), s["root"]
    # pyptx's cache: a get right after the put, and again, from its memory.
    cubins = CubinCache()
    key = CacheKey("f", {}, [], "sm_90")
    cubins.put(CacheEntry(key, ".version 8.0", b"\x7fELF cubin"))
    assert cubins.get(key) is not None and cubins.get(key) is not None
    pyptx = {c["name"]: c for c in stats()["companions"]}["pyptx"]
    assert pyptx["hits"] == 2, pyptx
    # pyptx tests, then gets: one lookup, one hit, whether memory or the
    # disk answered (a new instance reads the disk in the test).
    assert key in cubins and cubins.get(key) is not None
    again = CubinCache()
    assert key in again and again.get(key) is not None
    pyptx = {c["name"]: c for c in stats()["companions"]}["pyptx"]
    assert (pyptx["hits"], pyptx["misses"]) == (4, 0), pyptx
    # A test that read the disk, then a put: the get after it is a lookup of
    # its own (one hit each).
    third = CubinCache()
    assert key in third
    third.put(CacheEntry(key, ".version 8.0", b"\x7fELF cubin"))
    assert third.get(key) is not None
    pyptx = {c["name"]: c for c in stats()["companions"]}["pyptx"]
    assert (pyptx["hits"], pyptx["misses"]) == (6, 0), pyptx


def test_cached_decorator_and_scoped_clear(tmp_path):
    kc = KernelCache(tmp_path / "dec")

    @progcache.cached(kc)
    def make(n):
        return {"bin": bytes(n)}

    assert make(3).from_cache is False
    assert make(3).from_cache is True
    other = progcache.FileStreamProgramCache(tmp_path / "other")
    other[b"keep"] = b"me"
    kc.clear_cache()
    assert other[b"keep"] == b"me"
    assert make(3).from_cache is False


def test_editing_a_builder_invalidates_its_entries(tmp_path):
    kc = KernelCache(tmp_path / "edit")
    ns1, ns2 = {}, {}
    exec("def f(n):\n    return {'v': b'one'}\n", ns1)
    exec("def f(n):\n    return {'v': b'two'}\n", ns2)
    # Same qualified name, different code objects: different keys.
    assert kc.key_of(ns1["f"], (1,), {}, "auto") != kc.key_of(ns2["f"], (1,), {}, "auto")


def test_kernel_caches_sign_with_the_hmac_key_and_share_by_group(tmp_path, monkeypatch):
    """CubinCache and KernelCache follow PROGCACHE_HMAC_KEY_FILE and
    PROGCACHE_SHARING as the program caches do: an entry not signed with
    this key is a miss, and a group-writable root is usable when asked for."""
    key_a, key_b = tmp_path / "a.key", tmp_path / "b.key"
    key_a.write_bytes(b"a" * 32)
    key_b.write_bytes(b"b" * 32)
    key = CacheKey("k", {"N": 1}, [], "sm_90")
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key_a))
    CubinCache(tmp_path / "pyptx").put(CacheEntry(key, "ptx", b"\x7fELF"))
    assert CubinCache(tmp_path / "pyptx").get(key) is not None
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key_b))
    assert CubinCache(tmp_path / "pyptx").get(key) is None  # signed with another key: a miss

    def build(n):
        return {"kernel.cubin": b"\x7fELF" + bytes([n])}

    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key_a))
    kc = KernelCache(tmp_path / "kernels")
    kc.cached(build, 1)
    assert KernelCache(tmp_path / "kernels").cached(build, 1).from_cache
    monkeypatch.setenv("PROGCACHE_HMAC_KEY_FILE", str(key_b))
    assert not KernelCache(tmp_path / "kernels").cached(build, 1).from_cache

    monkeypatch.delenv("PROGCACHE_HMAC_KEY_FILE")
    shared = tmp_path / "team"
    shared.mkdir(mode=0o770)
    os.chmod(shared, 0o2770)
    with pytest.raises(PermissionError):
        KernelCache(shared)
    KernelCache(shared, sharing="group").cached(build, 2)
    monkeypatch.setenv("PROGCACHE_SHARING", "group")
    assert CubinCache(shared / "pyptx").get(key) is None and KernelCache(shared).cached(build, 2).from_cache


def test_kernel_cache_cached_takes_tilelangs_arguments_with_a_builder(tmp_path):
    """cached(func, out_idx, *args, target=, target_host=, execution_backend=,
    verbose=, pass_configs=, compile_flags=): with a builder, out_idx is its
    first argument and the tilelang keywords given reach it and the key."""
    kc = KernelCache(tmp_path / "kc")
    seen = []

    def build(out_idx, n, **kw):
        seen.append((out_idx, n, kw))
        return {progcache.KERNEL_CUBIN_PATH: bytes([n])}

    r = kc.cached(build, [2], 5, target="sm_90", pass_configs={"tl.disable_tma_lower": True}, compile_flags=["-O3"])
    assert seen == [([2], 5, {"pass_configs": {"tl.disable_tma_lower": True}, "compile_flags": ["-O3"]})]
    assert r.artifacts == {"kernel.cubin": b"\x05"}
    assert kc.cached(build, [2], 5, target="sm_90", pass_configs={"tl.disable_tma_lower": True},
                     compile_flags=["-O3"]).from_cache
    assert not kc.cached(build, [2], 5, target="sm_90", compile_flags=["-O2"]).from_cache  # keyed
    assert not kc.cached(build, [1], 5, target="sm_90").from_cache
    # A keyword left at tilelang's default is not passed on: the key is the one
    # of a call without it.
    assert kc.cached(build, [1], 5, target="sm_90", verbose=False, execution_backend="auto").from_cache
    with pytest.raises(TypeError, match="needs the function"):
        kc.cached()
    assert KernelCache.execution_backend == "tvm_ffi"


def test_tilelangs_file_names_are_exported():
    assert (progcache.DEVICE_KERNEL_PATH, progcache.HOST_KERNEL_PATH, progcache.EXECUTABLE_PATH,
            progcache.KERNEL_LIB_PATH, progcache.KERNEL_CUBIN_PATH, progcache.KERNEL_PY_PATH) == (
        "device_kernel.cu", "host_kernel.cu", "executable.so", "kernel_lib.so", "kernel.cubin", "kernel.py")
    assert progcache.PARAMS_PATH == "params.json"  # tilelang 0.1.15's; never a pickle


@pytest.mark.parametrize("setting", ["a file", "others-writable", "bad size"])
def test_default_kernel_caches_on_an_unusable_configuration_warn_once_and_still_work(tmp_path, monkeypatch, setting):
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    if setting == "a file":
        monkeypatch.setenv("PROGCACHE_DIR", str(f))
    elif setting == "others-writable":
        monkeypatch.setenv("PROGCACHE_DIR", str(open_dir))
    else:
        monkeypatch.setenv("PROGCACHE_MAX_SIZE", "10Q")
    monkeypatch.delenv("PYPTX_CACHE_DIR", raising=False)
    monkeypatch.setattr(progcache._integration, "_warned", set())  # "once" is per process
    with pytest.warns(RuntimeWarning) as caught:
        kc = KernelCache()  # the configuration decides: a miss and a build, never an exception
        first = kc.cached(build_kernel, 3)
        again = kc.cached(build_kernel, 3)
        g = CubinCache()
        key = CacheKey("k", {"N": 4}, [((4,), "float32")], "sm_90")
        g.put(CacheEntry(key, ".version 8.0", b"\x7fELF-cubin"))
    assert kc.builds == 2 and not first.from_cache and not again.from_cache
    assert g.get(key) is not None  # memory still serves
    assert len([w for w in caught if "progcache." in str(w.message)]) == 2  # one per cache kind
    # A directory the caller names is the caller's to fix: still an error.
    if setting != "bad size":
        with pytest.raises((OSError, RuntimeError)):
            KernelCache(f if setting == "a file" else open_dir)


def test_a_full_disk_never_loses_a_build(tmp_path):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a small tmpfs")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        kc = KernelCache(small / "kc")
        big = lambda n: ({"kernel.cubin": os.urandom(200_000) + bytes([n])}, {"n": n})  # noqa: E731
        got = [kc.cached(big, n) for n in range(3)]  # the second and third do not fit
        assert [g.from_cache for g in got] == [False, False, False]
        assert all(len(g.artifacts["kernel.cubin"]) == 200_001 for g in got)
        assert kc.errors >= 1
        c = CubinCache(small / "pyptx")
        for n in range(3):
            key = CacheKey("k", {"N": n}, [((4,), "float32")], "sm_90")
            c.put(CacheEntry(key, ".version 8.0", os.urandom(200_000)))
            assert c.get(key) is not None  # memory still serves it
        assert c.errors >= 1
        kc._store.close()
        c._disk.close()
    finally:
        # Lazily, so a store another reference still holds open never leaves the mount behind.
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def test_kernel_cache_loads_no_unsigned_host_code_from_a_group_shared_store(tmp_path, monkeypatch):
    monkeypatch.setattr(progcache._integration, "_warned", set())
    elf = b"\x7fELF\x02\x01\x01" + b"\0" * 11 + b"\x3e\x00" + b"\0" * 44  # x86-64
    planted = lambda n: ({"executable.so": elf + bytes([n])}, {})  # noqa: E731
    # A member of the group stores a shared library under the key.
    KernelCache(tmp_path / "team", sharing="group").cached(planted, 1)
    other = KernelCache(tmp_path / "team", sharing="group")
    with pytest.warns(RuntimeWarning, match="host code"):
        got = other.cached(planted, 1)
    assert not got.from_cache and other.builds == 1  # built, never loaded from the shared store
    # Device code from the same store is served as before.
    KernelCache(tmp_path / "team", sharing="group").cached(build_kernel, 5)
    assert other.cached(build_kernel, 5).from_cache
