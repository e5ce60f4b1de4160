"""progcache as nvcc's launcher against ccache, whole processes, paired.

1. Warm hits of `progcache nvcc -c` and `ccache nvcc -c` on the same files
   (the example kernels nvcc compiles whole), each process timed from spawn
   to exit, the two sides alternating in every round; medians per kernel and
   the ratio. The floor is a process that does nothing (`progcache
   --version`).
2. Warm hits of `progcache nvcc -cubin` and `-fatbin`, which ccache does
   not cache (checked: it counts them uncacheable), against a plain nvcc
   compile of the same command.
3. A CMake build of tests/nvcc_build (the example kernels and a PTX target)
   from an empty build directory with a warm cache, with
   CMAKE_CUDA_COMPILER_LAUNCHER=progcache and =ccache: the build step
   alone, and configure plus build.

    python3 bench/nvcc_launcher.py --progcache build/progcache [--rounds 21]
        [--out-of-source] [--hits-only]

--out-of-source runs the -c hits from a build directory beside the sources
(`nvcc -c ../src/k.cu -o k.o`), as CMake does: the outputs are written
there, not in the directory the sources' quoted includes search first.
--hits-only stops after part 1.
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
ROOT = os.path.join(HERE, "..")
KERNELS = ["saxpy", "reduce", "gemm_tiled", "softmax", "cub_scan", "coop_groups", "transpose", "histogram", "stencil"]


def timed(cmd: list[str], cwd: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--progcache", required=True)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--build-rounds", type=int, default=5)
    ap.add_argument("--out-of-source", action="store_true")
    ap.add_argument("--hits-only", action="store_true")
    a = ap.parse_args()
    pc = os.path.abspath(a.progcache)
    nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    ccache = shutil.which("ccache")
    if ccache is None:
        sys.exit("ccache not found (apt-get install ccache)")
    work = tempfile.mkdtemp(prefix="nvcc-launcher-bench-")
    env = dict(os.environ)
    env.pop("PROGCACHE_DISABLE", None)
    env["PROGCACHE_DIR"] = os.path.join(work, "progcache")
    env["CCACHE_DIR"] = os.path.join(work, "ccache")
    src = os.path.join(work, "src")
    os.makedirs(src)
    for k in KERNELS:
        shutil.copy(os.path.join(ROOT, "examples", "kernels", k + ".cu"), src)
    ver = subprocess.run([ccache, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{ver}; nvcc {nvcc}; {a.rounds} rounds")

    # 1. -c warm hits, paired.
    build = os.path.join(work, "build")
    os.makedirs(build)
    hits_in = build if a.out_of_source else src
    source_dir = "../src/" if a.out_of_source else ""

    def cmd(side: str, k: str, mode: str = "-c", out: str = "") -> list[str]:
        out = out or f"{k}.{side}.o"
        launcher = [pc, "nvcc"] if side == "progcache" else [ccache, nvcc]
        source = f"{source_dir}{k}.cu" if mode == "-c" else f"{k}.cu"
        return launcher + ["-arch=sm_90", "--use_fast_math", mode, source, "-o", out]

    # The places a stored result needs empty are watched by their directories
    # once those are two seconds old (docs/nvcc.md): the copies are left to
    # settle before the compiles that store.
    time.sleep(2.5)
    for k in KERNELS:  # fill both caches
        for side in ("progcache", "ccache"):
            timed(cmd(side, k), hits_in, env)
    floor = []
    rows = {k: {"progcache": [], "ccache": []} for k in KERNELS}
    for r in range(a.rounds):
        floor.append(timed([pc, "--version"], src, env))
        for k in KERNELS:
            order = ("progcache", "ccache") if r % 2 == 0 else ("ccache", "progcache")
            for side in order:
                rows[k][side].append(timed(cmd(side, k), hits_in, env))
    stats = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True).stdout
    direct = next((int(line.split()[1]) for line in stats.splitlines() if line.startswith("direct_cache_hit")), 0)
    print(f"\n1. warm hit of -c, whole process (floor: `progcache --version` {ms(statistics.median(floor))});"
          f" ccache direct hits: {direct}")
    print("| kernel | progcache nvcc -c | ccache nvcc -c | ratio |")
    print("| --- | --- | --- | --- |")
    ratios = []
    for k in KERNELS:
        p, c = statistics.median(rows[k]["progcache"]), statistics.median(rows[k]["ccache"])
        ratios.append(p / c)
        print(f"| {k} | {ms(p)} | {ms(c)} | {p / c:.2f} |")
    print(f"| median of the ratios | | | **{statistics.median(ratios):.2f}** |")
    if a.hits_only:
        return 0

    # 2. -cubin / -fatbin: progcache's hit against a plain compile; ccache refuses.
    before = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True).stdout
    subprocess.run(cmd("ccache", "saxpy", "-cubin", "s.cubin"), cwd=src, env=env, check=True, capture_output=True)
    after = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True).stdout

    def uncacheable(text: str) -> int:
        keys = ("called_for_link", "unsupported_compiler_option", "unsupported_code_directive", "compiler_produced_no_output",
                "bad_compiler_arguments", "compile_failed", "unsupported_source_language", "output_to_stdout",
                "could_not_use_modules", "multiple_source_files", "autoconf_test")
        return sum(int(line.split()[1]) for line in text.splitlines() if line.split() and line.split()[0] in keys)

    print(f"\n2. -cubin and -fatbin (ccache's uncacheable count for one -cubin call: "
          f"+{uncacheable(after) - uncacheable(before)})")
    print("| kernel | mode | progcache warm hit | plain nvcc | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for k in ("saxpy", "softmax", "cub_scan"):
        for mode, ext in (("-cubin", "cubin"), ("-fatbin", "fatbin")):
            pcmd = [pc, "nvcc", "-arch=sm_90", mode, f"{k}.cu", "-o", f"{k}.p.{ext}"]
            ncmd = [nvcc, "-arch=sm_90", mode, f"{k}.cu", "-o", f"{k}.n.{ext}"]
            timed(pcmd, src, env)
            hit = statistics.median(timed(pcmd, src, env) for _ in range(a.rounds))
            plain = statistics.median(timed(ncmd, src, env) for _ in range(3))
            print(f"| {k} | {mode} | {ms(hit)} | {ms(plain)} | {hit / plain:.4f} |")

    # 3. CMake build from an empty build directory, warm.
    proj = os.path.join(ROOT, "tests", "nvcc_build")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []

    def cmake_build(launcher: str) -> tuple[float, float]:
        b = os.path.join(work, "b-" + os.path.basename(launcher))
        shutil.rmtree(b, ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run(["cmake", "-S", proj, "-B", b, *gen, f"-DCMAKE_CUDA_COMPILER={nvcc}",
                        f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"], env=env, check=True, capture_output=True)
        t1 = time.perf_counter()
        subprocess.run(["cmake", "--build", b, "-j", "2"], env=env, check=True, capture_output=True)
        t2 = time.perf_counter()
        return t2 - t1, t2 - t0

    cold = {side: cmake_build(side) for side in (pc, ccache)}
    builds = {pc: [], ccache: []}
    for r in range(a.build_rounds):
        for side in ((pc, ccache) if r % 2 == 0 else (ccache, pc)):
            builds[side].append(cmake_build(side))
    print(f"\n3. CMake build of tests/nvcc_build (11 outputs) from an empty build directory, -j 2,"
          f" medians of {a.build_rounds}")
    print("| launcher | cold build | warm build | warm configure + build |")
    print("| --- | --- | --- | --- |")
    med = {}
    for side, name in ((pc, "progcache"), (ccache, "ccache")):
        b = statistics.median(x[0] for x in builds[side])
        w = statistics.median(x[1] for x in builds[side])
        med[name] = (b, w)
        print(f"| {name} | {cold[side][0]:.2f} s | {ms(b)} | {w:.2f} s |")
    print(f"| ratio | | **{med['progcache'][0] / med['ccache'][0]:.2f}** |"
          f" {med['progcache'][1] / med['ccache'][1]:.2f} |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
