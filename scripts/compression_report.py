#!/usr/bin/env python3
"""Runs bench/compression_bench on a corpus of cubins and prints, per zstd
level against level 0 (stored as is) in the same run: bytes stored, encode
and decode cost, file and Redis hit cost, and the bandwidth below which a
compressed remote hit is faster than an uncompressed one (the bytes it saves
divided by the decompression time it adds).

usage: compression_report.py BINARY --corpus DIR [--redis URL] [--repetitions N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--redis", default="")
    ap.add_argument("--repetitions", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, PROGCACHE_BENCH_CORPUS=args.corpus)
    if args.redis:
        env["PROGCACHE_BENCH_REDIS"] = args.redis
    out = subprocess.run([args.binary, "--benchmark_format=json", f"--benchmark_repetitions={args.repetitions}",
                          "--benchmark_enable_random_interleaving=true"],
                         env=env, check=True, capture_output=True, text=True).stdout
    runs = {}
    sizes = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        runs.setdefault(b["run_name"], []).append(b["cpu_time"] if "Encode" in b["run_name"] or "Decode" in b["run_name"]
                                                   else b["real_time"])
        sizes[b["run_name"]] = (b["raw_bytes"], b["stored_bytes"], b["entries"])
    med = {k: statistics.median(v) for k, v in runs.items()}  # microseconds per corpus pass
    raw, _, entries = sizes["BM_Encode/0"]
    print(f"corpus: {int(entries)} programs, {raw / 1024:.0f} KiB; times per pass over the corpus (median µs)")
    print("| level | stored | encode | decode (memory) | file hit | Redis hit (loopback) | break-even bandwidth |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for level in (0, 1, 3, 9, 19):
        enc = med.get(f"BM_Encode/{level}")
        if enc is None:
            continue
        stored = sizes[f"BM_Encode/{level}"][1]
        dec, file_hit, remote = (med.get(f"{n}/{level}") for n in ("BM_Decode", "BM_FileHitCorpus", "BM_RemoteHitCorpus"))
        fmt = lambda v, ref: "—" if v is None else (f"{v:,.0f} µs" + ("" if ref is None or level == 0 else f" ({v / ref:.2f} x)"))
        breakeven = "—"
        if level and dec is not None and med.get("BM_Decode/0") is not None:
            saved = sizes["BM_Encode/0"][1] - stored
            extra_s = (dec - med["BM_Decode/0"]) * 1e-6
            if extra_s > 0:
                breakeven = f"{saved / extra_s / 1e9 * 8:.1f} Gbit/s"
        print(f"| {level if level else 'off'} | {stored / 1024:.0f} KiB ({raw / stored:.2f} x smaller) | "
              f"{fmt(enc, None)} | {fmt(dec, med.get('BM_Decode/0'))} | {fmt(file_hit, med.get('BM_FileHitCorpus/0'))} | "
              f"{fmt(remote, med.get('BM_RemoteHitCorpus/0'))} | {breakeven} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
