#!/usr/bin/env bash
# Installs what progcache needs to build and test, from Debian packages and
# PyPI, skipping what is already there. Safe to run repeatedly.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libssl-dev libxxhash-dev libzstd-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev redis-server libcurl4-openssl-dev nginx-light
  python3 python3-dev python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all build dependencies present"
fi
