#!/usr/bin/env bash
# Configures and builds progcache into build/ (or $PROGCACHE_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${PROGCACHE_BUILD_DIR:-build}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi
cmake --build "$build_dir" -j "${PROGCACHE_JOBS:-2}"
