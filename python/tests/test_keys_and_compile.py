import threading

import pytest

import progcache
from conftest import requires_nvrtc

SAXPY = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


def key(**kw):
    args = dict(code=SAXPY, code_type="c++", options=["-arch=sm_90"], target_type="cubin")
    args.update(kw)
    return progcache.make_program_cache_key(**args)


def test_key_is_bytes_and_spellings_are_canonical():
    k = key()
    assert isinstance(k, bytes) and len(k) == 64
    assert key(options=["-arch", "sm_90"]) == k
    assert key(options=["--gpu-architecture=sm_90"]) == k
    assert key(code=SAXPY.encode()) == k
    assert key(options=["-arch=sm_80"]) != k
    assert key(target_type="ptx") != k
    assert key(name_expressions=["saxpy<float>"]) != k
    assert key(name_expressions=["b", "a"]) == key(name_expressions=["a", "b", "a"])


def test_key_is_keyword_only():
    with pytest.raises(TypeError):
        progcache.make_program_cache_key(SAXPY, "c++", [], "cubin")


def test_key_refusals_say_what_to_do():
    with pytest.raises(ValueError, match="extra_digest"):
        key(options=["-arch=sm_90", "-I/usr/include"])
    assert key(options=["-arch=sm_90", "-I/usr/include"], extra_digest=b"fp")
    with pytest.raises(ValueError, match="side effects"):
        key(options=["--create-pch=x.pch"], extra_digest=b"fp")
    with pytest.raises(ValueError):
        key(code_type="ptx", target_type="ltoir")
    with pytest.raises(TypeError):
        key(options="-arch=sm_90")
    with pytest.raises(TypeError):
        key(extra_digest="not-bytes")


def test_options_object_with_as_bytes():
    class Options:
        def as_bytes(self, backend):
            return [b"-arch=sm_90", b"-std=c++17"]

    assert key(options=Options()) == key(options=["-arch=sm_90", "-std=c++17"])


def test_key_works_as_a_cache_key():
    c = progcache.InMemoryProgramCache()
    c[key()] = b"cubin"
    assert c[key(options=["-arch", "sm_90"])] == b"cubin"


@requires_nvrtc
def test_compile_through_the_cache_keeps_symbols_and_log(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    first = progcache.compile(SAXPY, "c++", "cubin", ["-arch=sm_80"], ["saxpy<float>"], cache=cache)
    assert first.code[:4] == b"\x7fELF" and not first.from_cache
    assert first.symbol_mapping == {"saxpy<float>": "_Z5saxpyIfEvT_PKS0_PS0_i"}
    second = progcache.compile(SAXPY, "c++", "cubin", ["-arch", "sm_80"], ["saxpy<float>"], cache=cache)
    assert second.from_cache
    assert second.code == first.code and second.symbol_mapping == first.symbol_mapping and second.log == first.log
    assert cache[first.key] == first.code  # the raw cubin under its hex key


@requires_nvrtc
def test_compile_error_carries_the_log_and_stores_nothing(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    with pytest.raises(progcache.CompileError) as e:
        progcache.compile("__global__ void k( {", "c++", "cubin", ["-arch=sm_80"], cache=cache)
    assert "error" in e.value.log
    assert e.value.options == ["-arch=sm_80"]
    assert len(cache) == 0


@requires_nvrtc
def test_compile_releases_the_gil_and_threads_share_one_compile(tmp_path):
    cache = progcache.FileStreamProgramCache(tmp_path / "c")
    src = SAXPY + "// threads\n"
    results, ticks = [], []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    before = progcache.compile_stats()["compiles"]
    t = threading.Thread(target=ticker)
    t.start()
    workers = [threading.Thread(target=lambda: results.append(
        progcache.compile(src, "c++", "cubin", ["-arch=sm_80"], cache=cache))) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    t.join()
    assert len({r.code for r in results}) == 1
    assert progcache.compile_stats()["compiles"] - before == 1  # one compile, shared by the others
    assert len(ticks) > 5  # Python kept running while NVRTC compiled


@requires_nvrtc
def test_compile_to_ptx_and_ltoir():
    ptx = progcache.compile(SAXPY, "c++", "ptx", ["-arch=sm_80"], ["saxpy<double>"])
    assert b".entry" in ptx.code
    lto = progcache.compile(SAXPY, "c++", "ltoir", ["-arch=sm_80"], ["saxpy<double>"])
    assert len(lto.code) > 0
