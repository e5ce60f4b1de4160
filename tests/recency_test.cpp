// The file store's recency table (src/store/file/recency.h): reads recorded
// in a file every process maps, a full group refused, an idle slot taken
// over with its read handed back, damage never a crash.
#include "store/file/recency.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <vector>

#include "testing/test_util.h"

namespace progcache::file_store {
namespace {

using testing::make_key;
using testing::TempDir;

constexpr std::int64_t k_s = 1'000'000'000;

class RecencyTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(m_table.open(Env::posix(), path(), 0600).ok()); }
  std::string path() const { return m_tmp.sub("recency"); }

  // `n` keys that share one group of slots.
  static std::vector<Key> keys_of_one_group(std::size_t n) {
    std::vector<Key> out{make_key(1)};
    const std::size_t group = RecencyTable::group_of(out[0]);
    for (std::uint64_t i = 2; out.size() < n; ++i) {
      if (RecencyTable::group_of(make_key(i)) == group) out.push_back(make_key(i));
    }
    return out;
  }

  TempDir m_tmp;
  RecencyTable m_table;
};

TEST_F(RecencyTest, AReadIsRecordedAndALaterOneReplacesIt) {
  const std::int64_t t = 1'700'000'000 * k_s;
  EXPECT_EQ(m_table.last_read(make_key(1)), 0);
  std::optional<RecencyTable::Displaced> displaced;
  ASSERT_TRUE(m_table.record(make_key(1), t, &displaced));
  EXPECT_FALSE(displaced);
  EXPECT_EQ(m_table.last_read(make_key(1)), t);
  ASSERT_TRUE(m_table.record(make_key(1), t + 7, &displaced));
  EXPECT_EQ(m_table.last_read(make_key(1)), t + 7);
  EXPECT_EQ(m_table.last_read(make_key(2)), 0);
  struct stat st {};
  ASSERT_EQ(::stat(path().c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), RecencyTable::k_file_size);
  EXPECT_GE(static_cast<std::size_t>(st.st_blocks) * 512, RecencyTable::k_file_size) << "blocks not reserved";
}

TEST_F(RecencyTest, EveryProcessOfTheStoreSeesTheSameTable) {
  const std::int64_t t = 1'700'000'000 * k_s;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RecencyTable own;
    const bool ok = own.open(Env::posix(), path(), 0600).ok() && own.record(make_key(5), t, nullptr);
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(m_table.last_read(make_key(5)), t);
}

TEST_F(RecencyTest, AFullGroupRefusesUntilASlotIsIdleAndThenHandsItsReadBack) {
  const auto keys = keys_of_one_group(RecencyTable::k_ways + 1);
  const std::int64_t t = 1'700'000'000 * k_s;
  for (std::size_t i = 0; i < RecencyTable::k_ways; ++i) {
    ASSERT_TRUE(m_table.record(keys[i], t + static_cast<std::int64_t>(i), nullptr));
  }
  const Key& late = keys.back();
  std::optional<RecencyTable::Displaced> displaced;
  // Every slot read within the minute: the caller must stamp the file.
  EXPECT_FALSE(m_table.record(late, t + 30 * k_s, &displaced));
  EXPECT_FALSE(displaced);
  EXPECT_EQ(m_table.last_read(late), 0);
  // A minute on, the slot idle longest (keys[0]'s) is taken, and its read
  // comes back to be written to that entry's file.
  ASSERT_TRUE(m_table.record(late, t + 61 * k_s, &displaced));
  ASSERT_TRUE(displaced);
  EXPECT_EQ(displaced->key, keys[0]);
  EXPECT_EQ(displaced->read_ns, t);
  EXPECT_EQ(m_table.last_read(late), t + 61 * k_s);
  EXPECT_EQ(m_table.last_read(keys[0]), 0);
  for (std::size_t i = 1; i < RecencyTable::k_ways; ++i) {
    EXPECT_EQ(m_table.last_read(keys[i]), t + static_cast<std::int64_t>(i));
  }
}

TEST_F(RecencyTest, ATimeFarInTheFutureIsNoClaimOnASlot) {
  const auto keys = keys_of_one_group(RecencyTable::k_ways + 1);
  const std::int64_t t = 1'700'000'000 * k_s;
  ASSERT_TRUE(m_table.record(keys[0], t + 3650 * 86400 * k_s, nullptr));  // a clock that jumped back since
  for (std::size_t i = 1; i < RecencyTable::k_ways; ++i) ASSERT_TRUE(m_table.record(keys[i], t, nullptr));
  std::optional<RecencyTable::Displaced> displaced;
  ASSERT_TRUE(m_table.record(keys.back(), t + 1, &displaced));
  ASSERT_TRUE(displaced);
  EXPECT_EQ(displaced->key, keys[0]);
}

TEST_F(RecencyTest, ForgetDropsThatKeyAloneAndFreesItsSlot) {
  const auto keys = keys_of_one_group(RecencyTable::k_ways + 1);
  const std::int64_t t = 1'700'000'000 * k_s;
  for (std::size_t i = 0; i < RecencyTable::k_ways; ++i) ASSERT_TRUE(m_table.record(keys[i], t, nullptr));
  m_table.forget(keys[2]);
  EXPECT_EQ(m_table.last_read(keys[2]), 0);
  EXPECT_EQ(m_table.last_read(keys[1]), t);
  m_table.forget(keys.back());  // held nowhere: nothing changes
  EXPECT_EQ(m_table.last_read(keys[3]), t);
  std::optional<RecencyTable::Displaced> displaced;
  EXPECT_TRUE(m_table.record(keys.back(), t + 1, &displaced));  // the freed slot, within the minute
  EXPECT_FALSE(displaced);
}

TEST_F(RecencyTest, ATableThatCannotBeOpenedRecordsNothingAndSaysSo) {
  RecencyTable other;
  const std::string dir = m_tmp.sub("a-directory");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  EXPECT_FALSE(other.open(Env::posix(), dir, 0600).ok());
  EXPECT_FALSE(other.is_open());
  EXPECT_FALSE(other.record(make_key(1), 1, nullptr));
  EXPECT_EQ(other.last_read(make_key(1)), 0);
  other.forget(make_key(1));
}

TEST_F(RecencyTest, GarbageInTheFileIsNeverACrashAndNewReadsAreStillKept) {
  std::mt19937_64 rng(7);
  std::string junk(RecencyTable::k_file_size, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  testing::write_all(path(), junk);  // the mapping sees it: the same pages
  const std::int64_t t = 1'700'000'000 * k_s;
  std::size_t kept = 0;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    std::optional<RecencyTable::Displaced> displaced;
    if (m_table.record(make_key(i), t, &displaced)) kept += m_table.last_read(make_key(i)) == t ? 1 : 0;
  }
  // Slots of junk are "busy" or hold times of no sense: some groups refuse
  // (their reads are stamped on the files), the rest keep what they take.
  EXPECT_GT(kept, 0u);
}

TEST_F(RecencyTest, ATableCutShortUnderItsMappingIsClosedNotACrash) {
  // Anyone who can write the store can truncate the file the table maps;
  // an access past the new end is SIGBUS, which must not end the process.
  const std::int64_t t = 1'700'000'000 * k_s;
  ASSERT_TRUE(m_table.record(make_key(1), t, nullptr));
  ASSERT_EQ(::truncate(path().c_str(), 0), 0);
  EXPECT_EQ(m_table.last_read(make_key(1)), 0);
  EXPECT_FALSE(m_table.is_open());  // until the next call extends the file back
  // The next call does: the table works again, its lost slots empty.
  ASSERT_TRUE(m_table.record(make_key(2), t, nullptr));
  EXPECT_EQ(m_table.last_read(make_key(2)), t);
  struct stat st {};
  ASSERT_EQ(::stat(path().c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), RecencyTable::k_file_size);
  // Cut again within the second: no more than one extension a second, and
  // the calls between act as if the table were closed.
  ASSERT_EQ(::truncate(path().c_str(), 0), 0);
  EXPECT_EQ(m_table.last_read(make_key(2)), 0);
  EXPECT_FALSE(m_table.record(make_key(3), t, nullptr));
  m_table.forget(make_key(2));
  // Opened again, the file is its full size again and reads are kept.
  ASSERT_TRUE(m_table.open(Env::posix(), path(), 0600).ok());
  ASSERT_TRUE(m_table.record(make_key(3), t, nullptr));
  EXPECT_EQ(m_table.last_read(make_key(3)), t);
}

}  // namespace
}  // namespace progcache::file_store
