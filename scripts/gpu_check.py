"""Loads programs that progcache served onto a GPU and launches two of them.

Used by main_job.py after the warm pass: every warm output (a cubin) is
loaded with the CUDA driver (cuModuleLoadData) and every lowered name it
reports is looked up (cuModuleGetFunction); saxpy<float> and the hand-written
PTX vector_add are launched and their results checked on the host. The
driver is reached through ctypes, so nothing beyond the driver is needed.
Where no GPU is usable, `open_gpu` says why and the caller skips.
"""
import ctypes
import struct


class GpuError(RuntimeError):
    pass


class Gpu:
    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.ctx = ctypes.c_void_p()
        dev = ctypes.c_int()
        self.check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        name = ctypes.create_string_buffer(256)
        self.check(lib.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
        self.name = name.value.decode()

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(msg))
            raise GpuError(f"{what} failed: error {rc} ({(msg.value or b'?').decode()})")

    def load(self, image: bytes) -> ctypes.c_void_p:
        mod = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image)), "cuModuleLoadData")
        return mod

    def function(self, mod: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), f"cuModuleGetFunction({name})")
        return fn

    def alloc(self, data: bytes) -> ctypes.c_uint64:
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(len(data))), "cuMemAlloc")
        self.check(self.lib.cuMemcpyHtoD_v2(ptr, ctypes.c_char_p(data), ctypes.c_size_t(len(data))), "cuMemcpyHtoD")
        return ptr

    def read(self, ptr: ctypes.c_uint64, n: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        self.check(self.lib.cuMemcpyDtoH_v2(buf, ptr, ctypes.c_size_t(n)), "cuMemcpyDtoH")
        return buf.raw

    def launch(self, fn: ctypes.c_void_p, blocks: int, threads: int, args: list) -> None:
        arr = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args])
        self.check(self.lib.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, None, arr, None), "cuLaunchKernel")
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


def open_gpu() -> tuple[Gpu | None, str]:
    """Returns (gpu, "") or (None, why no GPU is usable)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, f"no CUDA driver ({e})"
    rc = lib.cuInit(0)
    if rc != 0:
        return None, f"cuInit failed with error {rc} (no usable GPU)"
    count = ctypes.c_int()
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the driver sees no GPU"
    try:
        return Gpu(lib), ""
    except GpuError as e:
        return None, str(e)


def _floats(values) -> bytes:
    return struct.pack(f"{len(values)}f", *values)


def check_outputs(gpu: Gpu, records: list[dict]) -> list[str]:
    """Loads every record's output and resolves its symbols; launches saxpy<float>
    and vector_add. Returns one line per check; raises GpuError on a failure."""
    lines = []
    modules = {}
    records = [r for r in records if r["target"] == "cubin"]  # LTO-IR halves of a link are not loadable
    for r in records:
        with open(r["output"], "rb") as f:
            mod = gpu.load(f.read())
        for expr, lowered in r.get("symbols", {}).items():
            gpu.function(mod, lowered)
        modules[r["input"]] = (mod, r)
    lines.append(f"loaded {len(records)}/{len(records)} cached programs on {gpu.name}")
    n = 4096
    xs = [float(i) for i in range(n)]
    ys = [1.0] * n
    expected_saxpy = [2.0 * x + 1.0 for x in xs]
    if "saxpy.cu" in modules:
        mod, rec = modules["saxpy.cu"]
        fn = gpu.function(mod, rec["symbols"]["saxpy<float>"])
        dx, dy = gpu.alloc(_floats(xs)), gpu.alloc(_floats(ys))
        gpu.launch(fn, (n + 255) // 256, 256, [ctypes.c_float(2.0), dx, dy, ctypes.c_int(n)])
        got = list(struct.unpack(f"{n}f", gpu.read(dy, 4 * n)))
        if got != expected_saxpy:
            raise GpuError("saxpy<float> from the cache computed wrong values")
        lines.append(f"saxpy<float>: {n} results correct")
    if "vector_add.ptx" in modules:
        mod, _ = modules["vector_add.ptx"]
        fn = gpu.function(mod, "vector_add")
        da, db, dc = gpu.alloc(_floats(xs)), gpu.alloc(_floats(ys)), gpu.alloc(_floats([0.0] * n))
        gpu.launch(fn, (n + 255) // 256, 256, [da, db, dc, ctypes.c_uint32(n)])
        got = list(struct.unpack(f"{n}f", gpu.read(dc, 4 * n)))
        if got != [x + 1.0 for x in xs]:
            raise GpuError("vector_add from the cache computed wrong values")
        lines.append(f"vector_add (PTX linked by nvJitLink): {n} results correct")
    return lines
