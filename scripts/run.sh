#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main
# job (every example kernel compiled through the cache, cold then warm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
python3 scripts/main_job.py --progcache "${PROGCACHE_BUILD_DIR:-build}/progcache" "$@"
