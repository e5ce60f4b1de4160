"""One process of a torch test: compiles a small model with torch.compile on
the CPU (Inductor's C++ code generation), runs it once without gradients, and
prints one JSON line: the output's bytes (hex) and whether it matches the
eager model, Inductor's own cache counters, and progcache.torch's counters.

argv[1] is a JSON object: model ("mlp", "mlp-wide", "conv", or "mm": a
matrix product alone, which Inductor hands to ATen and generates no kernel
for, as it generates no CPU code for a GPU-only graph), batch, dtype
("float32" or "float64"), enable (call progcache.torch.enable() rather than
rely on PROGCACHE_TORCH), threads (Inductor's compile threads)."""

import json
import sys
import warnings

spec = json.loads(sys.argv[1])
import torch  # noqa: E402

if spec.get("enable"):
    import progcache.torch as pt

    spec["enabled"] = pt.enable()
if spec.get("threads"):
    import torch._inductor.config as ic

    ic.compile_threads = int(spec["threads"])


def model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "mm":
        return torch.nn.Linear(32, 8, bias=False).eval()
    if kind == "conv":
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    else:
        width = 96 if kind == "mlp-wide" else 64
        m = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.GELU(), torch.nn.LayerNorm(width),
                                torch.nn.Linear(width, 8))
    return m.eval()


dtype = getattr(torch, spec.get("dtype", "float32"))
m = model(spec.get("model", "mlp")).to(dtype)
batch = int(spec.get("batch", 16))
x = (torch.randn(batch, 3, 8, 8) if spec.get("model") == "conv" else torch.randn(batch, 32)).to(dtype)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compiled = torch.compile(m)
    with torch.no_grad():
        y = compiled(x)
        ref = m(x)
from torch._dynamo.utils import counters  # noqa: E402

out = {
    "output": y.contiguous().numpy().tobytes().hex(),
    "matches_eager": bool(torch.allclose(y, ref, rtol=1e-4, atol=1e-5)),
    "inductor": {k: v for k, v in counters["inductor"].items() if "cache" in k},
    "aot": {k: v for k, v in counters["aot_autograd"].items() if "cache" in k},
    "warnings": [str(w.message) for w in caught if "progcache" in str(w.message)],
    "enabled": spec.get("enabled"),
}
from torch._inductor import cpu_vec_isa  # noqa: E402

# Whether this process picked a vector instruction set (compiling and
# loading a probe per set): Inductor does when it generates CPU code.
out["isa_picked"] = cpu_vec_isa.valid_vec_isa_list.cache_info().currsize > 0
if "progcache.torch" in sys.modules:
    import progcache.torch as pt

    out["progcache"] = {k: v for k, v in pt.stats().items() if isinstance(v, int)}
print(json.dumps(out))
