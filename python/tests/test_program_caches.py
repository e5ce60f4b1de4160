"""cuda.core's ProgramCacheResource contract, on every progcache cache."""
import os
import subprocess
import sys
import threading
import time

import pytest

import progcache
from progcache import FileStreamProgramCache, InMemoryProgramCache
from conftest import have_nvrtc as _have_nvrtc


@pytest.fixture(params=["memory", "file", "tiered"])
def cache(request, tmp_path):
    if request.param == "memory":
        c = InMemoryProgramCache()
    elif request.param == "file":
        c = FileStreamProgramCache(tmp_path / "fs")
    else:
        c = progcache.TieredProgramCache(tmp_path / "tiered")
    yield c
    c.close()


class ObjectCode:
    """Stands in for cuda.core's ObjectCode: bytes or a path in .code."""

    def __init__(self, code):
        self.code = code


def test_round_trip_and_str_bytes_keys_are_one_entry(cache):
    cache[b"k"] = b"\x7fELF\x00binary"
    assert cache["k"] == b"\x7fELF\x00binary"
    assert isinstance(cache["k"], bytes)
    cache["unicode-ключ"] = b"v"
    assert cache["unicode-ключ".encode("utf-8")] == b"v"
    assert len(cache) == 2


def test_miss_raises_keyerror_and_get_returns_default(cache):
    with pytest.raises(KeyError):
        cache[b"absent"]
    assert cache.get(b"absent") is None
    assert cache.get("absent", b"dflt") == b"dflt"


def test_values_bytearray_memoryview_and_objectcode(cache, tmp_path):
    cache[b"a"] = bytearray(b"ba")
    cache[b"m"] = memoryview(b"mv")
    cache[b"o"] = ObjectCode(b"obj")
    path = tmp_path / "k.cubin"
    path.write_bytes(b"from-a-file")
    cache[b"p"] = ObjectCode(str(path))
    path.write_bytes(b"changed later")  # read at write time, not lazily
    assert (cache[b"a"], cache[b"m"], cache[b"o"], cache[b"p"]) == (b"ba", b"mv", b"obj", b"from-a-file")


def test_delitem_update_clear_len(cache):
    cache.update({b"1": b"a", "2": b"b"})
    cache.update([(b"3", b"c")])
    assert len(cache) == 3
    del cache["2"]
    with pytest.raises(KeyError):
        del cache["2"]
    assert len(cache) == 2
    cache.clear()
    assert len(cache) == 0


def test_bad_keys_and_values_raise_typeerror(cache):
    for bad in (1, 1.5, None, ("t",), bytearray(b"k")):
        with pytest.raises(TypeError):
            cache[bad] = b"v"
    for bad in (1, "text", None, object(), ObjectCode(12)):
        with pytest.raises(TypeError):
            cache[b"k"] = bad


def test_subscript_keys_as_set_and_errors_as_python_gives_them(cache):
    cache["ключ"] = b"v"
    assert cache["ключ"] == cache["ключ".encode("utf-8")] == b"v"
    for bad in (1, 1.5, None, ("t",), bytearray(b"k"), memoryview(b"k")):
        with pytest.raises(TypeError, match=f"not {type(bad).__name__}"):
            cache[bad]
    with pytest.raises(UnicodeEncodeError):
        cache["\udc80"]  # a lone surrogate has no UTF-8, as str.encode says
    for absent in (b"absent", "absent"):
        with pytest.raises(KeyError) as e:
            cache[absent]
        assert e.value.args == (absent,)  # the key as the caller gave it


def test_subscript_is_the_c_level_slot_on_every_cache_class():
    """cache[key], the hot path, runs in C++ with no Python frame: a Python
    __getitem__ on any cache class would shadow it (and double a memory
    hit's time)."""
    for cls in progcache._caches._CACHE_CLASSES:
        assert cls.__getitem__ is progcache._core.CacheFront.__getitem__, cls


def test_a_subclass_that_skips_the_base_init_gets_an_error_not_a_crash():
    class Careless(InMemoryProgramCache):
        def __init__(self):
            pass

    with pytest.raises(RuntimeError, match="not initialised"):
        Careless()[b"k"]


def test_every_cache_reports_hits_misses_rate_bytes_and_times(cache):
    """The telemetry every cache class reports, counted from what this test
    did: sixteen hits of known sizes through both lookup routes (times are
    sampled one call in 16 per thread, so at least one is timed), two misses."""
    values = {f"k{i}": os.urandom(1000 * (i + 1)) for i in range(4)}
    for k, v in values.items():
        cache[k] = v
    for _ in range(2):
        for k in values:
            assert cache[k] == values[k]  # the C-level subscript slot
            assert cache.get(k) == values[k]
    assert cache.get("absent") is None
    with pytest.raises(KeyError):
        cache["absent too"]
    s = cache.stats()
    assert s["hits"] == 16 and s["misses"] == 2 and s["puts"] == 4
    assert s["hit_rate"] == pytest.approx(16 / 18)
    payloads = sum(len(v) for v in values.values())
    # Each tier counts its entries as it holds them: the payload alone in
    # memory, the encoded entry on disk (a few hundred bytes more).
    assert 4 * payloads <= s["bytes_read"] <= 4 * (payloads + 4 * 1024)
    assert payloads <= s["bytes_written"] <= payloads + 4 * 1024
    assert s["get_samples"] >= 1 and s["get_p99_ns"] >= s["get_p50_ns"] > 0


def test_no_contains(cache):
    cache[b"k"] = b"v"
    with pytest.raises(TypeError):
        b"k" in cache  # noqa: B015 - deliberately unsupported


def test_context_manager(tmp_path):
    with FileStreamProgramCache(tmp_path / "cm") as c:
        c[b"k"] = b"v"
    with FileStreamProgramCache(tmp_path / "cm") as c:
        assert c[b"k"] == b"v"


@pytest.mark.parametrize("cls", [InMemoryProgramCache, FileStreamProgramCache])
@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_bad_caps(cls, bad, tmp_path):
    kwargs = {"max_size_bytes": bad}
    with pytest.raises((TypeError, ValueError)):
        cls(tmp_path, **kwargs) if cls is FileStreamProgramCache else cls(**kwargs)


def test_memory_hit_returns_the_stored_object_without_copy():
    c = InMemoryProgramCache()
    payload = os.urandom(1 << 20)
    c[b"big"] = payload
    assert c[b"big"] is payload


def test_memory_lru_cap():
    c = InMemoryProgramCache(max_size_bytes=300)
    for i in range(3):
        c[str(i)] = bytes(100)
    c["0"]  # most recent
    c["3"] = bytes(100)
    assert c.get("1") is None
    assert c["0"] and c["2"] and c["3"]
    assert c.size_bytes <= 300
    c["huge"] = bytes(301)  # larger than the cap: not stored
    assert c.get("huge") is None


def test_file_cache_is_shared_by_processes_and_persists(tmp_path):
    import subprocess
    import sys
    root = tmp_path / "shared"
    code = (f"import progcache; c = progcache.FileStreamProgramCache({str(root)!r}); "
            "c[b'from-child'] = b'child-bytes'; print(len(c))")
    subprocess.run([sys.executable, "-c", code], check=True)
    c = FileStreamProgramCache(root)
    assert c[b"from-child"] == b"child-bytes"
    assert c.stats()["entries"] == 1


def test_file_cache_default_path_is_progcache_dir(tmp_path):
    c = FileStreamProgramCache()
    assert c.path == os.environ["PROGCACHE_DIR"]


def test_file_cache_cap_evicts(tmp_path):
    c = FileStreamProgramCache(tmp_path / "cap", max_size_bytes=64 * 1024)
    for i in range(100):
        c[str(i)] = os.urandom(2000)
    assert c.stats()["bytes_stored"] <= 64 * 1024
    assert c.stats()["evictions"] > 0
    assert c.get("99") is not None
    # On disk, not only in the accounting: the entry files (64 hex digits
    # split as shard/name) add up to no more than the cap, and to what the
    # cache reports.
    on_disk = sum(p.stat().st_size for p in (tmp_path / "cap").rglob("*")
                  if p.is_file() and len(p.name) == 62 and len(p.parent.name) == 2)
    assert on_disk <= 64 * 1024
    assert on_disk == c.stats()["bytes_stored"]


def test_file_cache_evicts_least_recently_used_first_with_few_entries(tmp_path):
    """100 entries of one size into a cache that holds 19: the newest
    survive, wherever they land, and a read keeps an old entry alive."""
    root = tmp_path / "lru"
    c = FileStreamProgramCache(root, max_size_bytes=None)
    keys = [bytes([i]) * 32 for i in range(100)]  # 32-byte keys are the keys themselves

    def path(k):
        h = k.hex()
        return root / "v1" / h[:2] / h[2:]

    c[keys[0]] = b"x" * 2000
    entry_size = path(keys[0]).stat().st_size
    c.close()
    c = FileStreamProgramCache(root, max_size_bytes=19 * entry_size)
    now = time.time()
    for i, k in enumerate(keys):
        c[k] = b"x" * 2000
        os.utime(path(k), (now - 1000 + i, now - 1000 + i))  # entry i used i seconds after entry 0
    alive = [i for i, k in enumerate(keys) if path(k).exists()]
    assert 17 <= len(alive) <= 19
    assert alive == list(range(100 - len(alive), 100)), f"survivors {alive} are not the newest"
    on_disk = sum(path(keys[i]).stat().st_size for i in alive)
    assert on_disk <= 19 * entry_size
    # A hit on the oldest survivor makes it the most recently used.
    oldest = alive[0]
    assert c.get(keys[oldest]) is not None
    for j in range(3):
        k = bytes([200 + j]) * 32
        c[k] = b"x" * 2000
    assert path(keys[oldest]).exists() and not path(keys[oldest + 1]).exists()


def test_file_cache_lru_follows_a_read_within_the_minute(tmp_path):
    """cuda.core's own case (test_filestream_cache_atime_lru_promotes_recently_read)
    with progcache's class: under a cap that holds two entries, the one read
    after the other was written survives the third, though all of it takes
    well under a minute (no sleeps: a read counts at once)."""
    probe = FileStreamProgramCache(tmp_path / "probe", max_size_bytes=None)
    probe[b"a"] = b"A" * 2000
    entry = sum(p.stat().st_size for p in (tmp_path / "probe").rglob("*") if p.is_file() and len(p.name) == 62)
    probe.close()
    root = tmp_path / "fc"
    with FileStreamProgramCache(root, max_size_bytes=entry * 5 // 2) as cache:
        cache[b"a"] = b"A" * 2000  # written first
        cache[b"b"] = b"B" * 2000
        assert cache[b"a"] == b"A" * 2000  # read last
        cache[b"c"] = b"C" * 2000  # one eviction
    with FileStreamProgramCache(root, max_size_bytes=entry * 5 // 2) as cache:
        assert cache.get(b"b") is None
        assert cache.get(b"a") == b"A" * 2000
        assert cache.get(b"c") == b"C" * 2000


def test_file_cache_none_is_no_cap_and_a_number_is_the_cap(tmp_path):
    # What the library applies, read back from the opened store.
    assert FileStreamProgramCache(tmp_path / "a", max_size_bytes=None).max_size_bytes is None
    assert FileStreamProgramCache(tmp_path / "b").max_size_bytes is None
    assert FileStreamProgramCache(tmp_path / "c", max_size_bytes=12345).max_size_bytes == 12345
    assert progcache.TieredProgramCache(tmp_path / "d", max_size_bytes=None).max_size_bytes is None
    assert progcache.TieredProgramCache(tmp_path / "e", max_size_bytes=777).max_size_bytes == 777


def test_file_cache_directories_removed_while_open_are_made_again(tmp_path):
    """As in cuda.core: removing the cache directory (or a shard of it) under
    an open cache costs the entries, never the next write."""
    import shutil
    root = tmp_path / "gone"
    c = FileStreamProgramCache(root)
    c["a"] = b"1"
    shutil.rmtree(root)
    assert c.get("a") is None
    c["b"] = b"2"
    assert c["b"] == b"2" and FileStreamProgramCache(root)["b"] == b"2"
    shard = next(p for p in (root / "v1").iterdir() if p.is_dir())
    shutil.rmtree(shard)
    c["c"] = b"3"
    assert c["c"] == b"3"


def test_threads_hammering_one_cache(cache):
    errors = []

    def work(t):
        try:
            for i in range(300):
                k = f"{(i * 7 + t) % 50}".encode()
                cache[k] = k * 10
                v = cache.get(k)
                if v is not None and v != k * 10:
                    errors.append((k, v))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_closing_while_other_threads_use_the_cache_is_safe(tmp_path):
    """close() on one thread while others read and write: each call works or
    says the cache is closed; the store is not freed under a call in flight
    (which released the GIL for its I/O)."""
    for r in range(30):
        c = FileStreamProgramCache(tmp_path / f"round{r}")
        for i in range(8):
            c[f"k{i}"] = bytes([i]) * 200_000
        stop = threading.Event()
        errors = []

        def work(t):
            i = 0
            while not stop.is_set() or i % 8:
                key = f"k{(i + t) % 8}"
                try:
                    v = c.get(key)
                    if v is not None and len(v) != 200_000:
                        errors.append(f"{key}: {len(v)} bytes")
                    if i % 5 == t:
                        c[key] = b"z" * 200_000
                except RuntimeError as e:
                    if "closed" not in str(e):
                        errors.append(repr(e))
                except Exception as e:  # noqa: BLE001 - anything else is the failure
                    errors.append(repr(e))
                i += 1

        threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.002 + (r % 10) * 0.0005)
        c.close()
        stop.set()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        with pytest.raises(RuntimeError, match="closed"):
            c[b"k1"]


def test_damaged_file_entry_is_a_miss(tmp_path):
    c = FileStreamProgramCache(tmp_path / "dmg")
    c[b"k"] = b"x" * 5000
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "dmg" / "v1") for f in fs if len(f) == 62]
    assert len(files) == 1
    data = bytearray(open(files[0], "rb").read())
    data[2000] ^= 1
    open(files[0], "wb").write(bytes(data))
    assert c.get(b"k") is None
    assert c.stats()["corrupt_dropped"] == 1


def test_entry_checksum_is_the_checksum_a_file_hit_verifies(tmp_path):
    # bench/python_hits.py times a bare read plus entry_checksum as the floor
    # of any verified hit: it must be the checksum stored in (and checked
    # against) every entry file's last 16 bytes, over everything before them.
    c = FileStreamProgramCache(tmp_path / "ck")
    c[b"k"] = os.urandom(70000)
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "ck" / "v1") for f in fs if len(f) == 62]
    assert len(files) == 1
    data = open(files[0], "rb").read()
    assert progcache._core.entry_checksum(data[:-16]) == data[-16:]
    assert progcache._core.entry_checksum(data[:-17]) != data[-16:]


def test_foreign_writable_root_is_refused(tmp_path):
    root = tmp_path / "open"
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.raises(PermissionError, match="writable by group or others"):
        FileStreamProgramCache(root)


def test_errors_speak_the_users_words_not_the_librarys_code_names(tmp_path):
    # The code chose the exception's type; the message is what is wrong.
    plain = tmp_path / "a-file"
    plain.write_bytes(b"x")
    with pytest.raises(RuntimeError) as e:
        FileStreamProgramCache(plain)
    assert "is not a directory" in str(e.value) and not str(e.value).startswith("failed_precondition"), e.value
    with pytest.raises(OSError) as e:
        progcache.RedisProgramCache("redis://127.0.0.1:1")[b"k" * 32]
    assert not str(e.value).startswith(("unavailable", "data_loss", "resource_exhausted")), e.value


def test_group_shared_root_is_usable_when_asked_for(tmp_path, monkeypatch):
    # A team's root: group-writable and setgid. Refused by default (as a
    # private cache must be), usable with sharing="group" or
    # PROGCACHE_SHARING=group; entries then are group-readable.
    root = tmp_path / "team"
    root.mkdir()
    os.chmod(root, 0o2770)
    with pytest.raises(PermissionError, match="writable by group or others"):
        FileStreamProgramCache(root)
    with FileStreamProgramCache(root, sharing="group") as c:
        c["k"] = b"shared"
        assert c["k"] == b"shared"
    entries = [p for p in root.rglob("*") if p.is_file() and len(p.name) == 62]
    assert entries and all(p.stat().st_mode & 0o777 == 0o660 for p in entries)
    monkeypatch.setenv("PROGCACHE_SHARING", "group")
    with FileStreamProgramCache(root) as c:
        assert c["k"] == b"shared"
    with pytest.raises(ValueError, match="sharing"):
        FileStreamProgramCache(root, sharing="world")
    # Others-writable stays refused even in group mode.
    os.chmod(root, 0o2777)
    with pytest.raises(PermissionError):
        FileStreamProgramCache(root, sharing="group")


def test_cuda_core_registration_when_available():
    try:
        from cuda.core.utils import ProgramCacheResource
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    assert progcache.REGISTERED_WITH_CUDA_CORE
    assert isinstance(InMemoryProgramCache(), ProgramCacheResource)
    assert issubclass(FileStreamProgramCache, ProgramCacheResource)


def test_importing_progcache_does_not_import_cuda_core_yet_registers_when_it_is():
    try:
        import cuda.core.utils  # noqa: F401
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    # A fresh interpreter: this one has imported cuda.core already.
    code = (
        "import sys, progcache\n"
        "assert 'cuda.core' not in sys.modules, 'import progcache imported cuda.core'\n"
        "from cuda.core.utils import ProgramCacheResource\n"
        "assert isinstance(progcache.InMemoryProgramCache(), ProgramCacheResource)\n"
        "assert issubclass(progcache.TieredProgramCache, ProgramCacheResource)\n"
        "assert progcache.REGISTERED_WITH_CUDA_CORE\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_cuda_core_program_compile_accepts_progcache_caches(tmp_path):
    try:
        from cuda.core import Program, ProgramOptions
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    src = 'extern "C" __global__ void k(float* x) { x[0] = 2; }'
    cache = FileStreamProgramCache(tmp_path / "cc")
    try:
        first = Program(src, "c++", ProgramOptions(arch="sm_80")).compile("cubin", cache=cache)
    except Exception as e:  # no NVRTC reachable through cuda.bindings
        pytest.skip(f"cuda.core cannot compile here: {e}")
    assert len(cache) == 1
    second = Program(src, "c++", ProgramOptions(arch="sm_80")).compile("cubin", cache=cache)
    assert cache.stats()["hits"] == 1
    assert bytes(second.code) == bytes(first.code)


# One process, cuda.core and progcache: the compiler progcache runs, and its
# keys name, is the one cuda.core loads (cuda-pathfinder's choice: pip's
# NVIDIA wheel before the system toolkit). Each case in a fresh interpreter,
# so that the order of loads is the user's.
_ONE_PROCESS = """
import json, sys, progcache
from cuda.core import Program, ProgramOptions
src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
o = ProgramOptions(arch="sm_80", name="prog")
obj = Program(src, "c++", options=o).compile("cubin")
theirs = bytes(obj.code)
key = progcache.make_program_cache_key(code=src, code_type="c++", options=o, target_type="cubin")
cache = progcache.FileStreamProgramCache(sys.argv[1])
cache[key] = obj  # cuda.core's documented way to fill a cache by hand
fresh = progcache.compile(src, options=o, cache=None)
from cuda.pathfinder import load_nvidia_dynamic_lib
print(json.dumps({"theirs": theirs.hex(), "fresh": fresh.code.hex(), "stored": bytes(cache[key]).hex(),
                  "key": key.hex(),
                  "nvrtc": load_nvidia_dynamic_lib("nvrtc").abs_path}))
"""


def _one_process(tmp_path, name, **env):
    import json
    r = subprocess.run([sys.executable, "-c", _ONE_PROCESS, str(tmp_path / name)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, **env})
    if r.returncode != 0 and ("DynamicLibNotFoundError" in r.stderr or "CUDAError" in r.stderr):
        pytest.skip(f"cuda.core cannot compile here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_one_process_one_compiler_for_cuda_core_and_progcache(tmp_path):
    try:
        import cuda.core  # noqa: F401
        import cuda.pathfinder  # noqa: F401
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    got = _one_process(tmp_path, "a")
    assert got["fresh"] == got["theirs"], "progcache compiled with another NVRTC than cuda.core's"
    # Filled by hand with cuda.core's bytes under progcache's key: what a
    # reader of that key gets is what progcache would compile now.
    assert got["stored"] == got["fresh"]
    # The key names the compiler: another NVRTC file (the toolkit's, named
    # explicitly, which wins over cuda-python's choice) gives another key
    # wherever its bytes differ.
    system = "/usr/local/cuda/lib64/libnvrtc.so.13"
    if not os.path.exists(system) or os.path.realpath(system) == os.path.realpath(got["nvrtc"]):
        pytest.skip("no second NVRTC on this machine to compare keys with")
    with open(system, "rb") as a, open(got["nvrtc"], "rb") as b:
        same_file = a.read() == b.read()
    other = _one_process(tmp_path, "b", PROGCACHE_NVRTC=system)
    assert (other["key"] == got["key"]) == same_file


# The escape hatch in the other order: the key made before cuda.core is
# imported, then cuda.core compiles and the bytes are stored under it.
_KEY_FIRST = """
import json, sys, progcache
src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 3.0f; }'
opts = ["-arch=sm_80"]
before = progcache.make_program_cache_key(code=src, code_type="c++", options=opts, target_type="cubin")
from cuda.core import Program, ProgramOptions
obj = Program(src, "c++", options=ProgramOptions(arch="sm_80")).compile("cubin")
after = progcache.make_program_cache_key(code=src, code_type="c++", options=opts, target_type="cubin")
fresh = progcache.compile(src, options=opts, cache=None)
print(json.dumps({"before": before.hex(), "after": after.hex(), "theirs": bytes(obj.code).hex(),
                  "fresh": fresh.code.hex()}))
"""


def test_a_key_made_before_cuda_core_is_imported_names_the_compiler_cuda_core_runs(tmp_path):
    try:
        import cuda.core  # noqa: F401
        import cuda.pathfinder  # noqa: F401
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    import json
    # Twice: the second process finds the compilers' identities memoised in
    # the root and loads no NVRTC to make the first key.
    (tmp_path / "root").mkdir()
    env = {**os.environ, "PROGCACHE_DIR": str(tmp_path / "root")}
    for run in ("first", "second"):
        r = subprocess.run([sys.executable, "-c", _KEY_FIRST], capture_output=True, text=True, timeout=300, env=env)
        if r.returncode != 0 and ("DynamicLibNotFoundError" in r.stderr or "CUDAError" in r.stderr):
            pytest.skip(f"cuda.core cannot compile here: {r.stderr[-300:]}")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["before"] == got["after"], f"{run} process: one program, two keys"
        assert got["fresh"] == got["theirs"], f"{run} process: progcache compiled with another NVRTC than cuda.core's"


def test_cuda_cores_own_refusals_on_the_drop_in_route_and_what_serves_them(tmp_path):
    """What docs/python.md says next to the drop-in example: cuda.core's
    Program.compile(cache=) refuses name_expressions and include_path with its
    own ValueError, and progcache.compile() serves both."""
    try:
        from cuda.core import Program, ProgramOptions
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    src = 'template <typename T> __global__ void scale(T* x, T a) { x[threadIdx.x] *= a; }'
    cache = FileStreamProgramCache(tmp_path / "c")
    with pytest.raises(ValueError, match="name_expressions"):
        Program(src, "c++", ProgramOptions(arch="sm_80")).compile("cubin", name_expressions=["scale<float>"],
                                                                  cache=cache)
    (tmp_path / "inc").mkdir()
    with pytest.raises(ValueError, match="include_path"):
        Program(src, "c++", ProgramOptions(arch="sm_80", include_path=[str(tmp_path / "inc")])).compile(
            "cubin", cache=cache)
    assert len(cache) == 0
    if not _have_nvrtc():
        pytest.skip("no NVRTC (CUDA toolkit) on this machine")
    opts = ProgramOptions(arch="sm_80", include_path=[str(tmp_path / "inc")])
    first = progcache.compile(src, options=opts, name_expressions=["scale<float>"], cache=cache)
    again = progcache.compile(src, options=opts, name_expressions=["scale<float>"], cache=cache)
    assert again.from_cache and again.code == first.code
    assert again.symbol_mapping == first.symbol_mapping == {"scale<float>": "_Z5scaleIfEvPT_S0_"}


_CUT_SHORT = """
import os, sys, progcache
d = sys.argv[1]
c = progcache.FileStreamProgramCache(d)
c[b"k"] = b"v" * 100
assert c[b"k"] == b"v" * 100
for name in ("recency", "accounting"):  # what any writer of the store can do
    os.truncate(os.path.join(d, "v1", name), 0)
for _ in range(3):
    assert c[b"k"] == b"v" * 100
c[b"k2"] = b"w"
assert c[b"k2"] == b"w"
print("served")
"""


@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_stores_mapped_files_cut_short_under_a_process_are_no_crash(tmp_path, faulthandler):
    """The recency table and the accounting file are mapped: truncated by
    another writer of the store (a member of a group root), an access past
    their end is SIGBUS. The process goes on serving and storing, also with
    Python's faulthandler on (which pytest and -X faulthandler install)."""
    flags = ["-X", "faulthandler"] if faulthandler else []
    r = subprocess.run([sys.executable, *flags, "-c", _CUT_SHORT, str(tmp_path / "root")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, f"rc {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.strip() == "served"


def test_fsync_durability_and_bad_value(tmp_path, monkeypatch):
    c = FileStreamProgramCache(tmp_path / "durable", durability="fsync")
    c[b"k"] = b"on disk for real"
    assert FileStreamProgramCache(tmp_path / "durable")[b"k"] == b"on disk for real"
    with pytest.raises(ValueError, match="durability"):
        FileStreamProgramCache(tmp_path / "x", durability="sometimes")
    monkeypatch.setenv("PROGCACHE_DURABILITY", "bogus")
    with pytest.raises(ValueError):
        FileStreamProgramCache(tmp_path / "y")


def test_tiered_memory_over_disk_needs_no_remote_and_counts_what_the_caller_saw(tmp_path, monkeypatch):
    monkeypatch.delenv("PROGCACHE_REMOTE", raising=False)
    first = progcache.TieredProgramCache(tmp_path / "t")
    first["k"] = b"kept on disk"
    first.close()
    # A new process's view: empty memory over the same disk.
    second = progcache.TieredProgramCache(tmp_path / "t")
    assert second["k"] == b"kept on disk"  # from disk, then kept in memory
    assert second["k"] == b"kept on disk"
    with pytest.raises(KeyError):
        second["absent"]
    assert progcache.TieredProgramCache(tmp_path / "unused").stats()["hit_rate"] is None  # no lookups: no rate
    s = second.stats()
    # One row per library counter; a hit in any tier is one hit.
    assert set(s) == {"entries", "bytes_stored", "hits", "misses", "puts", "evictions", "corrupt_dropped",
                      "rejected", "errors", "bytes_read", "bytes_written", "get_samples", "get_p50_ns", "get_p99_ns",
                      "put_samples", "put_p50_ns", "put_p99_ns", "hit_rate"}
    assert (s["hits"], s["misses"], s["entries"]) == (2, 1, 1)
    second.close()
