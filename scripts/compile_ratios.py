#!/usr/bin/env python3
"""Summarises compile_bench JSON: per kernel cold vs warm (memory, disk),
a warm memory hit against the store's own get of the entry (its floor),
and the whole example set (sum of cold / sum of warm). With repetitions,
the medians."""
import json
import sys


def main() -> int:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
    ns = {}
    repeated = any(r.get("run_type") == "aggregate" for r in runs)
    for r in runs:
        if repeated and r.get("aggregate_name") != "median":
            continue
        name = r["run_name"].split("/iterations:")[0]
        ns[name] = float(r["real_time"]) * {"ns": 1, "us": 1e3, "ms": 1e6}[r["time_unit"]]
    kernels = sorted({n.split("/", 1)[1] for n in ns})
    print(f"{'kernel':<18} {'cold':>10} {'warm mem':>10} {'warm disk':>10} {'cold/disk':>10} "
          f"{'mem get':>9}")
    tot = {"cold": 0.0, "warm_memory": 0.0, "warm_disk": 0.0}
    for k in kernels:
        c, m, d = ns[f"cold/{k}"], ns[f"warm_memory/{k}"], ns[f"warm_disk/{k}"]
        tot["cold"] += c
        tot["warm_memory"] += m
        tot["warm_disk"] += d
        g = ns.get(f"memory_get/{k}")
        floor = f"{g:>6.0f} ns" if g is not None else f"{'-':>9}"
        print(f"{k:<18} {c / 1e6:>7.1f} ms {m / 1e3:>7.1f} us {d / 1e3:>7.1f} us {c / d:>9.0f}x {floor}")
    print(f"{'example set':<18} {tot['cold'] / 1e6:>7.1f} ms {tot['warm_memory'] / 1e3:>7.1f} us "
          f"{tot['warm_disk'] / 1e3:>7.1f} us {tot['cold'] / tot['warm_disk']:>9.0f}x")
    if "warm_memory/saxpy.cu" in ns:
        m = ns["warm_memory/saxpy.cu"]
        print(f"saxpy.cu warm memory hit {m / 1e3:.2f} us (target <= 2 us: {'met' if m <= 2000 else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
