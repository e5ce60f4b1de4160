// Several real processes (fork) on one store: same key, distinct keys, a cap
// under concurrent writers, and readers that check every byte they get.
#include <gtest/gtest.h>
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

}  // namespace
}  // namespace progcache
