#!/usr/bin/env python3
"""Side-by-side: progcache's Python caches vs cuda.core's InMemoryProgramCache
and FileStreamProgramCache (cuda-core from PyPI) vs diskcache, in one process
with alternating runs; every figure a median, every comparison a ratio
measured in the same run.

Workloads, on payloads of 4 KiB, 64 KiB and 1 MiB:
  hit, miss, put under the cap,
  put into a full store of N entries (eviction active; --entries, default 1000 10000),
  and a mixed workload (60% get, 40% put) of N processes on a shared directory
  (--procs, default 8; 1 2 4 8 16 for the scaling figure).

usage: python3 bench/compare.py [--entries 1000 10000 100000] [--out bench-out] [--plots]

cuda.core's cache modules are imported from `cuda.core.utils`; with cuda-core's
CUDA 13 bindings installed (`pip install "cuda-core[cu13]"`) that import works
without a GPU or driver, which is how this machine runs them.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

import progcache

try:
    from cuda.core.utils import FileStreamProgramCache as CoreFile
    from cuda.core.utils import InMemoryProgramCache as CoreMemory
except Exception as e:  # pragma: no cover
    sys.exit(f"compare.py needs cuda.core (pip install 'cuda-core[cu13]'): {e}")
try:
    import diskcache
except Exception as e:  # pragma: no cover
    sys.exit(f"compare.py needs diskcache (pip install diskcache): {e}")

SIZES = {"4KiB": 4 << 10, "64KiB": 64 << 10, "1MiB": 1 << 20}


class DiskcacheAdapter:
    """diskcache.Cache with the mapping calls used here."""

    def __init__(self, path, max_size_bytes=None):
        kw = {"size_limit": max_size_bytes} if max_size_bytes else {"size_limit": 2 ** 40}
        self.c = diskcache.Cache(path, eviction_policy="least-recently-used", **kw)

    def __setitem__(self, k, v):
        self.c.set(k, v)

    def __getitem__(self, k):
        v = self.c.get(k, default=None, retry=True)
        if v is None:
            raise KeyError(k)
        return v

    def get(self, k, default=None):
        return self.c.get(k, default=default, retry=True)

    def close(self):
        self.c.close()


def make(kind, path, max_size_bytes=None, fsync=False):
    if kind == "progcache-memory":
        return progcache.InMemoryProgramCache(max_size_bytes=max_size_bytes)
    if kind == "cuda.core-memory":
        return CoreMemory(max_size_bytes=max_size_bytes)
    if kind == "progcache-file":
        return progcache.FileStreamProgramCache(path, max_size_bytes=max_size_bytes,
                                                durability="fsync" if fsync else "none")
    if kind == "cuda.core-file":
        return CoreFile(path, max_size_bytes=max_size_bytes)
    if kind == "diskcache":
        return DiskcacheAdapter(path, max_size_bytes)
    raise ValueError(kind)


MEMORY = ["progcache-memory", "cuda.core-memory"]
FILE = ["progcache-file", "cuda.core-file", "diskcache"]


def alternate(fns: dict, number: int, repeat: int) -> dict:
    """Runs each fn `number` times per round, alternating, `repeat` rounds;
    returns the median seconds per call for each."""
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            samples[k].append((time.perf_counter() - t0) / number)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_hits_misses_puts(tmp: str, results: list) -> None:
    for label, size in SIZES.items():
        payload = os.urandom(size)
        caches = {k: make(k, os.path.join(tmp, f"{k}-{label}")) for k in MEMORY + FILE}
        for c in caches.values():
            c[b"hit"] = payload
        big = size >= (1 << 20)
        for op in ("hit", "miss", "put"):
            fns = {}
            for k, c in caches.items():
                if op == "hit":
                    fns[k] = (lambda c=c: c[b"hit"])
                elif op == "miss":
                    fns[k] = (lambda c=c: c.get(b"absent"))
                else:
                    counter = iter(range(10 ** 9))
                    fns[k] = (lambda c=c, counter=counter: c.__setitem__(b"p%d" % (next(counter) % 64), payload))
            number = 20 if (big or op == "put") else 200
            med = alternate(fns, number, 9)
            for k, s in med.items():
                results.append({"workload": op, "payload": label, "impl": k, "seconds": s})
        for c in caches.values():
            if hasattr(c, "close"):
                c.close()


def fill_dir_fast(kind, path, n, payload):
    c = make(kind, path)  # no cap while filling
    for i in range(n):
        c[b"fill-%d" % i] = payload
    if hasattr(c, "close"):
        c.close()


def bench_full_store_puts(tmp: str, entries: list, results: list) -> None:
    payload = os.urandom(1024)
    for n in entries:
        cap = n * 1024  # below what n entries occupy: every put runs eviction
        for kind in FILE:
            path = os.path.join(tmp, f"full-{kind}-{n}")
            fill_dir_fast(kind, path, n, payload)
            # cuda.core fsyncs every put, so progcache does too here.
            c = make(kind, path, max_size_bytes=cap, fsync=True)
            puts = 3 if (kind == "cuda.core-file" and n >= 10000) else (10 if kind == "cuda.core-file" else 50)
            times = []
            for i in range(puts):
                t0 = time.perf_counter()
                c[b"new-%d" % i] = payload
                times.append(time.perf_counter() - t0)
            results.append({"workload": f"put_full_{n}", "payload": "1KiB", "impl": kind,
                            "seconds": statistics.median(times)})
            if hasattr(c, "close"):
                c.close()
            shutil.rmtree(path, ignore_errors=True)


def _mixed_worker(kind, path, seconds, q, seed):
    import random
    c = make(kind, path, max_size_bytes=32 << 20)
    payload = os.urandom(16 << 10)
    rnd = random.Random(seed)
    ops = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        k = b"k%d" % rnd.randrange(2000)
        if rnd.random() < 0.6:
            c.get(k)
        else:
            c[k] = payload
        ops += 1
    q.put(ops)


def bench_mixed(tmp: str, results: list, procs: list, seconds: float = 3.0) -> None:
    """N processes share one store: 60% get, 40% put of 16 KiB over 2 000
    keys, 32 MiB cap. Records time per operation per process and the
    aggregate throughput. Process counts outer, caches inner, so drift on a
    shared machine spreads over every cache alike."""
    ctx = multiprocessing.get_context("fork")
    for n in procs:
        for kind in FILE:
            path = os.path.join(tmp, f"mixed-{kind}-{n}")
            make(kind, path)  # create the directory once
            q = ctx.Queue()
            workers = [ctx.Process(target=_mixed_worker, args=(kind, path, seconds, q, i)) for i in range(n)]
            for p in workers:
                p.start()
            total = sum(q.get() for _ in workers)
            for p in workers:
                p.join()
            results.append({"workload": f"mixed_{n}proc", "payload": "16KiB", "impl": kind,
                            "seconds": seconds / total * n, "ops_per_s": total / seconds})
            shutil.rmtree(path, ignore_errors=True)


def table(results: list) -> str:
    rows = {}
    for r in results:
        rows.setdefault((r["workload"], r["payload"]), {})[r["impl"]] = r["seconds"]
    lines = ["| workload | payload | progcache | cuda.core | diskcache | cuda.core / progcache | diskcache / progcache |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for (w, p), impls in rows.items():
        for fam in ("memory", "file"):
            pk, ck = f"progcache-{fam}", f"cuda.core-{fam}"
            if pk not in impls and not (fam == "file" and "progcache-file" in impls):
                continue
            if pk not in impls:
                continue
            pc, cc, dc = impls.get(pk), impls.get(ck), impls.get("diskcache") if fam == "file" else None
            fmt = lambda s: "—" if s is None else (f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms")
            ratio = lambda s: "—" if s is None else f"{s / pc:.1f} x"
            lines.append(f"| {w} ({fam}) | {p} | {fmt(pc)} | {fmt(cc)} | {fmt(dc)} | {ratio(cc)} | {ratio(dc)} |")
    return "\n".join(lines)


def plots(results: list, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for impl in MEMORY + FILE:
        xs, ys = [], []
        for label, size in SIZES.items():
            for r in results:
                if r["workload"] == "hit" and r["payload"] == label and r["impl"] == impl:
                    xs.append(size)
                    ys.append(r["seconds"] * 1e6)
        if xs:
            ax.plot(xs, ys, marker="o", label=impl)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{x >> 10} KiB" for x in xs])
    ax.set_xlabel("payload")
    ax.set_ylabel("hit latency (µs, median)")
    ax.set_title("Cache hit latency against payload size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "hit_latency.png"), dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for impl in FILE:
        pts = sorted((int(r["workload"].split("_")[-1]), r["seconds"] * 1e3) for r in results
                     if r["workload"].startswith("put_full_") and r["impl"] == impl)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("entries in the (full) store")
    ax.set_ylabel("put with eviction (ms, median)")
    ax.set_title("Put cost against entry count (cap reached)\n"
                 "progcache: fsync per put; cuda.core: fsync per put; diskcache: SQLite WAL, no fsync per commit",
                 fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "put_vs_entries.png"), dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for impl in FILE:
        pts = sorted((int(r["workload"][len("mixed_"):-len("proc")]), r["ops_per_s"]) for r in results
                     if r["workload"].startswith("mixed_") and r["impl"] == impl)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
    if ax.lines:
        ax.set_xscale("log", base=2)
        ax.set_xticks([p[0] for p in pts], [str(p[0]) for p in pts])
        ax.set_yscale("log")
        ax.set_xlabel("processes sharing one store (2 cores)")
        ax.set_ylabel("operations per second, all processes")
        ax.set_title("60% get / 40% put of 16 KiB, 2 000 keys, 32 MiB cap\n"
                     "progcache: atomic rename, no fsync; diskcache: SQLite WAL, no fsync per commit; "
                     "cuda.core: fsync per put", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "mixed_scaling.png"), dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--plots", action="store_true")
    ap.add_argument("--skip-mixed", action="store_true")
    ap.add_argument("--procs", type=int, nargs="*", default=[8],
                    help="process counts for the mixed workload (the scaling figure: 1 2 4 8 16)")
    ap.add_argument("--skip-basic", action="store_true", help="skip hit/miss/put (full-store puts only)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="progcache-compare-")
    results: list = []
    try:
        if not args.skip_basic:
            bench_hits_misses_puts(tmp, results)
        if args.entries:
            bench_full_store_puts(tmp, args.entries, results)
        if not args.skip_mixed:
            bench_mixed(tmp, results, args.procs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(args.out, "compare-full.json" if args.skip_basic else "compare.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(table(results))
    scaling = sorted({int(r["workload"][len("mixed_"):-len("proc")]) for r in results
                      if r["workload"].startswith("mixed_")})
    if scaling:
        ops = {(r["workload"], r["impl"]): r["ops_per_s"] for r in results if r["workload"].startswith("mixed_")}
        print("\n| processes | progcache ops/s | cuda.core ops/s | diskcache ops/s | progcache / diskcache | target |")
        print("| --- | --- | --- | --- | --- | --- |")
        for n in scaling:
            w = f"mixed_{n}proc"
            pc, cc, dc = (ops.get((w, k)) for k in FILE)
            ratio = pc / dc if pc and dc else None
            mark = "" if ratio is None else (" ✔" if ratio >= 1.5 else " ✘")
            num = lambda v: "—" if v is None else f"{v:,.0f}"
            shown = "—" if ratio is None else f"{ratio:.1f} x"
            print(f"| {n} | {num(pc)} | {num(cc)} | {num(dc)} | {shown} | ≥ 1.5 x{mark} |")
    if args.plots:
        plots(results, args.out)
        print(f"plots: {args.out}/hit_latency.png {args.out}/put_vs_entries.png {args.out}/mixed_scaling.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
