#!/usr/bin/env python3
"""Where a served torch.compile start spends its time, beside Inductor's own
warm start (docs/benchmarks.md, "torch.compile warm start").

Fills Inductor's own directories and a progcache root with one cold run of
each, then runs ROUNDS pairs of warm starts as bench/torch_warm_start.py does
(Inductor's own; a new machine served only by the root), with Inductor
imported before the clock starts (so the first call times compilation and
loading, not imports) and a set of Inductor's and progcache.torch's
functions wrapped with a clock. Prints, per kind of start, the median first
call and the median time inside each function (calls nest: a function's
time includes those it calls), and the median of the rounds' ratios.

    .venv-torch/bin/python bench/torch_served_parts.py transformer 5
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_warm_start  # noqa: E402

WRAP = r'''
import atexit, functools, json, os, time
TIMES = {}


def clocked(obj, name, label):
    raw = obj.__dict__.get(name) if isinstance(obj, type) else None
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    f = raw.__func__ if kind else getattr(obj, name, None)
    if f is None:
        return

    @functools.wraps(f)
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            e = TIMES.setdefault(label, [0.0, 0])
            e[0] += time.perf_counter() - t
            e[1] += 1

    setattr(obj, name, kind(timed) if kind else timed)


import torch
import torch._inductor.codecache as cc
import torch._inductor.cpp_builder as cb
import torch._inductor.cpu_vec_isa as vi
from torch._functorch._aot_autograd import autograd_cache as ac

clocked(ac.AOTAutogradCache, "try_load", "AOTAutograd try_load (the whole lookup and load)")
clocked(cc.FxGraphCache, "load_with_key", "FX graph load_with_key")
clocked(cc.CppPythonBindingsCodeCache, "load_pybinding_async", "C++ kernels loaded (load_pybinding_async)")
clocked(cc, "_precompile_header", "precompiled header (_precompile_header)")
clocked(vi.VecISA, "check_build", "instruction-set probes (check_build)")
clocked(cb.CppBuilder, "build", "CppBuilder.build")
clocked(cc, "torch_key", "torch_key()")
clocked(cc, "triton_key", "triton_key()")
if os.environ.get("PROGCACHE_TORCH"):
    import progcache.torch as pt
    for n in ("_plan", "_serve", "_manifest_holds", "_place", "get_object"):
        clocked(pt, n, "progcache.torch." + n)
    clocked(pt._STORE, "get", "progcache store reads")
atexit.register(lambda: print("TIMES " + json.dumps(TIMES), flush=True))
'''


def run(model, dirs, root, progcache):
    env = torch_warm_start.child_env(dirs, root, progcache)
    child = torch_warm_start.CHILD.replace("t0 = time.perf_counter()\nimport torch\n",
                                           WRAP + "t0 = time.perf_counter()\n")
    p = subprocess.run([sys.executable, "-c", child, json.dumps({"model": model, "device": "cpu"})], env=env,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"{model}: the child failed:\n{p.stderr[-3000:]}")
    lines = p.stdout.strip().splitlines()
    first = json.loads([x for x in lines if x.startswith("{")][-1])
    if not first["correct"]:
        raise SystemExit(f"{model}: the compiled model's output differs from eager's")
    return first["first_call"], json.loads([x for x in lines if x.startswith("TIMES ")][-1][6:])


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "transformer"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    got = {"Inductor warm (local)": [], "new machine, progcache": []}
    with tempfile.TemporaryDirectory(prefix="pc-torch-parts-") as base:
        own, dirs, root = (os.path.join(base, n) for n in ("own", "dirs", "root"))
        run(model, own, root, False)
        run(model, dirs, root, True)
        for i in range(rounds):
            order = [(own, False), (dirs, True)][:: -1 if i % 2 else 1]
            for d, progcache in order:
                if progcache:
                    shutil.rmtree(dirs)
                got["new machine, progcache" if progcache else "Inductor warm (local)"].append(
                    run(model, d, root, progcache))
    print(f"{model}, {rounds} rounds, Inductor imported before the clock; medians, seconds")
    for kind, runs in got.items():
        print(f"{kind}: first call {statistics.median(r[0] for r in runs):.3f}")
        for label in sorted({k for r in runs for k in r[1]}):
            times = [r[1].get(label, [0.0, 0]) for r in runs]
            print(f"    {label:55s} {statistics.median(t[0] for t in times):7.3f}  ({times[0][1]} calls)")
    ratios = [n[0] / o[0] for n, o in zip(got["new machine, progcache"], got["Inductor warm (local)"])]
    print(f"new machine / Inductor warm: median of the rounds' ratios {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
