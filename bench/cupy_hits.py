"""CuPy: a kernel cache hit from progcache against one from CuPy's own disk
backend, for the same kernel, through CuPy's own compile path.

Two kernels: a plain one (no includes) and one that includes the toolkit's
cuda_fp16.h (through -I<CUDA>/include, as CuPy passes it: the headers it
reaches are read by progcache's key, not by CuPy's). The device's
architecture is given (sm_90), as on a machine without a GPU, and LTO-IR is
compiled, which needs no driver to load.

1. In one process, interleaved: one lookup through
   ``cupy.cuda.compiler._compile_module_with_cache`` answered by CuPy's own
   backend (a file in CUPY_CACHE_DIR) and one answered by progcache's disk
   store (its memory tier off, so every lookup reads the disk), medians of
   --rounds.
2. The first hit of a fresh process (the store opened, the header scan's
   memo read): one child per round per side, the call alone timed.

    .venv/bin/python bench/cupy_hits.py [--rounds 301] [--processes 11]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

KERNELS = {
    "plain": ('extern "C" __global__ void scale(float* a, float f) { a[threadIdx.x] *= f; }', False),
    "cuda_fp16.h": ('#include <cuda_fp16.h>\n'
                    'extern "C" __global__ void half2f(const __half* a, float* o) { o[threadIdx.x] = __half2float(a[threadIdx.x]); }',
                    True),
}

CHILD = r'''
import json, os, sys, time
which, src, inc, side = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
from cupy.cuda import compiler as cc
cc._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
if side == "progcache":
    import progcache.cupy
    progcache.cupy.enable()
import cupy
opts = ("-I" + inc,) if inc else ()
t = time.perf_counter()
cc._compile_module_with_cache(src, opts, arch="90", to_ltoir=True)
print(json.dumps({"first": time.perf_counter() - t}))
'''


def toolkit_include(cupy_path: str) -> str:
    """The toolkit's include directory: CuPy's CUDA path where it holds the
    headers; a CUDA path of PyPI's NVRTC wheels holds none (cuda_fp16.h is
    in the toolkit), so CUDA_PATH's or /usr/local/cuda's then."""
    for base in (cupy_path, os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if base and os.path.isfile(os.path.join(base, "include", "cuda_fp16.h")):
            return os.path.join(base, "include")
    raise SystemExit("no CUDA include directory with cuda_fp16.h: set CUDA_PATH")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=301)
    ap.add_argument("--processes", type=int, default=11)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cupy-bench-")
    os.environ.pop("PROGCACHE_CUPY", None)
    os.environ["PROGCACHE_DIR"] = os.path.join(tmp, "root")
    os.environ["CUPY_CACHE_DIR"] = os.path.join(tmp, "cupy-own")
    import cupy
    from cupy.cuda import compiler as cc

    import progcache.cupy as pcupy

    cc._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
    own = cc._kernel_cache_backend
    pcupy._STORE._memory_bytes = 0  # every lookup reads the disk tier
    pcupy.enable()
    ours = cc._kernel_cache_backend
    inc = toolkit_include(cupy.cuda.get_cuda_path())
    child = os.path.join(tmp, "child.py")
    with open(child, "w") as f:
        f.write(CHILD)
    try:
        for name, (src, cupy_inc) in KERNELS.items():
            opts = (f"-I{inc}",) if cupy_inc else ()
            for backend in (own, ours):  # warm both
                cc._kernel_cache_backend = backend
                cc._compile_module_with_cache(src, opts, arch="90", to_ltoir=True)
            missed = pcupy.stats()["misses"]
            t_own, t_ours = [], []
            for _ in range(a.rounds):
                for backend, into in ((own, t_own), (ours, t_ours)):
                    cc._kernel_cache_backend = backend
                    t = time.perf_counter()
                    cc._compile_module_with_cache(src, opts, arch="90", to_ltoir=True)
                    into.append(time.perf_counter() - t)
            assert pcupy.stats()["misses"] == missed  # every timed lookup was a hit
            first_own, first_ours = [], []
            env = {k: v for k, v in os.environ.items() if not k.startswith("PROGCACHE_CUPY")}
            for _ in range(a.processes):
                for side, into in (("cupy", first_own), ("progcache", first_ours)):
                    p = subprocess.run([sys.executable, child, name, src, inc if cupy_inc else "", side], env=env,
                                       capture_output=True, text=True, check=True)
                    into.append(json.loads(p.stdout.strip().splitlines()[-1])["first"])
            mo, mp = statistics.median(t_own), statistics.median(t_ours)
            fo, fp = statistics.median(first_own), statistics.median(first_ours)
            print(f"{name}: in process, rounds={a.rounds}: CuPy's own {mo * 1e6:7.1f} us, progcache "
                  f"{mp * 1e6:7.1f} us, ratio {mp / mo:.2f} x")
            print(f"{name}: first hit of a process, processes={a.processes}: CuPy's own {fo * 1e3:6.2f} ms, "
                  f"progcache {fp * 1e3:6.2f} ms, ratio {fp / fo:.2f} x")
        cc._kernel_cache_backend = own
    finally:
        pcupy.disable()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
