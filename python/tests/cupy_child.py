"""One process of a progcache.cupy test (python/tests/test_cupy.py): compiles
the kernels its spec names through CuPy's own compile path
(``cupy.cuda.compiler._compile_module_with_cache``, what RawKernel and
RawModule call) and prints one JSON line: per kernel, the bytes CuPy's kernel
cache backend was given (save) or answered (load), and NVRTC's compile count.

This machine may have no GPU: the device's architecture query is given by
this script (sm_90), and loading a cubin into a CUDA module, which needs a
driver, fails after the backend has done its part; that failure is caught
and reported. LTO-IR compiles need no module, so they run to the end.

spec (argv[1], JSON): kernels (a list of {source, options, ltoir,
name_expressions}), import (whether to import progcache.cupy itself),
break_hook (hide CuPy's backend hook first), wait_for (a file to wait for
before compiling), dump (a directory to keep each payload in), nvrtc (the
NVRTC file CuPy is to load), edit_during_compile ({path, text}: written
just before NVRTC compiles)."""

import hashlib
import json
import os
import sys
import time
import warnings

spec = json.loads(sys.argv[1])

if spec.get("nvrtc"):
    # The NVRTC CuPy loads is the file the test names (a copy of CuPy's
    # own): cuda.pathfinder, which CuPy asks, is answered with it.
    import ctypes

    import cuda.pathfinder as pathfinder
    from cuda.pathfinder._dynamic_libs.load_dl_common import LoadedDL
    _lib = ctypes.CDLL(spec["nvrtc"])
    _find = pathfinder.load_nvidia_dynamic_lib
    pathfinder.load_nvidia_dynamic_lib = lambda name: (LoadedDL(spec["nvrtc"], False, _lib._handle, "system-search")
                                                       if name == "nvrtc" else _find(name))

from cupy.cuda import compiler as cc  # noqa: E402

if spec.get("break_hook"):
    del cc._set_kernel_cache_backend

caught = []
enabled = None
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    if spec.get("import", True):
        import progcache.cupy as pc  # noqa: E402
        enabled = pc.enable()
    caught = [str(x.message) for x in w if "progcache" in str(x.message)]

# The architecture query needs a device: given here.
cc._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
cc._get_arch = lambda: "90"

nvrtc_compiles = [0]
_orig_nvrtc = cc._compile_using_nvrtc_no_warning


def _counting(*a, **k):
    nvrtc_compiles[0] += 1
    edit = spec.get("edit_during_compile")
    if edit:  # a header changed after the lookup, before NVRTC reads it
        with open(edit["path"], "w") as f:
            f.write(edit["text"])
    return _orig_nvrtc(*a, **k)


cc._compile_using_nvrtc_no_warning = _counting

# CuPy's preprocess of an empty file run by NVRTC (not answered from
# progcache's memo of it).
preprocesses = [0]


def _counting_preprocess(run):
    def preprocess(source, *a, **k):
        preprocesses[0] += source == ""
        return run(source, *a, **k)
    return preprocess


if enabled or "progcache.cupy" in sys.modules and sys.modules["progcache.cupy"].enabled():
    pc = sys.modules["progcache.cupy"]
    pc._saved["preprocess"] = _counting_preprocess(pc._saved["preprocess"])
else:
    cc._preprocess = _counting_preprocess(cc._preprocess)


def digest(data):
    """The payload's SHA-256; the payload itself is kept in spec["dump"]
    under that name (the test links LTO-IR, whose bytes differ from one
    compile to the next)."""
    h = hashlib.sha256(data).hexdigest()
    if spec.get("dump"):
        os.makedirs(spec["dump"], exist_ok=True)
        with open(os.path.join(spec["dump"], h), "wb") as f:
            f.write(data)
    return h


class Recorder:
    """Stands between CuPy and the installed backend: what CuPy loaded and
    saved, by digest."""

    def __init__(self, inner):
        self.inner = inner
        self.seen = []

    def load(self, name):
        data = self.inner.load(name)
        self.seen.append(["load", name, digest(data) if data is not None else None])
        return data

    def save(self, name, cubin, source):
        self.seen.append(["save", name, digest(cubin)])
        self.inner.save(name, cubin, source)


recorder = Recorder(cc._kernel_cache_backend)
cc._kernel_cache_backend = recorder

if spec.get("wait_for"):
    while not os.path.exists(spec["wait_for"]):
        time.sleep(0.005)

kernels = []
for k in spec["kernels"]:
    recorder.seen = []
    error = None
    out = None
    try:
        got = cc._compile_module_with_cache(k["source"], tuple(k.get("options", ())), arch="90",
                                            to_ltoir=bool(k.get("ltoir")),
                                            name_expressions=k.get("name_expressions"))
        if isinstance(got, bytes):
            out = digest(got)
    except Exception as e:  # loading a cubin needs a driver
        error = type(e).__name__
    kernels.append({"seen": recorder.seen, "returned": out, "error": error})

# The NVRTC CuPy compiled with (a wheel's or the toolkit's): its LTO-IR is
# linked by the nvJitLink beside it.
nvrtc = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libnvrtc.so" in line})
try:
    from cuda.pathfinder import load_nvidia_dynamic_lib
    cupy_nvrtc = os.path.realpath(load_nvidia_dynamic_lib("nvrtc").abs_path)
except Exception:
    cupy_nvrtc = None
res = {"cupy_nvrtc": cupy_nvrtc, "kernels": kernels, "nvrtc_compiles": nvrtc_compiles[0], "enabled": enabled, "warnings": caught,
       "nvrtc": nvrtc, "preprocesses": preprocesses[0]}
if "progcache.cupy" in sys.modules:
    import progcache.cupy as pc  # noqa: E402
    res["stats"] = {k: v for k, v in pc.stats().items() if isinstance(v, (int, float))}
    res["enabled"] = pc.enabled()
print(json.dumps(res))
