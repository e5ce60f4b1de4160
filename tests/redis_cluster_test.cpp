// The Redis Cluster backend: its routing pieces against recorded replies,
// and the whole tier against a real cluster on loopback (three primaries,
// three replicas, started by the test; skipped when redis-server or
// redis-cli is absent): keys spread over every primary, two cache roots
// share it, a primary killed mid-run fails over, slots resharded during
// traffic lose nothing committed, and a redirection loop, a MOVED to an
// address that refuses, seeds that do not answer and a partly-down cluster
// each end within the deadline.
#include "store/remote/redis_cluster.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "progcache/memory_store.h"
#include "progcache/redis_backend.h"
#include "progcache/tiered_store.h"
#include "testing/misbehaving_server.h"
#include "testing/redis_cluster.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::make_entry;
using testing::make_key;
using testing::MisbehavingServer;
using testing::RedisCluster;
using Clock = std::chrono::steady_clock;

#define REQUIRE_CLUSTER(c)                                                                     \
  do {                                                                                         \
    if (!RedisCluster::missing().empty()) GTEST_SKIP() << RedisCluster::missing();             \
    ASSERT_TRUE((c).ready()) << "the Redis Cluster did not form (redis-cli --cluster create)"; \
  } while (false)

std::unique_ptr<RemoteStore> store(const std::string& url, RemoteStoreOptions o = {}) {
  o.urls = {url};
  auto s = make_remote_store(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

// A reply parsed from the bytes a server sent.
struct Parsed {
  redisReply* r = nullptr;
  explicit Parsed(const std::string& resp) {
    redisReader* reader = redisReaderCreate();
    redisReaderFeed(reader, resp.data(), resp.size());
    void* out = nullptr;
    EXPECT_EQ(redisReaderGetReply(reader, &out), REDIS_OK);
    r = static_cast<redisReply*>(out);
    redisReaderFree(reader);
  }
  ~Parsed() {
    if (r != nullptr) freeReplyObject(r);
  }
};

// ------------------------------------------------------------ routing pieces

TEST(ClusterSlots, KeySlotsAreTheSpecificationsCrc16AndHonourHashTags) {
  // The Redis Cluster specification's check value: CRC16("123456789") = 0x31C3.
  EXPECT_EQ(redis::key_slot("123456789"), 0x31C3);
  EXPECT_EQ(redis::key_slot("foo"), 12182);  // CLUSTER KEYSLOT foo
  EXPECT_EQ(redis::key_slot("{user1000}.following"), redis::key_slot("{user1000}.followers"));
  EXPECT_EQ(redis::key_slot("{user1000}.following"), redis::key_slot("user1000"));
  EXPECT_EQ(redis::key_slot("foo{}{bar}"), 8363);  // an empty tag: the whole key
  EXPECT_EQ(redis::key_slot("foo{{bar}}zap"), redis::key_slot("{bar"));
  EXPECT_EQ(redis::key_slot("foo{bar}{zap}"), redis::key_slot("bar"));
}

TEST(ClusterSlots, ARecordedClusterSlotsReplyBecomesTheSlotMap) {
  // Recorded from redis-server 7.0 (three primaries), with a replica added to
  // the first range, a node listed with an empty host (the node asked) and a
  // range whose primary's endpoint is unknown ("?").
  const std::string resp =
      "*4\r\n"
      "*4\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:17001\r\n$40\r\n1a38ba100707a0d35c08cbbaf7570a62053cec84\r\n*"
      "0\r\n"
      "*4\r\n$9\r\n127.0.0.1\r\n:17004\r\n$40\r\n9b0e6ad5a3bd4df1ecbfd6e3cf0d32e7c0f3a1aa\r\n*0\r\n"
      "*3\r\n:5461\r\n:10922\r\n*4\r\n$0\r\n\r\n:17002\r\n$40\r\ndc5bde18367a98d1d8a17d4c71ef546f68aeb2c1\r\n*0\r\n"
      "*3\r\n:10923\r\n:16000\r\n*4\r\n$9\r\n127.0.0.1\r\n:17003\r\n$"
      "40\r\nd9f4ad26942314d6ae688f4397aa59c1bece7ab8\r\n*0\r\n"
      "*3\r\n:16001\r\n:16383\r\n*4\r\n$1\r\n?\r\n:17007\r\n$40\r\n0000000000000000000000000000000000000000\r\n*0\r\n";
  Parsed p(resp);
  auto ranges = redis::parse_cluster_slots(p.r, {"10.0.0.9", 17002});
  ASSERT_TRUE(ranges.ok()) << ranges.status().to_string();
  ASSERT_EQ(ranges->size(), 3u);  // the "?" range is left out
  EXPECT_EQ((*ranges)[0].replicas.size(), 1u);
  EXPECT_EQ((*ranges)[0].replicas[0].port, 17004);
  EXPECT_EQ((*ranges)[1].primary.host, "10.0.0.9");  // empty host: the node asked
  const auto map = redis::SlotMap::from(*ranges);
  EXPECT_EQ(map.covered(), 16001);
  EXPECT_EQ(map.primaries[map.owner[0]].port, 17001);
  EXPECT_EQ(map.primaries[map.owner[5460]].port, 17001);
  EXPECT_EQ(map.primaries[map.owner[5461]].port, 17002);
  EXPECT_EQ(map.primaries[map.owner[16000]].port, 17003);
  EXPECT_EQ(map.owner[16001], -1);
  // A MOVED patches one slot, to a node the map did not know.
  const auto moved = map.moved(42, {"127.0.0.1", 17009});
  EXPECT_EQ(moved.primaries[moved.owner[42]].port, 17009);
  EXPECT_EQ(moved.primaries[moved.owner[43]].port, 17001);
  // Replies of other shapes are data_loss, never a map.
  for (const std::string bad :
       {"+OK\r\n", "*1\r\n*2\r\n:0\r\n:5\r\n", "*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n",
        "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n", "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n"}) {
    Parsed q(bad);
    auto r = redis::parse_cluster_slots(q.r, {"h", 1});
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::data_loss);
  }
}

TEST(ClusterSlots, RedirectionsAreParsedAndAnythingElseIsNot) {
  auto m = redis::parse_redirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(m.has_value());
  EXPECT_FALSE(m->ask);
  EXPECT_EQ(m->slot, 3999);
  EXPECT_EQ(m->to.host, "127.0.0.1");
  EXPECT_EQ(m->to.port, 6381);
  auto a = redis::parse_redirect("ASK 12 ::1:7000");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->ask);
  EXPECT_EQ(a->to.host, "::1");
  EXPECT_EQ(redis::parse_redirect("ASK 12 [::1]:7000")->to.host, "::1");
  for (const char* bad : {"MOVED", "MOVED 3999", "MOVED x h:1", "MOVED 16384 h:1", "MOVED 1 h", "MOVED 1 h:0",
                          "MOVED 1 :7000", "ERR MOVED 1 h:1", "CLUSTERDOWN The cluster is down", "ASK -1 h:1"}) {
    EXPECT_FALSE(redis::parse_redirect(bad).has_value()) << bad;
  }
}

TEST(ClusterUrl, ParsesSeedsAndOptionsAndRefusesWhatAClusterCannotDo) {
  auto u =
      parse_redis_url("redis+cluster://ci:pw@a.example:7000,b.example:7001,[::1]:7002?prefix=p:&read_from=replicas");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_TRUE(u->cluster);
  ASSERT_EQ(u->seeds.size(), 3u);
  EXPECT_EQ(u->seeds[1].host, "b.example");
  EXPECT_EQ(u->seeds[2].host, "::1");
  EXPECT_EQ(u->seeds[2].port, 7002);
  EXPECT_TRUE(u->read_from_replicas);
  EXPECT_EQ(u->prefix, "p:");
  EXPECT_EQ(u->redacted(), "redis+cluster://ci:***@a.example:7000,b.example:7001,[::1]:7002");
  for (const char* bad :
       {"redis+cluster://", "redis+cluster://a:1,", "redis+cluster://a:1,b:x", "redis+cluster://a:1/2",
        "redis+cluster://a:1?db=3", "redis+cluster://a:1?read_from=any", "redis://a:1?read_from=replicas"}) {
    auto r = parse_redis_url(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::invalid_argument) << bad;
  }
  EXPECT_NE(parse_redis_url("redis+cluster://a:1?db=3").status().message().find("database 0"), std::string::npos);
  // PROGCACHE_REMOTE separates URLs by ',' and a cluster its seeds by ',' too.
  EXPECT_EQ(split_remote_urls("redis://a,redis+cluster://b:1,c:2,d:3?prefix=x,http://e/p,,redis://f"),
            (std::vector<std::string>{"redis://a", "redis+cluster://b:1,c:2,d:3?prefix=x", "http://e/p", "redis://f"}));
  EXPECT_TRUE(check_remote_url("redis+cluster://b:1,c:2").ok());
}

// ------------------------------------------------------------ a real cluster

TEST(RedisClusterStore, KeysSpreadOverEveryPrimaryAndReadBackExactly) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto s = store(cluster.url());
  std::map<int, std::string> written;
  for (int i = 0; i < 300; ++i) {
    written[i] = "entry " + std::to_string(i) + std::string(static_cast<std::size_t>(i * 37 % 5000), 'x');
    ASSERT_TRUE(s->put(make_key(i), make_entry(written[i])).ok()) << i;
  }
  // Every primary holds a share, and the shares add up: each key went to
  // the one node that owns its slot.
  std::uint64_t total = 0;
  const auto primaries = cluster.primaries();
  ASSERT_EQ(primaries.size(), 3u);
  for (int p : primaries) {
    const auto n = std::stoull(cluster.node(p).command({"DBSIZE"}));
    EXPECT_GT(n, 50u) << "primary " << p;
    total += n;
  }
  EXPECT_EQ(total, 300u);
  for (int i = 0; i < 300; ++i) {
    auto e = s->get(make_key(i));
    ASSERT_TRUE(e.ok() && e->has_value()) << i;
    EXPECT_EQ((*e)->primary().view(), written[i]);
  }
  EXPECT_FALSE(s->get(make_key(1000))->has_value());
  // Walks cover every primary: count, and clear leaves nothing.
  EXPECT_EQ(*s->count(), 300u);
  ASSERT_TRUE(s->erase(make_key(0)).ok());
  EXPECT_FALSE(s->get(make_key(0))->has_value());
  ASSERT_TRUE(s->clear().ok());
  for (int p : primaries) EXPECT_EQ(cluster.node(p).command({"DBSIZE"}), "0");
}

TEST(RedisClusterStore, ReadsGoToReplicasWhenAsked) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto writer = store(cluster.url());
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(writer->put(make_key(i), make_entry("v" + std::to_string(i))).ok());
  // Replication is asynchronous: wait until every replica holds its share.
  for (int p : cluster.primaries()) {
    const int r = cluster.replica_of(p);
    ASSERT_GE(r, 0);
    for (int t = 0; t < 100 && cluster.node(r).command({"DBSIZE"}) != cluster.node(p).command({"DBSIZE"}); ++t)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i : cluster.primaries()) cluster.node(i).command({"CONFIG", "RESETSTAT"});
  for (int i : cluster.replicas()) cluster.node(i).command({"CONFIG", "RESETSTAT"});
  auto reader = store(cluster.url("read_from=replicas"));
  for (int i = 0; i < 60; ++i) {
    auto e = reader->get(make_key(i));
    ASSERT_TRUE(e.ok() && e->has_value()) << i;
    EXPECT_EQ((*e)->primary().view(), "v" + std::to_string(i));
  }
  const auto gets = [&](int node) {
    const std::string stats = cluster.node(node).command({"INFO", "commandstats"});
    const auto at = stats.find("cmdstat_get:calls=");
    return at == std::string::npos ? 0 : std::stoi(stats.substr(at + 18));
  };
  int on_replicas = 0, on_primaries = 0;
  for (int r : cluster.replicas()) on_replicas += gets(r);
  for (int p : cluster.primaries()) on_primaries += gets(p);
  EXPECT_EQ(on_replicas, 60);
  EXPECT_EQ(on_primaries, 0);
}

class ClusterTiered : public ::testing::Test {
 protected:
  std::unique_ptr<TieredStore> machine(const std::string& name, const std::string& url) {
    TieredStoreOptions o;
    o.memory = std::move(*make_memory_store({}));
    o.disk = std::move(*FileStore::open({.root = m_tmp.sub(name)}));
    o.remote = store(url, {.breaker_backoff = std::chrono::milliseconds(200)});
    return make_tiered_store(std::move(o));
  }
  testing::TempDir m_tmp;
};

TEST_F(ClusterTiered, TwoCacheRootsShareCompilesThroughTheCluster) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto info = compiler_info();
  if (!info.ok() || info->nvrtc_path.empty()) GTEST_SKIP() << "no NVRTC";
  auto m1 = machine("m1", cluster.url());
  auto m2 = machine("m2", cluster.url("", 3));
  for (int k = 0; k < 3; ++k) {
    Program p;
    p.code = "__global__ void k" + std::to_string(k) + "(float* x) { x[threadIdx.x] += " + std::to_string(k) +
             ".0f; } // " + std::to_string(::getpid());
    p.options = {"-arch=sm_80"};
    auto first = compile(p, TargetType::cubin, {.cache = m1.get(), .state_dir = m_tmp.sub("s1")});
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_FALSE(first->from_cache);
    ASSERT_TRUE(m1->flush().ok());
    const auto compiles = compile_stats().compiles;
    auto second = compile(p, TargetType::cubin, {.cache = m2.get(), .state_dir = m_tmp.sub("s2")});
    ASSERT_TRUE(second.ok());
    EXPECT_TRUE(second->from_cache);
    EXPECT_EQ(compile_stats().compiles, compiles);
    EXPECT_EQ(second->code, first->code);
  }
  EXPECT_EQ(m2->tier_stats()[2].stats.hits, 3u);
}

TEST(RedisClusterStore, APrimaryKilledMidRunFailsOverAndCallsKeepSucceeding) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto s = store(cluster.url("timeout=300", 6), {.breaker_backoff = std::chrono::milliseconds(100)});
  const int victim = cluster.primaries().front();
  const int heir = cluster.replica_of(victim);
  ASSERT_GE(heir, 0);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, errors{0}, hits{0}, slow{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      for (std::uint64_t i = 0; !stop; ++i) {
        const std::uint64_t id = static_cast<std::uint64_t>(w) << 32 | i;
        const std::string value = "value " + std::to_string(id);
        auto t0 = Clock::now();
        if (!s->put(make_key(id), make_entry(value)).ok()) ++errors;
        // Reads of earlier keys: a hit is the right value, else a miss or
        // an error; never another key's bytes.
        auto r = s->get(make_key(id / 2));
        if (Clock::now() - t0 > std::chrono::milliseconds(1000)) ++slow;
        if (r.ok() && r->has_value()) {
          ++hits;
          // Every key's value is its number's: anything else is another key's bytes.
          if ((*r)->primary().view() != "value " + std::to_string(id / 2)) ++wrong;
        } else if (!r.ok()) {
          ++errors;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  cluster.node(victim).kill();
  // The replica takes over within a few node timeouts.
  ASSERT_TRUE(cluster.wait_until_primary(heir)) << "no failover";
  ASSERT_TRUE(cluster.wait_until_ok(30));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  stop = true;
  for (auto& t : workers) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(slow, 0) << "a call took more than its timeouts allow";
  EXPECT_GT(hits, 0);
  // After the failover every slot is served again: a fresh batch round-trips
  // (once the breaker, if the failures opened it, lets calls through).
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 0; i < 100; ++i) {
    const Key k = make_key(1'000'000 + i);
    const Status put = s->put(k, make_entry("after " + std::to_string(i)));
    ASSERT_TRUE(put.ok()) << i << ": " << put.to_string();
    auto e = s->get(k);
    ASSERT_TRUE(e.ok() && e->has_value()) << i;
    EXPECT_EQ((*e)->primary().view(), "after " + std::to_string(i));
  }
  RecordProperty("errors_during_failover", errors.load());
}

TEST(RedisClusterStore, SlotsReshardedDuringTrafficLoseNothingCommitted) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto s = store(cluster.url("timeout=2000"));
  const auto primaries = cluster.primaries();
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<std::uint64_t, std::string> committed;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      for (std::uint64_t i = 0; !stop; ++i) {
        const std::uint64_t id = static_cast<std::uint64_t>(w) << 32 | i;
        const std::string value = "v" + std::to_string(id) + std::string(200, 'r');
        if (s->put(make_key(id), make_entry(value)).ok()) {
          std::lock_guard l(mu);
          committed[id] = value;
        } else {
          ++failed;
        }
        if (i > 0) {
          const std::uint64_t back = static_cast<std::uint64_t>(w) << 32 | (i - 1);
          auto r = s->get(make_key(back));
          if (!r.ok()) ++failed;
          std::lock_guard l(mu);
          if (r.ok() && r->has_value() && committed.count(back) && (*r)->primary().view() != committed[back]) ++wrong;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Move 3000 slots from the first primary to the second while they run.
  const int rc = RedisCluster::redis_cli({"--cluster", "reshard", "127.0.0.1:" + std::to_string(cluster.node(0).port()),
                                          "--cluster-from", cluster.node_id(primaries[0]), "--cluster-to",
                                          cluster.node_id(primaries[1]), "--cluster-slots", "3000", "--cluster-yes"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& t : workers) t.join();
  ASSERT_EQ(rc, 0) << "redis-cli --cluster reshard failed";
  ASSERT_TRUE(cluster.wait_until_ok());
  EXPECT_EQ(wrong, 0);
  // A slot being migrated answers ASK for keys already moved: followed
  // (with ASKING), no call fails.
  EXPECT_EQ(failed, 0);
  ASSERT_GT(committed.size(), 100u);
  // Every committed entry is there, read by this client (whose map is old)
  // and by a new one.
  auto fresh = store(cluster.url());
  int missing = 0;
  for (const auto& [id, value] : committed) {
    for (RemoteStore* r : {s.get(), fresh.get()}) {
      auto e = r->get(make_key(id));
      if (!e.ok() || !e->has_value()) {
        ++missing;
        continue;
      }
      EXPECT_EQ((*e)->primary().view(), value);
    }
  }
  EXPECT_EQ(missing, 0) << "of " << committed.size() << " committed entries";
  // The slots did move: the second primary now holds more than a third.
  EXPECT_GT(std::stoull(cluster.node(primaries[1]).command({"DBSIZE"})), committed.size() / 3 + committed.size() / 10);
}

TEST(RedisClusterStore, ASlotMidMigrationIsServedThroughAsk) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto s = store(cluster.url("timeout=1000"));
  // Two keys of one slot: one written before the migration starts (it stays
  // on the old owner), one after (the old owner sends it on with ASK).
  const auto rkey = [](const Key& k) { return "progcache:" + k.hex(); };
  const Key before = make_key(7);
  const int slot = redis::key_slot(rkey(before));
  std::uint64_t n = 8;
  while (redis::key_slot(rkey(make_key(n))) != slot) ++n;
  const Key after = make_key(n);
  ASSERT_TRUE(s->put(before, make_entry("before")).ok());
  // The owner answers for the key; the others redirect.
  int src = -1, dst = -1;
  for (int p : cluster.primaries()) {
    if (cluster.node(p).command({"GET", rkey(before)}).starts_with("MOVED")) {
      if (dst < 0) dst = p;
    } else {
      src = p;
    }
  }
  ASSERT_GE(src, 0);
  ASSERT_GE(dst, 0);
  ASSERT_EQ(cluster.node(dst).command({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", cluster.node_id(src)}),
            "OK");
  ASSERT_EQ(cluster.node(src).command({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", cluster.node_id(dst)}),
            "OK");
  // The new key goes where the slot is going (ASK, then ASKING there).
  const Status put = s->put(after, make_entry("after"));
  ASSERT_TRUE(put.ok()) << put.to_string();
  EXPECT_EQ(cluster.node(dst).command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), "1");
  EXPECT_EQ(cluster.node(src).command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), "1");
  for (int round = 0; round < 2; ++round) {  // ASK changes no map: the same route twice
    auto a = s->get(after);
    ASSERT_TRUE(a.ok() && a->has_value()) << (a.ok() ? "miss" : a.status().to_string());
    EXPECT_EQ((*a)->primary().view(), "after");
    auto b = s->get(before);
    ASSERT_TRUE(b.ok() && b->has_value());
    EXPECT_EQ((*b)->primary().view(), "before");
  }
}

// A RESP server that serves a slot map naming itself and answers every
// other command with a redirection.
std::string slot_map_naming(int port) {
  return "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(port) + "\r\n";
}

void serve_redirects(int fd, const std::atomic<bool>& stop, const std::function<std::string()>& redirect, int port) {
  char buf[65536];
  while (!stop) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    const std::string request(buf, static_cast<std::size_t>(n));
    const std::string reply = request.find("SLOTS") != std::string::npos ? slot_map_naming(port)
                              : request.find("ASKING") != std::string::npos && request.find("GET") == std::string::npos
                                  ? "+OK\r\n"
                                  : redirect();
    if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
  }
}

TEST(RedisClusterDeadline, ARedirectionLoopEndsWithAnErrorWithinTheDeadline) {
  std::atomic<int> port{0};
  std::atomic<int> redirects{0};
  MisbehavingServer loop([&](int fd, const std::atomic<bool>& stop) {
    serve_redirects(
        fd, stop,
        [&] {
          ++redirects;
          return (redirects % 2 ? "-MOVED " : "-ASK ") + std::to_string(redis::key_slot("x")) +
                 " 127.0.0.1:" + std::to_string(port.load()) + "\r\n";
        },
        port);
  });
  port = loop.port();
  auto s = store("redis+cluster://127.0.0.1:" + std::to_string(loop.port()) + "?timeout=500");
  const auto t0 = Clock::now();
  auto r = s->get(make_key(1));
  const auto took = Clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::unavailable) << r.status().to_string();
  EXPECT_NE(r.status().message().find("redirected"), std::string::npos) << r.status().to_string();
  EXPECT_LT(took, std::chrono::milliseconds(500));
  EXPECT_LE(redirects, 6);
  EXPECT_EQ(s->stats().errors, 1u);
}

TEST(RedisClusterDeadline, AMovedToAnAddressThatRefusesIsAnErrorWithinTheDeadline) {
  const int closed = testing::free_loopback_port();
  std::atomic<int> port{0};
  MisbehavingServer server([&](int fd, const std::atomic<bool>& stop) {
    serve_redirects(
        fd, stop, [&] { return "-MOVED 1 127.0.0.1:" + std::to_string(closed) + "\r\n"; }, port);
  });
  port = server.port();
  auto s = store("redis+cluster://127.0.0.1:" + std::to_string(server.port()) + "?timeout=300");
  const auto t0 = Clock::now();
  auto r = s->get(make_key(1));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(400));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::unavailable) << r.status().to_string();
  // Through a tiered store it is a miss, and local tiers keep working.
  testing::TempDir tmp;
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = tmp.sub("root")}));
  o.remote = store("redis+cluster://127.0.0.1:" + std::to_string(server.port()) + "?timeout=300");
  auto t = make_tiered_store(std::move(o));
  auto miss = t->get(make_key(1));
  ASSERT_TRUE(miss.ok()) << miss.status().to_string();
  EXPECT_FALSE(miss->has_value());
}

TEST(RedisClusterDeadline, SeedsThatDoNotAnswerCostOneDeadlineAndACountedError) {
  const std::string url = "redis+cluster://127.0.0.1:" + std::to_string(testing::free_loopback_port()) +
                          ",127.0.0.1:" + std::to_string(testing::free_loopback_port()) + "?timeout=200";
  auto s = store(url);
  const auto t0 = Clock::now();
  auto r = s->get(make_key(1));
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(300));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::unavailable);
  EXPECT_NE(r.status().message().find("no node of the cluster answered"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(s->put(make_key(1), make_entry("x")).ok());
  EXPECT_EQ(s->stats().errors, 2u);
  // A paused seed (accepts, never answers) costs the call's deadline, no more.
  MisbehavingServer silent([](int fd, const std::atomic<bool>& stop) {
    while (!stop && MisbehavingServer::next_request(fd, stop)) {
    }
  });
  auto p = store("redis+cluster://127.0.0.1:" + std::to_string(silent.port()) + "?timeout=200");
  const auto t1 = Clock::now();
  EXPECT_FALSE(p->get(make_key(1)).ok());
  EXPECT_LT(Clock::now() - t1, std::chrono::milliseconds(300));
}

TEST(RedisClusterDeadline, APartlyDownClusterAnswersEveryCallWithinTheDeadline) {
  RedisCluster cluster;
  REQUIRE_CLUSTER(cluster);
  auto s = store(cluster.url("timeout=200", 6), {.breaker_failures = 1000});
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(s->put(make_key(i), make_entry("v" + std::to_string(i))).ok());
  // A primary and its replica die: a third of the slots has nobody.
  const int p = cluster.primaries().front();
  const int r = cluster.replica_of(p);
  ASSERT_GE(r, 0);
  cluster.node(r).kill();
  cluster.node(p).kill();
  int hits = 0, failed = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 60; ++i) {
      const auto t0 = Clock::now();
      auto e = s->get(make_key(i));
      EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(300)) << i;
      if (e.ok() && e->has_value()) {
        ++hits;
        EXPECT_EQ((*e)->primary().view(), "v" + std::to_string(i));
      } else {
        ++failed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the survivors notice
  }
  EXPECT_GT(failed, 0);
  RecordProperty("hits_while_partly_down", hits);
}

}  // namespace
}  // namespace progcache
