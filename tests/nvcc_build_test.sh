#!/usr/bin/env bash
# progcache as CMake's CUDA compiler launcher, as a user turns it on
# (CMAKE_CUDA_COMPILER_LAUNCHER=progcache), on the example kernels
# (tests/nvcc_build): every object and PTX file of a cold build, and of a
# warm build from an empty build directory, is what a build without the
# launcher makes; the warm build runs no compile; a header edit, a -D and
# another host compiler are compiled again.
#
# usage: nvcc_build_test.sh PROGCACHE SOURCE_DIR    (exit 77: skipped)
set -euo pipefail
cli=$1
src=$2
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[[ -x "$nvcc" ]] || { echo "skipped: no nvcc at $nvcc"; exit 77; }
generator=(-G "Unix Makefiles")
command -v ninja >/dev/null && generator=(-G Ninja)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cp -r "$src/tests/nvcc_build" "$t/proj"
export PROGCACHE_DIR="$t/cache"
unset PROGCACHE_DISABLE

configure() {
  local dir=$1
  shift
  cmake -S "$t/proj" -B "$dir" "${generator[@]}" -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DPROGCACHE_EXAMPLES="$src/examples/kernels" "$@" >"$t/configure.log" ||
    { cat "$t/configure.log"; exit 1; }
}
build() { cmake --build "$1" -j 2 "${@:2}" >"$t/build.log" || { cat "$t/build.log"; exit 1; }; }
counter() {
  "$cli" stats --json | python3 -c 'import json,sys; print((json.load(sys.stdin)["nvcc_launcher"] or {}).get(sys.argv[1], 0))' "$1"
}
expect() {  # expect NAME VALUE WHAT
  local got
  got=$(counter "$1")
  [[ "$got" == "$2" ]] || { echo "FAIL: $3: launcher $1 = $got, expected $2"; "$cli" stats; exit 1; }
}
# Every object and PTX file of the project in both trees, byte for byte.
# With "as-nvcc": a tree against a build without the launcher, where nvcc
# itself is not reproducible in two ways, each seen between two plain builds
# too: objects name nvcc's temporary file (tmpxft_<8 hex>_, masked here), and
# objects of sources with internal-linkage entities carry a per-run name
# (_INTERNAL_<hash>_..._<hash>_<pid>) also inside their compressed fatbin,
# which cannot be masked: those are only counted here and compared exactly
# between the cold and the warm launcher builds.
same_outputs() {
  python3 - "$@" <<'PY'
import pathlib, re, sys
a, b = map(pathlib.Path, sys.argv[1:3])
as_nvcc = len(sys.argv) > 3
mask = lambda data: re.sub(rb"tmpxft_[0-9a-f]{8}_", b"tmpxft_xxxxxxxx_", data)
files = [p.relative_to(a) for p in a.rglob("*") if p.suffix in (".o", ".ptx") and "CompilerId" not in str(p)]
if len(files) < 11:
    sys.exit(f"FAIL: only {len(files)} outputs in {a}")
unreproducible = 0
for f in files:
    if not (b / f).is_file():
        sys.exit(f"FAIL: {f} missing in {b}")
    x, y = (a / f).read_bytes(), (b / f).read_bytes()
    if not as_nvcc:
        if x != y:
            sys.exit(f"FAIL: {f} differs between the cold and the warm build")
        continue
    if f.suffix == ".o" and b"_INTERNAL_" in x:
        unreproducible += 1
        continue
    if mask(x) != mask(y):
        sys.exit(f"FAIL: {f} differs from the build without the launcher")
print(f"{len(files)} outputs identical" + (f" ({unreproducible} not reproducible by nvcc itself)" if as_nvcc else ""))
PY
}

configure "$t/plain"
build "$t/plain"

configure "$t/b" -DCMAKE_CUDA_COMPILER_LAUNCHER="$cli"
build "$t/b"
expect misses 11 "cold build"
expect hits 0 "cold build"
same_outputs "$t/plain" "$t/b" as-nvcc
cp -r "$t/b" "$t/cold"

rm -rf "$t/b"
configure "$t/b" -DCMAKE_CUDA_COMPILER_LAUNCHER="$cli"
build "$t/b"
expect hits 11 "warm build from an empty build directory"
expect misses 11 "warm build from an empty build directory"
same_outputs "$t/cold" "$t/b"
same_outputs "$t/plain" "$t/b" as-nvcc

# A header edit: the two outputs that include it are compiled, the rest served.
echo '#define TUNING_SCALE 3.0f' >"$t/proj/include/tuning.h"
build "$t/plain"
rm -rf "$t/b"
configure "$t/b" -DCMAKE_CUDA_COMPILER_LAUNCHER="$cli"
build "$t/b"
expect misses 13 "after a header edit"
expect hits 20 "after a header edit"
same_outputs "$t/plain" "$t/b" as-nvcc

# Another -D, then another host compiler: compiled again.
rm -rf "$t/b"
configure "$t/b" -DCMAKE_CUDA_COMPILER_LAUNCHER="$cli" -DCMAKE_CUDA_FLAGS=-DPROGCACHE_TEST_FLAG=1
build "$t/b" --target tuned tuned_ptx
expect misses 15 "after a -D change"
mkdir -p "$t/host"
printf '#!/bin/sh\nexec g++ "$@"\n' >"$t/host/g++"
chmod +x "$t/host/g++"
rm -rf "$t/b"
configure "$t/b" -DCMAKE_CUDA_COMPILER_LAUNCHER="$cli" -DCMAKE_CUDA_HOST_COMPILER="$t/host/g++"
build "$t/b" --target tuned tuned_ptx
expect misses 17 "after another host compiler"
expect hits 20 "after another host compiler"
echo "nvcc_build_test: ok"
