#!/usr/bin/env bash
# Installs the built tree into a temp prefix, builds tests/consumer against it
# with find_package(progcache), and runs it.
set -euo pipefail
build_dir="$1"
source_dir="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$source_dir/tests/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" -j 2 >/dev/null
"$tmp/build/consumer" "$tmp/cache"
