# Sourced by scripts/wheel.sh and scripts/wheel-manylinux.sh (auditwheel on
# PATH): repair_and_show NAME RAW DIR [PLATFORM] repairs the wheel RAW into
# DIR with auditwheel (for PLATFORM when given), prints what `auditwheel
# show` says of the result on one line, and sets `fixed` (the repaired
# wheel) and `shown` (that line). NAME starts its error messages.
repair_and_show() {
  local name=$1 raw=$2 dir=$3 platform=${4:-} log
  local args=(repair -w "$dir")
  [[ -n "$platform" ]] && args+=(--plat "$platform")
  if ! log=$(auditwheel "${args[@]}" "$raw" 2>&1); then
    echo "$log" >&2
    echo "$name: auditwheel repair failed" >&2
    return 1
  fi
  fixed=$(echo "$dir"/progcache-*.whl)
  shown=$(auditwheel show "$fixed" 2>&1 | tr -s '\n' ' ' | sed 's/  */ /g')
  echo "$shown"
}
