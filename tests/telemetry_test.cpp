// Telemetry: each store reports the bytes it served and took, and sampled
// lookup and put times; a file store's figures are host-wide (every process
// of the root, kept in its accounting file) and zeroed by zero_stats()
// without touching what it holds. Bytes are checked against what the user
// can see: the entry files on disk, the payloads put.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>

#include "progcache/file_store.h"
#include "progcache/memory_store.h"
#include "progcache/tiered_store.h"
#include "testing/test_util.h"
#include "util/latency.h"

namespace progcache {
namespace {

using testing::make_entry;
using testing::make_key;
using testing::make_payload;
using testing::TempDir;

TEST(LatencyTest, EveryValueLandsInABucketWhoseMiddleIsWithinAnEighth) {
  int last = 0;
  for (std::uint64_t ns = 16; ns < (std::uint64_t{1} << 41); ns += ns / 7 + 1) {
    const int b = latency_bucket(ns);
    EXPECT_GE(b, last) << ns;  // monotonic
    last = b;
    const double mid = static_cast<double>(latency_bucket_middle(b));
    EXPECT_LE(std::abs(mid - static_cast<double>(ns)) / static_cast<double>(ns), 0.125) << ns;
  }
  EXPECT_EQ(latency_bucket(0), 0);
  EXPECT_EQ(latency_bucket(~std::uint64_t{0}), k_latency_buckets - 1);
}

TEST(LatencyTest, PercentilesOfAKnownDistribution) {
  LatencyHistogram h;
  for (int i = 0; i < 980; ++i) h.record(1000);
  for (int i = 0; i < 20; ++i) h.record(1000000);
  const LatencySummary s = h.summary();
  EXPECT_EQ(s.samples, 1000u);
  EXPECT_NEAR(static_cast<double>(s.p50_ns), 1000.0, 190.0);
  EXPECT_NEAR(static_cast<double>(s.p99_ns), 1e6, 1.9e5);
  h.reset();
  EXPECT_EQ(h.summary().samples, 0u);
}

TEST(LatencyTest, TheFirstCallOfAThreadAndEverySixteenthAreSampled) {
  int sampled = 0;
  for (int i = 0; i < 33; ++i) sampled += sample_this_call<12345>() ? 1 : 0;
  EXPECT_EQ(sampled, 3);
}

TEST(TelemetryTest, AMemoryStoreCountsTheBytesItServedAndTimesItsCalls) {
  auto store = make_memory_store({});
  ASSERT_TRUE(store.ok());
  std::uint64_t put_bytes = 0;
  for (int i = 0; i < 40; ++i) {
    const Entry e = make_entry(make_payload(1000 + i, i));
    put_bytes += e.payload_size();
    ASSERT_TRUE((*store)->put(make_key(i), e).ok());
  }
  std::uint64_t got_bytes = 0;
  for (int i = 0; i < 40; ++i) {
    auto e = (*store)->get(make_key(i));
    ASSERT_TRUE(e.ok() && e->has_value());
    got_bytes += (*e)->payload_size();
  }
  ASSERT_FALSE((*store)->get(make_key(1000)).value().has_value());
  const StoreStats s = (*store)->stats();
  EXPECT_EQ(s.bytes_written, put_bytes);
  EXPECT_EQ(s.bytes_read, got_bytes);
  EXPECT_EQ(s.hits, 40u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_NEAR(hit_rate(s), 40.0 / 41.0, 1e-9);
  EXPECT_GE(s.get_samples, 2u);  // 41 lookups: at least one in 16
  EXPECT_LE(s.get_samples, 4u);
  EXPECT_GT(s.get_p50_ns, 0u);
  EXPECT_GE(s.get_p99_ns, s.get_p50_ns);
  EXPECT_GE(s.put_samples, 2u);
}

class FileTelemetryTest : public ::testing::Test {
 protected:
  std::unique_ptr<FileStore> open() {
    auto s = FileStore::open({.root = m_tmp.sub("cache")});
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(*s) : nullptr;
  }
  TempDir m_tmp;
};

TEST_F(FileTelemetryTest, BytesReadAndWrittenAreTheEntryFilesOnDiskAndOutliveTheStore) {
  {
    auto store = open();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(store->put(make_key(i), make_entry(make_payload(3000 + i, i))).ok());
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(store->get(make_key(i)).value().has_value());
    }
    const StoreStats own = store->stats();
    EXPECT_EQ(own.bytes_written, testing::entry_bytes_on_disk(m_tmp.sub("cache")));
    EXPECT_EQ(own.bytes_read, 2 * testing::entry_bytes_on_disk(m_tmp.sub("cache")));
  }
  // Another process (a child) reads every entry once more; the host-wide
  // figures, read by a store opened afterwards, hold both processes' calls.
  const pid_t child = ::fork();
  if (child == 0) {
    auto store = FileStore::open({.root = m_tmp.sub("cache")});
    bool ok = store.ok();
    for (int i = 0; ok && i < 20; ++i) ok = (*store)->get(make_key(i)).value().has_value();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto store = open();
  const std::uint64_t on_disk = testing::entry_bytes_on_disk(m_tmp.sub("cache"));
  const StoreStats host = store->host_stats();
  EXPECT_EQ(host.hits, 60u);
  EXPECT_EQ(host.puts, 20u);
  EXPECT_EQ(host.bytes_written, on_disk);
  EXPECT_EQ(host.bytes_read, 3 * on_disk);
  // One lookup in 16 of each thread is timed: 40 here, 20 in the child.
  EXPECT_GE(host.get_samples, 3u);
  EXPECT_GE(host.put_samples, 1u);
  EXPECT_GT(host.get_p50_ns, 0u);
  EXPECT_GE(host.get_p99_ns, host.get_p50_ns);
  EXPECT_EQ(store->stats().hits, 0u) << "a store object's own figures hold only its own calls";
}

TEST_F(FileTelemetryTest, ZeroingClearsTheCountersNotWhatIsHeld) {
  auto store = open();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store->put(make_key(i), make_entry(make_payload(500, i))).ok());
  for (int i = 0; i < 12; ++i) store->get(make_key(i)).value();
  const StoreStats before = store->host_stats();
  ASSERT_EQ(before.hits, 10u);
  ASSERT_EQ(before.misses, 2u);
  store->zero_stats();
  auto other = open();  // a second opener sees the zeroed file
  const StoreStats after = other->host_stats();
  for (const auto& f : store_stat_fields()) {
    if (f.member == &StoreStats::entries || f.member == &StoreStats::bytes_stored) {
      EXPECT_EQ(after.*f.member, before.*f.member) << f.name;
    } else {
      EXPECT_EQ(after.*f.member, 0u) << f.name;
    }
  }
  EXPECT_EQ(testing::entry_files_on_disk(m_tmp.sub("cache")), 10u);
  ASSERT_TRUE(other->get(make_key(3)).value().has_value());
  EXPECT_EQ(store->host_stats().hits, 1u);
}

TEST_F(FileTelemetryTest, ATieredStoreReportsItsOwnFiguresAndEachTiers) {
  TieredStoreOptions o;
  o.memory = make_memory_store({}).value();
  o.disk = open();
  auto tiered = make_tiered_store(std::move(o));
  const Entry e = make_entry(make_payload(2000, 1));
  ASSERT_TRUE(tiered->put(make_key(1), e).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(tiered->get(make_key(1)).value().has_value());
  const StoreStats s = tiered->stats();
  EXPECT_EQ(s.bytes_written, e.payload_size());
  EXPECT_EQ(s.bytes_read, 5 * e.payload_size());
  EXPECT_GE(s.get_samples, 1u);
  std::uint64_t memory_hits = 0;
  for (const auto& t : tiered->tier_stats()) {
    if (t.tier == "memory") memory_hits = t.stats.hits;
  }
  EXPECT_EQ(memory_hits, 5u);
}

}  // namespace
}  // namespace progcache
