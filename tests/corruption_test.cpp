// A populated store with entries damaged four ways (bit flips, truncation,
// extension, files swapped between keys): `progcache verify` lists every one
// with its reason; every damaged entry is then a miss, counted and removed;
// every undamaged one still hits with its own bytes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <random>
#include <set>

#include "progcache/file_store.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using testing::make_key;

std::string payload(int i) {
  return testing::make_payload(200 + (i * 37) % 3000, static_cast<std::uint64_t>(i));
}

TEST(Corruption, EveryDamagedEntryIsFoundServedAsAMissCountedAndRemoved) {
  testing::TempDir tmp;
  const std::string root = tmp.sub("cache");
  constexpr int k_entries = 200;
  {
    auto s = FileStore::open({.root = root});
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < k_entries; ++i) ASSERT_TRUE((*s)->put_bytes(make_key(i), Bytes::copy_of(payload(i))).ok());
  }
  auto s = std::move(*FileStore::open({.root = root}));
  std::mt19937 rng(42);
  std::set<int> damaged;
  auto path = [&](int i) { return s->entry_path(make_key(i)); };
  // 0..19 bit flips, 20..39 truncations, 40..59 extensions, 60..79 swapped in pairs.
  for (int i = 0; i < 20; ++i) {
    std::string b = testing::read_all(path(i));
    const std::size_t pos = rng() % b.size();
    b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8)));
    testing::write_all(path(i), b);
    damaged.insert(i);
  }
  for (int i = 20; i < 40; ++i) {
    std::string b = testing::read_all(path(i));
    testing::write_all(path(i), b.substr(0, rng() % b.size()));
    damaged.insert(i);
  }
  for (int i = 40; i < 60; ++i) {
    std::string b = testing::read_all(path(i));
    testing::write_all(path(i), b + std::string(1 + rng() % 100, static_cast<char>(rng())));
    damaged.insert(i);
  }
  for (int i = 60; i < 80; i += 2) {
    const std::string a = testing::read_all(path(i)), b = testing::read_all(path(i + 1));
    testing::write_all(path(i), b);
    testing::write_all(path(i + 1), a);
    damaged.insert(i);
    damaged.insert(i + 1);
  }

  // The CLI lists each with a reason and exits 3.
  const std::string out = tmp.sub("verify.out");
  const std::string cmd = std::string("'") + PROGCACHE_CLI_PATH + "' --dir '" + root + "' verify > '" + out + "'";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 3);
  const std::string listing = testing::read_all(out);
  for (int i : damaged) EXPECT_NE(listing.find(path(i) + ": "), std::string::npos) << "verify missed entry " << i;
  EXPECT_NE(listing.find("checksum mismatch"), std::string::npos);
  EXPECT_NE(listing.find("length mismatch"), std::string::npos);
  EXPECT_NE(listing.find("key echo mismatch"), std::string::npos);
  EXPECT_NE(listing.find("damaged 80"), std::string::npos) << listing;

  // Reads: damaged → miss, counted, removed; the rest intact.
  for (int i = 0; i < k_entries; ++i) {
    auto g = s->get_bytes(make_key(i));
    ASSERT_TRUE(g.ok());
    if (damaged.count(i)) {
      EXPECT_FALSE(g->has_value()) << "damaged entry " << i << " was served";
      EXPECT_FALSE(fs::exists(path(i)));
    } else {
      ASSERT_TRUE(g->has_value()) << i;
      EXPECT_EQ((*g)->str(), payload(i));
    }
  }
  EXPECT_EQ(s->stats().corrupt_dropped, damaged.size());
  auto after = s->verify(Repair::no);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->problems.empty());
  EXPECT_EQ(after->ok, k_entries - damaged.size());
}

}  // namespace
}  // namespace progcache
