// Store benchmarks, each next to its physical floor measured in the same run:
//   memory hit        vs  a bare std::unordered_map find over the same keys
//   file hit (64 KiB) vs  open + fstat + read + close of the same bytes
//   put, cap active   at 1 000 and at 100 000 entries (eviction running)
//   key derivation    vs  bare SHA-256 of the same 1 MiB source
// scripts/bench_ratios.py turns the JSON output into medians and ratios.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <random>
#include <unordered_map>

#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "progcache/key.h"
#include "progcache/memory_store.h"

namespace pc = progcache;
namespace fs = std::filesystem;

namespace {

pc::Key key_n(std::uint64_t n) {
  return pc::KeyBuilder("bench").add_int("n", static_cast<std::int64_t>(n)).finish();
}

std::string bench_dir(const std::string& name) {
  const char* base = std::getenv("PROGCACHE_BENCH_DIR");
  std::string dir =
      std::string(base != nullptr ? base : "/tmp") + "/progcache-bench-" + name + "-" + std::to_string(::getpid());
  fs::remove_all(dir);
  return dir;
}

constexpr int k_keys = 1024;

void BM_MemoryHit(benchmark::State& state) {
  auto store = std::move(*pc::make_memory_store({}));
  std::vector<pc::Key> keys;
  for (int i = 0; i < k_keys; ++i) {
    keys.push_back(key_n(i));
    store->put(keys.back(), pc::Entry::from_bytes(pc::Bytes::copy_of(std::string(4096, 'x')))).ignore();
  }
  std::size_t i = 0;
  for (auto _ : state) {
    auto e = store->get(keys[i++ & (k_keys - 1)]);
    benchmark::DoNotOptimize(e);
  }
}
BENCHMARK(BM_MemoryHit);

void BM_UnorderedMapFindFloor(benchmark::State& state) {
  std::unordered_map<pc::Key, pc::Entry, pc::KeyHash> map;
  std::vector<pc::Key> keys;
  for (int i = 0; i < k_keys; ++i) {
    keys.push_back(key_n(i));
    map.emplace(keys.back(), pc::Entry::from_bytes(pc::Bytes::copy_of(std::string(4096, 'x'))));
  }
  std::size_t i = 0;
  for (auto _ : state) {
    auto it = map.find(keys[i++ & (k_keys - 1)]);
    pc::Entry copy = it->second;  // the same shared handle a hit returns
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_UnorderedMapFindFloor);

struct FileFixture {
  std::string dir;
  std::unique_ptr<pc::FileStore> store;
  std::vector<pc::Key> keys;
  std::vector<std::string> paths;
};

FileFixture make_file_fixture(std::size_t payload) {
  FileFixture f;
  f.dir = bench_dir("hit");
  f.store = std::move(*pc::FileStore::open({.root = f.dir}));
  std::mt19937_64 rng(1);
  for (int i = 0; i < 64; ++i) {
    std::string p(payload, '\0');
    for (auto& c : p) c = static_cast<char>(rng());
    f.keys.push_back(key_n(i));
    f.store->put(f.keys.back(), pc::Entry::from_bytes(pc::Bytes::adopt(std::move(p)))).ignore();
    f.paths.push_back(f.store->entry_path(f.keys.back()));
  }
  return f;
}

void BM_FileHit(benchmark::State& state) {
  auto f = make_file_fixture(static_cast<std::size_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    auto e = f.store->get(f.keys[i++ & 63]);
    if (!e.ok() || !e->has_value()) state.SkipWithError("miss");
    benchmark::DoNotOptimize(e);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  f.store.reset();
  fs::remove_all(f.dir);
}
BENCHMARK(BM_FileHit)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

// The same hits into the caller's memory (get_primary_into: the path every
// Python hit takes): the artifact is read straight into it, with the
// trailer in the same read.
// Hits of the fixture's entries into fresh memory of each hit's size,
// rotating over the first `rotate` of them.
void hits_into_fresh_memory(benchmark::State& state, std::size_t rotate) {
  auto f = make_file_fixture(static_cast<std::size_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    std::unique_ptr<char[]> buf;
    auto r = f.store->get_primary_into(f.keys[i++ % rotate], [&](std::size_t n) {
      buf.reset(new char[n]);
      return buf.get();
    });
    if (!r.ok() || !*r) state.SkipWithError("miss");
    benchmark::DoNotOptimize(buf.get());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  f.store.reset();
  fs::remove_all(f.dir);
}

void BM_FileHitInto(benchmark::State& state) {
  hits_into_fresh_memory(state, 64);
}
BENCHMARK(BM_FileHitInto)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

// The floor's one read: open, fstat, read the whole file into a fresh
// buffer of its exact size, close.
void read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  ::fstat(fd, &st);
  std::unique_ptr<char[]> buf(new char[static_cast<std::size_t>(st.st_size)]);
  const ssize_t n = ::read(fd, buf.get(), static_cast<std::size_t>(st.st_size));
  ::close(fd);
  benchmark::DoNotOptimize(n);
  benchmark::DoNotOptimize(buf.get());
}

// The floor: the same files, read the cheapest way the kernel allows into a
// fresh buffer of the exact size.
void BM_FileReadFloor(benchmark::State& state) {
  auto f = make_file_fixture(static_cast<std::size_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    read_whole_file(f.paths[i++ & 63]);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  f.store.reset();
  fs::remove_all(f.dir);
}
BENCHMARK(BM_FileReadFloor)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

// A verified read's floor: open `path`, fstat it, read `n` bytes at
// `offset` (n = 0: the whole file) into fresh memory of that size, close,
// and run XXH3-128 over what was read. False on a short read.
bool read_and_checksum(const std::string& path, std::size_t n, off_t offset) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  ::fstat(fd, &st);
  if (n == 0) n = static_cast<std::size_t>(st.st_size);
  std::unique_ptr<char[]> buf(new char[n]);
  const ssize_t got = ::pread(fd, buf.get(), n, offset);
  ::close(fd);
  if (got != static_cast<ssize_t>(n)) return false;
  auto d = pc::xxh3_128(std::string_view(buf.get(), n));
  benchmark::DoNotOptimize(d);
  return true;
}

// The floor of a verified hit in the hit's own loop: the same rotating
// entry files, each read whole into fresh memory and XXH3-128 run over what
// was read (the checksum reads bytes the copy just brought in, as a hit's
// does). A 1 MiB hit is bounded by this, not by the bare read.
void BM_FileReadChecksumFloor(benchmark::State& state) {
  auto f = make_file_fixture(static_cast<std::size_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    if (!read_and_checksum(f.paths[i++ & 63], 0, 0)) {
      state.SkipWithError("short read");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  f.store.reset();
  fs::remove_all(f.dir);
}
BENCHMARK(BM_FileReadChecksumFloor)->Arg(1 << 20);

// One entry read over and over, hot in every cache, as the caller's memory
// (get_primary_into, the path Python's hits take), against a bare read of
// the same file into fresh memory: with BM_Xxh3Floor1MiB, what a 1 MiB hit
// is made of.
void BM_FileHitHot(benchmark::State& state) {
  hits_into_fresh_memory(state, 1);
}
BENCHMARK(BM_FileHitHot)->Arg(64 << 10)->Arg(1 << 20);

void BM_FileReadFloorHot(benchmark::State& state) {
  auto f = make_file_fixture(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    read_whole_file(f.paths[0]);
  }
  f.store.reset();
  fs::remove_all(f.dir);
}
BENCHMARK(BM_FileReadFloorHot)->Arg(64 << 10)->Arg(1 << 20);

// The floor of a verified hit of that entry, in the hit's own shape: open,
// fstat, one read of the entry file into fresh memory of the artifact's
// size, close, then XXH3-128 over what was read. What BM_FileHitHot costs
// over this is the cache's own work (header, trailer, layout checks) and
// where its checksum's stripes fall: here from the buffer's start, in the
// hit from the entry's start, which the caller's buffer puts anywhere.
void BM_FileReadChecksumFloorHot(benchmark::State& state) {
  auto f = make_file_fixture(static_cast<std::size_t>(state.range(0)));
  const auto n = static_cast<std::size_t>(state.range(0));
  struct stat st0 {};
  if (::stat(f.paths[0].c_str(), &st0) != 0) state.SkipWithError("no entry file");
  // The artifact's offset in the entry file: the same source alignment the hit copies from.
  const auto offset = static_cast<off_t>(static_cast<std::size_t>(st0.st_size) - n - 16);
  for (auto _ : state) {
    if (!read_and_checksum(f.paths[0], n, offset)) {
      state.SkipWithError("short read");
      break;
    }
  }
  f.store.reset();
  fs::remove_all(f.dir);
}
BENCHMARK(BM_FileReadChecksumFloorHot)->Arg(1 << 20);

// Puts into a store already full at its entry cap, so every put runs the
// accounting and eviction path. The cost per put should not grow with the
// number of entries.
void BM_PutCapActive(benchmark::State& state) {
  const auto n = static_cast<std::uint64_t>(state.range(0));
  const std::string dir = bench_dir("put");
  auto store = std::move(*pc::FileStore::open({.root = dir, .max_size_bytes = std::nullopt, .max_entries = n}));
  const std::string payload(1024, 'p');
  std::uint64_t next = 0;
  for (; next < n; ++next) store->put(key_n(next), pc::Entry::from_bytes(pc::Bytes::copy_of(payload))).ignore();
  for (auto _ : state) {
    store->put(key_n(next++), pc::Entry::from_bytes(pc::Bytes::copy_of(payload))).ignore();
  }
  state.counters["evictions"] = static_cast<double>(store->stats().evictions);
  store.reset();
  fs::remove_all(dir);
}
BENCHMARK(BM_PutCapActive)->Arg(1000)->Arg(100000)->Unit(benchmark::kMicrosecond)->Iterations(20000);

// The floor for a put with eviction: create a temp file, write the same
// encoded size, rename it into a shard, and unlink the oldest file.
void BM_PutFloor(benchmark::State& state) {
  const auto n = static_cast<std::uint64_t>(state.range(0));
  const std::string dir = bench_dir("putfloor");
  for (int i = 0; i < 256; ++i) fs::create_directories(dir + "/" + std::to_string(i));
  const std::string data(1024 + 200, 'p');
  auto path_of = [&](std::uint64_t i) { return dir + "/" + std::to_string(i % 256) + "/" + std::to_string(i); };
  auto write_one = [&](std::uint64_t i) {
    const std::string tmp = dir + "/" + std::to_string(i % 256) + "/.tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    benchmark::DoNotOptimize(::write(fd, data.data(), data.size()));
    ::close(fd);
    ::rename(tmp.c_str(), path_of(i).c_str());
  };
  std::uint64_t next = 0;
  for (; next < n; ++next) write_one(next);
  std::uint64_t oldest = 0;
  for (auto _ : state) {
    write_one(next++);
    ::unlink(path_of(oldest++).c_str());
  }
  fs::remove_all(dir);
}
BENCHMARK(BM_PutFloor)->Arg(1000)->Arg(100000)->Unit(benchmark::kMicrosecond)->Iterations(20000);

void BM_ProgramKey1MiB(benchmark::State& state) {
  std::string src(1 << 20, '\0');
  std::mt19937_64 rng(7);
  for (auto& c : src) c = static_cast<char>('a' + rng() % 26);
  for (auto _ : state) {
    pc::ProgramKeyInputs in;
    in.code = src;
    in.options = {"-arch=sm_90", "-std=c++17", "-DN=4"};
    in.name_expressions = {"k<float>"};
    in.compiler = {"13.0", "fp", "13.0", ""};
    auto k = pc::make_program_cache_key(in);
    benchmark::DoNotOptimize(k);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * (1 << 20));
}
BENCHMARK(BM_ProgramKey1MiB);

void BM_Sha256Floor1MiB(benchmark::State& state) {
  std::string src(1 << 20, '\0');
  std::mt19937_64 rng(7);
  for (auto& c : src) c = static_cast<char>('a' + rng() % 26);
  for (auto _ : state) {
    auto d = pc::sha256(src);
    benchmark::DoNotOptimize(d);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * (1 << 20));
}
BENCHMARK(BM_Sha256Floor1MiB);

// 1 MiB of random bytes starting `offset` (< 4096) bytes past a page boundary.
struct PhasedMiB {
  explicit PhasedMiB(std::size_t offset)
      : base(static_cast<char*>(::operator new[]((1 << 20) + 4096, std::align_val_t{4096}))), data(base + offset) {
    if (offset >= 4096) std::abort();  // the slack past 1 MiB is one page
    std::mt19937_64 rng(9);
    for (std::size_t i = 0; i < (1 << 20); ++i) data[i] = static_cast<char>(rng());
  }
  ~PhasedMiB() { ::operator delete[](base, std::align_val_t{4096}); }
  PhasedMiB(const PhasedMiB&) = delete;
  PhasedMiB& operator=(const PhasedMiB&) = delete;
  char* base;
  char* data;
};

// XXH3-128 of 1 MiB starting `offset` bytes past a page boundary.
void xxh3_of_phased_mib(benchmark::State& state, std::size_t offset) {
  const PhasedMiB m(offset);
  for (auto _ : state) {
    auto d = pc::xxh3_128(std::string_view(m.data, 1 << 20));
    benchmark::DoNotOptimize(d);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * (1 << 20));
}

// The checksum every file hit verifies, alone, over 1 MiB that starts on a
// 64-byte boundary. A 1 MiB hit costs at least the bare read plus this
// (scripts/bench_ratios.py).
void BM_Xxh3Floor1MiB(benchmark::State& state) {
  xxh3_of_phased_mib(state, 0);
}
BENCHMARK(BM_Xxh3Floor1MiB);

// The same checksum over bytes starting `offset` bytes past a 64-byte
// boundary: XXH3 reads 32-byte vectors, so where the bytes sit changes its
// speed ("Where a read lands" in docs/benchmarks.md).
void BM_Xxh3At(benchmark::State& state) {
  xxh3_of_phased_mib(state, static_cast<std::size_t>(state.range(0)));
}
BENCHMARK(BM_Xxh3At)->Arg(0)->Arg(16)->Arg(32)->Arg(5);

// One pread of 1 MiB from file offset 4096 (page cache, hot) into memory
// whose address is `delta` bytes past the same offset modulo a page: the
// kernel's copy, by where it lands. Buffers from bytes.cpp keep delta a
// multiple of 64.
void BM_ReadLandingAt(benchmark::State& state) {
  const std::string dir = bench_dir("landing");
  const std::string path = dir + "/f";
  fs::create_directories(dir);
  {
    const PhasedMiB m(0);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    for (int i = 0; i < 2; ++i) benchmark::DoNotOptimize(::write(fd, m.data, 1 << 20));
    ::close(fd);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) state.SkipWithError("cannot open the file it wrote");
  const PhasedMiB dst(0);
  const auto delta = static_cast<std::size_t>(state.range(0));
  char* into = dst.base + delta;  // base is page-aligned, the source offset is 4096
  for (auto _ : state) {
    if (::pread(fd, into, 1 << 20, 4096) != (1 << 20)) {
      state.SkipWithError("short read");
      break;
    }
  }
  ::close(fd);
  fs::remove_all(dir);
}
BENCHMARK(BM_ReadLandingAt)
    ->Arg(0)
    ->Arg(1)
    ->Arg(8)
    ->Arg(15)
    ->Arg(16)
    ->Arg(31)
    ->Arg(32)
    ->Arg(48)
    ->Arg(64)
    ->Arg(2048)
    ->Arg(4032);

// A hit into the caller's memory (get_primary_into, one entry, hot) whose
// buffer sits `past` bytes past the artifact's file offset modulo a page:
// what a caller pays by where its allocator put the buffer. The store
// stages reads that would land 1 to 31 bytes past (entry_reader.cpp).
void BM_FileHitIntoLanding(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const auto past = static_cast<std::size_t>(state.range(1));
  auto f = make_file_fixture(size);
  struct stat st {};
  if (::stat(f.paths[0].c_str(), &st) != 0) state.SkipWithError("no entry file");
  const auto at = static_cast<std::size_t>(st.st_size) - size - 16;  // the artifact's file offset
  const PhasedMiB arena(0);                                          // page-aligned, 1 MiB + a page
  char* into = arena.base + (at + past) % 4096;
  for (auto _ : state) {
    auto r = f.store->get_primary_into(f.keys[0], [&](std::size_t n) { return n == size ? into : nullptr; });
    if (!r.ok() || !*r) {
      state.SkipWithError("miss");
      break;
    }
    benchmark::DoNotOptimize(into);
  }
  f.store.reset();
  fs::remove_all(f.dir);
}
BENCHMARK(BM_FileHitIntoLanding)
    ->ArgsProduct({{64 << 10, 1 << 20}, {0, 8, 16, 27, 32, 43, 48, 59, 2048, 2059, 2064, 2075, 2096}});

}  // namespace

BENCHMARK_MAIN();
