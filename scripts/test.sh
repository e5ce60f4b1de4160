#!/usr/bin/env bash
# The README's second command: install what is missing, build, and run every
# test: the unit, integration, multi-process, crash and CLI suites (ctest);
# the same suites again under ASan+UBSan and under TSan; and a short run of
# each libFuzzer target.
#
# PROGCACHE_QUICK=1 runs only the first part (for a fast local loop).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd "${PROGCACHE_BUILD_DIR:-build}" && ctest --output-on-failure -j "${PROGCACHE_JOBS:-2}")
# The Python module, installed the way users install it, and its pytest suite.
# cuda-core (with its CUDA 13 bindings) is installed so the suite checks that
# cuda.core accepts progcache's caches; its GPU-only parts skip themselves.
python3 -m pip install -q --disable-pip-version-check pytest "cuda-core[cu13]" nanobind scikit-build-core
python3 -m pip install -q --disable-pip-version-check ./
python3 -m pytest -q python/tests
if [[ "${PROGCACHE_QUICK:-0}" != "1" ]]; then
  bash scripts/sanitize.sh asan tsan
  bash scripts/fuzz.sh "${PROGCACHE_FUZZ_SECONDS:-20}"
fi
echo "test.sh: all suites passed"
