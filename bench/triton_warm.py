"""Warm start of a Triton process: progcache.triton against Triton's own
file cache, on the five kernels of examples/triton/kernels.py (sm_90, no
GPU needed).

Each round starts fresh processes, alternating the two sides:
- triton: Triton's FileCacheManager, its cache directory warm;
- progcache: TRITON_CACHE_MANAGER=progcache.triton:CacheManager and nothing
  else (the warm-start memo on, as by default), the store warm and the
  materialised copy under TRITON_CACHE_DIR warm;
- progcache-no-memo: the same with PROGCACHE_TRITON_WARM_START=0;
- progcache-store: the same with an empty TRITON_CACHE_DIR each time (a new
  machine or container with the store mounted): every group is materialised
  from the store (its entries zstd-compressed, as by default);
- progcache-store-off: the same from a store written with
  PROGCACHE_COMPRESSION=off (what decompressing costs a new machine);
- floor: a cache manager that answers each lookup from a dict filled before
  the clock starts (the paths of Triton's own warm cache files): no I/O and
  no work of its own per lookup, so what remains is Triton's (hashing the
  kernel's source and options, building the CompiledKernel, reading its
  files). No cache manager can serve a hit for less.
Each process times its import (Triton, and progcache.triton where used),
triton_key() (which Triton computes before the first lookup of a process;
timed apart, so the per-kernel figures do not carry it), each kernel's
triton.compile (the first also pays Triton's backend start: two runs of
`ptxas --version`), and the whole. Medians over the rounds; the cold
compile of each kernel is measured once per side. Also counts the files and
bytes each cache keeps per kernel.

    python3 bench/triton_warm.py [--rounds 15]
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

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS_DIR = os.path.join(HERE, "..", "examples", "triton")
NAMES = ["vector_add", "softmax", "matmul", "layer_norm", "attention"]

CHILD = r"""
import time, sys, os, json
t0 = time.perf_counter()
if os.environ.get("BENCH_PROGCACHE") == "1":
    import progcache.triton
import triton
if os.environ.get("BENCH_FLOOR"):
    from triton.runtime.cache import CacheManager
    groups = {}
    for key in os.listdir(os.environ["BENCH_FLOOR"]):
        for f in os.listdir(os.path.join(os.environ["BENCH_FLOOR"], key)):
            if f.startswith("__grp__"):
                with open(os.path.join(os.environ["BENCH_FLOOR"], key, f)) as g:
                    groups[(key, f[len("__grp__"):])] = json.load(g)["child_paths"]

    class Floor(CacheManager):
        def __init__(self, key, override=False, dump=False):
            self.key = key
        def get_file(self, filename):
            return None
        def get_group(self, filename):
            return groups.get((self.key, filename))
        def put(self, data, filename, binary=True):
            raise RuntimeError("the floor manager serves warm lookups only")
        def put_group(self, filename, group):
            raise RuntimeError("the floor manager serves warm lookups only")

    triton.knobs.cache.manager_class = Floor
sys.path.insert(0, sys.argv[1])
import kernels
from triton.runtime import cache
t1 = time.perf_counter()
cache.triton_key()  # what Triton computes before its first lookup of a process
tk = time.perf_counter() - t1
t1 = time.perf_counter()
per = {}
for name in kernels.KERNELS:
    a = time.perf_counter()
    kernels.compile_kernel(name)
    per[name] = time.perf_counter() - a
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0 - tk, "triton_key": tk, "kernels": per, "compiles": t2 - t1,
                  "after_first": (t2 - t1 - per["vector_add"]) / (len(per) - 1), "total": t2 - t0}))
"""


def run(env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, KERNELS_DIR], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def tree_size(path: str) -> tuple:
    files = size = 0
    for d, _, fs in os.walk(path):
        for f in fs:
            files += 1
            size += os.path.getsize(os.path.join(d, f))
    return files, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="triton-bench-")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PROGCACHE_"))}
    base["TRITON_DEFAULT_FP_FUSION"] = "1"
    sides = {
        "triton": dict(base, TRITON_CACHE_DIR=f"{work}/triton-own", TRITON_HOME=work),
        "progcache": dict(base, TRITON_CACHE_DIR=f"{work}/triton-pc", TRITON_HOME=work, PROGCACHE_DIR=f"{work}/pc",
                          TRITON_CACHE_MANAGER="progcache.triton:CacheManager", BENCH_PROGCACHE="1"),
    }
    sides["progcache-no-memo"] = dict(sides["progcache"], TRITON_CACHE_DIR=f"{work}/triton-pc-off",
                                      PROGCACHE_TRITON_WARM_START="0")
    sides["progcache-off"] = dict(sides["progcache"], TRITON_CACHE_DIR=f"{work}/triton-pc-plain",
                                  PROGCACHE_DIR=f"{work}/pc-plain", PROGCACHE_COMPRESSION="off")
    store_only = dict(sides["progcache"], TRITON_CACHE_DIR=f"{work}/triton-fresh")
    store_plain = dict(sides["progcache-off"], TRITON_CACHE_DIR=f"{work}/triton-fresh-plain")
    try:
        cold = {side: run(env) for side, env in sides.items()}
        rows = {side: [] for side in ("triton", "progcache", "progcache-store", "floor", "progcache-no-memo",
                                      "progcache-store-off")}
        floor = dict(sides["triton"], BENCH_FLOOR=sides["triton"]["TRITON_CACHE_DIR"])
        for _ in range(args.rounds):
            rows["triton"].append(run(sides["triton"]))
            rows["floor"].append(run(floor))
            rows["progcache"].append(run(sides["progcache"]))
            rows["progcache-no-memo"].append(run(sides["progcache-no-memo"]))
            shutil.rmtree(store_only["TRITON_CACHE_DIR"], ignore_errors=True)
            rows["progcache-store"].append(run(store_only))
            shutil.rmtree(store_plain["TRITON_CACHE_DIR"], ignore_errors=True)
            rows["progcache-store-off"].append(run(store_plain))

        def med(side, f):
            return statistics.median(f(r) for r in rows[side])

        print(f"Triton {__import__('triton').__version__}, {args.rounds} rounds of fresh processes, medians (ms)\n")
        print(f"{'kernel':<12}{'cold':>10}{'triton warm':>13}{'progcache':>11}{'ratio':>7}"
              f"{'pc, fresh dir':>15}{'ratio':>7}{'floor':>9}{'ratio':>7}{'pc, no memo':>13}{'ratio':>7}"
              f"{'fresh, plain':>15}{'ratio':>7}")
        for n in NAMES:
            t, p, s, fl, o, u = (med(side, lambda r: r["kernels"][n]) * 1e3
                                 for side in ("triton", "progcache", "progcache-store", "floor", "progcache-no-memo",
                                              "progcache-store-off"))
            print(f"{n:<12}{cold['triton']['kernels'][n] * 1e3:>10.1f}{t:>13.2f}{p:>11.2f}{p / t:>7.2f}"
                  f"{s:>15.2f}{s / t:>7.2f}{fl:>9.2f}{fl / t:>7.2f}{o:>13.2f}{o / t:>7.2f}{u:>15.2f}{u / t:>7.2f}")
        for label, f in (("mean/kernel", lambda r: r["compiles"] / len(NAMES)),
                         ("mean 2nd-5th", lambda r: r["after_first"]), ("import", lambda r: r["import"]),
                         ("triton_key", lambda r: r["triton_key"]), ("process", lambda r: r["total"])):
            t, p, s, fl, o, u = (med(side, f) * 1e3
                                 for side in ("triton", "progcache", "progcache-store", "floor", "progcache-no-memo",
                                              "progcache-store-off"))
            print(f"{label:<12}{'':>10}{t:>13.2f}{p:>11.2f}{p / t:>7.2f}{s:>15.2f}{s / t:>7.2f}"
                  f"{fl:>9.2f}{fl / t:>7.2f}{o:>13.2f}{o / t:>7.2f}{u:>15.2f}{u / t:>7.2f}")
        tf, tb = tree_size(sides["triton"]["TRITON_CACHE_DIR"])
        print(f"\nkept per kernel: Triton's cache {tf / len(NAMES):.1f} files, {tb / len(NAMES) / 1e3:.1f} KB")
        for root in ("pc", "pc-plain"):
            kept(f"{work}/{root}/triton", "zstd level 1 (the default)" if root == "pc" else "PROGCACHE_COMPRESSION=off")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kept(store: str, label: str) -> None:
    """The entries a Triton store under progcache holds, per kernel."""
    kernels = memos = kb = 0
    for d, _, fs in os.walk(store):
        for f in fs:
            if len(f) != 62:
                continue  # the store's bookkeeping (counters, recency table, locks)
            path = os.path.join(d, f)
            with open(path, "rb") as fh:
                data = fh.read()
            if b'"kind": "key-memo"' in data or b'"kind": "triton-tool-memo"' in data:
                memos += 1
                continue
            kernels += 1
            kb += os.path.getsize(path)
    print(f"progcache, {label}: {kernels} entries for {len(NAMES)} kernels, {kb / max(kernels, 1) / 1e3:.1f} KB each "
          f"(and {memos} memo entries, the triton_key and ptxas memos, shared by all)")


if __name__ == "__main__":
    main()
