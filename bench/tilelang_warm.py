"""Warm start of tilelang kernels in fresh processes: tilelang's own kernel
cache against progcache.tilelang, plus the cold compile; per kernel and whole
process (import tilelang, then every kernel of examples/tilelang/kernels.py);
and the files and bytes each cache keeps per kernel. Medians of --rounds
alternating rounds. Needs tilelang (bash scripts/test-tilelang.sh makes
.venv-tilelang; run this with its python).

    .venv-tilelang/bin/python bench/tilelang_warm.py --rounds 7
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "..", "examples", "tilelang", "kernels.py")
NAMES = ["vector_add", "scale", "matmul"]

CHILD = r"""
import importlib.util, json, sys, time
t0 = time.perf_counter()
import tilelang
spec = importlib.util.spec_from_file_location("k", sys.argv[1])
k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)
t1 = time.perf_counter()
per = {}
for name in sys.argv[2].split(","):
    s = time.perf_counter(); k.compile_kernel(name); per[name] = time.perf_counter() - s
print(json.dumps({"import": t1 - t0, "kernels": per, "total": time.perf_counter() - t0}))
"""


def run(env):
    p = subprocess.run([sys.executable, "-c", CHILD, KERNELS, ",".join(NAMES)], env=env, capture_output=True,
                       text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pc-tilelang-bench-")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PROGCACHE_", "TILELANG_"))}
    own = dict(base, TILELANG_CACHE_DIR=os.path.join(work, "own"))
    pc = dict(base, TILELANG_CACHE_DIR=os.path.join(work, "pc"), PROGCACHE_DIR=os.path.join(work, "root"),
              PROGCACHE_TILELANG="1")
    pc_empty = dict(pc, TILELANG_CACHE_DIR=os.path.join(work, "pc-empty"))
    cold = dict(base, TILELANG_CACHE_DIR=os.path.join(work, "cold"))
    run(own), run(pc)  # fill both caches
    results = {"own": [], "progcache": [], "progcache, empty TILELANG_CACHE_DIR": [], "cold": []}
    for _ in range(a.rounds):
        results["own"].append(run(own))
        results["progcache"].append(run(pc))
        shutil.rmtree(pc_empty["TILELANG_CACHE_DIR"], ignore_errors=True)
        results["progcache, empty TILELANG_CACHE_DIR"].append(run(pc_empty))
        shutil.rmtree(cold["TILELANG_CACHE_DIR"], ignore_errors=True)
        results["cold"].append(run(cold))
    med = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    print(f"medians of {a.rounds} rounds, ms")
    print("| | " + " | ".join(results) + " | progcache / own |")
    print("| --- |" + " ---: |" * (len(results) + 1))
    rows = [("import tilelang", lambda r: r["import"])] + [(n, (lambda n: lambda r: r["kernels"][n])(n)) for n in NAMES]
    rows.append(("whole process", lambda r: r["total"]))
    for label, f in rows:
        vals = {m: med([f(r) for r in rs]) for m, rs in results.items()}
        print(f"| {label} | " + " | ".join(f"{v:.1f}" for v in vals.values())
              + f" | {vals['progcache'] / vals['own']:.2f} |")
    kdir = None
    for dirpath, dirnames, files in os.walk(own["TILELANG_CACHE_DIR"]):
        if os.path.basename(os.path.dirname(dirpath)) == "kernels":
            kdir = kdir or []
            kdir.append((len(files), sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)))
    entries = []
    for dirpath, dirnames, files in os.walk(os.path.join(pc["PROGCACHE_DIR"], "tilelang")):
        entries += [os.path.getsize(os.path.join(dirpath, f)) for f in files if len(f) == 62]
    print(f"tilelang's own cache: {len(kdir)} kernel directories, files per kernel "
          f"{sorted({n for n, _ in kdir})}, bytes per kernel (mean) {statistics.mean(b for _, b in kdir):.0f}")
    kernels = sorted(entries, reverse=True)[:len(kdir)]  # the rest: the compilers' memo
    print(f"progcache: {len(kernels)} kernel entries (+{len(entries) - len(kernels)} memo), one file per kernel, "
          f"bytes per kernel (mean) {statistics.mean(kernels):.0f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
