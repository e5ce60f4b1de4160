#!/usr/bin/env bash
# The C++ style is .clang-format's, checked by clang-format 14 (Debian's;
# another version formats some constructs differently, so it is not judged).
#   bash scripts/format.sh          check every tracked C++ file (CI runs this)
#   bash scripts/format.sh --fix    format them in place
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  source scripts/apt.sh
  apt_install clang-format
fi
version=$(clang-format --version | sed -n 's/.*version \([0-9][0-9]*\)\..*/\1/p')
if [[ "$version" != "14" ]]; then
  echo "format.sh: skipped: clang-format ${version:-?} here; the style is checked with clang-format 14"
  exit 0
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.h.in')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
clang-format --dry-run -Werror "${files[@]}"
echo "format.sh: ${#files[@]} C++ files as .clang-format says"
