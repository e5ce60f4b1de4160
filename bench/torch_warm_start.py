#!/usr/bin/env python3
"""torch.compile's start in a fresh process, with and without progcache.torch
(docs/benchmarks.md, "torch.compile warm start").

For each model (an MLP, a transformer encoder block, a convolutional block),
each round runs fresh processes and times the first call of the compiled model
(torch.compile through the first forward pass, under torch.no_grad()):

- cold: no cache anywhere, torch alone;
- cold + progcache: the same, storing into an empty progcache root;
- Inductor warm (local): torch alone, a second process on the same machine,
  its own caches (FX graph, AOTAutograd, C++ libraries) warm;
- new machine, progcache: empty Inductor, Triton and temporary directories
  (where Inductor keeps its caches and precompiled headers), served only by a
  warm progcache root;
- (with --fill-once) new machine, first process: the same, without what a
  root keeps of the machine itself (the memos of torch_key() and
  triton_key(), the headers' digests), as the first process on a machine
  whose local root is empty and whose entries come from a shared tier (read
  here from the local disk: a network tier's transfer is not timed);
- (with --fill-once --uncompressed) new machine, uncompressed store: served
  from a root written with PROGCACHE_COMPRESSION=off, against the default
  (zstd) one: what decompressing costs the start.

Prints medians and the ratio of the last to Inductor's own warm start, and
with --json the raw times. With --fill-once the two warm starts of each round run back to back,
each first in every other round. Run it with the Python that has torch and
progcache installed (scripts/test-torch.sh makes .venv-torch):

    .venv-torch/bin/python bench/torch_warm_start.py --rounds 5
    python3 bench/torch_warm_start.py --device cuda --rounds 3   # on a GPU machine

progcache must be installed in a site directory of that Python (pip install
of the wheel, not pip install --target on PYTHONPATH): PROGCACHE_TORCH acts
through progcache-autoload.pth, which Python runs only from a site
directory, and a child where progcache.torch was not on as asked stops the
run with a message.
"""

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
spec = json.loads(sys.argv[1])
if spec.get("first"):
    import progcache._triton_key as tk
    tk._memo_stores.update(torch=None, triton=None)  # no memo read or written
t0 = time.perf_counter()
import torch
torch.manual_seed(0)
kind = spec["model"]
if kind == "mlp":
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
                            torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
    x = torch.randn(64, 256)
elif kind == "transformer":
    class Block(torch.nn.Module):
        # Written out (attention, layer norms, MLP), so that Inductor generates
        # its kernels: torch's own encoder layer takes a fused fast path in eval.
        def __init__(self, d=128, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))
    m = Block()
    x = torch.randn(8, 32, 128)
else:
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    x = torch.randn(8, 3, 32, 32)
m.eval()
dev = spec["device"]
m, x = m.to(dev), x.to(dev)
t1 = time.perf_counter()
f = torch.compile(m)
with torch.no_grad():
    y = f(x)
if dev == "cuda":
    torch.cuda.synchronize()
t2 = time.perf_counter()
with torch.no_grad():
    correct = torch.allclose(y, m(x), atol=1e-3, rtol=1e-3)
from torch._dynamo.utils import counters
from torch._inductor import cpu_vec_isa
pt = sys.modules.get("progcache.torch")
print(json.dumps({"first_call": t2 - t1, "import": t1 - t0, "correct": bool(correct),
                  "progcache": bool(pt is not None and pt._enabled),
                  "isa_picked": cpu_vec_isa.valid_vec_isa_list.cache_info().currsize > 0,
                  "fx_hit": counters["inductor"].get("fxgraph_cache_hit", 0),
                  "fx_miss": counters["inductor"].get("fxgraph_cache_miss", 0)}))
"""


# Roots written and read with PROGCACHE_COMPRESSION=off (--uncompressed).
_UNCOMPRESSED_ROOTS = set()


def child_env(dirs, root, progcache):
    """A child's environment: Inductor's, Triton's and the temporary
    directories under ``dirs``, the progcache root, progcache.torch on or off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "TRITON_", "PROGCACHE_"))}
    os.makedirs(os.path.join(dirs, "tmp"), exist_ok=True)
    env.update({"TORCHINDUCTOR_CACHE_DIR": os.path.join(dirs, "inductor"),
                "TRITON_CACHE_DIR": os.path.join(dirs, "triton"), "TMPDIR": os.path.join(dirs, "tmp"),
                "PROGCACHE_DIR": root})
    if root in _UNCOMPRESSED_ROOTS:
        env["PROGCACHE_COMPRESSION"] = "off"
    if progcache:
        env["PROGCACHE_TORCH"] = "1"
    return env


def run(model, dirs, root, progcache, device, first=False):
    env = child_env(dirs, root, progcache)
    if first:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, "torch", "header-digests.json"))
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps({"model": model, "device": device, "first": first})],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{model}: the child failed:\n{p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if r["progcache"] != progcache:
        # PROGCACHE_TORCH acts through progcache-autoload.pth, which Python
        # runs only from a site directory (not from PYTHONPATH alone).
        raise SystemExit(f"{model}: progcache.torch was {'off' if progcache else 'on'} in a child that should have "
                         f"it {'on' if progcache else 'off'}: install progcache in a site directory "
                         "(docs/python.md, \"Switches without site directories\")")
    if not r["correct"]:
        raise SystemExit(f"{model}: the compiled model's output differs from eager's")
    if os.environ.get("BENCH_VERBOSE"):
        print(f"  {model} progcache={progcache} {json.dumps(r)}", file=sys.stderr, flush=True)
    return r


def cold(*args):
    r = run(*args)
    assert r["fx_miss"] == 1, r
    return r["first_call"]


def warm(*args):
    r = run(*args)
    assert r["fx_hit"] == 1 and r["fx_miss"] == 0, r
    return r["first_call"]


def store_bytes(root):
    """Bytes of the entries of the torch store under a progcache root."""
    total = 0
    for d, dirnames, files in os.walk(os.path.join(root, "torch")):
        dirnames[:] = [n for n in dirnames if n != "locks"]
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files if len(f) == 62)
    return total


def wipe(dirs):
    shutil.rmtree(dirs, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,transformer,conv")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--fill-once", action="store_true",
                    help="fill the caches with one cold run of each kind, then time only the two warm starts "
                         "each round (shorter; for a machine lent for minutes)")
    ap.add_argument("--no-first-process", action="store_true",
                    help="with --fill-once, leave out the new machine's first process (shorter)")
    ap.add_argument("--uncompressed", action="store_true",
                    help="with --fill-once, also serve a new machine from a root written with "
                         "PROGCACHE_COMPRESSION=off, and print each root's bytes on disk")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import torch  # noqa: F401 - the version is part of the report
    where = torch.cuda.get_device_name() if args.device == "cuda" else "no GPU"
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {where}, device {args.device}, {args.rounds} rounds, "
          "fresh processes, first call of the compiled model (s)")
    rows = {}
    for model in args.models.split(","):
        t = {"cold": [], "cold + progcache": [], "Inductor warm (local)": [], "new machine, progcache": []}
        if args.fill_once and not args.no_first_process:
            t["new machine, first process"] = []
        if args.fill_once and args.uncompressed:
            t["new machine, uncompressed store"] = []
        if args.fill_once:
            with tempfile.TemporaryDirectory(prefix="pc-torch-bench-") as base:
                own, dirs, root = (os.path.join(base, n) for n in ("own", "dirs", "root"))
                t["cold"].append(cold(model, own, root, False, args.device))
                t["cold + progcache"].append(cold(model, dirs, root, True, args.device))
                plain = os.path.join(base, "root-plain")
                if "new machine, uncompressed store" in t:
                    _UNCOMPRESSED_ROOTS.add(plain)
                    wipe(dirs)
                    cold(model, dirs, plain, True, args.device)
                    wipe(dirs)
                starts = [("Inductor warm (local)", own, False, False, root),
                          ("new machine, progcache", dirs, True, False, root),
                          ("new machine, first process", dirs, True, True, root),
                          ("new machine, uncompressed store", dirs, True, False, plain)]
                starts = [s for s in starts if s[0] in t]
                for i in range(args.rounds):
                    # The warm starts of a round run back to back, each in
                    # turn first: none is always the one after another.
                    for kind, d, progcache, first, r in starts[i % len(starts):] + starts[:i % len(starts)]:
                        if progcache:
                            wipe(dirs)
                        t[kind].append(warm(model, d, r, progcache, args.device, first))
                if "new machine, uncompressed store" in t:
                    print(f"{model:12s} torch store on disk: zstd (default) {store_bytes(root) / 1e6:.1f} MB, "
                          f"PROGCACHE_COMPRESSION=off {store_bytes(plain) / 1e6:.1f} MB", flush=True)
        for _ in range(0 if args.fill_once else args.rounds):
            with tempfile.TemporaryDirectory(prefix="pc-torch-bench-") as base:
                dirs, root = os.path.join(base, "dirs"), os.path.join(base, "root")
                t["cold"].append(cold(model, dirs, root, False, args.device))
                t["Inductor warm (local)"].append(warm(model, dirs, root, False, args.device))
                wipe(dirs)
                t["cold + progcache"].append(cold(model, dirs, root, True, args.device))
                wipe(dirs)
                t["new machine, progcache"].append(warm(model, dirs, root, True, args.device))
        rows[model] = t
        med = {k: statistics.median(v) for k, v in t.items()}
        ratio = med["new machine, progcache"] / med["Inductor warm (local)"]
        # Each round's two warm starts run back to back; the machine's speed
        # drifts over minutes, so the median of the rounds' own ratios is the
        # steadier figure.
        paired = statistics.median(n / o for n, o in zip(t["new machine, progcache"], t["Inductor warm (local)"]))
        print(f"{model:12s} " + "  ".join(f"{k} {v:6.2f}" for k, v in med.items()) +
              f"  new machine / Inductor warm {ratio:4.2f} (median of the rounds' ratios {paired:4.2f})")
        if "new machine, uncompressed store" in t:
            plain_ratio = statistics.median(c / u for c, u in zip(t["new machine, progcache"],
                                                                  t["new machine, uncompressed store"]))
            print(f"{'':12s} new machine, zstd store / uncompressed store: median of the rounds' ratios "
                  f"{plain_ratio:4.2f}")
        if "new machine, first process" in t:
            first = statistics.median(n / o for n, o in zip(t["new machine, first process"], t["Inductor warm (local)"]))
            print(f"{'':12s} new machine's first process / Inductor warm: median of the rounds' ratios {first:4.2f}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
