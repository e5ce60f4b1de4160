#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (+ASan/UBSan) and runs each for
# SECONDS (default 20) from the seed corpus in fuzz/corpus. New inputs go to a
# scratch corpus, so the repository is not modified.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
build="${PROGCACHE_FUZZ_BUILD_DIR:-build-fuzz}"
source scripts/clang.sh
need_clang_with_runtime
# A tree that already holds the fuzzers (scripts/sanitize.sh's ASan+UBSan
# tree) is only brought up to date; any other is configured here, for the
# fuzzers alone. -O1 with line tables, as scripts/sanitize.sh: the tree
# compiles in about half the time of -O2 -g, and a fuzzing run is fixed in
# seconds, not in executions. Configured on every run, so an existing tree
# follows the flags.
if ! grep -qs '^PROGCACHE_BUILD_FUZZERS:BOOL=ON$' "$build/CMakeCache.txt"; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DPROGCACHE_BUILD_FUZZERS=ON -DPROGCACHE_SANITIZE=address,undefined -DPROGCACHE_BUILD_TESTS=OFF \
    -DPROGCACHE_BUILD_BENCH=OFF -DPROGCACHE_BUILD_CLI=OFF >/dev/null
fi
cmake --build "$build" -j "${PROGCACHE_JOBS:-2}"
declare -A corpus=([entry_decode_fuzz]=entry_decode [program_key_fuzz]=program_key [parse_fuzz]=parse_size_duration
                   [redis_url_fuzz]=redis_url [http_url_fuzz]=http_url [bundle_fuzz]=bundle)
# Each target runs alone for its time; PROGCACHE_JOBS of them at once (one
# core each: libFuzzer runs one thread), reported as each ends.
run_one() {
  local t=$1 scratch runs
  scratch=$(mktemp -d)
  cp fuzz/corpus/"${corpus[$t]}"/* "$scratch/"
  if UBSAN_OPTIONS=halt_on_error=1 "$build/fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 \
      -rss_limit_mb=1024 "$scratch" > "$scratch.log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch.log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $t: $runs executions in ${seconds}s, no crash"
    rm -rf "$scratch" "$scratch.log"
  else
    echo "fuzz: $t FAILED"; tail -40 "$scratch.log"
    rm -rf "$scratch" "$scratch.log"
    return 1
  fi
}
status=0
running=0
for t in entry_decode_fuzz program_key_fuzz parse_fuzz redis_url_fuzz http_url_fuzz bundle_fuzz; do
  [[ -x "$build/fuzz/$t" ]] || { echo "fuzz: $t not built (no Redis or HTTP tier): skipped"; continue; }
  if ((running >= ${PROGCACHE_JOBS:-2})); then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
