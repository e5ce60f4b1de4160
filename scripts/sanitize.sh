#!/usr/bin/env bash
# Builds progcache with ASan+UBSan and with TSan, and runs the unit, stress
# and crash tests under each. usage: sanitize.sh [asan|tsan]... (default both)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
((${#kinds[@]})) || kinds=(asan tsan)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
for kind in "${kinds[@]}"; do
  case "$kind" in
    # intercept_tls_get_addr=0: LeakSanitizer's exit-time tracer crashed
    # (SIGSEGV) walking the dynamic TLS blocks of the dlopen'd NVRTC in
    # SourceDepsTest.ADanglingLinkOnTheSearchPathIsNeverTrustedToStayEmpty,
    # every time under ctest, after the test had passed. Without tracking
    # them it can only report more, never less.
    asan) flags="address,undefined"; env_vars=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1) ;;
    tsan) flags="thread"; env_vars=(TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1) ;;
    *) echo "unknown sanitizer kind '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
  build="build-$kind"
  # The ASan+UBSan tree is built with clang and holds the libFuzzer targets
  # too, so scripts/fuzz.sh runs them from it (PROGCACHE_FUZZ_BUILD_DIR)
  # instead of building the library a third time. Measured on a 2-core
  # machine: this tree built in 433 s and its tests ran in 140 s, where
  # g++'s ASan+UBSan tree took about 700 s and 270 s and the separate fuzzer
  # tree about 160 s more. The TSan tree stays on g++ (a second compiler's
  # view of the code).
  toolchain=()
  if [[ "$kind" == asan ]]; then
    source scripts/clang.sh
    need_clang_with_runtime
    toolchain=(-DCMAKE_CXX_COMPILER=clang++ -DPROGCACHE_BUILD_FUZZERS=ON)
  fi
  # -O1 with line tables only (-g1): what the sanitizers' documentation
  # recommends for speed, and enough for symbolised reports (file:line per
  # frame). Measured on a 2-core machine, one test TU (file_store_test.cpp)
  # under ASan+UBSan: 97 s at -O2 -g, 37 s at -O1 -g1; under TSan 30 s and
  # 18 s. Configured on every run, so a tree made with other flags follows.
  cmake -S . -B "$build" "${generator[@]}" "${toolchain[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPROGCACHE_SANITIZE="$flags" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DPROGCACHE_BUILD_BENCH=OFF >/dev/null
  # TSan reports races between threads of one process, so its pass builds
  # and runs the executables whose tests run threads in the process (their
  # own, or the library's: the tiered store's remote writer, the launcher's
  # text thread, the CLI's remote tier): the others, one thread each
  # (forked children included), can show it nothing, and cost a third of
  # the pass. ASan+UBSan runs everything.
  targets=()
  labels=()
  if [[ "$kind" == tsan ]]; then
    labels=(compile_test config_file_test file_store_test memory_store_test tiered_store_test remote_store_test
            redis_store_test redis_cluster_test http_store_test nvcc_launcher_test cli_test)
    for t in "${labels[@]}"; do
      grep -q "progcache_test($t)" tests/CMakeLists.txt || { echo "sanitize.sh: no test $t" >&2; exit 2; }
    done
    targets=(--target "${labels[@]}")
  fi
  # A test target that this configuration leaves out (no hiredis, no nvcc)
  # is not asked for.
  if ((${#targets[@]})); then
    have=$(cmake --build "$build" --target help 2>/dev/null || true)
    kept=()
    for t in "${labels[@]}"; do grep -qE "(^|[ /])$t(:| )" <<<"$have" && kept+=("$t"); done
    labels=("${kept[@]}")
    targets=(--target "${labels[@]}")
  fi
  cmake --build "$build" -j "${PROGCACHE_JOBS:-2}" "${targets[@]}"
  echo "== $kind: unit, stress and crash tests"
  # install_and_find_package exercises packaging, not memory safety;
  # nvcc_cmake_build is a minute of nvcc and CMake around a few launcher
  # calls that nvcc_launcher_test makes too. That test runs under ASan.
  # Under TSan only its suite of the preprocessed text runs: the launcher's
  # one second thread (the text computed beside nvcc) is that suite's
  # subject; the others would be minutes of nvcc around one thread.
  skip='install_and_find_package|nvcc_cmake_build'
  [[ "$kind" == tsan ]] && skip="$skip|NvccLauncher(Oracle|Place|DeviceLink|BaseDir)?Test\..*"
  log="$build/sanitize-$kind.log"
  only=()
  ((${#labels[@]})) && only=(-L "^($(IFS='|'; echo "${labels[*]}"))\$")
  if ! (cd "$build" && env "${env_vars[@]}" ctest --output-on-failure -j "${PROGCACHE_JOBS:-2}" \
    -E "^($skip)\$" "${only[@]}") 2>&1 | tee "$log"; then
    # LeakSanitizer checks a process at exit by stopping it with ptrace from a
    # tracer thread, and that tracer itself has crashed under load ("Tracer
    # caught signal 11 ... LeakSanitizer has encountered a fatal error", after
    # the test had passed): the checker failing, not the code. Only when that
    # is every failure are the failed tests run once more; a leak, a memory
    # error, a race or a failed assertion fails the run as it is.
    if grep -q "LeakSanitizer has encountered a fatal error" "$log" &&
      ! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error|WARNING: ThreadSanitizer|\[  FAILED  \]" "$log"; then
      echo "== $kind: LeakSanitizer's tracer crashed; the tests it failed, once more"
      (cd "$build" && env "${env_vars[@]}" ctest --output-on-failure --rerun-failed)
    else
      exit 1
    fi
  fi
done
