"""A real CUDA project through progcache and ccache: NVIDIA's cuda-samples.

Builds a subset of cuda-samples' Samples/0_Introduction (CMake, Ninja,
CUDA_SEPARABLE_COMPILATION on, -lineinfo, as the samples' own CMakeLists
say) with CMAKE_CUDA_COMPILER_LAUNCHER=progcache and =ccache, each with an
empty cache of its own, through the cases a team meets. CMake runs no
compiler launcher for a device link (nvcc -dlink): progcache's side also
sets the RULE_LAUNCH_LINK property (a CMAKE_PROJECT_INCLUDE file, as
docs/nvcc.md says), which puts progcache in front of every link step: it
caches the device links and runs the host links unchanged. ccache caches
no link, so its side has no such setting.

  cold              an empty cache, a new build directory
  warm_clean        the build directory removed, configured and built again
  second_builddir   another build directory of the same checkout
  second_checkout   a copy of the checkout at another path (ccache with
                    CCACHE_BASEDIR, progcache with PROGCACHE_BASE_DIR, both
                    set to the directory above both)
  comment_edit      a comment changed in Common/helper_cuda.h (included by
                    every sample), the first build directory built again
  real_edit         a declaration added to the same header, built again

For each: the build step's wall time (configure is CMake's own, the same on
both sides, and left out), and the hits and misses each tool counts for that
build alone. After the comment edit, every object progcache served is
compared with a plain build (no launcher) of the same tree: equal but for
nvcc's temporary names (tmpxft_<8 hex digits>); and each side's objects in
the second checkout are compared with a plain build there.

The sample list and the GPU architectures (the samples list nine; two here,
so that a run takes minutes) are the only changes to the project's files.

    git clone https://github.com/NVIDIA/cuda-samples   # measured at c94ff366
    python3 bench/nvcc_project.py --samples cuda-samples --progcache build/progcache [--rounds 5]
    python3 bench/nvcc_project.py --samples cuda-samples --progcache build/progcache --interleaved-warm 7
    python3 bench/nvcc_project.py --samples cuda-samples --progcache build/progcache --whole-program --checkouts-only

With --rounds N, the two warm cases are each built N times (the build
directory removed and configured again each time) and the median is
reported: a warm build takes a second or two, where one noisy run moves the
ratio by tenths. With --interleaved-warm N, only the warm cases run, the two
sides' builds alternating within each of N rounds: the sides otherwise run one
after the other, and a machine that slows between them moves every ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SAMPLES = [
    "asyncAPI",
    "clock",
    "fp16ScalarProduct",
    "matrixMul",
    "mergeSort",
    "simpleAWBarrier",
    "simpleAssert",
    "simpleAtomicIntrinsics",
    "simpleCooperativeGroups",
    "simpleHyperQ",
    "simpleOccupancy",
    "simplePrintf",
    "simpleStreams",
    "simpleTemplates",
    "simpleVoteIntrinsics",
    "vectorAdd",
]
HEADER = "Common/helper_cuda.h"


def copy_tree(src: str, dst: str, archs: str, whole_program: bool = False) -> None:
    """The project's files the subset needs, with the architectures set
    (and, `whole_program`, without separable compilation or -lineinfo)."""
    shutil.copytree(os.path.join(src, "Common"), os.path.join(dst, "Common"))
    shutil.copytree(os.path.join(src, "cmake"), os.path.join(dst, "cmake"))
    intro = os.path.join(dst, "Samples", "0_Introduction")
    for s in SAMPLES:
        shutil.copytree(os.path.join(src, "Samples", "0_Introduction", s), os.path.join(intro, s))
        lists = os.path.join(intro, s, "CMakeLists.txt")
        with open(lists, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"set\(CMAKE_CUDA_ARCHITECTURES [^)]*\)", f"set(CMAKE_CUDA_ARCHITECTURES {archs})", text)
        if whole_program:
            text = text.replace(" -lineinfo", "").replace("CUDA_SEPARABLE_COMPILATION ON", "CUDA_SEPARABLE_COMPILATION OFF")
        with open(lists, "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(dst, "CMakeLists.txt"), "w", encoding="utf-8") as f:
        f.write("cmake_minimum_required(VERSION 3.20)\nproject(cuda-samples-subset LANGUAGES C CXX CUDA)\n")
        for s in SAMPLES:
            f.write(f"add_subdirectory(Samples/0_Introduction/{s})\n")


class Side:
    """One launcher (progcache or ccache, or none) with its own cache."""

    def __init__(self, name: str, launcher: str | None, work: str, progcache: str) -> None:
        self.name = name
        self.launcher = launcher
        self.progcache = progcache
        self.env = dict(os.environ)
        self.env.pop("PROGCACHE_DISABLE", None)
        self.env["PROGCACHE_DIR"] = os.path.join(work, "cache-progcache")
        self.env["XDG_CONFIG_HOME"] = os.path.join(work, "xdg")
        self.env["CCACHE_DIR"] = os.path.join(work, "cache-ccache")
        self.env["CCACHE_BASEDIR"] = work
        # progcache's base directory, the same one (docs/nvcc.md, "Two
        # checkouts"): it shares only what names no path of the checkout.
        self.env["PROGCACHE_BASE_DIR"] = work
        self.env["CCACHE_MAXSIZE"] = "20G"

    def configure(self, tree: str, build: str) -> None:
        cmd = ["cmake", "-S", tree, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"]
        if self.launcher:
            cmd.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={self.launcher}")
        if self.name == "progcache":
            include = os.path.join(os.path.dirname(self.env["PROGCACHE_DIR"]), "progcache-link.cmake")
            with open(include, "w", encoding="utf-8") as f:
                f.write(f'set_property(GLOBAL PROPERTY RULE_LAUNCH_LINK "{self.progcache}")\n')
            cmd.append(f"-DCMAKE_PROJECT_INCLUDE={include}")
        subprocess.run(cmd, env=self.env, check=True, stdout=subprocess.DEVNULL)

    def zero(self) -> None:
        if self.name == "progcache":
            subprocess.run([self.progcache, "stats", "-z"], env=self.env, check=True, stdout=subprocess.DEVNULL)
        elif self.name == "ccache":
            subprocess.run(["ccache", "-z"], env=self.env, check=True, stdout=subprocess.DEVNULL)

    def counts(self) -> tuple[int, int]:
        """Hits and misses since zero()."""
        if self.name == "progcache":
            out = subprocess.run(
                [self.progcache, "stats", "--json"], env=self.env, check=True, capture_output=True, text=True
            ).stdout
            launcher = json.loads(out).get("nvcc_launcher") or {}
            return int(launcher.get("hits", 0)), int(launcher.get("misses", 0))
        if self.name == "ccache":
            out = subprocess.run(
                ["ccache", "--print-stats"], env=self.env, check=True, capture_output=True, text=True
            ).stdout
            stats = dict(line.split("\t") for line in out.splitlines() if "\t" in line)
            hits = int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))
            return hits, int(stats.get("cache_miss", 0))
        return 0, 0

    def build(self, build: str) -> tuple[float, int, int]:
        self.zero()
        t0 = time.perf_counter()
        subprocess.run(["ninja", "-C", build], env=self.env, check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        hits, misses = self.counts()
        return seconds, hits, misses


def edit(tree: str, old: str, new: str) -> None:
    path = os.path.join(tree, HEADER)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if old not in text:
        sys.exit(f"{HEADER}: '{old}' not found")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new, 1))


def plain_twice(side: "Side", tree: str, name: str) -> tuple[dict[str, bytes], set[str]]:
    """Two plain builds of `tree` (no launcher): the objects of the first,
    and those that differ between the two (nvcc's own run-to-run names for
    internal-linkage entities in a compressed fatbin), which no comparison
    can judge."""
    plain = Side("plain", None, os.path.dirname(tree), side.progcache)
    one, two = os.path.join(tree, f"{name}-1"), os.path.join(tree, f"{name}-2")
    for b in (one, two):
        plain.configure(tree, b)
        plain.build(b)
    first, second = objects(one), objects(two)
    return first, {k for k in first if first[k] != second.get(k)}


def compare(got: dict[str, bytes], made: dict[str, bytes], unjudged: set[str]) -> tuple[int, int]:
    """Objects unlike plain nvcc's among those a comparison can judge, and how many were judged."""
    judged = [k for k in made if k not in unjudged]
    return sum(1 for k in judged if got.get(k) != made[k]), len(judged)


def objects(build: str) -> dict[str, bytes]:
    """Every CUDA object and device link under `build`, tmpxft names masked."""
    out = {}
    for root, _, files in os.walk(build):
        for name in files:
            if name.endswith(".cu.o") or name == "cmake_device_link.o":
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read()
                out[os.path.relpath(os.path.join(root, name), build)] = re.sub(rb"tmpxft_[0-9a-f]{8}", b"tmpxft_x", data)
    return out


def interleaved_warm(a: argparse.Namespace) -> int:
    """The warm cases alone, the two sides' builds alternating within each
    round (which side goes first alternates too), so that a machine slowing
    down during the run moves both sides alike. Medians over the rounds."""
    work = tempfile.mkdtemp(prefix="nvcc-project-warm-")
    sides = {}
    for name in ("progcache", "ccache"):
        tree = os.path.join(work, name, "checkout")
        copy_tree(a.samples, tree, a.archs, a.whole_program)
        launcher = os.path.abspath(a.progcache) if name == "progcache" else shutil.which("ccache")
        side = Side(name, launcher, os.path.join(work, name), os.path.abspath(a.progcache))
        side.configure(tree, os.path.join(tree, "build"))
        side.build(os.path.join(tree, "build"))  # cold: fills the cache
        sides[name] = (side, tree)
    times: dict[str, dict[str, list[float]]] = {}
    for r in range(a.interleaved_warm):
        order = ("progcache", "ccache") if r % 2 == 0 else ("ccache", "progcache")
        for label, sub in (("warm_clean", "build"), ("second_builddir", "build-2")):
            for name in order:
                side, tree = sides[name]
                build = os.path.join(tree, sub)
                shutil.rmtree(build, ignore_errors=True)
                side.configure(tree, build)
                seconds, hits, misses = side.build(build)
                times.setdefault(label, {}).setdefault(name, []).append(seconds)
                print(f"round {r} {label:16s} {name:9s} {seconds:6.2f} s  hits {hits:3d}  misses {misses:3d}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print()
    print("| case | progcache s (median) | ccache s (median) | ratio of medians |")
    print("| --- | --- | --- | --- |")
    for label, by in times.items():
        p, c = sorted(by["progcache"]), sorted(by["ccache"])
        mp, mc = p[len(p) // 2], c[len(c) // 2]
        print(f"| {label} | {mp:.2f} ({p[0]:.2f}-{p[-1]:.2f}) | {mc:.2f} ({c[0]:.2f}-{c[-1]:.2f}) | {mp / mc:.2f} |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", required=True, help="a cuda-samples checkout")
    ap.add_argument("--progcache", required=True)
    ap.add_argument("--archs", default="80 90")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--interleaved-warm", type=int, default=0, metavar="ROUNDS",
                    help="measure only the warm cases, the sides alternating, this many rounds")
    ap.add_argument("--whole-program", action="store_true",
                    help="build without separable compilation and -lineinfo (CMake's defaults)")
    ap.add_argument("--checkouts-only", action="store_true",
                    help="only the cold build and the second checkout, each compared with plain nvcc")
    ap.add_argument("--rounds", type=int, default=1,
                    help="warm builds (warm_clean, second_builddir) repeated this many times; the median is reported")
    a = ap.parse_args()
    if shutil.which("ccache") is None or shutil.which("ninja") is None:
        sys.exit("ccache and ninja are needed (apt-get install ccache ninja-build)")
    if a.interleaved_warm > 0:
        return interleaved_warm(a)
    results: dict[str, dict[str, dict[str, float]]] = {}
    equal_after_comment = None
    for name in ("progcache", "ccache"):
        work = tempfile.mkdtemp(prefix=f"nvcc-project-{name}-")
        tree_a = os.path.join(work, "checkout-a")
        tree_c = os.path.join(work, "checkout-c")
        copy_tree(a.samples, tree_a, a.archs, a.whole_program)
        copy_tree(a.samples, tree_c, a.archs, a.whole_program)
        launcher = os.path.abspath(a.progcache) if name == "progcache" else shutil.which("ccache")
        side = Side(name, launcher, work, os.path.abspath(a.progcache))
        rows: dict[str, dict[str, float]] = {}

        def case(label: str, tree: str, build: str, fresh: bool = True, rounds: int = 1) -> None:
            times = []
            for _ in range(rounds):
                if fresh:
                    shutil.rmtree(build, ignore_errors=True)
                    side.configure(tree, build)
                seconds, hits, misses = side.build(build)
                times.append(seconds)
            seconds = sorted(times)[len(times) // 2]
            rows[label] = {"seconds": seconds, "hits": hits, "misses": misses, "all_seconds": times}
            print(f"{name:9s} {label:16s} {seconds:8.2f} s  hits {hits:3d}  misses {misses:3d}"
                  + (f"  (median of {rounds}: {', '.join(f'{t:.2f}' for t in times)})" if rounds > 1 else ""),
                  flush=True)

        b1 = os.path.join(tree_a, "build")
        case("cold", tree_a, b1)
        if not a.checkouts_only:
            case("warm_clean", tree_a, b1, rounds=a.rounds)
            case("second_builddir", tree_a, os.path.join(tree_a, "build-2"), rounds=a.rounds)
        case("second_checkout", tree_c, os.path.join(tree_c, "build"))
        # What each side put in the second checkout's build against what
        # plain nvcc makes there (ccache's base directory serves the first
        # checkout's objects, which name its paths).
        made, unjudged = plain_twice(side, tree_c, "build-plain")
        differ, judged = compare(objects(os.path.join(tree_c, "build")), made, unjudged)
        rows["second_checkout"]["objects_unlike_plain"] = differ
        rows["second_checkout"]["objects_judged"] = judged
        print(f"{name:9s} second checkout: {differ} of {judged} objects unlike plain nvcc's there "
              f"({len(unjudged)} differ between two plain builds)", flush=True)
        if a.checkouts_only:
            results[name] = rows
            shutil.rmtree(work, ignore_errors=True)
            continue
        edit(tree_a, "Copyright (c) 2022, NVIDIA", "Copyright (c) 2022 NVIDIA")
        case("comment_edit", tree_a, b1, fresh=False)
        if name == "progcache":
            made, unjudged = plain_twice(side, tree_a, "build-plain")
            differ, judged = compare(objects(b1), made, unjudged)
            equal_after_comment = f"{judged - differ} of {judged} equal ({len(unjudged)} differ between two plain builds)"
            print(f"progcache after the comment edit: {equal_after_comment}", flush=True)
        edit(tree_a, "#define COMMON_HELPER_CUDA_H_\n", "#define COMMON_HELPER_CUDA_H_\nstatic const int bench_edit = 1;\n")
        case("real_edit", tree_a, b1, fresh=False)
        results[name] = rows
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| case | progcache s | hits/misses | ccache s | hits/misses | time ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label in results["progcache"]:
        p, c = results["progcache"][label], results["ccache"][label]
        ratio = p["seconds"] / c["seconds"] if c["seconds"] > 0 else float("nan")
        print(
            f"| {label} | {p['seconds']:.2f} | {p['hits']:.0f}/{p['misses']:.0f} | {c['seconds']:.2f} "
            f"| {c['hits']:.0f}/{c['misses']:.0f} | {ratio:.2f} |"
        )
    print(f"\nobjects served after the comment edit equal to a plain build's: {equal_after_comment}")
    for name in ("progcache", "ccache"):
        row = results[name]["second_checkout"]
        print(f"{name}: second checkout objects unlike plain nvcc's there: "
              f"{row.get('objects_unlike_plain')} of {row.get('objects_judged')} judged")
    if a.json:
        print(json.dumps({"results": results, "equal_after_comment": equal_after_comment}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
