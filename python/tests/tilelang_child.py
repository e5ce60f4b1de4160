"""One process of the progcache.tilelang tests: compiles tilelang kernels for
sm_90a (no GPU needed) and prints, as JSON, how many times tilelang generated
code (calls of JITKernel._compile_artifact) and ran nvcc, with the SHA-256 of
every file of the directory each kernel was loaded from.

    python tilelang_child.py '{"kernels": [["vector_add", {}]], "backend": "tvm_ffi"}'

progcache is on when the environment says so (PROGCACHE_TILELANG=1): the
child never imports progcache itself before tilelang's compile, so the
variable alone is what is tested.

With "own": {"caches": [{"dir": ..., "max_size_bytes": ..., "sharing": ...}],
"steps": [["cached", i, name, params], ["clear", i], ["threads", i, name, n]]},
kernels go through progcache's own KernelCache.cached (tilelang's signature)
instead, and the counts are reported after each step. With "launch": true, each kernel is also run
on the GPU against torch (skipped, and said so, without one).
"""

import hashlib
import json
import os
import sys

spec = json.loads(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
module = os.path.join(here, "..", "..", "examples", "tilelang", "kernels.py")

import importlib.util  # noqa: E402

import tilelang  # noqa: E402

if "fake_version" in spec:  # another tilelang release, as far as keys and entries go
    tilelang.__version__ = spec["fake_version"]
import tilelang.contrib.nvcc as _nvcc  # noqa: E402
from tilelang.jit.kernel import JITKernel  # noqa: E402

counts = {"codegen": 0, "nvcc": 0}
_orig_artifact = JITKernel._compile_artifact
_orig_nvcc = _nvcc.compile_cuda


def _artifact(self, *a, **k):
    counts["codegen"] += 1
    return _orig_artifact(self, *a, **k)


def _compile_cuda(*a, **k):
    counts["nvcc"] += 1
    return _orig_nvcc(*a, **k)


JITKernel._compile_artifact = _artifact
_nvcc.compile_cuda = _compile_cuda
mod_spec = importlib.util.spec_from_file_location("tilelang_kernels_under_test", module)
kernels = importlib.util.module_from_spec(mod_spec)
mod_spec.loader.exec_module(kernels)

if "own" in spec:
    import threading

    import progcache

    caches = [progcache.KernelCache(c["dir"], **{k: v for k, v in c.items() if k != "dir"})
              for c in spec["own"]["caches"]]
    steps, seen = [], {}

    def _cached(cache, name, params):
        out_idx = [1] if name == "scale" else [2]
        return cache.cached(kernels.prim_func(name, params), out_idx, target=kernels.TARGET,
                            execution_backend=spec.get("backend", "tvm_ffi"))

    for step in spec["own"]["steps"]:
        cache = caches[step[1]]
        rec = {"step": step[0]}
        if step[0] == "cached":
            kern = _cached(cache, step[2], step[3])
            rec.update(type=type(kern).__name__, same_object=seen.get((step[1], step[2])) is kern,
                       source=hashlib.sha256(kern.get_kernel_source().encode()).hexdigest())
            seen[(step[1], step[2])] = kern
        elif step[0] == "threads":
            got = []
            threads = [threading.Thread(target=lambda: got.append(_cached(cache, step[2], {})))
                       for _ in range(step[3])]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rec.update(results=len(got), distinct=len({id(x) for x in got}))
        elif step[0] == "clear":
            cache.clear_cache()
        rec.update(codegen=counts["codegen"], builds=cache.builds, errors=cache.errors, entries=len(cache))
        steps.append(rec)
    print(json.dumps({"codegen": counts["codegen"], "nvcc": counts["nvcc"], "steps": steps}))
    sys.exit(0)

out = []
launched = None
for name, params in spec["kernels"]:
    k = kernels.compile_kernel(name, params, execution_backend=spec.get("backend", "tvm_ffi"))
    path = getattr(k, "_tilelang_cache_path", None)
    files = {}
    if path and os.path.isdir(path):
        for f in sorted(os.listdir(path)):
            if f.startswith(".progcache"):
                continue
            with open(os.path.join(path, f), "rb") as fh:
                files[f] = hashlib.sha256(fh.read()).hexdigest()
    out.append({"name": name, "dir": path, "files": files,
                "source": hashlib.sha256(k.get_kernel_source().encode()).hexdigest()})
    if spec.get("launch"):
        import torch
        if not torch.cuda.is_available():
            launched = "skipped: no GPU"
        else:
            a = torch.randn(4096, device="cuda")
            if name == "vector_add":
                b = torch.randn(4096, device="cuda")
                ok = torch.allclose(k(a, b), a + b)
            elif name == "scale":
                ok = torch.allclose(k(a), a * (params or {}).get("factor", 2.0))
            else:
                x = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
                y = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
                ok = torch.allclose(k(x, y).float(), (x @ y).float(), atol=1e-1, rtol=1e-2)
            launched = (launched if isinstance(launched, dict) else {})
            launched[name] = bool(ok)

result = {"codegen": counts["codegen"], "nvcc": counts["nvcc"], "kernels": out, "launched": launched,
          "progcache": "progcache.tilelang" in sys.modules}
if "progcache.tilelang" in sys.modules:
    import progcache.tilelang
    result["stats"] = progcache.tilelang.stats()
print(json.dumps(result))
