#!/usr/bin/env python3
"""Runs a Google Benchmark binary with repetitions and prints medians and the
ratios that progcache's targets are stated in, each against a reference
measured in the same run.

usage: bench_ratios.py BINARY [--repetitions N] [--filter REGEX] [extra benchmark args]
"""
import argparse
import json
import statistics
import subprocess
import sys

# (label, numerator, denominator, target ratio or None)
RATIOS = [
    ("memory hit / unordered_map find", "BM_MemoryHit", "BM_UnorderedMapFindFloor", 2.0),
    ("file hit 4 KiB / bare read", "BM_FileHit/4096", "BM_FileReadFloor/4096", 1.5),
    ("file hit 64 KiB / bare read", "BM_FileHit/65536", "BM_FileReadFloor/65536", 1.5),
    ("file hit 1 MiB / bare read", "BM_FileHit/1048576", "BM_FileReadFloor/1048576", 1.5),
    ("file hit 1 MiB / (read + XXH3 of it, same loop)", "BM_FileHit/1048576", "BM_FileReadChecksumFloor/1048576",
     None),
    ("1 MiB bound: (read + XXH3 of it) / bare read", "BM_FileReadChecksumFloor/1048576",
     "BM_FileReadFloor/1048576", None),
    ("file hit 1 MiB / (bare read + XXH3-128 of 1 MiB)", "BM_FileHit/1048576",
     ("BM_FileReadFloor/1048576", "BM_Xxh3Floor1MiB"), None),
    ("one hot 1 MiB entry into caller memory / (bare read + XXH3-128)", "BM_FileHitHot/1048576",
     ("BM_FileReadFloorHot/1048576", "BM_Xxh3Floor1MiB"), None),
    ("one hot 1 MiB entry into caller memory / its read + XXH3-128 in one loop", "BM_FileHitHot/1048576",
     "BM_FileReadChecksumFloorHot/1048576", None),
    ("put, cap active: 100k entries / 1k entries", "BM_PutCapActive/100000", "BM_PutCapActive/1000", 1.5),
    ("put 1k entries / bare create+rename+unlink", "BM_PutCapActive/1000", "BM_PutFloor/1000", None),
    ("put 100k entries / bare create+rename+unlink", "BM_PutCapActive/100000", "BM_PutFloor/100000", None),
    ("bare SHA-256 / key of 1 MiB source (throughput share)", "BM_Sha256Floor1MiB", "BM_ProgramKey1MiB", None),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--filter", default="")
    args, extra = ap.parse_known_args()
    cmd = [args.binary, "--benchmark_format=json", f"--benchmark_repetitions={args.repetitions}",
           "--benchmark_enable_random_interleaving=true"]
    if args.filter:
        cmd.append(f"--benchmark_filter={args.filter}")
    out = subprocess.run(cmd + extra, check=True, capture_output=True, text=True).stdout
    runs = json.loads(out)["benchmarks"]
    samples: dict[str, list[float]] = {}
    for r in runs:
        if r.get("run_type") != "iteration":
            continue
        name = r["run_name"].split("/iterations:")[0]
        samples.setdefault(name, []).append(float(r["real_time"]) * {"ns": 1, "us": 1e3, "ms": 1e6}[r["time_unit"]])
    medians = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{'benchmark':<34} {'median':>14}")
    for k, v in medians.items():
        print(f"{k:<34} {v:>11.0f} ns")
    print()
    print(f"{'ratio':<56} {'value':>7}  target")
    failed = False
    for label, num, den, target in RATIOS:
        dens = den if isinstance(den, tuple) else (den,)  # a tuple: the sum of its floors
        if num not in medians or any(d not in medians for d in dens):
            continue
        ratio = medians[num] / sum(medians[d] for d in dens)
        verdict = ""
        if target is not None:
            ok = ratio <= target
            failed |= not ok
            verdict = f"<= {target}  {'met' if ok else 'MISSED'}"
        print(f"{label:<56} {ratio:>7.2f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
