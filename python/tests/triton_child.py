"""One process of the progcache.triton tests: compiles Triton kernels for
sm_90 (no GPU needed) and prints, as JSON, how many compiles Triton itself ran
(its compilation listener's cache_hit=False) and the SHA-256 of every file of
each kernel's group as Triton read it back.

    python triton_child.py '{"manager": "progcache", "kernels": [["softmax", {}]]}'

Keys of the spec: manager ("progcache": chosen by TRITON_CACHE_MANAGER,
"knobs": the same class set as triton.knobs.cache.manager_class, "triton":
Triton's own FileCacheManager, or "remote": Triton's RemoteCacheManager over
progcache.triton.RemoteCacheBackend), kernels ([name, constexprs] pairs),
module (a file defining KERNELS and compile_kernel; default
examples/triton/kernels.py), start_at (a time.time() to wait for, so several
processes start their compiles together).

The result also counts the reads of Triton's libtriton.so made by the process
(an audit hook installed before Triton is imported): Triton's triton_key()
reads it whole, the warm-start memo only stats it.
"""

import hashlib
import json
import os
import sys
import time

libtriton_reads = []
sys.addaudithook(lambda event, args: event == "open" and isinstance(args[0], str)
                 and os.path.basename(args[0]).startswith("libtriton") and libtriton_reads.append(args[0]))

spec = json.loads(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
module = spec.get("module") or os.path.join(here, "..", "..", "examples", "triton", "kernels.py")
manager = spec.get("manager", "progcache")
if manager == "progcache":
    os.environ["TRITON_CACHE_MANAGER"] = "progcache.triton:CacheManager"
elif manager == "remote":
    os.environ["TRITON_CACHE_MANAGER"] = "triton.runtime.cache:RemoteCacheManager"
    os.environ["TRITON_REMOTE_CACHE_BACKEND"] = "progcache.triton:RemoteCacheBackend"
else:
    os.environ.pop("TRITON_CACHE_MANAGER", None)

import importlib.util  # noqa: E402

from triton import knobs  # noqa: E402

if manager == "knobs":
    import progcache.triton

    knobs.cache.manager_class = progcache.triton.CacheManager

hits = []
knobs.compilation.listener = lambda **kw: hits.append(bool(kw["cache_hit"]))
mod_spec = importlib.util.spec_from_file_location("kernels_under_test", module)
kernels = importlib.util.module_from_spec(mod_spec)
mod_spec.loader.exec_module(kernels)

if "start_at" in spec:
    time.sleep(max(0.0, spec["start_at"] - time.time()))

out = []
for name, constexprs in spec["kernels"]:
    k = kernels.compile_kernel(name, constexprs)
    files = {}
    for child, path in k.metadata_group.items():
        with open(path, "rb") as f:
            files[child] = hashlib.sha256(f.read()).hexdigest()
    out.append({"name": name, "cubin": hashlib.sha256(k.asm["cubin"]).hexdigest(), "files": files,
                "dir": os.path.dirname(next(iter(k.metadata_group.values())))})

result = {"compiles": hits.count(False), "hits": hits.count(True), "kernels": out,
          "libtriton_reads": len(libtriton_reads)}
if manager in ("progcache", "knobs", "remote"):
    import progcache.triton
    result["stats"] = progcache.triton.stats()
print(json.dumps(result))
