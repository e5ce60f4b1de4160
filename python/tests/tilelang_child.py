"""One process of the progcache.tilelang tests: compiles tilelang kernels for
sm_90a (no GPU needed) and prints, as JSON, how many times tilelang generated
code (calls of JITKernel._compile_artifact) and ran nvcc, with the SHA-256 of
every file of the directory each kernel was loaded from.

    python tilelang_child.py '{"kernels": [["vector_add", {}]], "backend": "tvm_ffi"}'

progcache is on when the environment says so (PROGCACHE_TILELANG=1): the
child never imports progcache itself before tilelang's compile, so the
variable alone is what is tested. With "launch": true, each kernel is also run
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
