#!/usr/bin/env python3
"""Summarises compile_bench JSON: per kernel cold vs warm (memory, disk),
and the whole example set (sum of cold / sum of warm)."""
import json
import sys


def main() -> int:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
    ns = {}
    for r in runs:
        name = r["run_name"].split("/iterations:")[0]
        ns[name] = float(r["real_time"]) * {"ns": 1, "us": 1e3, "ms": 1e6}[r["time_unit"]]
    kernels = sorted({n.split("/", 1)[1] for n in ns})
    print(f"{'kernel':<18} {'cold':>10} {'warm mem':>10} {'warm disk':>10} {'cold/disk':>10}")
    tot = {"cold": 0.0, "warm_memory": 0.0, "warm_disk": 0.0}
    for k in kernels:
        c, m, d = ns[f"cold/{k}"], ns[f"warm_memory/{k}"], ns[f"warm_disk/{k}"]
        tot["cold"] += c
        tot["warm_memory"] += m
        tot["warm_disk"] += d
        print(f"{k:<18} {c / 1e6:>7.1f} ms {m / 1e3:>7.1f} us {d / 1e3:>7.1f} us {c / d:>9.0f}x")
    print(f"{'example set':<18} {tot['cold'] / 1e6:>7.1f} ms {tot['warm_memory'] / 1e3:>7.1f} us "
          f"{tot['warm_disk'] / 1e3:>7.1f} us {tot['cold'] / tot['warm_disk']:>9.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
