// Tiers composed, with no Redis: memory over disk, and a remote tier over a
// backend held in memory. (Tiers over a real redis-server are in
// redis_store_test.cpp.)
#include "progcache/tiered_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "progcache/file_store.h"
#include "progcache/memory_store.h"
#include "testing/fake_backend.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::FakeBackend;
using testing::make_entry;
using testing::make_key;
using namespace std::chrono_literals;

// A tier that fails every call, as a disk that went away.
class BrokenStore final : public Store {
 public:
  Result<std::optional<Entry>> get(const Key&) override { return unavailable("broken tier"); }
  Status put(const Key&, const Entry&) override { return unavailable("broken tier"); }
  Result<bool> erase(const Key&) override { return unavailable("broken tier"); }
  Status clear() override { return unavailable("broken tier"); }
  Result<std::uint64_t> count() override { return unavailable("broken tier"); }
  Result<std::uint64_t> size_bytes() override { return unavailable("broken tier"); }
  StoreStats stats() override { return {}; }
  Status close() override { return {}; }
  [[nodiscard]] std::string name() const override { return "broken"; }
};

// A memory tier whose put waits until released, then answers as a store
// closed meanwhile does: what a put overtaken by close() meets.
class HeldStore final : public Store {
 public:
  Result<std::optional<Entry>> get(const Key&) override { return std::optional<Entry>(); }
  Status put(const Key&, const Entry&) override {
    std::unique_lock<std::mutex> l(m_mu);
    m_entered = true;
    m_cv.notify_all();
    m_cv.wait(l, [&] { return m_released; });
    return m_closed ? failed_precondition("held store is closed") : Status();
  }
  Result<bool> erase(const Key&) override { return false; }
  Status clear() override { return {}; }
  Result<std::uint64_t> count() override { return 0; }
  Result<std::uint64_t> size_bytes() override { return 0; }
  StoreStats stats() override { return {}; }
  Status close() override {
    std::lock_guard<std::mutex> l(m_mu);
    m_closed = true;
    return {};
  }
  [[nodiscard]] std::string name() const override { return "held"; }
  void wait_entered() {
    std::unique_lock<std::mutex> l(m_mu);
    m_cv.wait(l, [&] { return m_entered; });
  }
  void release() {
    std::lock_guard<std::mutex> l(m_mu);
    m_released = true;
    m_cv.notify_all();
  }

 private:
  std::mutex m_mu;
  std::condition_variable m_cv;
  bool m_entered = false, m_released = false, m_closed = false;
};

class TieredStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<TieredStore> memory_over_disk() {
    TieredStoreOptions o;
    o.memory = std::move(*make_memory_store({}));
    o.disk = std::move(*FileStore::open({.root = m_tmp.sub("disk")}));
    return make_tiered_store(std::move(o));
  }
  std::unique_ptr<RemoteStore> fake_remote(std::shared_ptr<FakeBackend::State> state) {
    std::vector<std::unique_ptr<RemoteBackend>> bs;
    bs.push_back(std::make_unique<FakeBackend>("fake://r", std::move(state)));
    return std::move(*make_remote_store(std::move(bs), {}));
  }
  testing::TempDir m_tmp;
};

TEST_F(TieredStoreTest, MemoryOverDiskNeedsNoRemoteAndBackfillsMemoryFromDisk) {
  {
    auto first = memory_over_disk();
    ASSERT_TRUE(first->put(make_key(1), make_entry("on disk")).ok());
    ASSERT_TRUE(first->close().ok());
  }
  // A new process: its memory is empty, the disk has the entry.
  auto t = memory_over_disk();
  auto hit = t->get_bytes(make_key(1));
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->view(), "on disk");
  auto tiers = t->tier_stats();
  ASSERT_EQ(tiers.size(), 2u);
  EXPECT_EQ(tiers[0].tier, "memory");
  EXPECT_EQ(tiers[0].stats.misses, 1u);
  EXPECT_EQ(tiers[1].tier, "file");
  EXPECT_EQ(tiers[1].stats.hits, 1u);
  // Backfilled: the second get is served by memory, the disk is not asked.
  ASSERT_TRUE(t->get(make_key(1))->has_value());
  tiers = t->tier_stats();
  EXPECT_EQ(tiers[0].stats.hits, 1u);
  EXPECT_EQ(tiers[1].stats.hits, 1u);
  // The caller saw two hits (one from disk, one from memory), which neither
  // tier's own counters say.
  EXPECT_EQ(t->stats().hits, 2u);
  EXPECT_EQ(t->stats().misses, 0u);
  EXPECT_FALSE(t->remote_stats().has_value());
}

TEST_F(TieredStoreTest, StatsAreWhatTheCallerSawAndWhatTheDiskHolds) {
  auto t = memory_over_disk();
  ASSERT_TRUE(t->put(make_key(1), make_entry("a")).ok());
  ASSERT_TRUE(t->put(make_key(2), make_entry("bb")).ok());
  ASSERT_TRUE(t->get(make_key(1))->has_value());
  EXPECT_FALSE(t->get(make_key(3))->has_value());  // missed in both tiers: one miss
  const StoreStats s = t->stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.puts, 2u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.entries, *t->count());
  EXPECT_EQ(s.bytes_stored, *t->size_bytes());
  EXPECT_GT(s.bytes_stored, 0u);
}

TEST_F(TieredStoreTest, AFailingTierIsAMissThereAndOnlyAllTiersFailingIsAnError) {
  TieredStoreOptions o;
  o.memory = std::make_unique<BrokenStore>();
  o.disk = std::move(*FileStore::open({.root = m_tmp.sub("disk")}));
  auto t = make_tiered_store(std::move(o));
  ASSERT_TRUE(t->put(make_key(1), make_entry("v")).ok());  // the disk took it
  auto g = t->get_bytes(make_key(1));
  ASSERT_TRUE(g.ok() && g->has_value()) << g.status().to_string();
  EXPECT_EQ((*g)->view(), "v");

  TieredStoreOptions all_broken;
  all_broken.memory = std::make_unique<BrokenStore>();
  all_broken.disk = std::make_unique<BrokenStore>();
  auto b = make_tiered_store(std::move(all_broken));
  EXPECT_EQ(b->get(make_key(1)).status().code(), Code::unavailable);
  EXPECT_EQ(b->put(make_key(1), make_entry("v")).code(), Code::unavailable);
  EXPECT_EQ(b->stats().errors, 2u);
}

TEST_F(TieredStoreTest, RemotePutsAreAsynchronousFlushedOnCloseAndHitsComeBackDown) {
  auto state = std::make_shared<FakeBackend::State>();
  {
    TieredStoreOptions o;
    o.disk = std::move(*FileStore::open({.root = m_tmp.sub("m1")}));
    o.remote = fake_remote(state);
    auto m1 = make_tiered_store(std::move(o));
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(m1->put(make_key(i), make_entry("shared " + std::to_string(i))).ok());
    ASSERT_TRUE(m1->close().ok());
    EXPECT_EQ(m1->tiered_stats().dropped, 0u);
  }
  EXPECT_EQ(state->data.size(), 10u);
  // Another machine: its disk is empty; the remote serves, the disk is filled.
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = m_tmp.sub("m2")}));
  o.remote = fake_remote(state);
  auto m2 = make_tiered_store(std::move(o));
  auto g = m2->get_bytes(make_key(4));
  ASSERT_TRUE(g.ok() && g->has_value());
  EXPECT_EQ((*g)->view(), "shared 4");
  EXPECT_EQ(m2->tier_stats().back().tier, "remote");
  auto disk = FileStore::open({.root = m_tmp.sub("m2")});
  EXPECT_TRUE((*(*disk)->get(make_key(4))).has_value());
}

// After close() no call reports success it cannot have: a put is refused,
// not queued for a remote worker that has stopped.
TEST_F(TieredStoreTest, AfterCloseEveryCallFailsAndNothingIsQueued) {
  auto state = std::make_shared<FakeBackend::State>();
  TieredStoreOptions o;
  o.memory = std::move(*make_memory_store({}));
  o.disk = std::move(*FileStore::open({.root = m_tmp.sub("closed")}));
  o.remote = fake_remote(state);
  auto t = make_tiered_store(std::move(o));
  ASSERT_TRUE(t->put(make_key(1), make_entry("before")).ok());
  ASSERT_TRUE(t->close().ok());
  EXPECT_EQ(t->put(make_key(2), make_entry("after")).code(), Code::failed_precondition);
  EXPECT_EQ(t->get(make_key(1)).status().code(), Code::failed_precondition);
  EXPECT_EQ(t->erase(make_key(1)).status().code(), Code::failed_precondition);
  EXPECT_EQ(t->clear().code(), Code::failed_precondition);
  EXPECT_EQ(t->count().status().code(), Code::failed_precondition);
  EXPECT_EQ(t->size_bytes().status().code(), Code::failed_precondition);
  EXPECT_EQ(state->data.size(), 1u);  // what was put before the close, flushed
  EXPECT_EQ(t->tiered_stats().dropped, 0u);
}

// A put already past the closed check when close() runs to the end (its
// memory tier still busy): no tier took it and the remote worker is gone,
// so it fails; it is not reported stored.
TEST_F(TieredStoreTest, APutOvertakenByCloseIsRefusedNotReportedStored) {
  auto state = std::make_shared<FakeBackend::State>();
  TieredStoreOptions o;
  auto held = std::make_unique<HeldStore>();
  HeldStore* memory = held.get();
  o.memory = std::move(held);
  o.remote = fake_remote(state);
  auto t = make_tiered_store(std::move(o));
  Status put_result;
  std::thread putter([&] { put_result = t->put(make_key(1), make_entry("overtaken")); });
  memory->wait_entered();
  ASSERT_TRUE(t->close().ok());
  memory->release();
  putter.join();
  EXPECT_EQ(put_result.code(), Code::failed_precondition) << put_result.to_string();
  EXPECT_EQ(state->data.size(), 0u);
  EXPECT_EQ(t->tiered_stats().dropped, 0u);
}

// No tier at all (every option left empty): a cache that holds nothing,
// not a crash on the first question about its size.
TEST_F(TieredStoreTest, ATieredStoreWithNoTiersHoldsNothing) {
  auto t = make_tiered_store({});
  auto g = t->get(make_key(1));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_FALSE(g->has_value());
  EXPECT_TRUE(t->put(make_key(1), make_entry("nowhere")).ok());
  ASSERT_TRUE(t->count().ok());
  EXPECT_EQ(*t->count(), 0u);
  ASSERT_TRUE(t->size_bytes().ok());
  EXPECT_EQ(*t->size_bytes(), 0u);
  EXPECT_EQ(t->stats().entries, 0u);
  EXPECT_TRUE(t->close().ok());
}

TEST_F(TieredStoreTest, ARemoteOutageCostsAMissNeverAFailedCall) {
  auto state = std::make_shared<FakeBackend::State>();
  state->mode = FakeBackend::Mode::down;
  TieredStoreOptions o;
  o.memory = std::move(*make_memory_store({}));
  o.disk = std::move(*FileStore::open({.root = m_tmp.sub("d")}));
  o.remote = fake_remote(state);
  auto t = make_tiered_store(std::move(o));
  auto miss = t->get(make_key(1));
  ASSERT_TRUE(miss.ok()) << miss.status().to_string();
  EXPECT_FALSE(miss->has_value());
  ASSERT_TRUE(t->put(make_key(1), make_entry("local")).ok());
  EXPECT_TRUE(t->get(make_key(1))->has_value());
  ASSERT_TRUE(t->flush().ok());
  EXPECT_GE(t->remote_stats()->failures, 1u);
}

TEST_F(TieredStoreTest, AFullRemoteQueueDropsAndCountsNewPutsWithoutBlocking) {
  auto state = std::make_shared<FakeBackend::State>();
  state->mode = FakeBackend::Mode::hang;  // each remote put takes its 50 ms timeout
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = m_tmp.sub("d")}));
  o.remote = fake_remote(state);
  o.remote_queue = 2;
  o.flush_timeout = 10s;
  auto t = make_tiered_store(std::move(o));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(t->put(make_key(i), make_entry("v")).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "puts waited for the remote";
  const TieredStats ts = t->tiered_stats();
  EXPECT_GE(ts.dropped, 1u);
  EXPECT_LE(ts.queued, 2u);
  ASSERT_TRUE(t->flush().ok());
  EXPECT_EQ(t->tiered_stats().queued, 0u);
  // Every remote put is accounted for: dropped at the queue, or tried and
  // timed out at the hung backend.
  EXPECT_EQ(t->tiered_stats().dropped + t->tier_stats().back().stats.errors, 20u);
  // Every put reached the disk, whatever the remote did.
  EXPECT_EQ(*t->count(), 20u);
}

}  // namespace
}  // namespace progcache
