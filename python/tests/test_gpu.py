"""On a machine with a GPU: programs served from progcache's caches load and
run. Skipped, saying why, where no GPU (or no NVRTC) is usable."""
import os
import struct
import sys

import pytest

import progcache
from progcache import FileStreamProgramCache

from conftest import requires_nvrtc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import gpu_check  # noqa: E402

SAXPY = """
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture(scope="module")
def gpu():
    g, why = gpu_check.open_gpu()
    if g is None:
        pytest.skip(f"no GPU: {why}")
    return g


def _arch(gpu) -> str:
    import ctypes
    major, minor, dev = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    gpu.check(gpu.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    gpu.check(gpu.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev), "cuDeviceGetAttribute")  # CC major
    gpu.check(gpu.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev), "cuDeviceGetAttribute")  # CC minor
    return f"sm_{major.value}{minor.value}"


@requires_nvrtc
def test_cached_cubin_launches_and_matches_a_fresh_compile(gpu, tmp_path):
    cache = FileStreamProgramCache(tmp_path / "c")
    opts = [f"-arch={_arch(gpu)}"]
    first = progcache.compile(SAXPY, "c++", "cubin", opts, ["saxpy<float>"], cache=cache)
    hit = progcache.compile(SAXPY, "c++", "cubin", opts, ["saxpy<float>"], cache=cache)
    assert not first.from_cache and hit.from_cache
    fresh = progcache.compile(SAXPY, "c++", "cubin", opts, ["saxpy<float>"], cache=None)
    assert hit.code == fresh.code
    mod = gpu.load(hit.code)
    fn = gpu.function(mod, hit.symbol_mapping["saxpy<float>"])
    import ctypes
    n = 1 << 16
    x = [float(i % 1000) for i in range(n)]
    dx = gpu.alloc(struct.pack(f"{n}f", *x))
    dy = gpu.alloc(struct.pack(f"{n}f", *([1.0] * n)))
    gpu.launch(fn, (n + 255) // 256, 256, [ctypes.c_float(3.0), dx, dy, ctypes.c_int(n)])
    assert list(struct.unpack(f"{n}f", gpu.read(dy, 4 * n))) == [3.0 * v + 1.0 for v in x]


def test_cuda_core_loads_and_launches_a_cubin_from_progcache(gpu, tmp_path):
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    except Exception as e:
        pytest.skip(f"cuda.core not importable here: {e}")
    dev = Device()
    dev.set_current()
    cache = FileStreamProgramCache(tmp_path / "cc")
    src = 'extern "C" __global__ void fill(int* out, int v) { out[threadIdx.x] = v + threadIdx.x; }'
    opts = ProgramOptions(arch=f"sm_{dev.arch}")
    Program(src, "c++", opts).compile("cubin", cache=cache)  # miss: stored
    obj = Program(src, "c++", opts).compile("cubin", cache=cache)  # hit
    assert cache.stats()["hits"] >= 1
    kernel = obj.get_kernel("fill")
    stream = dev.create_stream()
    buf = dev.allocate(4 * 64, stream=stream)
    launch(stream, LaunchConfig(grid=1, block=64), kernel, buf, 7)
    stream.sync()
    import ctypes
    host = ctypes.create_string_buffer(4 * 64)
    gpu.check(gpu.lib.cuMemcpyDtoH_v2(host, ctypes.c_uint64(int(buf.handle)), ctypes.c_size_t(4 * 64)), "cuMemcpyDtoH")
    assert list(struct.unpack("64i", host.raw)) == [7 + i for i in range(64)]
