// The remote tier's policies over backends held in memory: sharding, the
// breaker, deadlines, read-only mode, the entry format and the statistics,
// with no server and no Redis. (The Redis backend itself, against real
// redis-server processes, is in redis_store_test.cpp.)
#include "progcache/remote_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "testing/fake_backend.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::FakeBackend;
using testing::make_entry;
using testing::make_key;
using Mode = FakeBackend::Mode;
using namespace std::chrono_literals;

struct Rig {
  std::vector<std::shared_ptr<FakeBackend::State>> states;
  std::unique_ptr<RemoteStore> store;
};

Rig rig(int backends, RemoteStoreOptions o = {}, std::chrono::milliseconds timeout = 50ms) {
  Rig r;
  std::vector<std::unique_ptr<RemoteBackend>> bs;
  for (int i = 0; i < backends; ++i) {
    r.states.push_back(std::make_shared<FakeBackend::State>());
    bs.push_back(std::make_unique<FakeBackend>("fake://" + std::to_string(i), r.states.back(), timeout));
  }
  auto s = make_remote_store(std::move(bs), o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  r.store = std::move(*s);
  return r;
}

TEST(RemoteStore, RoundTripsEntriesAndWalksEveryBackendForCountSizeAndClear) {
  Rig r = rig(2);
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(r.store->put(make_key(i), make_entry("value " + std::to_string(i))).ok());
  for (int i = 0; i < 9; ++i) {
    auto got = r.store->get_bytes(make_key(i));
    ASSERT_TRUE(got.ok() && got->has_value()) << i;
    EXPECT_EQ((*got)->view(), "value " + std::to_string(i));
  }
  EXPECT_FALSE(r.store->get(make_key(100))->has_value());
  // Stored under the key's hex name, encoded as an entry.
  std::uint64_t held = 0;
  for (auto& st : r.states) {
    for (const auto& [name, value] : st->data) {
      EXPECT_TRUE(Key::from_hex(name).ok()) << name;
      held += value.size();
    }
  }
  // The walks go batch by batch (two names a batch here) over both backends.
  for (auto& st : r.states) EXPECT_FALSE(st->data.empty()) << "a backend got no key";
  EXPECT_EQ(*r.store->count(), 9u);
  EXPECT_EQ(*r.store->size_bytes(), held);
  const StoreStats s = r.store->stats();
  EXPECT_EQ(s.puts, 9u);
  EXPECT_EQ(s.hits, 9u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_TRUE(*r.store->erase(make_key(0)));
  EXPECT_FALSE(*r.store->erase(make_key(0)));
  ASSERT_TRUE(r.store->clear().ok());
  EXPECT_EQ(*r.store->count(), 0u);
  for (auto& st : r.states) EXPECT_TRUE(st->data.empty());
}

TEST(RemoteStore, RendezvousShardingSpreadsKeysAndLosingABackendMovesOnlyItsShare) {
  Rig three = rig(3);
  constexpr int k_keys = 3000;
  std::map<std::string, int> per;
  std::map<int, std::string> owner;
  for (int i = 0; i < k_keys; ++i) per[owner[i] = three.store->server_for(make_key(i))]++;
  ASSERT_EQ(per.size(), 3u);
  for (const auto& [id, n] : per) {
    EXPECT_GT(n, k_keys / 3 - 200) << id;
    EXPECT_LT(n, k_keys / 3 + 200) << id;
  }
  // Backend 2 leaves: every key it did not own keeps its owner.
  Rig two = rig(2);
  for (int i = 0; i < k_keys; ++i) {
    if (owner[i] != "fake://2") {
      EXPECT_EQ(two.store->server_for(make_key(i)), owner[i]) << i;
    }
  }
  // A put lands on its owner only.
  ASSERT_TRUE(three.store->put(make_key(7), make_entry("x")).ok());
  const int o = owner[7].back() - '0';
  for (int b = 0; b < 3; ++b) EXPECT_EQ(three.states[b]->data.size(), b == o ? 1u : 0u);
}

TEST(RemoteStore, ConsecutiveOutagesOpenTheBreakerWhichSkipsCallsThenProbesAfterTheBackoff) {
  Rig r = rig(1, {.breaker_failures = 2, .breaker_backoff = 200ms});
  ASSERT_TRUE(r.store->put(make_key(1), make_entry("kept")).ok());
  r.states[0]->mode = Mode::down;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(r.store->get(make_key(1)).status().code(), Code::unavailable);
  const int calls = r.states[0]->calls;
  // Open: the backend is not called at all.
  for (int i = 0; i < 5; ++i) {
    auto g = r.store->get(make_key(1));
    EXPECT_EQ(g.status().code(), Code::unavailable);
    EXPECT_NE(g.status().message().find("circuit breaker"), std::string::npos) << g.status().to_string();
  }
  EXPECT_EQ(r.states[0]->calls, calls);
  RemoteStats rs = r.store->remote_stats();
  EXPECT_EQ(rs.breaker_trips, 1u);
  EXPECT_EQ(rs.skipped, 5u);
  EXPECT_EQ(rs.failures, 2u);
  EXPECT_NE(rs.last_error.find("connection refused"), std::string::npos);
  EXPECT_EQ(r.store->stats().errors, 7u);
  // After the back-off exactly one probe goes through; it fails, and the
  // breaker is open again for another back-off.
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(r.store->get(make_key(1)).status().code(), Code::unavailable);
  EXPECT_EQ(r.states[0]->calls, calls + 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.store->get(make_key(1)).status().code(), Code::unavailable);
  EXPECT_EQ(r.states[0]->calls, calls + 1) << "calls reached the backend while the breaker was open again";
  // After the next back-off the probe succeeds; the backend is back.
  r.states[0]->mode = Mode::ok;
  std::this_thread::sleep_for(250ms);
  auto g = r.store->get_bytes(make_key(1));
  ASSERT_TRUE(g.ok() && g->has_value()) << g.status().to_string();
  EXPECT_EQ((*g)->view(), "kept");
  EXPECT_EQ(r.states[0]->calls, calls + 2);
  EXPECT_TRUE(r.store->get(make_key(1))->has_value());
  EXPECT_EQ(r.states[0]->calls, calls + 3);
}

TEST(RemoteStore, AHungBackendCostsAtMostItsCallTimeoutAndCountsAsATimeout) {
  Rig r = rig(1, {.breaker_failures = 100}, 50ms);
  r.states[0]->mode = Mode::hang;
  for (int i = 0; i < 3; ++i) {
    r.states[0]->last_budget = 0ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto g = r.store->get(make_key(1));
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(g.status().code(), Code::deadline_exceeded);
    EXPECT_GE(waited, 45ms);
    EXPECT_LT(waited, 2s) << "a hung backend held a call far past its timeout";
    // The deadline handed to the backend is the call timeout from now.
    EXPECT_GT(r.states[0]->last_budget, 30ms);
    EXPECT_LE(r.states[0]->last_budget, 50ms);
  }
  EXPECT_EQ(r.store->remote_stats().timeouts, 3u);
  EXPECT_EQ(r.store->remote_stats().failures, 0u);
}

TEST(RemoteStore, RefusedCredentialsOpenTheBreakerLikeAnOutage) {
  Rig r = rig(1, {.breaker_failures = 2, .breaker_backoff = 10s});
  r.states[0]->mode = Mode::refuse_auth;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(r.store->put(make_key(1), make_entry("v")).code(), Code::permission_denied);
  EXPECT_EQ(r.store->put(make_key(1), make_entry("v")).code(), Code::unavailable);
  EXPECT_EQ(r.store->remote_stats().breaker_trips, 1u);
  EXPECT_EQ(r.states[0]->calls, 2);
}

TEST(RemoteStore, AWalkThatNeverEndsIsBoundedByTheAdminTimeout) {
  Rig r = rig(1, {.admin_timeout = 300ms});
  r.states[0]->mode = Mode::endless_scan;
  const auto t0 = std::chrono::steady_clock::now();
  auto n = r.store->count();
  EXPECT_EQ(n.status().code(), Code::deadline_exceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(r.store->clear().code(), Code::deadline_exceeded);
}

TEST(RemoteStore, ReadOnlyNeverWritesAndCountsWhatItSkipped) {
  Rig r = rig(1, {.read_only = true});
  ASSERT_TRUE(r.store->put(make_key(1), make_entry("v")).ok());  // skipped, not an error
  EXPECT_TRUE(r.states[0]->data.empty());
  EXPECT_EQ(r.states[0]->calls, 0);
  EXPECT_EQ(r.store->remote_stats().read_only_skips, 1u);
  EXPECT_EQ(r.store->erase(make_key(1)).status().code(), Code::failed_precondition);
  EXPECT_EQ(r.store->clear().code(), Code::failed_precondition);
  // Reads still reach the backend and hit.
  std::vector<std::unique_ptr<RemoteBackend>> bs;
  bs.push_back(std::make_unique<FakeBackend>("fake://0", r.states[0]));
  auto writer = std::move(*make_remote_store(std::move(bs), {}));
  ASSERT_TRUE(writer->put(make_key(2), make_entry("written elsewhere")).ok());
  auto got = r.store->get_bytes(make_key(2));
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->view(), "written elsewhere");
}

TEST(RemoteStore, GarbageOrForeignValuesAreCountedMissesNotErrors) {
  Rig r = rig(1);
  r.states[0]->data[make_key(1).hex()] = "garbage";
  r.states[0]->data[make_key(2).hex()] = "";  // a value of another kind
  ASSERT_TRUE(r.store->put(make_key(3), make_entry("right")).ok());
  r.states[0]->data[make_key(4).hex()] = r.states[0]->data[make_key(3).hex()];  // an entry under the wrong key
  for (int i : {1, 2, 4}) {
    auto g = r.store->get(make_key(i));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_FALSE(g->has_value()) << i;
  }
  EXPECT_EQ(r.store->stats().corrupt_dropped, 3u);
  EXPECT_EQ(r.store->stats().errors, 0u);
  EXPECT_EQ(r.store->remote_stats().breaker_trips, 0u);
}

TEST(RemoteStore, SignedEntriesAreCheckedWithTheKey) {
  auto state = std::make_shared<FakeBackend::State>();
  auto over = [&](std::string key) {
    std::vector<std::unique_ptr<RemoteBackend>> bs;
    bs.push_back(std::make_unique<FakeBackend>("fake://shared", state));
    return std::move(*make_remote_store(std::move(bs), {.codec = {std::move(key)}}));
  };
  auto signer = over("0123456789abcdef-one");
  auto other = over("0123456789abcdef-two");
  auto unsigned_reader = over("");
  ASSERT_TRUE(signer->put(make_key(1), make_entry("signed")).ok());
  EXPECT_TRUE(signer->get(make_key(1))->has_value());
  EXPECT_FALSE(other->get(make_key(1))->has_value());
  EXPECT_EQ(other->stats().rejected, 1u);
  ASSERT_TRUE(unsigned_reader->put(make_key(2), make_entry("unsigned")).ok());
  EXPECT_FALSE(signer->get(make_key(2))->has_value());
  EXPECT_EQ(signer->stats().rejected, 1u);
}

TEST(RemoteStore, AnEntryOverTheValueLimitIsNeverSent) {
  Rig r = rig(1, {.max_value_bytes = 1024});
  const Status st = r.store->put(make_key(1), make_entry(std::string(4096, 'x')));
  EXPECT_EQ(st.code(), Code::resource_exhausted) << st.to_string();
  EXPECT_EQ(r.states[0]->calls, 0);
  EXPECT_EQ(r.store->stats().errors, 1u);
}

TEST(RemoteStore, AnOutageOfOneBackendCostsOnlyItsShare) {
  Rig r = rig(3, {.breaker_failures = 1, .breaker_backoff = 10s});
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(r.store->put(make_key(i), make_entry("v")).ok());
  r.states[1]->mode = Mode::down;
  int served = 0, failed = 0;
  for (int i = 0; i < 60; ++i) {
    auto g = r.store->get(make_key(i));
    const bool on_down = r.store->server_for(make_key(i)) == "fake://1";
    EXPECT_EQ(g.ok(), !on_down) << i;
    (g.ok() && g->has_value() ? served : failed)++;
  }
  EXPECT_EQ(served + failed, 60);
  EXPECT_GT(served, 20);
  EXPECT_GT(failed, 5);
}

TEST(RemoteUrls, TheSchemeTableNamesWhatThisBuildHasAndNeverEchoesAPassword) {
  auto unknown = check_remote_url("memcached://user:hunter2@host");
  EXPECT_EQ(unknown.status().code(), Code::invalid_argument);
  EXPECT_EQ(unknown.status().message().find("hunter2"), std::string::npos) << unknown.status().to_string();
  EXPECT_FALSE(check_remote_url("no-scheme-at-all").ok());
  // A password before the first "://" is not a scheme, and is not shown.
  auto odd = check_remote_url("alice:hunter2://x@h");
  EXPECT_EQ(odd.status().code(), Code::invalid_argument);
  EXPECT_EQ(odd.status().message().find("hunter2"), std::string::npos) << odd.status().to_string();
  EXPECT_FALSE(make_remote_store({.urls = {"memcached://h"}}).ok());
  EXPECT_EQ(make_remote_store({}).status().code(), Code::invalid_argument);
  const auto schemes = remote_schemes();
  const bool redis = std::find(schemes.begin(), schemes.end(), "redis") != schemes.end();
#ifdef PROGCACHE_WITH_REDIS
  EXPECT_TRUE(redis);
#else
  EXPECT_FALSE(redis);
#endif
  auto r = check_remote_url("redis://alice:hunter2@h:6380");
  if (redis) {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->has_password);
    EXPECT_EQ(r->shown.find("hunter2"), std::string::npos);
    EXPECT_FALSE(check_remote_url("redis://h")->has_password);
  } else {
    EXPECT_EQ(r.status().code(), Code::unavailable);
    EXPECT_EQ(r.status().message().find("hunter2"), std::string::npos);
  }
}

}  // namespace
}  // namespace progcache
