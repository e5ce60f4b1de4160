#!/usr/bin/env bash
# Configures and builds progcache into build/ (or $PROGCACHE_BUILD_DIR).
# PROGCACHE_BUILD_TARGET names the one target to build (the README's first
# command builds only the CLI its main job runs); unset, everything.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${PROGCACHE_BUILD_DIR:-build}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # -O2 with line tables only (-g1): backtraces and sanitizer-free crash
  # reports keep file:line, and the build takes a third less time than with
  # full debug information (tests/cli_test.cpp alone: 60 s at -g, 40 s at
  # -g1, on a 2-core machine). Pass -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g"
  # for a debugger's view of variables.
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" "$@"
fi
targets=()
[[ -n "${PROGCACHE_BUILD_TARGET:-}" ]] && targets=(--target "$PROGCACHE_BUILD_TARGET")
cmake --build "$build_dir" -j "${PROGCACHE_JOBS:-2}" "${targets[@]}"
