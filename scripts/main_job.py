#!/usr/bin/env python3
"""The main job: compile every example kernel through progcache twice against
a fresh cache directory (cold, then warm) and print a summary.

Where a GPU is usable, every warm output is then loaded with the CUDA driver
and two kernels are launched and checked (scripts/gpu_check.py); without one
that step reports itself skipped and why.

usage: main_job.py [--progcache PATH] [--cache-dir DIR] [--keep] [--gpu auto|require|off]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "examples", "kernels")


def cuda_root() -> str:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    return "/usr/local/cuda"


def run_pass(progcache: str, manifest: dict, env: dict, outdir: str) -> tuple[float, list[dict]]:
    """Runs every job once; returns wall seconds and the per-input records."""
    records = []
    start = time.perf_counter()
    for i, job in enumerate(manifest["jobs"]):
        args = [a.replace("{cuda}", cuda_root()) for a in job["args"]]
        cmd = [progcache, "compile", *job["inputs"], "--arch", manifest["arch"], "--json", *args]
        out = os.path.join(outdir, f"job{i}")
        os.makedirs(out, exist_ok=True)
        cmd += ["-o", out if len(job["inputs"]) > 1 and "--link" not in args else os.path.join(out, "out.bin")]
        proc = subprocess.run(cmd, cwd=KERNELS, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(f"main job: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr}\n")
            sys.exit(1)
        records += json.loads(proc.stdout)
    return time.perf_counter() - start, records


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--progcache", default=os.path.join(ROOT, "build", "progcache"))
    ap.add_argument("--cache-dir", help="cache root to use (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temp cache dir")
    ap.add_argument("--gpu", choices=["auto", "require", "off"], default="auto",
                    help="load the cached programs on a GPU: when one is usable (auto), always (require), never")
    args = ap.parse_args()
    # Every compile runs with cwd=examples/kernels (the manifest names inputs
    # relative to it), so a relative path to the binary must be resolved first.
    progcache = os.path.abspath(args.progcache)
    if not os.access(progcache, os.X_OK):
        sys.stderr.write(f"main job: no progcache binary at {progcache} (build it with scripts/build.sh)\n")
        return 2

    with open(os.path.join(KERNELS, "manifest.json")) as f:
        manifest = json.load(f)
    tmp = tempfile.mkdtemp(prefix="progcache-main-")
    cache = args.cache_dir or os.path.join(tmp, "cache")
    env = dict(os.environ, PROGCACHE_DIR=cache)
    env.pop("PROGCACHE_DISABLE", None)
    try:
        cold_s, cold = run_pass(progcache, manifest, env, os.path.join(tmp, "out-cold"))
        warm_s, warm = run_pass(progcache, manifest, env, os.path.join(tmp, "out-warm"))
        stats = json.loads(subprocess.run([progcache, "stats", "--json"], env=env, check=True,
                                          capture_output=True, text=True).stdout)
        print(f"{'input':<18} {'cold':>11} {'warm':>10} {'warm':>5} {'bytes':>8}")
        for c, w in zip(cold, warm):
            print(f"{c['input']:<18} {c['seconds'] * 1e3:>8.1f} ms {w['seconds'] * 1e3:>7.2f} ms "
                  f"{'hit' if w['hit'] else 'MISS':>5} {w['bytes']:>8}")
            if c["key"] != w["key"]:
                sys.stderr.write(f"main job: key of {c['input']} changed between passes\n")
                return 1
        # Warm outputs must be byte-identical to cold ones.
        for root, _, files in os.walk(os.path.join(tmp, "out-cold")):
            for name in files:
                a = os.path.join(root, name)
                b = a.replace("out-cold", "out-warm")
                with open(a, "rb") as fa, open(b, "rb") as fb:
                    if fa.read() != fb.read():
                        sys.stderr.write(f"main job: warm output {b} differs from cold\n")
                        return 1
        if args.gpu != "off":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import gpu_check
            gpu, why = gpu_check.open_gpu()
            if gpu is None:
                print(f"\nGPU check skipped: {why}")
                if args.gpu == "require":
                    return 1
            else:
                try:
                    for line in gpu_check.check_outputs(gpu, warm):
                        print(f"GPU: {line}")
                except gpu_check.GpuError as e:
                    sys.stderr.write(f"main job: GPU check failed: {e}\n")
                    return 1
        hits = sum(1 for w in warm if w["hit"])
        cold_compile = sum(c["seconds"] for c in cold)
        warm_lookup = sum(w["seconds"] for w in warm)
        print()
        print(f"programs compiled     {len(cold)} ({len(manifest['jobs'])} jobs)")
        print(f"cold pass             {cold_s:8.2f} s wall  ({cold_compile:.2f} s in compile calls)")
        print(f"warm pass             {warm_s:8.3f} s wall  ({warm_lookup * 1e3:.2f} ms in compile calls)")
        print(f"warm hits             {hits}/{len(warm)}")
        print(f"cached bytes          {stats['bytes_stored']} in {stats['entries']} entries")
        print(f"speed-up (calls)      {cold_compile / warm_lookup:,.0f}x   (whole processes: {cold_s / warm_s:,.1f}x)")
        return 0 if hits == len(warm) else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
