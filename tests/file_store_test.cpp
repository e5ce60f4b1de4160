#include "progcache/file_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <thread>

#include "store/file/recency.h"
#include "testing/fault_env.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using testing::entry_bytes_on_disk;
using testing::entry_files_on_disk;
using testing::FaultEnv;
using testing::make_entry;
using testing::make_key;
using testing::Op;
using testing::TempDir;

class FileStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<FileStore> open_store(FileStoreOptions o = {}) {
    if (o.root.empty()) o.root = m_tmp.sub("cache");
    auto s = FileStore::open(o);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::size_t temps_on_disk(const std::string& root) {
    std::size_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(root + "/v1")) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(".tmp.") || name.starts_with(".q.")) ++n;
    }
    return n;
  }

  // Sets atime and mtime (mtime defaults to the atime); for an entry, what
  // the recency table recorded of it is dropped, so the times set stand for
  // its whole history of use. Note that on relatime mounts the kernel itself
  // refreshes an atime that is not newer than the mtime when the file is
  // read.
  static void set_times(const std::string& path, std::int64_t atime_s, std::optional<std::int64_t> mtime_s = {}) {
    struct timespec ts[2];
    ts[0].tv_sec = atime_s;
    ts[0].tv_nsec = 0;
    ts[1].tv_sec = mtime_s.value_or(atime_s);
    ts[1].tv_nsec = 0;
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW), 0);
    if (fs::path(path).filename().string().size() == 62) testing::forget_recorded_use(path);
  }

  // A store capped at 4 entries holding keys 1..4 of shard 0x42, their ages
  // set explicitly: 1 oldest ... 4 newest (1000 s ago and after).
  std::unique_ptr<FileStore> four_aged_entries_in_one_shard(FaultEnv& env) {
    auto s = open_store({.max_size_bytes = std::nullopt, .max_entries = 4, .env = &env, .recency_granularity_ns = 0});
    const std::int64_t now_s = env.now_ns() / 1'000'000'000;
    for (int i = 1; i <= 4; ++i) {
      EXPECT_TRUE(s->put(make_key(i, 0x42), make_entry("e" + std::to_string(i))).ok());
      set_times(s->entry_path(make_key(i, 0x42)), now_s - 1000 + i);
    }
    return s;
  }

  TempDir m_tmp;
};

TEST_F(FileStoreTest, MissIsNulloptAndRoundTripWorks) {
  auto s = open_store();
  auto miss = s->get(make_key(1));
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
  ASSERT_TRUE(s->put(make_key(1), make_entry("payload-1")).ok());
  auto hit = s->get_bytes(make_key(1));
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->view(), "payload-1");
  const StoreStats st = s->stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.puts, 1u);
}

// Where a read lands decides what the kernel's copy and the checksum cost
// (bytes.cpp): an entry's first artifact starts on a multiple of 64 in its
// file whatever the metadata's length (entry.h), and an artifact read from
// disk starts at the same offset modulo 64 as it has in its file, for
// entries read whole and for entries streamed (over 1 MiB), and for an
// entry written before artifacts were aligned.
TEST_F(FileStoreTest, ArtifactsReadFromDiskKeepTheAlignmentTheyHaveInTheirFile) {
  auto s = open_store();
  std::uint64_t n = 0;
  for (const std::size_t payload : {std::size_t{100}, std::size_t{3} << 20}) {
    for (const std::size_t pad : {0, 1, 5, 17, 31, 40, 63}) {
      const Key k = make_key(static_cast<int>(++n));
      const std::string metadata = "{\"p\":\"" + std::string(pad, 'x') + "\"}";
      ASSERT_TRUE(s->put(k, Entry(metadata, {{"code", Bytes::copy_of(std::string(payload, 'a'))}})).ok());
      const auto file_size = fs::file_size(s->entry_path(k));
      const std::uint64_t offset = file_size - 16 - payload;  // one artifact, then the 16-byte checksum
      EXPECT_EQ(offset % 64, 0u) << "metadata padded by " << pad;
      auto hit = s->get(k);
      ASSERT_TRUE(hit.ok() && hit->has_value());
      const auto addr = reinterpret_cast<std::uintptr_t>((*hit)->artifacts()[0].data.data());
      EXPECT_EQ((addr - offset) % 64, 0u) << "payload " << payload << ", artifact at file offset " << offset;
    }
  }
  // Written before the alignment: its 256-byte artifact, then a 3-byte one,
  // then the checksum, starts at an odd offset.
  const Key old_key = KeyBuilder("golden").add_string("name", "saxpy").finish();
  const std::string old = testing::read_all(std::string(PROGCACHE_TEST_SOURCE_DIR) + "/golden/entry_v1.bin");
  ASSERT_FALSE(old.empty());
  fs::create_directories(fs::path(s->entry_path(old_key)).parent_path());
  testing::write_all(s->entry_path(old_key), old);
  const std::uint64_t old_offset = old.size() - 16 - 3 - 256;
  ASSERT_NE(old_offset % 64, 0u);
  auto old_hit = s->get(old_key);
  ASSERT_TRUE(old_hit.ok() && old_hit->has_value()) << old_hit.status().to_string();
  const auto old_addr = reinterpret_cast<std::uintptr_t>((*old_hit)->primary().data());
  EXPECT_EQ((old_addr - old_offset) % 64, 0u) << "artifact at file offset " << old_offset;
  char* p = nullptr;
  for (const std::uint64_t phase : {0, 1, 16, 63, 64, 101}) {
    const Bytes b = Bytes::allocate(1 << 20, &p, phase);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, phase % 64);
    EXPECT_EQ(b.data(), p);
  }
}

TEST_F(FileStoreTest, LayoutIsShardedAndPrivate) {
  auto s = open_store();
  const Key k = make_key(7);
  ASSERT_TRUE(s->put(k, make_entry("x")).ok());
  const std::string hex = k.hex();
  const std::string path = m_tmp.sub("cache") + "/v1/" + hex.substr(0, 2) + "/" + hex.substr(2);
  EXPECT_EQ(s->entry_path(k), path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(m_tmp.sub("cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((m_tmp.sub("cache") + "/v1/" + hex.substr(0, 2)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(FileStoreTest, ReplaceEraseClearAndAccounting) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1), make_entry(std::string(1000, 'a'))).ok());
  ASSERT_TRUE(s->put(make_key(2), make_entry(std::string(10, 'b'))).ok());
  const std::uint64_t size_two = *s->size_bytes();
  ASSERT_TRUE(s->put(make_key(1), make_entry(std::string(10, 'a'))).ok());  // replace
  EXPECT_EQ(*s->count(), 2u);
  EXPECT_EQ(*s->size_bytes(), size_two - 990);
  EXPECT_EQ((*s->get_bytes(make_key(1)))->size(), 10u);
  EXPECT_TRUE(*s->erase(make_key(1)));
  EXPECT_FALSE(*s->erase(make_key(1)));
  EXPECT_EQ(*s->count(), 1u);
  ASSERT_TRUE(s->clear().ok());
  EXPECT_EQ(*s->count(), 0u);
  EXPECT_EQ(*s->size_bytes(), 0u);
  EXPECT_EQ(entry_files_on_disk(m_tmp.sub("cache")), 0u);
}

TEST_F(FileStoreTest, DamagedCounterHealsAndNeverEvictsEverything) {
  auto s = open_store({.max_size_bytes = 1 << 20});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry(std::string(1000, 'a'))).ok());
  // Overwrite shard 0's byte counter in the shared accounting file with an
  // absurd value, as a torn write or another program could leave it. Layout:
  // magic, version, 6 pad words, then (bytes, count) per shard.
  const std::string acct = m_tmp.sub("cache") + "/v1/accounting";
  const int fd = ::open(acct.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::int64_t absurd = std::int64_t{1} << 50;
  ASSERT_EQ(::pwrite(fd, &absurd, sizeof absurd, 8 * 8), static_cast<ssize_t>(sizeof absurd));
  ::close(fd);
  ASSERT_TRUE(s->put(make_key(100), make_entry(std::string(1000, 'b'))).ok());
  // Nothing was evicted for it, and the size reported is the size on disk.
  EXPECT_EQ(entry_files_on_disk(m_tmp.sub("cache")), 21u);
  EXPECT_EQ(*s->size_bytes(), entry_bytes_on_disk(m_tmp.sub("cache")));
  EXPECT_EQ(s->stats().evictions, 0u);
}

TEST_F(FileStoreTest, TruncatedAccountingFileIsRebuiltNotTrustedAsZeros) {
  {
    auto s = open_store();
    for (int i = 0; i < 30; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry(std::string(500, 't'))).ok());
  }
  // Cut after the magic and version words: they still look valid.
  ASSERT_EQ(::truncate((m_tmp.sub("cache") + "/v1/accounting").c_str(), 16), 0);
  auto s = open_store();
  EXPECT_EQ(*s->count(), 30u);
  EXPECT_EQ(*s->size_bytes(), entry_bytes_on_disk(m_tmp.sub("cache")));
}

TEST_F(FileStoreTest, AccountingEqualsTheDiskAfterRacingReplacementsAndRemovals) {
  // Replacing puts and erases of the same keys from several threads (each
  // with its own store object, as separate processes would have): every
  // byte that entered or left an entry path is charged once.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto s = open_store();
      for (int i = 0; i < 400; ++i) {
        const int k = i % 7;
        if ((i + t) % 3 == 0) {
          s->erase(make_key(k)).status().ignore();
        } else {
          s->put(make_key(k), make_entry(std::string(100 + 37 * ((i * (t + 1)) % 50), 'r'))).ignore();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  auto s = open_store();
  EXPECT_EQ(*s->size_bytes(), entry_bytes_on_disk(m_tmp.sub("cache")));
  EXPECT_EQ(*s->count(), entry_files_on_disk(m_tmp.sub("cache")));
}

TEST_F(FileStoreTest, PersistsAcrossOpensAndRebuildsLostAccounting) {
  {
    auto s = open_store();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry("v" + std::to_string(i))).ok());
  }
  fs::remove(m_tmp.sub("cache") + "/v1/accounting");
  auto s = open_store();
  EXPECT_EQ(*s->count(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ((*s->get_bytes(make_key(i)))->view(), "v" + std::to_string(i));
  // A damaged accounting file is rebuilt too.
  s.reset();
  testing::write_all(m_tmp.sub("cache") + "/v1/accounting", std::string(8192, '\x7f'));
  s = open_store();
  EXPECT_EQ(*s->count(), 20u);
}

TEST_F(FileStoreTest, DamagedEntryIsAMissCountedAndRemoved) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1), make_entry(std::string(4096, 'q'))).ok());
  const std::string path = s->entry_path(make_key(1));
  std::string bytes = testing::read_all(path);
  bytes[2000] ^= 0x10;
  testing::write_all(path, bytes);
  auto r = s->get(make_key(1));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().corrupt_dropped, 1u);
  EXPECT_FALSE(fs::exists(path));
  // The next put works and the next get hits: no "clear your cache".
  ASSERT_TRUE(s->put(make_key(1), make_entry("fresh")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "fresh");
}

TEST_F(FileStoreTest, AJunkFileNamedLikeAnEntryIsJudgedOnItsHeaderNotReadWhole) {
  auto s = open_store();
  const std::string path = s->entry_path(make_key(1));
  fs::create_directories(fs::path(path).parent_path());
  {
    // 2 GiB, sparse: costs no disk, but reading it whole would cost 2 GiB of
    // memory and seconds of zero-filling.
    std::ofstream(path) << "not an entry";
    ASSERT_EQ(::truncate(path.c_str(), std::int64_t{2} << 30), 0);
  }
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  auto r = s->get(make_key(1));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().corrupt_dropped, 1u);
  EXPECT_FALSE(fs::exists(path)) << "a damaged entry is removed";
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  // ru_maxrss is in KiB: the peak grew by far less than the file's size.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "the junk file was read whole";
}

// An entry whose layout adds up but is larger than the memory the process
// may still take: the read fails with an error the caller can handle, the
// process goes on, and the file (not damaged) stays. Before, the failed
// allocation threw std::bad_alloc out of get(). Each case runs in a child
// under RLIMIT_AS (not under the sanitizers, whose shadow memory needs more).
TEST_F(FileStoreTest, AnEntryLargerThanTheMemoryLeftIsAnErrorNotAnException) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "RLIMIT_AS cannot be used under a sanitizer";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(hwaddress_sanitizer)
  GTEST_SKIP() << "RLIMIT_AS cannot be used under a sanitizer";
#endif
#endif
  static_assert(sizeof(std::size_t) == 8, "the declared sizes below need a 64-bit address space");
  auto s = open_store();
  // Entry layout (entry.h): the metadata length is the u32 at offset 60, the
  // first artifact's encoding and stored length are the u32 at 68 and the u64
  // at 72; all little-endian, as is this machine. The file grows (sparse) by
  // what the new length adds, so the layout adds up and the reader allocates
  // before it reads what the lengths cover.
  enum class Grow { payload, payload_compressed, metadata };
  const auto craft = [&](int n, Grow grow) -> std::string {
    const Key k = make_key(n);
    EXPECT_TRUE(s->put(k, make_entry("abc")).ok());
    const std::string path = s->entry_path(k);
    const auto old_size = fs::file_size(path);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::uint64_t added = 0;
    if (grow == Grow::metadata) {
      std::uint32_t len = 0;
      f.seekg(60);
      f.read(reinterpret_cast<char*>(&len), 4);
      const std::uint32_t huge = 0xE0000000u;  // 3.5 GiB
      f.seekp(60);
      f.write(reinterpret_cast<const char*>(&huge), 4);
      added = huge - len;
    } else {
      std::uint64_t len = 0;
      f.seekg(72);
      f.read(reinterpret_cast<char*>(&len), 8);
      EXPECT_EQ(len, 3u);
      const std::uint64_t huge = std::uint64_t{6} << 30;
      const std::uint32_t encoding = grow == Grow::payload_compressed ? 1 : 0;
      f.seekp(68);
      f.write(reinterpret_cast<const char*>(&encoding), 4);
      f.write(reinterpret_cast<const char*>(&huge), 8);
      added = huge - len;
    }
    f.close();
    if (::truncate(path.c_str(), static_cast<off_t>(old_size + added)) != 0) return "";
    return path;
  };
  // 0: failed with resource_exhausted; 1: another result; 2: threw; 3: no limit could be set.
  const auto in_child = [&](const std::function<Status()>& read) -> int {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(60);
      std::ifstream status("/proc/self/status");
      std::uint64_t vm_kib = 0;
      for (std::string line; std::getline(status, line);) {
        if (line.starts_with("VmSize:")) vm_kib = std::stoull(line.substr(7));
      }
      rlimit lim{};
      if (vm_kib == 0 || ::getrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
      const rlim_t want = (vm_kib << 10) + (rlim_t{1} << 30);  // 1 GiB more than now
      if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < want) ::_exit(3);
      lim.rlim_cur = want;
      if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
      try {
        const Status st = read();
        ::_exit(st.code() == Code::resource_exhausted ? 0 : 1);
      } catch (...) {
        ::_exit(2);
      }
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  };
  const auto get = [&](int n) {
    return [&, n]() -> Status {
      auto r = s->get(make_key(n));
      return r.ok() ? Status() : r.status();
    };
  };
  const auto get_into = [&](int n) {
    return [&, n]() -> Status {
      std::unique_ptr<char[]> buf;
      auto r = s->get_primary_into(make_key(n), [&](std::size_t size) {
        buf.reset(new char[size]);  // throws std::bad_alloc for the 6 GiB payload
        return buf.get();
      });
      return r.ok() ? Status() : r.status();
    };
  };
  struct Case {
    const char* what;
    Grow grow;
    bool into;
  };
  const Case cases[] = {
      {"a 6 GiB payload, get()", Grow::payload, false},
      {"3.5 GiB of metadata, get()", Grow::metadata, false},
      {"3.5 GiB of metadata, get_primary_into()", Grow::metadata, true},
      {"a 6 GiB payload, get_primary_into() whose allocation throws", Grow::payload, true},
      {"a 6 GiB compressed payload, get_primary_into()", Grow::payload_compressed, true},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = craft(++n, c.grow);
    if (path.empty()) GTEST_SKIP() << "this filesystem cannot make a sparse file of gigabytes";
    const int got = in_child(c.into ? std::function<Status()>(get_into(n)) : std::function<Status()>(get(n)));
    if (got == 3) GTEST_SKIP() << "RLIMIT_AS cannot be set here";
    EXPECT_NE(got, -1) << "the child was killed";
    EXPECT_NE(got, 2) << "the read threw instead of returning an error";
    EXPECT_EQ(got, 0) << "the read did not fail with resource_exhausted";
    EXPECT_TRUE(fs::exists(path)) << "an entry too large for this process's memory is not damage";
  }
}

TEST_F(FileStoreTest, FifoAtAnEntryPathIsAMissNeverAHangAndRepairRemovesIt) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(2), make_entry("neighbour")).ok());
  const std::string path = s->entry_path(make_key(1));
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  // Each read path in a detached thread, so a hang fails the test instead
  // of stalling it (a blocked thread is left behind only when it fails).
  auto within = [](std::function<void()> fn) {
    auto done = std::make_shared<std::promise<void>>();
    auto fut = done->get_future();
    std::thread([fn = std::move(fn), done] {
      fn();
      done->set_value();
    }).detach();
    return fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  };
  ASSERT_TRUE(within([&] {
    auto r = s->get(make_key(1));
    EXPECT_TRUE(r.ok() && !r->has_value());
  })) << "get blocked on a FIFO";
  ASSERT_TRUE(within([&] {
    std::string out;
    auto r = s->get_primary_into(make_key(1), [&](std::size_t n) {
      out.resize(n);
      return out.data();
    });
    EXPECT_TRUE(r.ok() && !*r);
  })) << "get_primary_into blocked on a FIFO";
  ASSERT_TRUE(within([&] {
    auto v = s->verify(Repair::yes);
    ASSERT_TRUE(v.ok());
    ASSERT_EQ(v->problems.size(), 1u);
    EXPECT_TRUE(v->problems[0].removed) << v->problems[0].reason;
  })) << "verify blocked on a FIFO";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ((*s->get_bytes(make_key(2)))->view(), "neighbour");
}

TEST_F(FileStoreTest, EntryPlantedUnderAnotherKeyIsAMiss) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1), make_entry("genuine for key 1")).ok());
  const std::string victim = s->entry_path(make_key(2));
  fs::create_directories(fs::path(victim).parent_path());
  fs::copy_file(s->entry_path(make_key(1)), victim);
  auto r = s->get(make_key(2));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().corrupt_dropped, 1u);
  EXPECT_TRUE((*s->get(make_key(1))).has_value());
}

TEST_F(FileStoreTest, SymlinkedEntryIsNeverFollowed) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1), make_entry("real")).ok());
  const std::string target = m_tmp.sub("outside");
  fs::copy_file(s->entry_path(make_key(1)), target);
  const std::string link = s->entry_path(make_key(1));
  fs::remove(link);
  fs::create_symlink(target, link);
  auto r = s->get(make_key(1));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(target));  // the link was removed, never its target
  EXPECT_EQ(s->stats().corrupt_dropped, 1u);
  // The streaming read treats it the same way: a miss, the link removed and
  // counted, the target untouched.
  fs::create_symlink(target, link);
  std::string out;
  auto into = s->get_primary_into(make_key(1), [&](std::size_t n) {
    out.assign(n, '\0');
    return out.data();
  });
  ASSERT_TRUE(into.ok()) << into.status().to_string();
  EXPECT_FALSE(*into);
  EXPECT_FALSE(fs::is_symlink(link));
  EXPECT_TRUE(fs::exists(target));
  EXPECT_EQ(s->stats().corrupt_dropped, 2u);
}

TEST_F(FileStoreTest, SymlinkedShardDirectoryIsRefused) {
  const std::string root = m_tmp.sub("cache");
  { open_store(); }
  const Key k = make_key(3);
  const std::string shard = root + "/v1/" + k.hex().substr(0, 2);
  fs::remove_all(shard);
  fs::create_directories(m_tmp.sub("elsewhere"));
  ::chmod(m_tmp.sub("elsewhere").c_str(), 0700);
  fs::create_symlink(m_tmp.sub("elsewhere"), shard);
  auto s = open_store();
  const Status st = s->put(k, make_entry("x"));
  EXPECT_EQ(st.code(), Code::permission_denied) << st.to_string();
  EXPECT_TRUE(fs::is_empty(m_tmp.sub("elsewhere")));
  auto r = s->get(k);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
}

TEST_F(FileStoreTest, OthersWritableRootIsRefusedUnlessGroupModeAllows) {
  const std::string root = m_tmp.sub("open");
  fs::create_directories(root);
  ::chmod(root.c_str(), 0777);
  auto s = FileStore::open({.root = root});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::permission_denied);
  EXPECT_NE(s.status().message().find(root), std::string::npos);
  ::chmod(root.c_str(), 0770);
  EXPECT_EQ(FileStore::open({.root = root}).status().code(), Code::permission_denied);
  auto g = FileStore::open({.root = root, .sharing = Sharing::group});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_TRUE((*g)->put(make_key(1), make_entry("shared")).ok());
  struct stat st {};
  ASSERT_EQ(::stat((*g)->entry_path(make_key(1)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ::chmod(root.c_str(), 0777);
  EXPECT_EQ(FileStore::open({.root = root, .sharing = Sharing::group}).status().code(), Code::permission_denied);
}

TEST_F(FileStoreTest, ARootUnderADirectoryOthersCanWriteIsRefusedUnlessItIsSticky) {
  // Whoever can write the parent can rename the root aside and plant a
  // tree of their own under a running process: refused at open.
  const std::string parent = m_tmp.sub("parent");
  fs::create_directories(parent + "/cache");
  ::chmod((parent + "/cache").c_str(), 0700);
  ::chmod(parent.c_str(), 0777);
  auto s = FileStore::open({.root = parent + "/cache"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::permission_denied);
  EXPECT_NE(s.status().message().find(parent), std::string::npos) << s.status().message();
  // Reached through a symlink in a safe directory, it is judged where it is.
  fs::create_directory_symlink(parent + "/cache", m_tmp.sub("link"));
  EXPECT_EQ(FileStore::open({.root = m_tmp.sub("link")}).status().code(), Code::permission_denied);
  // Sticky (as /tmp): only the root's owner may rename it there. Accepted.
  ::chmod(parent.c_str(), 01777);
  auto sticky = FileStore::open({.root = parent + "/cache"});
  ASSERT_TRUE(sticky.ok()) << sticky.status().to_string();
  // Group-writable parent: refused privately, accepted in group mode;
  // others-writable: refused in both.
  ::chmod(parent.c_str(), 0770);
  EXPECT_EQ(FileStore::open({.root = parent + "/cache"}).status().code(), Code::permission_denied);
  ::chmod((parent + "/cache").c_str(), 02770);
  EXPECT_TRUE(FileStore::open({.root = parent + "/cache", .sharing = Sharing::group}).ok());
  ::chmod(parent.c_str(), 0777);
  EXPECT_EQ(FileStore::open({.root = parent + "/cache", .sharing = Sharing::group}).status().code(),
            Code::permission_denied);
}

TEST_F(FileStoreTest, ARootUnderADirectoryOwnedBySomeoneElseIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a directory owned by another user";
  // The parent belongs to uid 65534, who could otherwise `mv cache old;
  // mv planted cache` while this process serves from it.
  const std::string parent = m_tmp.sub("theirs");
  fs::create_directories(parent + "/cache");
  ::chmod((parent + "/cache").c_str(), 0700);
  ::chmod(parent.c_str(), 0755);
  ASSERT_EQ(::chown(parent.c_str(), 65534, 65534), 0);
  auto s = FileStore::open({.root = parent + "/cache"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::permission_denied);
  EXPECT_NE(s.status().message().find("owned by uid 65534"), std::string::npos) << s.status().message();
  ASSERT_EQ(::chown(parent.c_str(), 0, 0), 0);
  EXPECT_TRUE(FileStore::open({.root = parent + "/cache"}).ok());
}

TEST_F(FileStoreTest, ForeignOwnedRootIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a directory owned by another user";
  const std::string root = m_tmp.sub("foreign");
  fs::create_directories(root);
  ::chmod(root.c_str(), 0700);
  ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0);
  auto s = FileStore::open({.root = root});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::permission_denied);
  EXPECT_NE(s.status().message().find("owned by uid 65534"), std::string::npos) << s.status().message();
}

TEST_F(FileStoreTest, InvalidCapsAreRefused) {
  EXPECT_EQ(FileStore::open({.root = m_tmp.sub("c"), .max_size_bytes = 0}).status().code(), Code::invalid_argument);
  EXPECT_EQ(FileStore::open({.root = m_tmp.sub("c"), .max_entries = 0}).status().code(), Code::invalid_argument);
}

TEST_F(FileStoreTest, RootThatIsAFileIsAClearError) {
  testing::write_all(m_tmp.sub("file"), "x");
  auto s = FileStore::open({.root = m_tmp.sub("file")});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(m_tmp.sub("file")), std::string::npos) << s.status().message();
}

TEST_F(FileStoreTest, EvictionIsLeastRecentlyUsedFirstAndDeterministic) {
  FaultEnv env;
  auto s = four_aged_entries_in_one_shard(env);
  ASSERT_TRUE((*s->get(make_key(1, 0x42))).has_value());  // a hit makes 1 the most recent
  ASSERT_TRUE(s->put(make_key(5, 0x42), make_entry("e5")).ok());
  // Over the cap (5 > 4): trimmed to 90% of it (3 entries), oldest first: 2, 3.
  EXPECT_FALSE(fs::exists(s->entry_path(make_key(2, 0x42))));
  EXPECT_FALSE(fs::exists(s->entry_path(make_key(3, 0x42))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(1, 0x42))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(4, 0x42))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(5, 0x42))));
  EXPECT_EQ(s->stats().evictions, 2u);
  EXPECT_EQ(*s->count(), 3u);
}

TEST_F(FileStoreTest, WithFewEntriesEvictionIsLeastRecentlyUsedAcrossShards) {
  // 100 entries in 100 shards, one per second of age, into a store that
  // holds 19: what survives is the newest, whatever shard it is in, and an
  // entry read since survives its elders.
  FaultEnv env;
  auto s = open_store({.max_size_bytes = std::nullopt, .max_entries = 19, .env = &env, .recency_granularity_ns = 0});
  const std::int64_t now_s = env.now_ns() / 1'000'000'000;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(s->put(make_key(i, i), make_entry("e" + std::to_string(i))).ok());
    set_times(s->entry_path(make_key(i, i)), now_s - 1000 + i);
  }
  const auto present = [&](int i) { return fs::exists(s->entry_path(make_key(i, i))); };
  int survivors = 0, newest_evicted = -1, oldest_survivor = 100;
  for (int i = 0; i < 100; ++i) {
    if (present(i)) {
      ++survivors;
      oldest_survivor = std::min(oldest_survivor, i);
    } else {
      newest_evicted = i;
    }
  }
  EXPECT_LE(survivors, 19);
  EXPECT_GE(survivors, 17);
  EXPECT_LT(newest_evicted, oldest_survivor) << "an entry survived one used after it";
  EXPECT_TRUE(present(99));
  EXPECT_EQ(static_cast<std::uint64_t>(survivors), entry_files_on_disk(m_tmp.sub("cache")));
  // A hit makes the oldest survivor the most recent: the next evictions
  // take the ones after it.
  ASSERT_TRUE((*s->get(make_key(oldest_survivor, oldest_survivor))).has_value());
  for (int i = 100; i < 104; ++i) {
    ASSERT_TRUE(s->put(make_key(i, i), make_entry("e" + std::to_string(i))).ok());
    set_times(s->entry_path(make_key(i, i)), now_s + (i - 100));
  }
  EXPECT_TRUE(present(oldest_survivor));
  EXPECT_FALSE(present(oldest_survivor + 1));
}

TEST_F(FileStoreTest, OneCapBoundsEveryStoreOfTheRootAndEvictsTheOldestAcrossThem) {
  // The root's own store holds eight old entries; a companion store of the
  // same root then takes eight new ones. One cap of 100 KiB for both: what
  // is on disk in the two together stays under it, and what goes is the
  // oldest, whichever store holds it.
  const std::string root = m_tmp.sub("cache");
  const FileStoreOptions o{.root = root, .max_size_bytes = 100 * 1024, .cap_root = root, .recency_granularity_ns = 0};
  auto own = open_store(o);
  FileStoreOptions t = o;
  t.root = root + "/triton";
  auto triton = open_store(t);
  const std::int64_t now_s = Env::posix()->now_ns() / 1'000'000'000;
  const std::string payload(10000, 'p');
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(own->put(make_key(i, i), make_entry(payload + std::to_string(i))).ok());
    set_times(own->entry_path(make_key(i, i)), now_s - 1000 + i);
  }
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(triton->put(make_key(100 + i, i), make_entry(payload + std::to_string(i))).ok());
    set_times(triton->entry_path(make_key(100 + i, i)), now_s - 500 + i);
  }
  EXPECT_LE(entry_bytes_on_disk(root) + entry_bytes_on_disk(root + "/triton"), 100U * 1024);
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(fs::exists(triton->entry_path(make_key(100 + i, i)))) << "a new entry went before an old one: " << i;
  }
  int own_left = 0, newest_gone = -1, oldest_left = 8;
  for (int i = 0; i < 8; ++i) {
    if (fs::exists(own->entry_path(make_key(i, i)))) {
      ++own_left;
      oldest_left = std::min(oldest_left, i);
    } else {
      newest_gone = i;
    }
  }
  EXPECT_LT(own_left, 8);
  EXPECT_LT(newest_gone, oldest_left) << "an old entry outlived a newer one of its store";
  // A store opened alone (no cap root) keeps its own cap, as before.
  FileStoreOptions alone = t;
  alone.root = m_tmp.sub("alone");
  alone.cap_root.clear();
  auto lone = open_store(alone);
  ASSERT_TRUE(lone->put(make_key(999, 1), make_entry(payload)).ok());
  EXPECT_EQ(entry_files_on_disk(m_tmp.sub("alone")), 1U);
}

TEST_F(FileStoreTest, PruneBoundsEveryStoreOfTheRootTogether) {
  const std::string root = m_tmp.sub("cache");
  const FileStoreOptions o{.root = root, .max_size_bytes = std::nullopt, .cap_root = root, .recency_granularity_ns = 0};
  auto own = open_store(o);
  FileStoreOptions n = o;
  n.root = root + "/nvcc";
  auto nvcc = open_store(n);
  const std::int64_t now_s = Env::posix()->now_ns() / 1'000'000'000;
  const std::string payload(10000, 'p');
  // Ages interleaved: even i in the root's store, odd i in nvcc's.
  for (int i = 0; i < 10; ++i) {
    FileStore* s = i % 2 == 0 ? own.get() : nvcc.get();
    ASSERT_TRUE(s->put(make_key(i, i), make_entry(payload)).ok());
    set_times(s->entry_path(make_key(i, i)), now_s - 1000 + i);
  }
  auto report = nvcc->prune(30 * 1024, std::nullopt, {});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->stores, 2U);
  const std::uint64_t left = entry_bytes_on_disk(root) + entry_bytes_on_disk(root + "/nvcc");
  EXPECT_LE(left, 30U * 1024);
  EXPECT_EQ(report->bytes_remaining, left);
  for (int i = 0; i < 10; ++i) {
    FileStore* s = i % 2 == 0 ? own.get() : nvcc.get();
    EXPECT_EQ(fs::exists(s->entry_path(make_key(i, i))), i >= 7) << i;
  }
}

TEST_F(FileStoreTest, ACompanionThatIsALinkIsNeverCountedOrTrimmedAndARemadeOneIsFound) {
  // root/kernels is a link back to the root, root/torch a link into another
  // root: neither is one of this root's stores. The other root's entries
  // survive, the cap is not halved by counting the root twice.
  const std::string root = m_tmp.sub("cache");
  const std::string other = m_tmp.sub("other");
  const std::string payload(10000, 'p');
  auto elsewhere = open_store({.root = other, .max_size_bytes = std::nullopt});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(elsewhere->put(make_key(200 + i), make_entry(payload)).ok());
  const FileStoreOptions o{.root = root, .max_size_bytes = 60 * 1024, .cap_root = root, .recency_granularity_ns = 0};
  auto own = open_store(o);
  fs::create_directory_symlink(root, root + "/kernels");
  fs::create_directory_symlink(other, root + "/torch");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(own->put(make_key(i, i), make_entry(payload)).ok());
  EXPECT_EQ(entry_files_on_disk(other), 5U) << "another root's entries were trimmed through a link";
  EXPECT_EQ(entry_files_on_disk(root), 5U) << "the root counted twice (through a link to itself) halved the cap";
  auto report = own->prune(std::uint64_t{0}, std::nullopt, {});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->stores, 1U);
  EXPECT_EQ(entry_files_on_disk(other), 5U);
  // A companion removed and made again under a running store is the new
  // one (its accounting file is another file): counted, trimmed.
  fs::remove(root + "/torch");
  FileStoreOptions t = o;
  t.root = root + "/triton";
  auto triton = open_store(t);
  ASSERT_TRUE(triton->put(make_key(300), make_entry(payload)).ok());
  triton.reset();
  fs::remove_all(root + "/triton");
  auto remade = open_store(t);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(remade->put(make_key(400 + i), make_entry(payload)).ok());
  remade.reset();
  ASSERT_TRUE(own->prune(30 * 1024, std::nullopt, {}).ok());
  EXPECT_LE(entry_bytes_on_disk(root) + entry_bytes_on_disk(root + "/triton"), 30U * 1024);
}

TEST_F(FileStoreTest, ANewEntryNeverEvictsItself) {
  // A cap of one entry: each put must evict the previous entry, never the
  // one it wrote, in whichever shards the two land.
  auto s = open_store({.max_size_bytes = std::nullopt, .max_entries = 1, .recency_granularity_ns = 0});
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(s->put(make_key(i, (i * 37) % 256), make_entry("e" + std::to_string(i))).ok());
    EXPECT_TRUE((*s->get(make_key(i, (i * 37) % 256))).has_value()) << "put " << i << " evicted itself";
    EXPECT_EQ(entry_files_on_disk(m_tmp.sub("cache")), 1u);
  }
}

TEST_F(FileStoreTest, AFutureDatedEntryDoesNotOutliveEntriesUsedSince) {
  FaultEnv env;
  auto s = four_aged_entries_in_one_shard(env);
  const std::int64_t now_s = env.now_ns() / 1'000'000'000;
  // Key 4 claims to have been used ten years from now.
  set_times(s->entry_path(make_key(4, 0x42)), now_s + 10 * 365 * 86400);
  ASSERT_TRUE(s->put(make_key(5, 0x42), make_entry("e5")).ok());
  // Trimmed to 3 entries: the future-dated one goes first, then the oldest.
  EXPECT_FALSE(fs::exists(s->entry_path(make_key(4, 0x42))));
  EXPECT_FALSE(fs::exists(s->entry_path(make_key(1, 0x42))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(2, 0x42))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(5, 0x42))));
}

TEST_F(FileStoreTest, AHitOnAFutureDatedEntryStampsItNow) {
  FaultEnv env;
  auto s = open_store({.env = &env});  // default granularity: 60 s
  ASSERT_TRUE(s->put(make_key(1), make_entry("x")).ok());
  const std::string path = s->entry_path(make_key(1));
  const std::int64_t now_s = env.now_ns() / 1'000'000'000;
  set_times(path, now_s + 86400 * 365, now_s - 100);
  ASSERT_TRUE((*s->get(make_key(1))).has_value());
  struct stat st {};
  ::stat(path.c_str(), &st);
  EXPECT_LE(st.st_atim.tv_sec, now_s + 5);
}

TEST_F(FileStoreTest, RecencyIsStampedOnlyWhenOlderThanTheGranularity) {
  FaultEnv env;
  auto s = open_store({.env = &env});  // default granularity: 60 s
  ASSERT_TRUE(s->put(make_key(1), make_entry("x")).ok());
  const std::string path = s->entry_path(make_key(1));
  const std::int64_t now_s = env.now_ns() / 1'000'000'000;
  // The kernel's relatime may refresh atime on its own (ctime is newer after
  // utimensat), so what is checked here is progcache's own stamping.
  set_times(path, now_s - 30, now_s - 100);
  const auto stamps = env.calls(Op::set_atime);
  ASSERT_TRUE((*s->get(make_key(1))).has_value());
  EXPECT_EQ(env.calls(Op::set_atime), stamps);  // fresh enough: left alone
  set_times(path, now_s - 3600, now_s - 3700);
  ASSERT_TRUE((*s->get(make_key(1))).has_value());
  EXPECT_EQ(env.calls(Op::set_atime), stamps + 1);
  struct stat st {};
  ::stat(path.c_str(), &st);
  EXPECT_GE(st.st_atim.tv_sec, now_s - 1);     // stale: stamped now
  EXPECT_EQ(st.st_mtim.tv_sec, now_s - 3700);  // mtime untouched
}

// Eviction follows every read, not only reads a minute apart (the atime's
// granularity): under a cap that holds two entries, a third put evicts the
// entry read least recently, whichever was written first.
TEST_F(FileStoreTest, EvictionFollowsEveryReadNotOnlyReadsAMinuteApart) {
  const auto payload = std::string(2000, 'p');
  std::uint64_t entry = 0;
  {
    auto probe = open_store({.root = m_tmp.sub("probe")});
    ASSERT_TRUE(probe->put(make_key(1), make_entry(payload)).ok());
    entry = fs::file_size(probe->entry_path(make_key(1)));
  }
  const auto survivors = [&](const std::string& name, const std::vector<std::string>& steps) {
    // The default granularity (60 s): every step lies within one minute.
    auto s = open_store({.root = m_tmp.sub(name), .max_size_bytes = entry * 5 / 2});
    std::string alive;
    for (const auto& step : steps) {
      const Key k = make_key(static_cast<unsigned char>(step[1]));
      if (step[0] == 'p') {
        EXPECT_TRUE(s->put(k, make_entry(payload)).ok());
      } else {
        EXPECT_TRUE((*s->get(k)).has_value()) << step;
      }
    }
    for (const char c : std::string("abc")) alive += fs::exists(s->entry_path(make_key(c))) ? std::string(1, c) : "";
    return alive;
  };
  EXPECT_EQ(survivors("one", {"pa", "pb", "ga", "pc"}), "ac");
  EXPECT_EQ(survivors("two", {"pa", "pb", "gb", "ga", "gb", "pc"}), "bc");
  EXPECT_EQ(survivors("three", {"pa", "pb", "ga", "gb", "pc"}), "bc");
}

TEST_F(FileStoreTest, AReadInAnotherProcessCountsForEviction) {
  const auto payload = std::string(2000, 'p');
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1), make_entry(payload)).ok());
  const std::uint64_t entry = fs::file_size(s->entry_path(make_key(1)));
  s.reset();
  const FileStoreOptions o{.root = m_tmp.sub("cache"), .max_size_bytes = entry * 5 / 2};
  s = open_store(o);
  ASSERT_TRUE(s->put(make_key(2), make_entry(payload)).ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto own = FileStore::open(o);
    ::_exit(own.ok() && (*own)->get(make_key(1)).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(s->put(make_key(3), make_entry(payload)).ok());
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(1)))) << "the entry the other process read was evicted";
  EXPECT_FALSE(fs::exists(s->entry_path(make_key(2))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(3))));
}

// Keys that share one group of the recency table: where the group is taken
// by keys used in the last minute, a read is stamped on the entry's file.
TEST_F(FileStoreTest, AReadTheRecencyTableCannotHoldIsStampedOnTheFile) {
  std::vector<Key> keys{make_key(1)};
  for (std::uint64_t i = 2; keys.size() < file_store::RecencyTable::k_ways + 1; ++i) {
    if (file_store::RecencyTable::group_of(make_key(i)) == file_store::RecencyTable::group_of(keys[0])) {
      keys.push_back(make_key(i));
    }
  }
  const auto payload = std::string(2000, 'p');
  auto s = open_store();
  for (const Key& k : keys) ASSERT_TRUE(s->put(k, make_entry(payload)).ok());
  const std::uint64_t entry = fs::file_size(s->entry_path(keys[0]));
  s.reset();
  // Room for the five and one more: a sixth put trims two.
  s = open_store({.max_size_bytes = entry * 11 / 2});
  const Key& late = keys.back();  // its put found the group full
  // Used 30 s ago by its file's times: within the granularity, so only the
  // table's refusal has the read stamped.
  const std::int64_t now_s = ::time(nullptr);
  struct timespec old[2] = {{now_s - 30, 0}, {now_s - 30, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, s->entry_path(late).c_str(), old, AT_SYMLINK_NOFOLLOW), 0);
  ASSERT_TRUE((*s->get(late)).has_value());
  ASSERT_TRUE(s->put(make_key(1000), make_entry(payload)).ok());
  EXPECT_TRUE(fs::exists(s->entry_path(late))) << "its read was not recorded";
  EXPECT_FALSE(fs::exists(s->entry_path(keys[0])));
  EXPECT_FALSE(fs::exists(s->entry_path(keys[1])));
}

// A slot idle for a minute goes to another key; the read it held is written
// to its entry's file, so it still counts.
TEST_F(FileStoreTest, AReadTheRecencyTableGivesUpIsKeptOnTheFile) {
  std::vector<Key> keys{make_key(1)};
  for (std::uint64_t i = 2; keys.size() < file_store::RecencyTable::k_ways + 1; ++i) {
    if (file_store::RecencyTable::group_of(make_key(i)) == file_store::RecencyTable::group_of(keys[0])) {
      keys.push_back(make_key(i));
    }
  }
  FaultEnv env;
  auto s = open_store({.env = &env});
  for (const Key& k : keys) ASSERT_TRUE(s->put(k, make_entry("x")).ok());
  const std::int64_t t = env.now_ns() + 5 * std::int64_t{1'000'000'000};
  env.set_now(t);
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) ASSERT_TRUE((*s->get(keys[i])).has_value());
  env.set_now(t + 120 * std::int64_t{1'000'000'000});
  ASSERT_TRUE((*s->get(keys.back())).has_value());  // takes keys[0]'s slot, idle longest
  struct stat st {};
  ASSERT_EQ(::stat(s->entry_path(keys[0]).c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec * std::int64_t{1'000'000'000} + st.st_atim.tv_nsec, t);
  auto listed = s->list();
  ASSERT_TRUE(listed.ok());
  for (const auto& e : *listed) {
    if (e.key == keys[0]) {
      EXPECT_EQ(e.last_used_ns, t);
    }
  }
}

TEST_F(FileStoreTest, ItsSharedFilesCutShortUnderItCostNoMoreThanTheirUse) {
  // The accounting file and the recency table are mapped, and anyone who
  // can write the store can truncate them (a group root's members): an
  // access past the new end is SIGBUS. The store goes on serving the bytes
  // it holds and storing new ones; the files are extended back, and a store
  // opened afterwards rebuilds the counters, so the cap holds again.
  const std::uint64_t cap = 64 * 1024;
  auto s = open_store({.max_size_bytes = cap});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry("entry " + std::to_string(i))).ok());
  ASSERT_TRUE((*s->get(make_key(0))).has_value());
  for (const char* name : {"accounting", "recency"}) {
    ASSERT_EQ(::truncate((m_tmp.sub("cache") + "/v1/" + name).c_str(), 0), 0) << name;
  }
  for (int i = 0; i < 8; ++i) {
    auto got = s->get_bytes(make_key(i));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->view(), "entry " + std::to_string(i));
  }
  for (int i = 100; i < 200; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry(std::string(2000, 'a'))).ok());
  EXPECT_EQ((*s->get_bytes(make_key(199)))->view(), std::string(2000, 'a'));
  (void)s->stats();
  auto other = open_store({.max_size_bytes = cap});  // as another process opening the store
  EXPECT_EQ(*other->size_bytes(), entry_bytes_on_disk(m_tmp.sub("cache")));
  ASSERT_TRUE(other->put(make_key(1000), make_entry(std::string(2000, 'b'))).ok());
  EXPECT_LE(entry_bytes_on_disk(m_tmp.sub("cache")), cap) << "over the cap on disk";
  EXPECT_EQ((*other->get_bytes(make_key(1000)))->view(), std::string(2000, 'b'));
}

TEST_F(FileStoreTest, ByteCapHoldsAndAccountingMatchesTheFiles) {
  const std::uint64_t cap = 64 * 1024;
  auto s = open_store({.max_size_bytes = cap});
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry(std::string(900, 'x'))).ok());
  EXPECT_LE(*s->size_bytes(), cap);
  EXPECT_LE(entry_bytes_on_disk(m_tmp.sub("cache")), cap) << "over the cap on disk";
  EXPECT_EQ(*s->size_bytes(), entry_bytes_on_disk(m_tmp.sub("cache")));
  EXPECT_GT(s->stats().evictions, 0u);
  EXPECT_EQ(*s->count(), entry_files_on_disk(m_tmp.sub("cache")));
  // The most recent entry survived.
  EXPECT_TRUE((*s->get(make_key(399))).has_value());
}

TEST_F(FileStoreTest, ClearRemovesEveryEntryButSparesTempsOfPutsInFlight) {
  auto s = open_store();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->put(make_key(i, 0x10), make_entry("e")).ok());
  // Another process's put, half-written: its temp must survive the clear,
  // or that put fails (or publishes nothing) for no fault of its own.
  const std::string shard = m_tmp.sub("cache") + "/v1/10";
  testing::write_all(shard + "/.tmp.4242.1.1", "being written right now");
  testing::write_all(shard + "/.tmp.4242.2.2", "abandoned long ago");
  set_times(shard + "/.tmp.4242.2.2", ::time(nullptr) - 7200);
  ASSERT_TRUE(s->clear().ok());
  EXPECT_EQ(entry_files_on_disk(m_tmp.sub("cache")), 0u);
  EXPECT_EQ(*s->count(), 0u);
  EXPECT_TRUE(fs::exists(shard + "/.tmp.4242.1.1"));
  EXPECT_FALSE(fs::exists(shard + "/.tmp.4242.2.2"));
}

TEST_F(FileStoreTest, StaleAndFutureDatedTempsAreSweptFreshOnesKept) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1, 0x10), make_entry("x")).ok());
  const std::string shard = m_tmp.sub("cache") + "/v1/10";
  testing::write_all(shard + "/.tmp.99999.1.1", "half-written");
  testing::write_all(shard + "/.tmp.99999.2.2", "in progress");
  testing::write_all(shard + "/.tmp.99999.3.3", "dated in 2036");
  set_times(shard + "/.tmp.99999.1.1", ::time(nullptr) - 7200);
  set_times(shard + "/.tmp.99999.3.3", ::time(nullptr) + 10 * 365 * 86400, ::time(nullptr) + 10 * 365 * 86400);
  auto report = s->verify(Repair::no);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->temps_removed, 2u);
  EXPECT_FALSE(fs::exists(shard + "/.tmp.99999.1.1"));
  EXPECT_FALSE(fs::exists(shard + "/.tmp.99999.3.3")) << "a future-dated temp is of unknown age: swept";
  EXPECT_TRUE(fs::exists(shard + "/.tmp.99999.2.2"));
}

TEST_F(FileStoreTest, VerifyReportsASymlinkedShardDirectoryAndRepairRemovesIt) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1, 0x10), make_entry("one")).ok());
  ASSERT_TRUE(s->put(make_key(2, 0x20), make_entry("two")).ok());
  // Shard 10 is swapped for a symlink to a directory holding a copy of it.
  const std::string shard = m_tmp.sub("cache") + "/v1/10";
  fs::rename(shard, m_tmp.sub("elsewhere"));
  fs::create_directory_symlink(m_tmp.sub("elsewhere"), shard);
  auto report = s->verify(Repair::no);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].path, shard);
  EXPECT_NE(report->problems[0].reason.find("symlink"), std::string::npos) << report->problems[0].reason;
  // What the link leads to is not counted as stored here.
  EXPECT_EQ(*s->count(), 1u);
  auto repaired = s->verify(Repair::yes);
  ASSERT_TRUE(repaired.ok());
  ASSERT_EQ(repaired->problems.size(), 1u);
  EXPECT_TRUE(repaired->problems[0].removed);
  EXPECT_FALSE(fs::is_symlink(shard));
  EXPECT_TRUE(fs::exists(m_tmp.sub("elsewhere")));  // the link's target is not ours to touch
  EXPECT_TRUE(s->put(make_key(3, 0x10), make_entry("three")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(3, 0x10)))->view(), "three");
}

TEST_F(FileStoreTest, DirectoriesRemovedWhileOpenAreMadeAgainOnPut) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1, 0x10), make_entry("one")).ok());
  fs::remove_all(m_tmp.sub("cache") + "/v1/10");  // one shard
  ASSERT_TRUE(s->put(make_key(2, 0x10), make_entry("two")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(2, 0x10)))->view(), "two");
  fs::remove_all(m_tmp.sub("cache"));  // the whole tree
  ASSERT_TRUE(s->put(make_key(3, 0x10), make_entry("three")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(3, 0x10)))->view(), "three");
  EXPECT_EQ(fs::status(m_tmp.sub("cache")).permissions() & fs::perms::all, fs::perms::owner_all);
  // A shard this store never wrote to, after the whole tree went again.
  fs::remove_all(m_tmp.sub("cache"));
  ASSERT_TRUE(s->put(make_key(4, 0x20), make_entry("four")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(4, 0x20)))->view(), "four");
}

TEST_F(FileStoreTest, VerifyZeroesTheCountersOfAShardWithNoDirectory) {
  auto s = open_store();
  ASSERT_TRUE(s->put(make_key(1, 0x10), make_entry("one")).ok());
  ASSERT_TRUE(s->put(make_key(2, 0x20), make_entry("two")).ok());
  fs::remove_all(m_tmp.sub("cache") + "/v1/10");
  ASSERT_TRUE(s->verify(Repair::no).ok());
  EXPECT_EQ(*s->count(), 1u);
  EXPECT_EQ(*s->size_bytes(), entry_bytes_on_disk(m_tmp.sub("cache")));
}

TEST_F(FileStoreTest, VerifyListsDamageWithReasonsAndRepairRemovesIt) {
  auto s = open_store();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry(std::string(500, 'a' + i))).ok());
  const std::string p1 = s->entry_path(make_key(1));
  const std::string p2 = s->entry_path(make_key(2));
  std::string b1 = testing::read_all(p1);
  testing::write_all(p1, b1.substr(0, b1.size() / 2));  // truncated
  std::string b2 = testing::read_all(p2);
  b2[300] ^= 1;
  testing::write_all(p2, b2);  // bit flip
  auto report = s->verify(Repair::no);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, 5u);
  EXPECT_EQ(report->ok, 3u);
  ASSERT_EQ(report->problems.size(), 2u);
  for (const auto& p : report->problems) {
    EXPECT_FALSE(p.removed);
    EXPECT_FALSE(p.reason.empty());
  }
  EXPECT_TRUE(fs::exists(p1));
  auto repaired = s->verify(Repair::yes);
  ASSERT_TRUE(repaired.ok());
  EXPECT_EQ(repaired->problems.size(), 2u);
  for (const auto& p : repaired->problems) EXPECT_TRUE(p.removed);
  EXPECT_FALSE(fs::exists(p1));
  EXPECT_FALSE(fs::exists(p2));
  EXPECT_EQ(*s->count(), 3u);
  EXPECT_TRUE(s->verify(Repair::no)->problems.empty());
}

TEST_F(FileStoreTest, PruneByAgeAndBySize) {
  auto s = open_store();
  const std::int64_t now_s = ::time(nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s->put(make_key(i), make_entry(std::string(1000, 'p'))).ok());
    set_times(s->entry_path(make_key(i)), now_s - 86400 * (10 - i));  // key 0 is 10 days old
  }
  auto r = s->prune(std::nullopt, std::int64_t{86400} * 11 / 2 * 1'000'000'000);  // 5.5 days
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->removed, 5u);  // 10..6 days old
  EXPECT_FALSE(fs::exists(s->entry_path(make_key(0))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(9))));
  const std::uint64_t one = fs::file_size(s->entry_path(make_key(9)));
  r = s->prune(2 * one, std::nullopt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->remaining, 2u);
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(9))));
  EXPECT_TRUE(fs::exists(s->entry_path(make_key(8))));
  EXPECT_EQ(*s->count(), 2u);
}

TEST_F(FileStoreTest, ListShowsEveryEntry) {
  auto s = open_store();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry("l")).ok());
  auto l = s->list();
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 7u);
  std::set<Key> keys;
  for (const auto& e : *l) {
    keys.insert(e.key);
    EXPECT_GT(e.created_unix_ns, 0);
    EXPECT_GT(e.size, 0u);
  }
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(keys.count(make_key(i)));
}

TEST_F(FileStoreTest, SignedStoreRejectsUnsignedEntries) {
  {
    auto plain = open_store();
    ASSERT_TRUE(plain->put(make_key(1), make_entry("unsigned")).ok());
  }
  auto s = open_store({.codec = {"a-signing-key-of-some-length"}});
  auto r = s->get(make_key(1));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().rejected, 1u);
  ASSERT_TRUE(s->put(make_key(2), make_entry("signed")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(2)))->view(), "signed");
}

TEST_F(FileStoreTest, PeekJudgesAsALookupAndChangesNothing) {
  const std::string root = m_tmp.sub("cache");
  // No store there: nothing found, and nothing made.
  auto none = FileStore::peek({.root = root}, make_key(1));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(fs::exists(root + "/v1"));
  auto s = open_store({.root = root, .recency_granularity_ns = 0});
  ASSERT_TRUE(s->put(make_key(1), make_entry("one")).ok());
  ASSERT_TRUE(s->put(make_key(2), make_entry("two")).ok());
  ASSERT_TRUE(s->put(make_key(3), make_entry("three")).ok());
  const std::string path = s->entry_path(make_key(1));
  set_times(path, 1000);
  const StoreStats before = s->stats();
  auto got = FileStore::peek({.root = root}, make_key(1));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->primary().view(), "one");
  // Nothing counted, nothing stamped.
  EXPECT_EQ(s->stats().hits, before.hits);
  EXPECT_EQ(s->stats().misses, before.misses);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1000);
  // A damaged entry is data_loss and stays where it is (a lookup removes it).
  const std::string damaged = s->entry_path(make_key(2));
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.write("zz", 2);
  }
  auto bad = FileStore::peek({.root = root}, make_key(2));
  EXPECT_EQ(bad.status().code(), Code::data_loss) << bad.status().to_string();
  EXPECT_TRUE(fs::exists(damaged));
  // A link where an entry belongs is never followed, and stays.
  const std::string linked = s->entry_path(make_key(3));
  fs::remove(linked);
  fs::create_symlink(path, linked);
  auto link = FileStore::peek({.root = root}, make_key(3));
  EXPECT_EQ(link.status().code(), Code::data_loss) << link.status().to_string();
  EXPECT_TRUE(fs::is_symlink(linked));
  // Under a signing key an unsigned entry is what a signed store rejects.
  auto unsigned_one = FileStore::peek({.root = root, .codec = {"a-signing-key-of-some-length"}}, make_key(1));
  EXPECT_EQ(unsigned_one.status().code(), Code::permission_denied) << unsigned_one.status().to_string();
  EXPECT_EQ(s->stats().corrupt_dropped, before.corrupt_dropped);
  // What a lookup finds, peek found.
  EXPECT_FALSE((*s->get(make_key(2))).has_value());
  EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "one");
}

TEST_F(FileStoreTest, PrimaryIntoCallerMemoryVerifiesAndMatchesGet) {
  auto s = open_store();
  std::vector<Artifact> arts{{"cubin", Bytes::copy_of(testing::make_payload(70000, 1))},
                             {"log", Bytes::copy_of("warnings")}};
  ASSERT_TRUE(s->put(make_key(1), Entry(R"({"k":1})", arts)).ok());
  ASSERT_TRUE(s->put_bytes(make_key(2), Bytes::copy_of("")).ok());
  std::string out;
  auto into = [&](std::size_t n) {
    out.assign(n, '\0');
    return out.data();
  };
  ASSERT_TRUE(*s->get_primary_into(make_key(1), into));
  EXPECT_EQ(out, arts[0].data.str());
  ASSERT_TRUE(*s->get_primary_into(make_key(2), into));
  EXPECT_EQ(out, "");
  EXPECT_FALSE(*s->get_primary_into(make_key(3), into));
  // Damage anywhere (payload, metadata, the other artifact, length) is a miss,
  // counted and removed, exactly as with get().
  const std::string path = s->entry_path(make_key(1));
  const std::string good = testing::read_all(path);
  for (std::size_t pos : {good.size() / 2, std::size_t{70}, good.size() - 20, good.size() - 3}) {
    std::string bad = good;
    bad[pos] ^= 0x20;
    testing::write_all(path, bad);
    const auto before = s->stats().corrupt_dropped;
    EXPECT_FALSE(*s->get_primary_into(make_key(1), into)) << "flip at " << pos;
    EXPECT_EQ(s->stats().corrupt_dropped, before + 1);
    EXPECT_FALSE(fs::exists(path));
  }
  testing::write_all(path, good.substr(0, good.size() - 1));
  EXPECT_FALSE(*s->get_primary_into(make_key(1), into));
  // A signed store takes the ordinary path and still works.
  auto signed_store = open_store({.root = m_tmp.sub("signed"), .codec = {"signing-key-for-this-test"}});
  ASSERT_TRUE(signed_store->put_bytes(make_key(5), Bytes::copy_of("signed payload")).ok());
  ASSERT_TRUE(*signed_store->get_primary_into(make_key(5), into));
  EXPECT_EQ(out, "signed payload");
}

// Each put makes an inode and each replacement or eviction frees one. On
// ext4 the shards must sit in block groups of their own (the top-directory
// flag on the version directory), or every new inode of a busy store is
// allocated in one group, past all the inodes freed there lately.
TEST_F(FileStoreTest, ShardsAreSpreadAcrossTheFilesystemWhereItTakesTheHint) {
  auto s = open_store();
  ASSERT_NE(s, nullptr);
  const std::string v1 = m_tmp.sub("cache") + "/v1";
  const int fd = ::open(v1.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  int flags = 0;
  const int r = ::ioctl(fd, FS_IOC_GETFLAGS, &flags);
  const int err = errno;
  struct statfs fsinfo {};
  ASSERT_EQ(::fstatfs(fd, &fsinfo), 0);
  ::close(fd);
  // The hint is ext2/3/4's (one magic number for the three); xfs, btrfs and
  // tmpfs keep inode flags but refuse this one, which the store ignores.
  constexpr long k_ext4 = 0xEF53;
  if (fsinfo.f_type != k_ext4) GTEST_SKIP() << "the test's temp dir is not on ext2/3/4, whose hint this is";
  if (r != 0)
    GTEST_SKIP() << "the filesystem of the test's temp dir keeps no inode flags (" << std::strerror(err) << ")";
  EXPECT_NE(flags & FS_TOPDIR_FL, 0) << "the version directory does not ask for its shards to be spread";
  // ext4 holds at most 32768 inodes per block group: shards in one group
  // have inode numbers within that span.
  if (fsinfo.f_files < 8 * 32768) return;
  std::uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < 256; ++i) {
    ASSERT_TRUE(s->put(make_key(i, i), make_entry("e")).ok());
    struct stat st {};
    ASSERT_EQ(::stat(fs::path(s->entry_path(make_key(i, i))).parent_path().c_str(), &st), 0);
    lo = std::min<std::uint64_t>(lo, st.st_ino);
    hi = std::max<std::uint64_t>(hi, st.st_ino);
  }
  EXPECT_GT(hi - lo, 32768u) << "the 256 shard directories were all made in one block group";
}

TEST_F(FileStoreTest, AFilesystemThatRefusesThePlacementHintCostsOnlyTheHint) {
  FaultEnv env;
  for (const int err : {ENOTTY, EPERM, EIO}) {
    env.fail(Op::spread_subdirectories, err, 0, /*sticky=*/true);
    auto s = open_store({.root = m_tmp.sub("refused" + std::to_string(err)), .env = &env});
    ASSERT_NE(s, nullptr) << std::strerror(err);
    ASSERT_TRUE(s->put(make_key(1), make_entry("e1")).ok());
    auto g = s->get(make_key(1));
    ASSERT_TRUE(g.ok() && g->has_value());
    EXPECT_EQ((*g)->primary().view(), "e1");
  }
  EXPECT_GE(env.calls(Op::spread_subdirectories), 3u);
}

// With compression on, what is on disk is smaller, and every read path
// returns the bytes that were put; a store opened without the setting reads
// the same entries (the encoding is in each entry).
TEST_F(FileStoreTest, CompressedEntriesTakeLessDiskAndReadBackExactly) {
  const std::string root = m_tmp.sub("cache");
  auto s = open_store({.root = root, .codec = {.compression_level = 3}});
  ASSERT_NE(s, nullptr);
  std::uint64_t raw = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string cubin = testing::compressible_payload(20'000 + 5'000 * i, i);
    raw += cubin.size();
    ASSERT_TRUE(s->put_bytes(make_key(i), Bytes::copy_of(cubin)).ok());
  }
  const std::uint64_t on_disk = entry_bytes_on_disk(root);
  EXPECT_LT(on_disk * 3, raw) << on_disk << " bytes on disk for " << raw << " bytes of payload";
  EXPECT_EQ(*s->size_bytes(), on_disk) << "the cap is charged what is on disk";
  auto plain = open_store({.root = root});
  for (int i = 0; i < 8; ++i) {
    const std::string cubin = testing::compressible_payload(20'000 + 5'000 * i, i);
    for (FileStore* store : {s.get(), plain.get()}) {
      auto g = store->get_bytes(make_key(i));
      ASSERT_TRUE(g.ok() && g->has_value()) << g.status().to_string();
      EXPECT_EQ((*g)->view(), cubin);
      std::string into;
      auto r = store->get_primary_into(make_key(i), [&](std::size_t n) {
        into.assign(n, '\0');
        return into.data();
      });
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_TRUE(*r);
      EXPECT_EQ(into, cubin);
    }
  }
  EXPECT_EQ(s->stats().corrupt_dropped, 0u);
  EXPECT_EQ(plain->stats().corrupt_dropped, 0u);
}

TEST_F(FileStoreTest, ClosedStoreFails) {
  auto s = open_store();
  ASSERT_TRUE(s->close().ok());
  EXPECT_EQ(s->get(make_key(1)).status().code(), Code::failed_precondition);
  EXPECT_EQ(s->put(make_key(1), make_entry("x")).code(), Code::failed_precondition);
}

// close() on one thread while others read, write and trim: every call
// either works or fails with failed_precondition; nothing a call in flight
// uses is taken from under it (run under TSan and ASan too, which report a
// mapping or descriptor released while another thread used it).
TEST_F(FileStoreTest, ClosingWhileOtherThreadsUseTheStoreIsSafe) {
  for (int round = 0; round < 20; ++round) {
    auto s = open_store({.root = m_tmp.sub("close" + std::to_string(round)),
                         .max_size_bytes = std::nullopt,
                         .max_entries = 8,
                         .recency_granularity_ns = 0});
    for (int k = 0; k < 8; ++k) ASSERT_TRUE(s->put(make_key(k), make_entry(std::string(20'000, 'a' + k))).ok());
    std::atomic<int> unexpected{0};
    std::atomic<bool> closed{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        const auto judge = [&](const Status& st) {
          if (!st.ok() && st.code() != Code::failed_precondition) ++unexpected;
        };
        for (int i = 0; !closed.load() || i % 16 != 0; ++i) {
          const Key k = make_key((i + t) % 12);  // keys 8-11 are new: puts, then trims
          std::string into;
          judge(s->get_primary_into(k, [&](std::size_t n) {
                   into.resize(n);
                   return into.data();
                 }).status());
          judge(s->get(k).status());
          if (i % 4 == t) judge(s->put(k, make_entry(std::string(20'000, 'z'))));
          s->stats();
          s->host_stats();
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + round % 5));
    ASSERT_TRUE(s->close().ok());
    closed.store(true);
    for (auto& th : threads) th.join();
    EXPECT_EQ(unexpected.load(), 0) << "round " << round;
    EXPECT_EQ(s->get(make_key(1)).status().code(), Code::failed_precondition);
  }
}

// ------------------------------------------------------------ faults

struct PutFault {
  Op op;
  int err;
  bool short_write;
  Code code;
};

class FileStorePutFaultTest : public FileStoreTest, public ::testing::WithParamInterface<PutFault> {};

TEST_P(FileStorePutFaultTest, FailedPutLeavesNoTempAndKeepsTheOldEntry) {
  const PutFault f = GetParam();
  FaultEnv env;
  auto s = open_store({.durability = Durability::fsync, .env = &env});
  ASSERT_TRUE(s->put(make_key(1), make_entry("committed")).ok());
  env.fail(f.op, f.err, 0, false, f.short_write);
  const Status st = s->put(make_key(1), make_entry(std::string(10000, 'n')));
  ASSERT_FALSE(st.ok()) << testing::op_name(f.op);
  EXPECT_EQ(st.code(), f.code) << st.to_string();
  EXPECT_NE(st.message().find(make_key(1).hex()), std::string::npos) << st.message();
  EXPECT_EQ(env.fired(), 1u);
  EXPECT_EQ(temps_on_disk(m_tmp.sub("cache")), 0u);
  if (f.op != Op::fsync_dir) {  // a failed directory fsync happens after the rename
    EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "committed");
  }
  EXPECT_EQ(s->stats().errors, 1u);
  // And the store works again once the fault is gone.
  ASSERT_TRUE(s->put(make_key(1), make_entry("after")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "after");
}

INSTANTIATE_TEST_SUITE_P(Faults, FileStorePutFaultTest,
                         ::testing::Values(PutFault{Op::open_create, ENOSPC, false, Code::resource_exhausted},
                                           PutFault{Op::open_create, EACCES, false, Code::permission_denied},
                                           PutFault{Op::open_create, EROFS, false, Code::permission_denied},
                                           PutFault{Op::open_create, EMFILE, false, Code::resource_exhausted},
                                           PutFault{Op::write, ENOSPC, true, Code::resource_exhausted},
                                           PutFault{Op::write, EIO, false, Code::internal},
                                           PutFault{Op::fsync, EIO, false, Code::internal},
                                           PutFault{Op::close, EIO, false, Code::internal},
                                           PutFault{Op::rename_exchange, EIO, false, Code::internal},
                                           PutFault{Op::rename_exchange, ENOSPC, false, Code::resource_exhausted},
                                           PutFault{Op::fsync_dir, EIO, false, Code::internal}),
                         [](const auto& param_info) {
                           const PutFault& f = param_info.param;
                           return std::string(testing::op_name(f.op)) + "_" + std::to_string(f.err) +
                                  (f.short_write ? "_short" : "");
                         });

TEST_F(FileStoreTest, ReadFaultsAreErrorsNotCorruption) {
  FaultEnv env;
  auto s = open_store({.env = &env});
  ASSERT_TRUE(s->put(make_key(1), make_entry("ok")).ok());
  env.fail(Op::pread, EIO);
  auto r = s->get(make_key(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::internal);
  // An I/O error is not evidence of damage: the entry stays.
  EXPECT_EQ(s->stats().corrupt_dropped, 0u);
  EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "ok");
  env.fail(Op::open_read, EMFILE);
  EXPECT_EQ(s->get(make_key(1)).status().code(), Code::resource_exhausted);
}

// A hit of an entry too large for the first read: one read for the header,
// one (vectored) for the artifact and the trailer after it.
TEST_F(FileStoreTest, AHitOfALargeEntryIsTwoReads) {
  FaultEnv env;
  auto s = open_store({.env = &env});
  const std::string payload = testing::make_payload(64 * 1024, 3);
  ASSERT_TRUE(s->put(make_key(1), make_entry(payload)).ok());
  const auto before = env.calls(Op::pread);
  std::string out;
  auto r = s->get_primary_into(make_key(1), [&](std::size_t n) {
    out.resize(n);
    return out.data();
  });
  ASSERT_TRUE(r.ok() && *r) << r.status().to_string();
  EXPECT_EQ(out, payload);
  EXPECT_EQ(env.calls(Op::pread) - before, 2u);
}

TEST_F(FileStoreTest, DurabilityFsyncSyncsFileAndDirectory) {
  FaultEnv env;
  auto s = open_store({.durability = Durability::fsync, .env = &env});
  const auto f0 = env.calls(Op::fsync), d0 = env.calls(Op::fsync_dir);
  ASSERT_TRUE(s->put(make_key(1), make_entry("durable")).ok());
  EXPECT_EQ(env.calls(Op::fsync) - f0, 1u);
  EXPECT_EQ(env.calls(Op::fsync_dir) - d0, 1u);
  auto n = open_store({.root = m_tmp.sub("cache2"), .env = &env});
  const auto f1 = env.calls(Op::fsync);
  ASSERT_TRUE(n->put(make_key(1), make_entry("fast")).ok());
  EXPECT_EQ(env.calls(Op::fsync), f1);
}

TEST_F(FileStoreTest, EvictionFaultsLoseNothingCommittedBeyondTheVictims) {
  FaultEnv env;
  auto s = open_store({.max_size_bytes = std::nullopt, .max_entries = 10, .env = &env});
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry("v")).ok());
  env.fail(Op::list_dir, EIO, 0, /*sticky=*/true);          // the eviction scan cannot run
  ASSERT_TRUE(s->put(make_key(10), make_entry("v")).ok());  // the put itself still succeeds
  env.clear_faults();
  EXPECT_EQ(entry_files_on_disk(m_tmp.sub("cache")), 11u);
  ASSERT_TRUE(s->put(make_key(11), make_entry("v")).ok());  // now trims
  EXPECT_LE(*s->count(), 10u);
  EXPECT_EQ(*s->count(), entry_files_on_disk(m_tmp.sub("cache")));
  EXPECT_TRUE((*s->get(make_key(11))).has_value());
}

}  // namespace
}  // namespace progcache
