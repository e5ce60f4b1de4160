// progcache_stress: many processes hammering one small-capped file store.
//
//   progcache_stress --dir D [--procs 8] [--ops 4000] [--keys 300] [--cap 1M]
//                    [--kills 0] [--seed 1]
//
// Every payload is self-describing: "<key id>:<writer>:<seq>:<len>:" + filler
// + 16 hex digits of XXH3-64 over the rest. A read that is torn, belongs to
// another key, or fails its checksum is a bad read.
//
// With --kills N (crash mode) the parent keeps --procs workers running,
// SIGKILLs a random one at a random moment N times (respawning it), and then
// checks the aftermath: `verify` finds no damaged entry, stale temps are
// swept, the shared accounting equals the files on disk, and a read of every
// key sees only good payloads.
//
// Prints one line of figures; exits 1 on any bad read or failed check.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "testing/payload.h"

namespace pc = progcache;
using progcache::testing::payload_ok;

namespace {

struct Shared {  // in MAP_SHARED anonymous memory, summed over workers
  std::atomic<std::uint64_t> ops, errors, bad_reads, hits, puts, erases;
};

pc::Key key_of(int id) {
  return pc::KeyBuilder("stress").add_int("id", id).finish();
}

struct Config {
  std::string dir;
  int procs = 8;
  std::uint64_t ops = 4000;  // per worker; 0 = until killed
  int keys = 300;
  std::uint64_t cap = 1 << 20;
  int kills = 0;
  unsigned seed = 1;
};

[[noreturn]] void worker(const Config& c, int id, Shared* sh) {
  auto store = pc::FileStore::open({.root = c.dir, .max_size_bytes = c.cap});
  if (!store.ok()) {
    std::fprintf(stderr, "worker %d: %s\n", id, store.status().to_string().c_str());
    ::_exit(2);
  }
  std::mt19937_64 rng(c.seed * 7777 + static_cast<unsigned>(id) * 31 + static_cast<unsigned>(::getpid()));
  for (std::uint64_t i = 0; c.ops == 0 || i < c.ops; ++i) {
    const int k = static_cast<int>(rng() % static_cast<std::uint64_t>(c.keys));
    const unsigned dice = rng() % 100;
    if (dice < 55) {
      auto g = (*store)->get_bytes(key_of(k));
      if (!g.ok())
        sh->errors++;
      else if (g->has_value()) {
        sh->hits++;
        if (!payload_ok((**g).view(), k)) sh->bad_reads++;
      }
    } else if (dice < 92) {
      const std::size_t size = 64 + rng() % (rng() % 8 == 0 ? 65536 : 4096);
      if (!(*store)->put_bytes(key_of(k), pc::Bytes::adopt(pc::testing::checked_payload(k, id, i, size))).ok())
        sh->errors++;
      else
        sh->puts++;
    } else {
      if (!(*store)->erase(key_of(k)).ok())
        sh->errors++;
      else
        sh->erases++;
    }
    sh->ops++;
  }
  ::_exit(0);
}

pid_t spawn(const Config& c, int id, Shared* sh) {
  const pid_t pid = ::fork();
  if (pid == 0) worker(c, id, sh);
  return pid;
}

std::pair<std::uint64_t, std::uint64_t> files_on_disk(const std::string& dir) {
  std::uint64_t files = 0, bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/v1")) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() == 62) {
      ++files;
      bytes += e.file_size();
    }
  }
  return {files, bytes};
}

int aftermath(const Config& c, Shared* sh, int kills) {
  // How far the counters drifted while processes died mid-operation (before
  // verify reconciles them): reported, not judged.
  std::int64_t drift = 0;
  {
    auto before = pc::FileStore::open({.root = c.dir, .max_size_bytes = c.cap});
    if (before.ok())
      drift = static_cast<std::int64_t>((*before)->host_stats().entries) -
              static_cast<std::int64_t>(files_on_disk(c.dir).first);
  }
  // All writers are dead: every temp is stale now, so sweep with age 0.
  auto store = pc::FileStore::open({.root = c.dir, .max_size_bytes = c.cap, .stale_temp_ns = 0});
  if (!store.ok()) {
    std::fprintf(stderr, "reopen: %s\n", store.status().to_string().c_str());
    return 1;
  }
  auto report = (*store)->verify(pc::Repair::no);
  if (!report.ok()) {
    std::fprintf(stderr, "verify: %s\n", report.status().to_string().c_str());
    return 1;
  }
  int failed = sh->bad_reads.load() != 0 ? 1 : 0;
  for (const auto& p : report->problems) {
    std::fprintf(stderr, "damaged after crashes: %s: %s\n", p.path.c_str(), p.reason.c_str());
    failed = 1;
  }
  std::uint64_t temps = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(c.dir + "/v1")) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".tmp.") || name.starts_with(".q.")) ++temps;
  }
  const auto [files, bytes] = files_on_disk(c.dir);
  const auto st = (*store)->host_stats();
  if (temps != 0 || st.entries != files || st.bytes_stored != bytes) {
    std::fprintf(stderr,
                 "after verify: %llu temps left; accounting says %llu entries / %llu bytes, disk has %llu / %llu\n",
                 static_cast<unsigned long long>(temps), static_cast<unsigned long long>(st.entries),
                 static_cast<unsigned long long>(st.bytes_stored), static_cast<unsigned long long>(files),
                 static_cast<unsigned long long>(bytes));
    failed = 1;
  }
  std::uint64_t read_bad = 0;
  for (int k = 0; k < c.keys; ++k) {
    auto g = (*store)->get_bytes(key_of(k));
    if (!g.ok() || (g->has_value() && !payload_ok((**g).view(), k))) ++read_bad;
  }
  if (read_bad != 0) failed = 1;
  std::printf(
      "crash: kills=%d ops=%llu bad_reads=%llu damaged=%zu temps_swept=%llu entries=%llu "
      "count_drift_before_verify=%lld final_read_bad=%llu\n",
      kills, static_cast<unsigned long long>(sh->ops.load()), static_cast<unsigned long long>(sh->bad_reads.load()),
      report->problems.size(), static_cast<unsigned long long>(report->temps_removed),
      static_cast<unsigned long long>(files), static_cast<long long>(drift), static_cast<unsigned long long>(read_bad));
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string cap = "1M";
  CLI::App app{"progcache multi-process stress and crash harness"};
  app.add_option("--dir", c.dir, "Store root (created)")->required();
  app.add_option("--procs", c.procs, "Worker processes");
  app.add_option("--ops", c.ops, "Operations per worker (stress mode)");
  app.add_option("--keys", c.keys, "Distinct keys");
  app.add_option("--cap", cap, "Byte cap of the store");
  app.add_option("--kills", c.kills, "SIGKILLs to deliver (crash mode)");
  app.add_option("--seed", c.seed, "Random seed");
  CLI11_PARSE(app, argc, argv);
  auto parsed = pc::parse_size(cap);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().to_string().c_str());
    return 2;
  }
  c.cap = *parsed;
  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* sh = new (mem) Shared{};
  {
    auto init = pc::FileStore::open({.root = c.dir, .max_size_bytes = c.cap});
    if (!init.ok()) {
      std::fprintf(stderr, "%s\n", init.status().to_string().c_str());
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (c.kills == 0) {
    std::vector<pid_t> pids;
    for (int i = 0; i < c.procs; ++i) pids.push_back(spawn(c, i, sh));
    int failed_workers = 0;
    for (pid_t p : pids) {
      int status = 0;
      ::waitpid(p, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed_workers;
    }
    auto store = pc::FileStore::open({.root = c.dir, .max_size_bytes = c.cap});
    const auto st = (*store)->host_stats();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // What the user sees: the bytes of entry files on disk, against the cap,
    // and against what the accounting claims.
    const auto [disk_files, disk_bytes] = files_on_disk(c.dir);
    const bool over_cap = disk_bytes > c.cap;
    const bool lies = st.bytes_stored != disk_bytes || st.entries != disk_files;
    if (over_cap || lies || st.corrupt_dropped != 0) {
      std::fprintf(stderr,
                   "stress: disk holds %llu entries / %llu bytes (cap %llu); accounting says %llu / %llu; "
                   "corrupt entries dropped: %llu\n",
                   static_cast<unsigned long long>(disk_files), static_cast<unsigned long long>(disk_bytes),
                   static_cast<unsigned long long>(c.cap), static_cast<unsigned long long>(st.entries),
                   static_cast<unsigned long long>(st.bytes_stored),
                   static_cast<unsigned long long>(st.corrupt_dropped));
    }
    std::printf(
        "stress: procs=%d ops=%llu errors=%llu bad_reads=%llu hits=%llu puts=%llu erases=%llu evictions=%llu "
        "disk_bytes=%llu bytes=%llu cap=%llu seconds=%.1f\n",
        c.procs, static_cast<unsigned long long>(sh->ops.load()), static_cast<unsigned long long>(sh->errors.load()),
        static_cast<unsigned long long>(sh->bad_reads.load()), static_cast<unsigned long long>(sh->hits.load()),
        static_cast<unsigned long long>(sh->puts.load()), static_cast<unsigned long long>(sh->erases.load()),
        static_cast<unsigned long long>(st.evictions), static_cast<unsigned long long>(disk_bytes),
        static_cast<unsigned long long>(st.bytes_stored), static_cast<unsigned long long>(c.cap), secs);
    return (sh->bad_reads.load() != 0 || sh->errors.load() != 0 || failed_workers != 0 || over_cap || lies ||
            st.corrupt_dropped != 0)
               ? 1
               : 0;
  }

  // Crash mode: workers run until killed.
  Config endless = c;
  endless.ops = 0;
  std::vector<pid_t> pids(static_cast<std::size_t>(c.procs));
  for (int i = 0; i < c.procs; ++i) pids[static_cast<std::size_t>(i)] = spawn(endless, i, sh);
  std::mt19937 rng(c.seed);
  for (int k = 0; k < c.kills; ++k) {
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 15000));
    const std::size_t victim = rng() % pids.size();
    ::kill(pids[victim], SIGKILL);
    ::waitpid(pids[victim], nullptr, 0);
    pids[victim] = spawn(endless, static_cast<int>(victim), sh);
  }
  for (pid_t p : pids) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  return aftermath(c, sh, c.kills + c.procs);
}
