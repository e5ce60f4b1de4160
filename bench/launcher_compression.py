"""The nvcc launcher's store with and without compression: bytes on disk
after the same compiles, and a warm hit's time.

Four `-rdc=true -c` compiles of example kernels through `progcache nvcc`,
into an empty root with PROGCACHE_COMPRESSION=off and into another with the
launcher's default (zstd level 1); the bytes of each store's entries (the
files named by 62 hex digits: not the recency table or the counters); then
warm hits of one kernel from each root, alternating, medians of --rounds.
With --ccache, the same four compiles through `ccache nvcc` into an empty
CCACHE_DIR (ccache's default: zstd level 1), and the bytes of its result
and manifest files (not its statistics or locks), the peer's figure for the
same compiles.

    python3 bench/launcher_compression.py --progcache build/progcache [--rounds 31] [--ccache ccache]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = ["saxpy", "reduce", "gemm_tiled", "softmax"]


def entry_bytes(store: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(store):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files if len(f) == 62)
    return total


def ccache_bytes(cache_dir: str) -> int:
    """ccache's results and manifests (files named <digest>R and <digest>M)."""
    total = 0
    for dirpath, _, files in os.walk(cache_dir):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files
                     if len(f) > 20 and f[-1] in "RM" and f[:-1].isalnum())
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--progcache", required=True)
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--ccache", help="ccache to compare the bytes kept with")
    a = ap.parse_args()
    tool = os.path.abspath(a.progcache)
    tmp = tempfile.mkdtemp(prefix="launcher-compression-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROGCACHE_")}
    sides = {"uncompressed": dict(base, PROGCACHE_DIR=os.path.join(tmp, "off"), PROGCACHE_COMPRESSION="off"),
             "default": dict(base, PROGCACHE_DIR=os.path.join(tmp, "default"))}

    def compile_(kernel: str, env: dict) -> None:
        subprocess.run([tool, "nvcc", "-rdc=true", "-c", os.path.join(HERE, "..", "examples", "kernels", f"{kernel}.cu"),
                        "-o", os.path.join(tmp, f"{kernel}.o")], env=env, check=True, capture_output=True)
    try:
        for env in sides.values():
            for k in KERNELS:
                compile_(k, env)
        size = {s: entry_bytes(os.path.join(env["PROGCACHE_DIR"], "nvcc")) for s, env in sides.items()}
        if a.ccache:
            ccache_dir = os.path.join(tmp, "ccache")
            env = dict(base, CCACHE_DIR=ccache_dir)
            env = {k: v for k, v in env.items() if not k.startswith("CCACHE_") or k == "CCACHE_DIR"}
            for k in KERNELS:
                subprocess.run([a.ccache, "nvcc", "-rdc=true", "-c",
                                os.path.join(HERE, "..", "examples", "kernels", f"{k}.cu"),
                                "-o", os.path.join(tmp, f"{k}.ccache.o")], env=env, check=True, capture_output=True)
            kept = ccache_bytes(ccache_dir)
            print(f"ccache        entries {kept:9d} bytes   progcache (default) / ccache: "
                  f"{size['default'] / kept:.2f}")
        times: dict[str, list[float]] = {s: [] for s in sides}
        for r in range(a.rounds):
            for s in (list(sides) if r % 2 else list(sides)[::-1]):
                t0 = time.perf_counter()
                compile_("gemm_tiled", sides[s])
                times[s].append(time.perf_counter() - t0)
        for s in sides:
            print(f"{s:13s} entries {size[s]:9d} bytes   warm hit of gemm_tiled {statistics.median(times[s]) * 1e3:7.2f} ms")
        print(f"default / uncompressed: bytes {size['default'] / size['uncompressed']:.2f}, "
              f"hit {statistics.median(times['default']) / statistics.median(times['uncompressed']):.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
