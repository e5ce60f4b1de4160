# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: clang, its sanitizer
# and libFuzzer runtimes, and llvm-symbolizer (file:line in reports), from
# Debian's LLVM 14, installed when missing.
need_clang_with_runtime() {
  if ! command -v clang++ >/dev/null || ! command -v llvm-symbolizer >/dev/null ||
    ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "ok installed"; then
    source scripts/apt.sh
    apt_install clang libclang-rt-14-dev llvm
  fi
}
