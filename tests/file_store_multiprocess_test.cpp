// Several real processes (fork) on one store: same key, distinct keys, a cap
// under concurrent writers, and readers that check every byte they get.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <random>

#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "testing/payload.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using testing::make_key;

using testing::checked_payload;
using testing::payload_ok;

// Runs `fn(i)` in `n` child processes; returns the sum of their exit codes
// (each child reports its count of bad results, capped at 100).
int run_children(int n, const std::function<int(int)>& fn) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int bad = 0;
      try {
        bad = fn(i);
      } catch (...) {
        bad = 100;
      }
      std::fflush(nullptr);
      ::_exit(bad > 100 ? 100 : bad);
    }
    pids.push_back(pid);
  }
  int total = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    total += WIFEXITED(status) ? WEXITSTATUS(status) : 1000;
  }
  return total;
}

std::unique_ptr<FileStore> open_or_die(const FileStoreOptions& o) {
  auto s = FileStore::open(o);
  if (!s.ok()) {
    std::fprintf(stderr, "open failed: %s\n", s.status().to_string().c_str());
    ::_exit(99);
  }
  return std::move(*s);
}

TEST(FileStoreMultiProcess, ManyWritersOfOneKeyNeverExposeATornEntry) {
  testing::TempDir tmp;
  const FileStoreOptions opt{.root = tmp.sub("cache")};
  const int bad = run_children(8, [&](int w) {
    auto s = open_or_die(opt);
    int errors = 0;
    for (int i = 0; i < 150; ++i) {
      const std::string p = checked_payload(1, w, i, 1000 + (i * 997 + w * 131) % 60000);
      if (!s->put_bytes(make_key(1), Bytes::copy_of(p)).ok()) ++errors;
      auto g = s->get_bytes(make_key(1));
      if (!g.ok() || !g->has_value() || !payload_ok((*g)->view(), 1)) ++errors;
    }
    return errors;
  });
  EXPECT_EQ(bad, 0);
  auto s = open_or_die(opt);
  EXPECT_EQ(*s->count(), 1u);
  EXPECT_TRUE(payload_ok((*s->get_bytes(make_key(1)))->view(), 1));
  EXPECT_EQ(s->host_stats().corrupt_dropped, 0u);
  EXPECT_EQ(testing::entry_files_on_disk(opt.root), 1u);
}

TEST(FileStoreMultiProcess, DistinctKeysFromManyProcessesAreAllKept) {
  testing::TempDir tmp;
  const FileStoreOptions opt{.root = tmp.sub("cache")};
  const int per = 150;
  const int bad = run_children(8, [&](int w) {
    auto s = open_or_die(opt);
    int errors = 0;
    for (int i = 0; i < per; ++i) {
      const int id = w * per + i;
      if (!s->put_bytes(make_key(id), Bytes::copy_of(checked_payload(id, w, 0, 200))).ok()) ++errors;
    }
    return errors;
  });
  EXPECT_EQ(bad, 0);
  auto s = open_or_die(opt);
  EXPECT_EQ(*s->count(), 8u * per);
  EXPECT_EQ(testing::entry_files_on_disk(opt.root), 8u * per);
  for (int id = 0; id < 8 * per; ++id) {
    auto g = s->get_bytes(make_key(id));
    ASSERT_TRUE(g.ok() && g->has_value()) << id;
    EXPECT_TRUE(payload_ok((*g)->view(), id));
  }
}

TEST(FileStoreMultiProcess, TheCapHoldsUnderConcurrentWritersAndReaders) {
  testing::TempDir tmp;
  const std::uint64_t cap = 256 * 1024;
  const FileStoreOptions opt{.root = tmp.sub("cache"), .max_size_bytes = cap};
  const int bad = run_children(6, [&](int w) {
    auto s = open_or_die(opt);
    int errors = 0;
    std::mt19937 rng(static_cast<unsigned>(w));
    for (int i = 0; i < 300; ++i) {
      const int id = static_cast<int>(rng() % 400);
      if (w % 2 == 0) {
        const std::string p = checked_payload(id, w, i, 2000 + rng() % 2000);
        if (!s->put_bytes(make_key(id), Bytes::copy_of(p)).ok()) ++errors;
      } else {
        auto g = s->get_bytes(make_key(id));
        if (!g.ok())
          ++errors;
        else if (g->has_value() && !payload_ok((*g)->view(), id))
          ++errors;
      }
    }
    return errors;
  });
  EXPECT_EQ(bad, 0);
  auto s = open_or_die(opt);
  EXPECT_LE(*s->size_bytes(), cap);
  // What the disk holds, before verify recounts anything: under the cap,
  // and what the accounting says.
  EXPECT_LE(testing::entry_bytes_on_disk(opt.root), cap) << "over the cap on disk";
  EXPECT_EQ(*s->size_bytes(), testing::entry_bytes_on_disk(opt.root));
  auto report = s->verify(Repair::no);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  // verify reconciled the counters with the files; they were already right.
  EXPECT_EQ(*s->count(), testing::entry_files_on_disk(opt.root));
  EXPECT_LE(*s->size_bytes(), cap);
  EXPECT_GT(s->host_stats().evictions, 0u);
  EXPECT_EQ(s->host_stats().corrupt_dropped, 0u);
}

// ---- writers killed part-way

// A writer that stops half way through its temp file: killed there
// (SIGKILL, as the OOM killer or a cluster scheduler would), or, with
// `stall`, stopped there alive until killed, after saying so on `ready`.
class MidWriteEnv : public EnvWrapper {
 public:
  explicit MidWriteEnv(int ready = -1) : EnvWrapper(Env::posix()), m_ready(ready) {}
  Status write_all(int fd, std::string_view data) override {
    EnvWrapper::write_all(fd, data.substr(0, data.size() / 2)).ignore();
    if (m_ready >= 0) {
      [[maybe_unused]] const ssize_t n = ::write(m_ready, "r", 1);
      for (;;) ::pause();
    }
    ::kill(::getpid(), SIGKILL);
    return internal_error("not reached");
  }

 private:
  int m_ready;
};

// What lies in the store's shard directories: bytes of every file, and how
// many of them are temp or quarantine files.
struct OnDisk {
  std::uint64_t bytes = 0;
  int transient = 0;
};
OnDisk on_disk(const std::string& root) {
  OnDisk d;
  for (const auto& shard : fs::directory_iterator(root + "/v1")) {
    if (!shard.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(shard.path())) {
      if (!f.is_regular_file()) continue;
      d.bytes += f.file_size();
      d.transient += f.path().filename().string()[0] == '.' ? 1 : 0;
    }
  }
  return d;
}

// Starts a child that puts a 1 MiB entry under `key` and stops half way
// through writing it (MidWriteEnv).
pid_t start_writer(const std::string& root, std::uint64_t cap, std::uint64_t key, int ready = -1) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    MidWriteEnv env(ready);
    auto s = open_or_die({.root = root, .max_size_bytes = cap, .env = &env});
    s->put(make_key(key), testing::make_entry(testing::make_payload(std::size_t{1} << 20, key))).ignore();
    ::_exit(0);  // not reached: the write kills or stalls the child
  }
  return pid;
}

TEST(FileStoreMultiProcess, WritersKilledMidWriteLeaveNothingOnceTheNextPutTrims) {
  testing::TempDir tmp;
  const std::string root = tmp.sub("store");
  constexpr std::uint64_t k_cap = std::uint64_t{8} << 20;
  // Opened first: an open sweeps one shard, which here must be the put's.
  auto s = FileStore::open({.root = root, .max_size_bytes = k_cap});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  // 30 writers of 1 MiB entries, each killed half way: 30 MiB of temps
  // against a cap of 8 MiB.
  for (int i = 0; i < 30; ++i) {
    const pid_t pid = start_writer(root, k_cap, 1000 + static_cast<std::uint64_t>(i));
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer " << i << " status " << status;
  }
  // (Each writer's own open swept one shard: a few temps may be gone.)
  const OnDisk left = on_disk(root);
  ASSERT_GE(left.transient, 20) << "the killed writers left no temps: the test shows nothing";
  ASSERT_GT(left.bytes, k_cap);
  // The next put, an hour before any temp is stale: the dead writers' temps
  // were charged, so the store is over its cap, and its trim finds them.
  ASSERT_TRUE((*s)->put(make_key(1), testing::make_entry(testing::make_payload(100000, 1))).ok());
  const OnDisk after = on_disk(root);
  EXPECT_EQ(after.transient, 0) << "temps of dead writers are still on disk";
  EXPECT_LE(after.bytes, k_cap) << "bytes on disk exceed the cap";
  EXPECT_TRUE(fs::exists((*s)->entry_path(make_key(1))));
  EXPECT_EQ(*(*s)->size_bytes(), after.bytes) << "the counters disagree with the disk";
}

TEST(FileStoreMultiProcess, VerifyRepairRemovesDeadWritersTempsAndNeverALiveOnes) {
  testing::TempDir tmp;
  const std::string root = tmp.sub("store");
  constexpr std::uint64_t k_big = std::uint64_t{1} << 30;
  auto s = FileStore::open({.root = root});  // first: an open sweeps one shard
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  // One writer alive half way through its temp, five killed half way.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t alive = start_writer(root, k_big, 500, ready[1]);
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{alive};
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the stalled writer never started";
  ::close(ready[0]);
  for (int i = 0; i < 5; ++i) {
    const pid_t pid = start_writer(root, k_big, 600 + static_cast<std::uint64_t>(i));
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  }
  // (Each writer's own open swept one shard: a dead one's temp may be gone.)
  const int before = on_disk(root).transient;
  ASSERT_GE(before, 4);
  auto report = (*s)->verify(Repair::yes);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->temps_removed, static_cast<std::uint64_t>(before - 1));
  EXPECT_EQ(on_disk(root).transient, 1) << "a live writer's temp was removed, or a dead one's kept";
  // Its writer killed, its temp goes at the next repair.
  ::kill(alive, SIGKILL);
  ::waitpid(alive, nullptr, 0);
  reaper.pid = -1;
  report = (*s)->verify(Repair::yes);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->temps_removed, 1u);
  const OnDisk after = on_disk(root);
  EXPECT_EQ(after.transient, 0);
  EXPECT_EQ(after.bytes, 0u);
  EXPECT_EQ(*(*s)->size_bytes(), 0u) << "the counters still hold the dead writers' bytes";
}

// Anyone who can open the accounting file can hold its lock (in a
// group-shared root, any member): opening the store must not wait on it.
TEST(FileStoreMultiProcess, AnAccountingLockHeldByAnotherProcessNeverHangsAnOpen) {
  testing::TempDir tmp;
  FileStoreOptions o;
  o.root = tmp.sub("root");
  {
    auto s = FileStore::open(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_TRUE((*s)->put(make_key(1), testing::make_entry("kept")).ok());
  }
  const std::string acct = o.root + "/v1/accounting";
  const int holder = ::open(acct.c_str(), O_RDONLY | O_CLOEXEC);  // read access is enough to lock it
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  // In a child under a watchdog, so a hang fails the test instead of the suite.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(60);
    auto s = open_or_die(o);
    auto got = s->get(make_key(1));
    const bool ok = got.ok() && got->has_value() && s->put(make_key(2), testing::make_entry("new")).ok();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(holder);
  ASSERT_TRUE(WIFEXITED(status)) << "the open hung (killed by signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(FileStoreMultiProcess, AnUninitialisedPeerHeldLockedNeverDelaysAPutUnderACapPerRoot) {
  // Another store of the root whose accounting file was made but never
  // initialised, its lock held (any member of a group root can do this):
  // a store capped with its root never waits on it; it is not counted.
  testing::TempDir tmp;
  const std::string root = tmp.sub("root");
  FileStoreOptions o;
  o.root = root;
  o.cap_root = root;
  o.max_size_bytes = 1 << 20;
  { ASSERT_TRUE(FileStore::open(o).ok()); }
  fs::create_directories(root + "/torch/v1");
  fs::permissions(root + "/torch", fs::perms::owner_all);
  fs::permissions(root + "/torch/v1", fs::perms::owner_all);
  const std::string acct = root + "/torch/v1/accounting";
  const int holder = ::open(acct.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Far less than the accounting lock's 20 s deadline, which a put
    // waited out before.
    ::alarm(8);
    auto s = open_or_die(o);
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) ok = s->put(make_key(10 + i), testing::make_entry("new")).ok();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(holder);
  ASSERT_TRUE(WIFEXITED(status)) << "the put waited on the peer (killed by signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace progcache
