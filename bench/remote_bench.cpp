// Remote tier: a hit from each server over loopback next to a hit from the
// local disk store, at 4 KiB, 64 KiB and 1 MiB; and 8 processes reading from
// one server at once. Each server comes from a variable:
// PROGCACHE_BENCH_REDIS=redis://127.0.0.1:PORT,
// PROGCACHE_BENCH_THREE_REDIS="redis://127.0.0.1:P1 redis://127.0.0.1:P2 ..."
// (independent servers, keys spread by the client's rendezvous hashing),
// PROGCACHE_BENCH_CLUSTER=redis+cluster://127.0.0.1:PORT,... (a Redis Cluster:
// scripts/redis_cluster.sh) and
// PROGCACHE_BENCH_HTTP=http://127.0.0.1:PORT/PREFIX (nginx's WebDAV:
// scripts/http_cache_server.sh) and
// PROGCACHE_BENCH_S3=s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:PORT (an S3
// server, with the AWS_ variables giving its credentials:
// scripts/s3_server.sh). A benchmark whose server is unset is skipped.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "progcache/file_store.h"
#include "progcache/remote_store.h"

namespace pc = progcache;

namespace {

std::string url_of(const char* variable) {
  const char* u = std::getenv(variable);
  return u != nullptr ? u : "";
}

// "URL[ URL...]": several independent servers (rendezvous hashing), each
// with a deadline long enough for a loaded machine.
std::vector<std::string> urls_of(const std::string& list, const char* options = "?timeout=2000") {
  std::vector<std::string> urls;
  std::size_t from = 0;
  while (from < list.size()) {
    const std::size_t space = std::min(list.find(' ', from), list.size());
    if (space > from) {
      const std::string url = list.substr(from, space - from);
      // An S3 URL has its options already: the deadline is one more.
      urls.push_back(url + (url.find('?') != std::string::npos && options[0] == '?' ? "&" + std::string(options + 1)
                                                                                    : std::string(options)));
    }
    from = space + 1;
  }
  return urls;
}

pc::Key key_n(int n) {
  return pc::KeyBuilder("remote-bench").add_int("n", n).finish();
}

void BM_RemoteHit(benchmark::State& state, const char* variable) {
  const std::string url = url_of(variable);
  if (url.empty()) {
    state.SkipWithError((std::string("set ") + variable).c_str());
    return;
  }
  auto store = std::move(*pc::make_remote_store({.urls = urls_of(url)}));
  const auto size = static_cast<std::size_t>(state.range(0));
  for (int i = 0; i < 16; ++i) store->put_bytes(key_n(i), pc::Bytes::copy_of(std::string(size, 'r'))).ignore();
  int i = 0;
  for (auto _ : state) {
    auto g = store->get(key_n(i++ & 15));
    if (!g.ok() || !g->has_value()) state.SkipWithError("remote miss");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK_CAPTURE(BM_RemoteHit, redis, "PROGCACHE_BENCH_REDIS")
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RemoteHit, three_redis, "PROGCACHE_BENCH_THREE_REDIS")
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RemoteHit, cluster, "PROGCACHE_BENCH_CLUSTER")
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RemoteHit, http, "PROGCACHE_BENCH_HTTP")
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_RemoteHit, s3, "PROGCACHE_BENCH_S3")
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Unit(benchmark::kMicrosecond);

void BM_DiskHit(benchmark::State& state) {
  const std::string dir = "/tmp/progcache-remote-bench-disk-" + std::to_string(::getpid());
  auto store = std::move(*pc::FileStore::open({.root = dir}));
  const auto size = static_cast<std::size_t>(state.range(0));
  for (int i = 0; i < 16; ++i) store->put_bytes(key_n(i), pc::Bytes::copy_of(std::string(size, 'd'))).ignore();
  int i = 0;
  for (auto _ : state) {
    auto g = store->get(key_n(i++ & 15));
    if (!g.ok() || !g->has_value()) state.SkipWithError("disk miss");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  store.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_DiskHit)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

// 8 processes, each doing 2 000 hits of 64 KiB entries; one iteration is the
// whole run, so items_per_second is the aggregate hit rate.
void BM_EightProcessesSharingOneServer(benchmark::State& state, const char* variable) {
  const std::string url = url_of(variable);
  if (url.empty()) {
    state.SkipWithError((std::string("set ") + variable).c_str());
    return;
  }
  {
    auto store = std::move(*pc::make_remote_store({.urls = urls_of(url)}));
    for (int i = 0; i < 64; ++i) store->put_bytes(key_n(i), pc::Bytes::copy_of(std::string(64 << 10, 's'))).ignore();
  }
  constexpr int k_procs = 8, k_gets = 2000;
  for (auto _ : state) {
    std::vector<pid_t> pids;
    for (int p = 0; p < k_procs; ++p) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        auto store = std::move(*pc::make_remote_store({.urls = urls_of(url, "?timeout=5000")}));
        int bad = 0;
        for (int i = 0; i < k_gets; ++i) {
          auto g = store->get(key_n((i * 7 + p) & 63));
          if (!g.ok() || !g->has_value()) ++bad;
        }
        ::_exit(bad == 0 ? 0 : 1);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int st = 0;
      ::waitpid(pid, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) state.SkipWithError("a reader missed");
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * k_procs * k_gets);
}
BENCHMARK_CAPTURE(BM_EightProcessesSharingOneServer, redis, "PROGCACHE_BENCH_REDIS")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_EightProcessesSharingOneServer, cluster, "PROGCACHE_BENCH_CLUSTER")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_EightProcessesSharingOneServer, http, "PROGCACHE_BENCH_HTTP")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
