#!/usr/bin/env bash
# Builds a manylinux_2_28 wheel of progcache on Debian 11 (glibc 2.31, Python
# 3.9) with scripts/wheel-manylinux.sh and installs and runs it there: an
# older C library than this machine's, in a chroot made by debootstrap from
# deb.debian.org. Run as root (debootstrap, chroot and bind mounts).
#
#   sudo bash scripts/wheel-manylinux-test.sh
#
# The chroot is kept in build-manylinux/bullseye between runs; the checkout
# is bind-mounted at its own path inside it (the dependencies built there by
# wheel-manylinux.sh are found where their pkg-config files say), and so is
# /usr/local/cuda where it exists, read-only, so the wheel compiles through
# NVRTC there. What it runs in the installed wheel: the import, a disk
# cache written and read back, the `progcache` command, and, with CUDA, a
# kernel compiled cold then served warm, its cubin compared with the one this
# machine's own build makes (`build/progcache`, when built).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# The checkout's own build-manylinux/ (the chroot sees the checkout only),
# whatever PROGCACHE_MANYLINUX_DIR says.
work=$root/build-manylinux
mkdir -p "$work"
jail=$work/bullseye
say() { echo "wheel-manylinux-test: $*"; }
if [[ $(id -u) -ne 0 ]]; then
  echo "wheel-manylinux-test: run as root (debootstrap, chroot, mount)" >&2
  exit 2
fi
command -v debootstrap >/dev/null || { source scripts/apt.sh; apt_install debootstrap; }
# Never remove a chroot with something still mounted in it (the checkout
# and /dev are, while this runs): a run killed before its cleanup leaves them.
mounted_in_jail() { [[ -d "$jail" ]] && awk -v j="$jail/" 'index($5 "/", j) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; }
if mounted_in_jail; then
  echo "wheel-manylinux-test: something is still mounted under $jail (an earlier run was killed):" >&2
  echo "  umount it (findmnt -R $jail) before running again" >&2
  exit 1
fi
if [[ ! -f "$jail/.made" ]]; then
  say "making a Debian 11 chroot in $jail"
  rm -rf --one-file-system "$jail"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-dev,python3-pip,make,perl,pkg-config,xz-utils,curl,ca-certificates \
    bullseye "$jail" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
  touch "$jail/.made"
fi
mounts=()
bind() {  # bind SOURCE [ro]
  mkdir -p "$jail$1"
  mount --bind "$1" "$jail$1"
  mounts=("$jail$1" "${mounts[@]}")
  [[ "${2:-}" == ro ]] && mount -o remount,bind,ro "$jail$1"
  return 0
}
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
  # Run with sudo: what it built belongs to the user who asked.
  if [[ -n "${SUDO_UID:-}" ]]; then
    find "$work" -path "$jail" -prune -o -exec chown -h "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" {} + 2>/dev/null || true
  fi
}
trap cleanup EXIT
bind /proc
bind /dev
bind "$root"
cuda=""
[[ -d /usr/local/cuda/ ]] && { bind "$(readlink -f /usr/local/cuda)" ro; cuda=$(readlink -f /usr/local/cuda); }
cp /etc/resolv.conf "$jail/etc/resolv.conf"
# pip from PyPI reads certifi's bundle unless told: the chroot's own, which holds them.
in_jail() {
  chroot "$jail" env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "$@"
}
# This machine's own certificate authorities (a proxy's, where connections
# go through one) are the chroot's too.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$jail/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$jail/usr/local/share/ca-certificates/"
  in_jail update-ca-certificates >/dev/null 2>&1 || true
fi
# What the build needs (also in a chroot made by an earlier version of this
# script).
need=()
for p in python3-venv python3-dev make perl pkg-config xz-utils curl; do
  in_jail dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  in_jail apt-get update -qq >/dev/null
  in_jail env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
say "glibc in the chroot: $(in_jail ldd --version | head -n 1)"
out=$work/dist-bullseye
rm -rf "$out"
in_jail bash "$root/scripts/wheel-manylinux.sh" python3 "$out"
wheel=$(echo "$out"/progcache-*-cp39-cp39-manylinux_2_28_x86_64.whl)
[[ -f "$wheel" ]] || { echo "wheel-manylinux-test: no cp39 manylinux_2_28 wheel in $out" >&2; exit 1; }
say "installing $(basename "$wheel") into a new venv in the chroot"
in_jail rm -rf /tmp/venv
in_jail python3 -m venv /tmp/venv
in_jail /tmp/venv/bin/pip install -q --disable-pip-version-check "$wheel"
expect=""
if [[ -n "$cuda" && -x build/progcache ]]; then
  expect=$(mktemp -d)
  PROGCACHE_DISABLE=1 build/progcache compile examples/kernels/saxpy.cu --arch sm_90 -std=c++17 \
    --name-expr 'saxpy<float>' -o "$expect/saxpy.cubin" >/dev/null
  cp "$expect/saxpy.cubin" "$jail/tmp/expected.cubin"
  rm -rf "$expect"
  expect=/tmp/expected.cubin
fi
# NVRTC opens its builtins library by name: found through the loader's path,
# which the toolkit's installer configures on a machine of its own.
in_jail env PROGCACHE_DIR=/tmp/pc-root PROGCACHE_NVRTC="${cuda:+$(ls "$cuda"/lib64/libnvrtc.so.* 2>/dev/null | head -n 1)}" \
  LD_LIBRARY_PATH="${cuda:+$cuda/lib64}" \
  EXPECTED="$expect" ROOT="$root" /tmp/venv/bin/python - <<'PY'
import hashlib, os, shutil, subprocess, sys
shutil.rmtree("/tmp/pc-root", ignore_errors=True)
if not os.environ.get("PROGCACHE_NVRTC"):
    os.environ.pop("PROGCACHE_NVRTC", None)
import progcache
print("progcache", progcache.__version__, "on", os.confstr("CS_GNU_LIBC_VERSION"), "Python", sys.version.split()[0])
with progcache.FileStreamProgramCache("/tmp/pc-root/py") as c:
    c[b"k"] = b"bytes on disk"
with progcache.FileStreamProgramCache("/tmp/pc-root/py") as c:
    assert c[b"k"] == b"bytes on disk"
cli = "/tmp/venv/bin/progcache"
print(subprocess.run([cli, "--version"], check=True, capture_output=True, text=True).stdout.strip())
open("/tmp/blob", "wb").write(b"x" * 4096)
subprocess.run([cli, "put", "ab" * 32, "/tmp/blob"], check=True)
subprocess.run([cli, "get", "ab" * 32, "-o", "/tmp/blob.back"], check=True)
assert open("/tmp/blob.back", "rb").read() == b"x" * 4096
if os.environ.get("PROGCACHE_NVRTC"):
    src = os.path.join(os.environ["ROOT"], "examples", "kernels", "saxpy.cu")
    args = [cli, "compile", src, "--arch", "sm_90", "-std=c++17", "--name-expr", "saxpy<float>", "-o"]
    def run(out):
        r = subprocess.run(args + [out, "--json"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout
    cold, warm = run("/tmp/cold.cubin"), run("/tmp/warm.cubin")
    import json
    assert not json.loads(cold)[0]["hit"] and json.loads(warm)[0]["hit"], (cold, warm)
    a, b = open("/tmp/cold.cubin", "rb").read(), open("/tmp/warm.cubin", "rb").read()
    assert a == b
    if os.environ.get("EXPECTED"):
        assert a == open(os.environ["EXPECTED"], "rb").read(), "the cubin differs from this machine's build's"
        print("compiled through NVRTC: the cubin equals the build machine's")
    obj = progcache.compile(open(src).read(), options=("-arch=sm_90", "-std=c++17"), name_expressions=["saxpy<float>"],
                            cache=True)
    print("progcache.compile:", len(obj.code), "bytes,", "from cache" if obj.from_cache else "compiled")
print("ok")
PY
say "passed"
