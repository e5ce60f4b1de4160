#include "progcache/memory_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::make_entry;
using testing::make_key;

std::unique_ptr<Store> make(MemoryStoreOptions o = {}) {
  auto s = make_memory_store(o);
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

TEST(MemoryStore, MissIsNulloptNotAnError) {
  auto s = make();
  auto r = s->get(make_key(1));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(s->stats().misses, 1u);
}

TEST(MemoryStore, PutGetEraseClearCountSize) {
  auto s = make();
  ASSERT_TRUE(s->put(make_key(1), make_entry("one")).ok());
  ASSERT_TRUE(s->put_bytes(make_key(2), Bytes::copy_of("two!")).ok());
  EXPECT_EQ(*s->count(), 2u);
  EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "one");
  EXPECT_EQ((*s->get_bytes(make_key(2)))->view(), "two!");
  EXPECT_TRUE(*s->erase(make_key(1)));
  EXPECT_FALSE(*s->erase(make_key(1)));
  EXPECT_EQ(*s->count(), 1u);
  ASSERT_TRUE(s->clear().ok());
  EXPECT_EQ(*s->count(), 0u);
  EXPECT_EQ(*s->size_bytes(), 0u);
  const StoreStats st = s->stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.puts, 2u);
}

TEST(MemoryStore, StringAndBytesKeysAreOneEntry) {
  auto s = make();
  const std::string as_string = "k";
  const char raw[] = {'k'};
  ASSERT_TRUE(s->put_bytes(key_from_user(as_string), Bytes::copy_of("v")).ok());
  auto got = s->get_bytes(key_from_user(std::string_view(raw, 1)));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->view(), "v");
}

TEST(MemoryStore, HitsAreZeroCopy) {
  auto s = make();
  const Entry e = make_entry(std::string(1 << 20, 'x'));
  ASSERT_TRUE(s->put(make_key(1), e).ok());
  auto a = s->get(make_key(1));
  auto b = s->get(make_key(1));
  EXPECT_EQ((*a)->primary().data(), e.primary().data());
  EXPECT_EQ((*b)->primary().data(), e.primary().data());
}

TEST(MemoryStore, EvictsLeastRecentlyUsedInExactOrder) {
  const std::uint64_t each = make_entry("0123456789").payload_size();
  auto s = make({.max_size_bytes = 3 * each});
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry("0123456789")).ok());
  ASSERT_TRUE((*s->get(make_key(1))).has_value());  // 1 becomes most recent: order 2,3,1
  ASSERT_TRUE(s->put(make_key(4), make_entry("0123456789")).ok());
  EXPECT_FALSE((*s->get(make_key(2))).has_value());
  EXPECT_TRUE((*s->get(make_key(3))).has_value());  // order now 1,4,3
  ASSERT_TRUE(s->put(make_key(5), make_entry("0123456789")).ok());
  EXPECT_FALSE((*s->get(make_key(1))).has_value());
  EXPECT_TRUE((*s->get(make_key(4))).has_value());
  EXPECT_TRUE((*s->get(make_key(5))).has_value());
  EXPECT_EQ(s->stats().evictions, 2u);
  EXPECT_LE(*s->size_bytes(), 3 * each);
}

TEST(MemoryStore, EntryCapAndOversizedEntry) {
  auto s = make({.max_size_bytes = 100, .max_entries = 2});
  ASSERT_TRUE(s->put(make_key(1), make_entry("a")).ok());
  ASSERT_TRUE(s->put(make_key(2), make_entry("b")).ok());
  ASSERT_TRUE(s->put(make_key(3), make_entry("c")).ok());
  EXPECT_EQ(*s->count(), 2u);
  EXPECT_FALSE((*s->get(make_key(1))).has_value());
  ASSERT_TRUE(s->put(make_key(9), make_entry(std::string(200, 'z'))).ok());  // larger than the cap
  EXPECT_FALSE((*s->get(make_key(9))).has_value());
  EXPECT_EQ(*s->count(), 2u);
}

TEST(MemoryStore, ReplacingAnEntryRechargesItsSize) {
  auto s = make({.max_size_bytes = 1000});
  ASSERT_TRUE(s->put(make_key(1), make_entry(std::string(100, 'a'))).ok());
  const auto first = *s->size_bytes();
  ASSERT_TRUE(s->put(make_key(1), make_entry(std::string(10, 'a'))).ok());
  EXPECT_EQ(*s->count(), 1u);
  EXPECT_EQ(*s->size_bytes(), first - 90);
}

TEST(MemoryStore, CapacityZeroDisables) {
  auto s = make({.max_size_bytes = 0});
  ASSERT_TRUE(s->put(make_key(1), make_entry("x")).ok());
  EXPECT_FALSE((*s->get(make_key(1))).has_value());
  EXPECT_EQ(*s->count(), 0u);
}

TEST(MemoryStore, BadShardCountIsRefused) {
  EXPECT_EQ(make_memory_store({.shards = 3}).status().code(), Code::invalid_argument);
  EXPECT_EQ(make_memory_store({.shards = 512}).status().code(), Code::invalid_argument);
}

TEST(MemoryStore, ClosedStoreFails) {
  auto s = make();
  ASSERT_TRUE(s->close().ok());
  EXPECT_EQ(s->get(make_key(1)).status().code(), Code::failed_precondition);
  EXPECT_EQ(s->put(make_key(1), make_entry("x")).code(), Code::failed_precondition);
  EXPECT_EQ(s->erase(make_key(1)).status().code(), Code::failed_precondition);
  EXPECT_EQ(s->clear().code(), Code::failed_precondition);
  EXPECT_EQ(s->count().status().code(), Code::failed_precondition);
  EXPECT_EQ(s->size_bytes().status().code(), Code::failed_precondition);
}

TEST(MemoryStore, ManyThreadsKeepTheCapAndSeeConsistentEntries) {
  const std::uint64_t cap = 64 * 1024;
  auto s = make({.max_size_bytes = cap, .shards = 16});
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        const int k = (i * 7 + t) % 300;
        const std::string payload = std::to_string(k) + std::string(100 + k, 'p');
        if (i % 3 == 0) {
          s->put(make_key(k), make_entry(payload)).ignore();
        } else {
          auto g = s->get(make_key(k));
          if (g.ok() && g->has_value() && (*g)->primary().view() != payload) bad++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(*s->size_bytes(), cap);
}

}  // namespace
}  // namespace progcache
