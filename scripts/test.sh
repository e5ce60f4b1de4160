#!/usr/bin/env bash
# The README's second command: install what is missing, build, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd "${PROGCACHE_BUILD_DIR:-build}"
ctest --output-on-failure -j "${PROGCACHE_JOBS:-2}"
