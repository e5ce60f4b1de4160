# Sourced by the scripts that install Debian packages: apt_install PKG...
# installs them (with sudo when not root), quietly.
apt_install() {
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
