// zstd entries on a corpus of real compiled programs (the example kernels'
// cubins; scripts/bench.sh exports them): for each level, the bytes stored,
// the cost of encoding, of decoding from memory, of a file hit, and of a
// Redis hit over loopback (with PROGCACHE_BENCH_REDIS). Level 0 is the
// uncompressed reference in the same run. scripts/compression_report.py
// turns the JSON into ratios and the break-even bandwidth.
//
//   PROGCACHE_BENCH_CORPUS=DIR compression_bench [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "progcache/entry.h"
#include "progcache/file_store.h"
#include "progcache/key.h"
#include "progcache/remote_store.h"

namespace pc = progcache;
namespace fs = std::filesystem;

namespace {

struct Corpus {
  std::vector<pc::Key> keys;
  std::vector<pc::Entry> entries;
  std::uint64_t raw_bytes = 0;
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus out;
    const char* dir = std::getenv("PROGCACHE_BENCH_CORPUS");
    if (dir == nullptr) return out;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      out.keys.push_back(pc::KeyBuilder("compression-bench").add_string("file", f.filename().string()).finish());
      out.entries.push_back(pc::Entry::from_bytes(pc::Bytes::copy_of(ss.str())));
      out.raw_bytes += ss.str().size();
    }
    return out;
  }();
  return c;
}

bool have_corpus(benchmark::State& state) {
  if (corpus().entries.empty()) state.SkipWithError("set PROGCACHE_BENCH_CORPUS to a directory of cubins");
  return !corpus().entries.empty();
}

std::string bench_dir(const std::string& name) {
  const char* base = std::getenv("PROGCACHE_BENCH_DIR");
  std::string dir =
      std::string(base != nullptr ? base : "/tmp") + "/progcache-zbench-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

void set_sizes(benchmark::State& state, std::uint64_t stored) {
  state.counters["raw_bytes"] = static_cast<double>(corpus().raw_bytes);
  state.counters["stored_bytes"] = static_cast<double>(stored);
  state.counters["entries"] = static_cast<double>(corpus().entries.size());
}

// Encoding every program of the corpus once.
void BM_Encode(benchmark::State& state) {
  if (!have_corpus(state)) return;
  const pc::EntryCodecOptions o{.compression_level = static_cast<int>(state.range(0))};
  std::uint64_t stored = 0;
  for (auto _ : state) {
    stored = 0;
    for (std::size_t i = 0; i < corpus().entries.size(); ++i) {
      auto e = pc::encode_entry(corpus().keys[i], corpus().entries[i], 1, o);
      stored += e->size();
      benchmark::DoNotOptimize(e);
    }
  }
  set_sizes(state, stored);
}
BENCHMARK(BM_Encode)->Arg(0)->Arg(1)->Arg(3)->Arg(9)->Arg(19)->Unit(benchmark::kMicrosecond);

// Decoding every program of the corpus from memory (checksum and, for
// compressed entries, decompression): what a hit adds to its transfer.
void BM_Decode(benchmark::State& state) {
  if (!have_corpus(state)) return;
  const pc::EntryCodecOptions o{.compression_level = static_cast<int>(state.range(0))};
  std::vector<pc::Bytes> encoded;
  std::uint64_t stored = 0;
  for (std::size_t i = 0; i < corpus().entries.size(); ++i) {
    encoded.push_back(pc::Bytes::copy_of(*pc::encode_entry(corpus().keys[i], corpus().entries[i], 1, o)));
    stored += encoded.back().size();
  }
  for (auto _ : state) {
    for (std::size_t i = 0; i < encoded.size(); ++i) {
      auto e = pc::decode_entry(encoded[i], corpus().keys[i]);
      benchmark::DoNotOptimize(e);
    }
  }
  set_sizes(state, stored);
}
BENCHMARK(BM_Decode)->Arg(0)->Arg(1)->Arg(3)->Arg(19)->Unit(benchmark::kMicrosecond);

// A file hit of every program of the corpus.
void BM_FileHitCorpus(benchmark::State& state) {
  if (!have_corpus(state)) return;
  const std::string dir = bench_dir("file-" + std::to_string(state.range(0)));
  auto store =
      std::move(*pc::FileStore::open({.root = dir, .codec = {.compression_level = static_cast<int>(state.range(0))}}));
  for (std::size_t i = 0; i < corpus().entries.size(); ++i) {
    store->put(corpus().keys[i], corpus().entries[i]).ignore();
  }
  for (auto _ : state) {
    for (const auto& k : corpus().keys) {
      auto e = store->get_bytes(k);
      benchmark::DoNotOptimize(e);
    }
  }
  set_sizes(state, *store->size_bytes());
  fs::remove_all(dir);
}
BENCHMARK(BM_FileHitCorpus)->Arg(0)->Arg(1)->Arg(3)->Unit(benchmark::kMicrosecond);

// A Redis hit (loopback) of every program of the corpus.
void BM_RemoteHitCorpus(benchmark::State& state) {
  if (!have_corpus(state)) return;
  const char* url = std::getenv("PROGCACHE_BENCH_REDIS");
  if (url == nullptr) {
    state.SkipWithError("set PROGCACHE_BENCH_REDIS");
    return;
  }
  const int level = static_cast<int>(state.range(0));
  auto store = std::move(
      *pc::make_remote_store({.urls = {std::string(url) + "?timeout=2000&prefix=zbench" + std::to_string(level) + ":"},
                              .codec = {.compression_level = level}}));
  std::uint64_t stored = 0;
  for (std::size_t i = 0; i < corpus().entries.size(); ++i) {
    store->put(corpus().keys[i], corpus().entries[i]).ignore();
    stored += pc::encode_entry(corpus().keys[i], corpus().entries[i], 1, {.compression_level = level})->size();
  }
  for (auto _ : state) {
    for (const auto& k : corpus().keys) {
      auto e = store->get_bytes(k);
      if (!e.ok() || !e->has_value()) state.SkipWithError("remote miss");
      benchmark::DoNotOptimize(e);
    }
  }
  set_sizes(state, stored);
}
BENCHMARK(BM_RemoteHitCorpus)->Arg(0)->Arg(1)->Arg(3)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
