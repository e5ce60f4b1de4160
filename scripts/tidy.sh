#!/usr/bin/env bash
# clang-tidy over the library and the CLI with the checks in .clang-tidy,
# every finding an error (CI runs this after the build, which writes the
# compile_commands.json it reads). Checked with clang-tidy 14 (Debian's);
# another version has other checks, so it is not judged.
#   bash scripts/tidy.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-${PROGCACHE_BUILD_DIR:-build}}"
if ! command -v clang-tidy >/dev/null || ! command -v run-clang-tidy >/dev/null; then
  source scripts/apt.sh
  apt_install clang-tidy
fi
version=$(clang-tidy --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
if [[ "$version" != "14" ]]; then
  echo "tidy.sh: skipped: clang-tidy ${version:-?} here; the checks are judged with clang-tidy 14"
  exit 0
fi
if [[ ! -f "$build_dir/compile_commands.json" ]]; then
  echo "tidy.sh: no $build_dir/compile_commands.json: build first (bash scripts/build.sh)" >&2
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! run-clang-tidy -p "$build_dir" -quiet -j "${PROGCACHE_JOBS:-2}" "$PWD/(src|tools)/" >"$log" 2>&1; then
  grep -a -E "(warning|error):" "$log" | sed 's/\x1b\[[0-9;]*m//g' | sort -u >&2 || cat "$log" >&2
  echo "tidy.sh: clang-tidy found the problems above" >&2
  exit 1
fi
echo "tidy.sh: $(grep -c '"file"' "$build_dir/compile_commands.json") translation units in the build, library and CLI checked, no findings"
