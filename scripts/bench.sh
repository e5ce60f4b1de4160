#!/usr/bin/env bash
# Regenerates every figure in docs/benchmarks.md. Takes a while (the 100 000
# entry put benchmark fills a real store). Output: stdout, and bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for tool in ccache hyperfine strace; do
  command -v "$tool" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$tool" >/dev/null; }
done
bash scripts/build.sh
build="${PROGCACHE_BUILD_DIR:-build}"
out=bench-out
mkdir -p "$out"
outabs="$PWD/$out"

echo "== store: hits and puts against their floors (disk: ${PROGCACHE_BENCH_DIR:-/tmp})"
python3 scripts/bench_ratios.py "$build/bench/store_bench" --repetitions 3 | tee "$out/store.txt"

echo "== store: puts with the cap active, on tmpfs (no disk noise)"
PROGCACHE_BENCH_DIR=/dev/shm python3 scripts/bench_ratios.py "$build/bench/store_bench" --repetitions 3 \
  --filter Put | tee "$out/store_tmpfs.txt"

echo "== compile: cold vs warm (memory, disk) per example kernel"
"$build/bench/compile_bench" --benchmark_format=json --benchmark_out="$out/compile.json" \
  --benchmark_out_format=json >/dev/null
python3 scripts/compile_ratios.py "$out/compile.json" | tee "$out/compile.txt"

echo "== whole process: progcache compile warm hit vs ccache nvcc -c warm hit"
work=$(mktemp -d)
cp examples/kernels/saxpy.cu "$work/"
# nvcc needs an instantiation to emit code; the same source otherwise.
echo 'template __global__ void saxpy<float>(float, const float*, float*, int);' >> "$work/saxpy.cu"
export PROGCACHE_DIR="$work/pc" CCACHE_DIR="$work/ccache"
pc="$PWD/$build/progcache"
(cd "$work" && "$pc" compile saxpy.cu --arch sm_90 -std=c++17 >/dev/null &&
  ccache nvcc -c -arch=sm_90 -std=c++17 saxpy.cu -o saxpy.o && ccache nvcc -c -arch=sm_90 -std=c++17 saxpy.cu -o saxpy.o &&
  hyperfine -N --warmup 5 --runs 100 --export-json "$outabs/hyperfine.json" \
    "$pc compile saxpy.cu --arch sm_90 -std=c++17" \
    "ccache nvcc -c -arch=sm_90 -std=c++17 saxpy.cu -o saxpy.o" \
    "$pc --version") | tee "$out/cli.txt"
rm -rf "$work"

echo "== whole process, a kernel that includes CUB: progcache compile warm hit vs ccache nvcc -c warm hit"
# progcache checks its include manifest (every file of the -I tree, by stat);
# ccache in direct mode checks its manifest of the headers nvcc read.
work=$(mktemp -d)
cp examples/kernels/cub_scan.cu "$work/"
echo 'template __global__ void block_prefix_sum<128, 4>(const int*, int*);' >> "$work/cub_scan.cu"
export PROGCACHE_DIR="$work/pc" CCACHE_DIR="$work/ccache"
cuda="${CUDA_HOME:-/usr/local/cuda}"
export PATH="$cuda/bin:$PATH"
pc_cmd="$pc compile cub_scan.cu --arch sm_90 -std=c++17 -I $cuda/include/cccl -I $cuda/include -o k.cubin"
cc_cmd="ccache nvcc -c -arch=sm_90 -std=c++17 cub_scan.cu -o k.o"
(cd "$work" && $pc_cmd >/dev/null && sleep 3 && $pc_cmd >/dev/null && $cc_cmd && $cc_cmd &&
  echo "headers nvcc reads: $(nvcc -std=c++17 -arch=sm_90 -M cub_scan.cu | grep -c '\.')" &&
  echo "progcache manifest records: $(strace -f -e trace=newfstatat,fstat $pc_cmd 2>&1 >/dev/null | grep -c stat)" &&
  hyperfine -N --warmup 5 --runs 60 --export-json "$outabs/hyperfine_cub.json" "$pc_cmd" "$cc_cmd") |
  tee "$out/cli_cub.txt"
rm -rf "$work"

echo "== remote tier: Redis and an HTTP cache (nginx WebDAV) over loopback vs local disk"
port=6398
redis-server --port "$port" --bind 127.0.0.1 --save '' --daemonize yes --pidfile "$outabs/redis.pid" >/dev/null
sleep 0.5
nginx_pid=$(bash scripts/http_cache_server.sh "$outabs/http-cache" 8398)
PROGCACHE_BENCH_REDIS="redis://127.0.0.1:$port" PROGCACHE_BENCH_HTTP="http://127.0.0.1:8398/progcache" \
  "$build/bench/remote_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true | tee "$out/remote.txt"
kill "$nginx_pid"

echo "== compression: zstd levels on the example kernels' cubins (disk, memory, Redis over loopback)"
# The corpus: every program the main job compiles, as the cache holds it.
corpus_cache=$(mktemp -d)
python3 scripts/main_job.py --progcache "$build/progcache" --cache-dir "$corpus_cache/pc" >/dev/null
mkdir -p "$out/corpus"
rm -f "$out/corpus"/*
for key in $("$build/progcache" ls --dir "$corpus_cache/pc"); do
  "$build/progcache" get --dir "$corpus_cache/pc" "$key" -o "$out/corpus/$key"
done
rm -rf "$corpus_cache"
python3 scripts/compression_report.py "$build/bench/compression_bench" --corpus "$out/corpus" \
  --redis "redis://127.0.0.1:$port" | tee "$out/compression.txt"
kill "$(cat "$outabs/redis.pid")" || true

echo "== Python: progcache vs cuda.core vs diskcache (tables and plots)"
python3 -m pip install -q --disable-pip-version-check ./ "cuda-core[cu13]" diskcache matplotlib
python3 bench/python_hits.py | tee "$out/python_hits.txt"
python3 bench/compare.py --entries 1000 10000 --procs 1 2 4 8 16 --plots --out "$out" | tee "$out/compare.txt"
python3 bench/compare.py --entries 1000 10000 100000 --skip-basic --skip-mixed --out "$out" \
  | tee "$out/compare_full.txt"

echo "== plots into docs/img"
cp "$out"/hit_latency.png "$out"/put_vs_entries.png "$out"/mixed_scaling.png docs/img/

echo "== the nvcc launcher against ccache (-c hits, -cubin/-fatbin, a CMake build)"
python3 bench/nvcc_launcher.py --progcache "$build/progcache" | tee "$out/nvcc_launcher.txt"

echo "== main job"
python3 scripts/main_job.py --progcache "$build/progcache" | tee "$out/main_job.txt"
