#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main
# job (every example kernel compiled through the cache, cold then warm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The main job runs the CLI alone: only it is built (the tests, benchmarks
# and Python module are the second command's).
PROGCACHE_BUILD_TARGET=progcache_cli bash scripts/build.sh
python3 scripts/main_job.py --progcache "${PROGCACHE_BUILD_DIR:-build}/progcache" "$@"
