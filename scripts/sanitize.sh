#!/usr/bin/env bash
# Builds progcache with ASan+UBSan and with TSan, and runs the unit, stress
# and crash tests under each. usage: sanitize.sh [asan|tsan]... (default both)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
for kind in "${kinds[@]}"; do
  case "$kind" in
    asan) flags="address,undefined"; env_vars=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1) ;;
    tsan) flags="thread"; env_vars=(TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1) ;;
    *) echo "unknown sanitizer kind '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
  build="build-$kind"
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROGCACHE_SANITIZE="$flags" \
      -DPROGCACHE_BUILD_BENCH=OFF >/dev/null
  fi
  cmake --build "$build" -j "${PROGCACHE_JOBS:-2}"
  echo "== $kind: unit, stress and crash tests"
  # install_and_find_package exercises packaging, not memory safety.
  (cd "$build" && env "${env_vars[@]}" ctest --output-on-failure -j "${PROGCACHE_JOBS:-2}" -E install_and_find_package)
done
