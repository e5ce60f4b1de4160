// The Redis tier against real redis-server processes on loopback ports,
// started and stopped by the tests (skipped when redis-server is absent).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "progcache/memory_store.h"
#include "progcache/redis_backend.h"
#include "progcache/tiered_store.h"
#include "testing/misbehaving_server.h"
#include "testing/redis_server.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::make_entry;
using testing::make_key;
using testing::MisbehavingServer;
using testing::RedisServer;

#define REQUIRE_REDIS()                                                              \
  do {                                                                               \
    if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server not installed"; \
  } while (false)

std::unique_ptr<RemoteStore> redis(const std::vector<std::string>& urls, RemoteStoreOptions o = {}) {
  o.urls = urls;
  auto s = make_remote_store(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(RedisUrl, ParsesEveryFormAndNeverShowsThePassword) {
  auto u =
      parse_redis_url("redis://alice:s3cret%21@cache.example:6380/2?prefix=ci:&ttl=60&timeout=50&connect_timeout=75");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ(u->host, "cache.example");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 2);
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "s3cret!");
  EXPECT_EQ(u->prefix, "ci:");
  EXPECT_EQ(*u->ttl_seconds, 60);
  EXPECT_EQ(u->timeout.count(), 50);
  EXPECT_EQ(u->connect_timeout.count(), 75);
  EXPECT_EQ(u->redacted().find("s3cret"), std::string::npos);
  EXPECT_NE(u->redacted().find("alice:***@"), std::string::npos);
  auto sock = parse_redis_url("redis+unix:///run/redis.sock?db=3");
  ASSERT_TRUE(sock.ok());
  EXPECT_EQ(sock->unix_path, "/run/redis.sock");
  EXPECT_EQ(sock->db, 3);
  auto v6 = parse_redis_url("redis://[::1]:7000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7000);
  EXPECT_EQ(parse_redis_url("redis://h").value().port, 6379);
  for (const char* bad : {"http://h", "redis://", "redis://h:0", "redis://h:99999", "redis://h/x", "redis://h?ttl=-1",
                          "redis://h?bogus=1", "redis+unix://relative", "redis://h?timeout", "redis://h?db=3010030100",
                          "redis://h/3010030100"}) {
    auto r = parse_redis_url(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::invalid_argument);
  }
  auto bad_pw = parse_redis_url("redis://user:hunter2@h:notaport");
  ASSERT_FALSE(bad_pw.ok());
  EXPECT_EQ(bad_pw.status().message().find("hunter2"), std::string::npos) << bad_pw.status().message();
}

TEST(RedisUrl, PasswordsHoldingSeparatorsParseAndNeverLeakIntoErrors) {
  // '@', '?', '/' and ':' inside a password: credentials end at the last '@'.
  auto odd = parse_redis_url("redis://bob:p@ss?w/o:rd@cache.example:6390/1?prefix=x:");
  ASSERT_TRUE(odd.ok()) << odd.status().to_string();
  EXPECT_EQ(odd->user, "bob");
  EXPECT_EQ(odd->password, "p@ss?w/o:rd");
  EXPECT_EQ(odd->host, "cache.example");
  EXPECT_EQ(odd->port, 6390);
  EXPECT_EQ(odd->db, 1);
  EXPECT_EQ(odd->prefix, "x:");
  // Malformed URLs whose messages once echoed part of the password; the last
  // is what splitting PROGCACHE_REMOTE at a ',' inside a password leaves.
  for (const char* url :
       {"redis://:p@SECRETAT@127.0.0.1:notaport", "redis://pw?SECRETQ@127.0.0.1:99999", "redis://user:SECRETNOAT",
        "redis://:pa,SECRETCOMMA@h", "redis://:paSECRETFRAG", "SECRETCOMMA@127.0.0.1"}) {
    auto r = parse_redis_url(url);
    if (r.ok()) continue;  // parsed: nothing is shown
    EXPECT_EQ(r.status().message().find("SECRET"), std::string::npos) << url << " -> " << r.status().message();
  }
}

// The harness itself: a server whose port another one took first fails at
// once and is never mistaken for the other (concurrent tests pick ports).
TEST(RedisHarness, AServerWhosePortIsTakenFailsAtOnceAndIsNotMistakenForTheOther) {
  REQUIRE_REDIS();
  RedisServer first;
  ASSERT_TRUE(first.running());
  const auto t0 = std::chrono::steady_clock::now();
  RedisServer second({}, first.port());
  EXPECT_FALSE(second.running());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST(RedisStore, PasswordFromTheOptionsServesUrlsThatCarryNone) {
  REQUIRE_REDIS();
  RedisServer server({"--requirepass", "opt-password"});
  ASSERT_TRUE(server.running());
  auto s = redis({"redis://127.0.0.1:" + std::to_string(server.port())}, {.password = "opt-password"});
  ASSERT_TRUE(s->put(make_key(1), make_entry("authed by option")).ok());
  EXPECT_EQ((*s->get_bytes(make_key(1)))->view(), "authed by option");
}

TEST(RedisStore, RoundTripsBinaryEntriesWithPrefixNamespacing) {
  REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.running());
  auto a = redis({server.url("prefix=a:")});
  auto b = redis({server.url("prefix=b:")});
  std::string binary =
      "\x7f"
      "ELF";
  binary += std::string("\0\0\x01\xff", 4) + testing::make_payload(100000, 9);
  ASSERT_TRUE(a->put_bytes(make_key(1), Bytes::copy_of(binary)).ok());
  auto got = a->get_bytes(make_key(1));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().to_string();
  EXPECT_EQ((*got)->str(), binary);
  EXPECT_FALSE(b->get(make_key(1))->has_value());  // other namespace
  ASSERT_TRUE(b->put_bytes(make_key(1), Bytes::copy_of("b's")).ok());
  EXPECT_EQ(*a->count(), 1u);
  EXPECT_GT(*a->size_bytes(), binary.size());
  EXPECT_TRUE(*a->erase(make_key(1)));
  EXPECT_FALSE(*a->erase(make_key(1)));
  ASSERT_TRUE(a->put_bytes(make_key(2), Bytes::copy_of("x")).ok());
  ASSERT_TRUE(a->clear().ok());
  EXPECT_EQ(*a->count(), 0u);
  EXPECT_EQ((*b->get_bytes(make_key(1)))->view(), "b's");  // clear is scoped to the prefix
  const StoreStats st = a->stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 0u);
  EXPECT_EQ(st.puts, 2u);
}

TEST(RedisStore, CompressedEntriesCrossTheWireSmallerAndReadBackExactly) {
  REQUIRE_REDIS();
  RedisServer server;
  auto packed = redis({server.url()}, {.codec = {.compression_level = 1}});
  auto plain = redis({server.url()});
  const std::string cubin = testing::compressible_payload(64 << 10, 4);
  ASSERT_TRUE(packed->put_bytes(make_key(1), Bytes::copy_of(cubin)).ok());
  ASSERT_TRUE(plain->put_bytes(make_key(2), Bytes::copy_of(cubin)).ok());
  const auto stored = std::stoull(server.command({"STRLEN", "progcache:" + make_key(1).hex()}));
  const auto raw = std::stoull(server.command({"STRLEN", "progcache:" + make_key(2).hex()}));
  EXPECT_GT(raw, cubin.size());
  EXPECT_LT(stored * 3, raw) << stored << " bytes in Redis against " << raw;
  for (RemoteStore* s : {packed.get(), plain.get()}) {
    for (int k : {1, 2}) {
      auto g = s->get_bytes(make_key(k));
      ASSERT_TRUE(g.ok() && g->has_value()) << g.status().to_string();
      EXPECT_EQ((*g)->view(), cubin);
    }
  }
}

TEST(RedisStore, TtlExpiresEntries) {
  REQUIRE_REDIS();
  RedisServer server;
  auto s = redis({server.url("ttl=1")});
  ASSERT_TRUE(s->put(make_key(1), make_entry("short-lived")).ok());
  EXPECT_TRUE(s->get(make_key(1))->has_value());
  EXPECT_NE(server.command({"TTL", "progcache:" + make_key(1).hex()}), "-1");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_FALSE(s->get(make_key(1))->has_value());
}

TEST(RedisStore, ReadOnlyModeNeverWrites) {
  REQUIRE_REDIS();
  RedisServer server;
  auto writer = redis({server.url()});
  ASSERT_TRUE(writer->put(make_key(1), make_entry("shared")).ok());
  auto reader = redis({server.url()}, {.read_only = true});
  EXPECT_TRUE(reader->put(make_key(2), make_entry("nope")).ok());  // skipped, not an error
  EXPECT_EQ(reader->remote_stats().read_only_skips, 1u);
  EXPECT_EQ(server.command({"EXISTS", "progcache:" + make_key(2).hex()}), "0");
  EXPECT_EQ((*reader->get_bytes(make_key(1)))->view(), "shared");
  EXPECT_EQ(reader->erase(make_key(1)).status().code(), Code::failed_precondition);
}

TEST(RedisStore, GarbageValuesAreCountedMisses) {
  REQUIRE_REDIS();
  RedisServer server;
  auto s = redis({server.url()});
  server.command({"SET", "progcache:" + make_key(1).hex(), "this is not an entry"});
  server.command({"LPUSH", "progcache:" + make_key(2).hex(), "a list, not a string"});
  auto g1 = s->get(make_key(1));
  ASSERT_TRUE(g1.ok());
  EXPECT_FALSE(g1->has_value());
  auto g2 = s->get(make_key(2));
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  EXPECT_FALSE(g2->has_value());
  EXPECT_EQ(s->stats().corrupt_dropped, 2u);
  // An entry of another key stored under this one is garbage too.
  ASSERT_TRUE(s->put(make_key(3), make_entry("three")).ok());
  server.command({"RENAME", "progcache:" + make_key(3).hex(), "progcache:" + make_key(4).hex()});
  EXPECT_FALSE(s->get(make_key(4))->has_value());
}

TEST(RedisStore, SignedEntriesAcceptedAndUnsignedOrForeignRejected) {
  REQUIRE_REDIS();
  RedisServer server;
  auto signer = redis({server.url()}, {.codec = {"team-signing-key-0123456789"}});
  auto other = redis({server.url()}, {.codec = {"someone-elses-key-0123456789"}});
  auto plain = redis({server.url()});
  ASSERT_TRUE(signer->put(make_key(1), make_entry("signed")).ok());
  EXPECT_EQ((*signer->get_bytes(make_key(1)))->view(), "signed");
  EXPECT_FALSE(other->get(make_key(1))->has_value());
  EXPECT_EQ(other->stats().rejected, 1u);
  ASSERT_TRUE(plain->put(make_key(2), make_entry("unsigned, maybe poisoned")).ok());
  EXPECT_FALSE(signer->get(make_key(2))->has_value());
  EXPECT_EQ(signer->stats().rejected, 1u);
}

TEST(RedisStore, RendezvousShardingSpreadsKeysAndLosingAServerMovesOnlyItsShare) {
  REQUIRE_REDIS();
  RedisServer s1, s2, s3;
  const std::vector<std::string> three = {s1.url(), s2.url(), s3.url()};
  auto store = redis(three);
  constexpr int k_keys = 3000;
  std::map<std::string, int> per_server;
  std::map<int, std::string> owner;
  for (int i = 0; i < k_keys; ++i) {
    owner[i] = store->server_for(make_key(i));
    per_server[owner[i]]++;
  }
  ASSERT_EQ(per_server.size(), 3u);
  for (const auto& [srv, n] : per_server) {
    EXPECT_GT(n, k_keys / 3 - 200) << srv;
    EXPECT_LT(n, k_keys / 3 + 200) << srv;
  }
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(store->put(make_key(i), make_entry(std::to_string(i))).ok());
  EXPECT_EQ(s1.command({"DBSIZE"}) != "0" && s2.command({"DBSIZE"}) != "0" && s3.command({"DBSIZE"}) != "0", true);
  // s3 leaves: keys it did not own keep their owner; its keys spread over the rest.
  auto two = redis({s1.url(), s2.url()});
  const std::string gone = "redis://127.0.0.1:" + std::to_string(s3.port());
  int moved = 0, kept = 0;
  for (int i = 0; i < k_keys; ++i) {
    const std::string now = two->server_for(make_key(i));
    if (owner[i] == gone) {
      ++moved;
    } else {
      EXPECT_EQ(now, owner[i]) << "key " << i << " moved although its server stayed";
      ++kept;
    }
  }
  EXPECT_EQ(moved, per_server[gone]);
  EXPECT_EQ(kept, k_keys - per_server[gone]);
  // Entries on the remaining servers are still hits through the 2-server store.
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ((*two->get(make_key(i))).has_value(), owner[i] != gone) << i;
  }
}

TEST(RedisStore, DeadOrPausedServerTripsTheBreakerAndNeverStallsPastTheTimeout) {
  REQUIRE_REDIS();
  RedisServer server;
  auto s = redis({server.url("timeout=100&connect_timeout=100")},
                 {.breaker_failures = 2, .breaker_backoff = std::chrono::milliseconds(300)});
  ASSERT_TRUE(s->put(make_key(1), make_entry("before")).ok());
  server.pause();
  // Paused: each call is bounded by the 100 ms timeout; after two failures
  // the breaker skips the server without waiting.
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s->get(make_key(1));
    const auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::deadline_exceeded) << r.status().to_string();
    EXPECT_LT(waited, std::chrono::seconds(2)) << "a paused server stalled a call far beyond its timeout";
  }
  auto skipped = s->get(make_key(1));
  EXPECT_EQ(skipped.status().code(), Code::unavailable);
  RemoteStats rs = s->remote_stats();
  EXPECT_EQ(rs.breaker_trips, 1u);
  EXPECT_GE(rs.skipped, 1u);
  EXPECT_GE(rs.timeouts, 2u);
  server.resume();
  // Killed: connection refused is an error, not a timeout.
  server.kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  auto refused = s->get(make_key(1));
  EXPECT_EQ(refused.status().code(), Code::unavailable);
  // Restarted (empty): after the back-off the tier resumes.
  ASSERT_TRUE(server.restart());
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  Status st;
  for (int i = 0; i < 10 && !(st = s->put(make_key(2), make_entry("after"))).ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ((*s->get_bytes(make_key(2)))->view(), "after");
}

TEST(RedisStore, APooledConnectionTheServerClosedIsReplacedNotAFailedCall) {
  REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.running());
  auto s = redis({server.url()});
  ASSERT_TRUE(s->put(make_key(1), make_entry("one")).ok());
  ASSERT_TRUE((*s->get(make_key(1))).has_value());  // a connection now waits in the pool
  // The server drops its clients (an idle timeout, a failover, a restart
  // look the same to the client): the pooled connection is dead.
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  for (int i = 0; i < 3; ++i) {
    auto got = s->get(make_key(1));
    ASSERT_TRUE(got.ok()) << "call " << i
                          << " after the server closed the pooled connection: " << got.status().to_string();
    ASSERT_TRUE(got->has_value());
    EXPECT_EQ((*got)->artifacts()[0].data.view(), "one");
  }
  EXPECT_EQ(s->remote_stats().failures, 0u) << s->remote_stats().last_error;
}

// total_connections_received of the server's INFO (each call of
// command() is a connection of its own).
std::uint64_t connections_received(const RedisServer& server) {
  const std::string info = server.command({"INFO", "stats"});
  const std::string field = "total_connections_received:";
  const std::size_t at = info.find(field);
  return at == std::string::npos ? 0 : std::stoull(info.substr(at + field.size()));
}

TEST(RedisStore, LargeHitsReuseOnePooledConnection) {
  REQUIRE_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.running());
  // Database 1: each new connection runs SELECT first, a small reply before
  // the first hit (as AUTH and READONLY are).
  auto s = redis({"redis://127.0.0.1:" + std::to_string(server.port()) + "/1"});
  const Entry big = make_entry(testing::make_payload(200000, 3));
  ASSERT_TRUE(s->put(make_key(1), big).ok());
  ASSERT_TRUE(s->put(make_key(2), make_entry("small")).ok());
  ASSERT_TRUE((*s->get(make_key(1))).has_value());
  const std::uint64_t before = connections_received(server);
  for (int i = 0; i < 10; ++i) {
    auto got = s->get(make_key(i % 3 == 0 ? 2 : 1));  // small and large replies mixed
    ASSERT_TRUE(got.ok() && got->has_value()) << got.status().to_string();
  }
  // Only the INFO above and this one connected.
  EXPECT_LE(connections_received(server) - before, 1u) << "hits opened new connections";
}

TEST(RedisStore, MissingPasswordIsAnAuthenticationErrorNotCorruption) {
  REQUIRE_REDIS();
  RedisServer server({"--requirepass", "right-password"});
  ASSERT_TRUE(server.running());
  auto none = redis({"redis://127.0.0.1:" + std::to_string(server.port())});
  auto r = none->get(make_key(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::permission_denied) << r.status().to_string();
  EXPECT_NE(r.status().message().find("authentication failed"), std::string::npos) << r.status().message();
  Status put = none->put(make_key(1), make_entry("x"));
  EXPECT_NE(put.message().find("authentication failed"), std::string::npos) << put.message();
  EXPECT_EQ(none->stats().corrupt_dropped, 0u);
}

TEST(RedisStore, WrongPasswordIsAClearErrorWithoutThePassword) {
  REQUIRE_REDIS();
  RedisServer server({"--requirepass", "right-password"});
  ASSERT_TRUE(server.running());
  auto wrong = redis({"redis://:wrong-password@127.0.0.1:" + std::to_string(server.port())});
  auto r = wrong->get(make_key(1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("authentication failed"), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find("wrong-password"), std::string::npos);
  auto right = redis({"redis://:right-password@127.0.0.1:" + std::to_string(server.port())});
  ASSERT_TRUE(right->put(make_key(1), make_entry("authed")).ok());
  EXPECT_EQ((*right->get_bytes(make_key(1)))->view(), "authed");
}

// Every reply a 200-byte value sent a byte per 50 ms: 10 s in all.
void trickle_every_reply(int fd, const std::atomic<bool>& stop) {
  while (MisbehavingServer::next_request(fd, stop)) {
    MisbehavingServer::trickle(fd, stop, "$200\r\n" + std::string(200, 'x') + "\r\n", std::chrono::milliseconds(50));
  }
}

TEST(RedisDeadline, ATrickledReplyCostsAtMostTheCallTimeout) {
  MisbehavingServer server(trickle_every_reply);
  auto s = redis({server.url("timeout=200")});
  for (int i = 0; i < 2; ++i) {  // a fresh connection, then (after the discard) another
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s->get(make_key(1));
    const auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::deadline_exceeded) << r.status().to_string();
    // The whole reply would take 10 s; the call ends at its 200 ms deadline
    // (the bound here is loose only for a loaded machine).
    EXPECT_LT(waited, std::chrono::seconds(3)) << "a trickling server held the call past its deadline";
  }
  EXPECT_EQ(s->remote_stats().timeouts, 2u);
  EXPECT_EQ(s->stats().corrupt_dropped, 0u);
}

TEST(RedisDeadline, CloseIsBoundedWhenTheRemoteTricklesItsAnswerToSet) {
  MisbehavingServer server(trickle_every_reply);
  testing::TempDir tmp;
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = tmp.sub("d")}));
  o.remote = std::move(*make_remote_store({.urls = {server.url("timeout=200")}, .breaker_failures = 100}));
  o.flush_timeout = std::chrono::milliseconds(300);
  auto t = make_tiered_store(std::move(o));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(t->put(make_key(i), make_entry("v")).ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(t->close().code(), Code::deadline_exceeded);
  const auto waited = std::chrono::steady_clock::now() - t0;
  // flush 300 ms + the SET in flight 200 ms; 20 trickled SETs would take minutes.
  EXPECT_LT(waited, std::chrono::seconds(3)) << "close() waited on a stalled remote put";
  // Nothing lost locally, and every queued put is accounted for.
  auto rs = t->remote_stats();
  EXPECT_EQ(t->tiered_stats().dropped + t->tier_stats().back().stats.errors, 20u);
}

TEST(RedisDeadline, AScanCursorThatNeverEndsIsBoundedByTheAdminTimeout) {
  MisbehavingServer server([](int fd, const std::atomic<bool>& stop) {
    // Every SCAN answers "cursor 1, no keys": a walk that never ends.
    const std::string reply = "*2\r\n$1\r\n1\r\n*0\r\n";
    while (MisbehavingServer::next_request(fd, stop)) {
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) return;
    }
  });
  auto s = redis({server.url("timeout=200")},
                 {.breaker_failures = 1000000, .admin_timeout = std::chrono::milliseconds(300)});
  const auto t0 = std::chrono::steady_clock::now();
  auto n = s->count();
  auto bytes = s->size_bytes();
  Status cleared = s->clear();
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(n.status().code(), Code::deadline_exceeded) << n.status().to_string();
  EXPECT_EQ(bytes.status().code(), Code::deadline_exceeded);
  EXPECT_EQ(cleared.code(), Code::deadline_exceeded);
  EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST(RedisDeadline, AnOversizedValueIsAbandonedNotBuffered) {
  MisbehavingServer server([](int fd, const std::atomic<bool>& stop) {
    // Claims a 1 GiB value and streams it as fast as the client reads.
    if (!MisbehavingServer::next_request(fd, stop)) return;
    const std::string head = "$1073741824\r\n";
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0) return;
    const std::string chunk(65536, 'x');
    while (!stop && ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
    }
  });
  auto s = redis({server.url("timeout=5000")}, {.max_value_bytes = 1 << 20});
  auto r = s->get(make_key(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::resource_exhausted) << r.status().to_string();
  // A put of a value over the limit is refused before anything is sent.
  Status big = s->put(make_key(2), make_entry(std::string(2 << 20, 'y')));
  EXPECT_EQ(big.code(), Code::resource_exhausted);
}

// A large value is read from the socket straight into the reply (no
// parser buffer on the way); these serve one real entry's bytes, as Redis
// stored them, from a server that sends them in pieces or malformed.
class LargeValueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server not installed";
    RedisServer server;
    ASSERT_TRUE(server.running());
    auto s = redis({server.url()});
    m_entry = make_entry(testing::make_payload(200000, 5));  // incompressible, past the direct-read size
    ASSERT_TRUE(s->put(make_key(1), m_entry).ok());
    m_stored = server.command({"GET", "progcache:" + make_key(1).hex()});
    ASSERT_GT(m_stored.size(), 200000u);
  }
  // Serves every request with `head`, the stored value, then `tail`, each
  // part cut in pieces of `piece` bytes sent `gap` apart.
  MisbehavingServer::Serve serve(const std::string& tail, std::size_t piece, std::chrono::milliseconds gap) {
    const std::string reply = "$" + std::to_string(m_stored.size()) + "\r\n" + m_stored + tail;
    return [reply, piece, gap](int fd, const std::atomic<bool>& stop) {
      while (MisbehavingServer::next_request(fd, stop)) {
        for (std::size_t at = 0; at < reply.size() && !stop; at += piece) {
          const std::size_t n = std::min(piece, reply.size() - at);
          if (::send(fd, reply.data() + at, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) return;
          std::this_thread::sleep_for(gap);
        }
      }
    };
  }
  Entry m_entry;
  std::string m_stored;
};

TEST_F(LargeValueTest, ALargeValueSentInPiecesReadsBackExactly) {
  // Pieces of 4099 bytes: the header arrives with part of the value, and
  // the last piece holds the value's end with its CRLF split off.
  MisbehavingServer server(serve("\r\n", 4099, std::chrono::milliseconds(1)));
  auto s = redis({server.url("timeout=5000")});
  for (int i = 0; i < 2; ++i) {  // twice over one pooled connection
    auto got = s->get(make_key(1));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(got->has_value());
    ASSERT_EQ((*got)->artifacts().size(), 1u);
    EXPECT_TRUE((*got)->artifacts()[0].data.view() == m_entry.artifacts()[0].data.view())
        << "the value read in pieces differs from the one stored";
  }
  EXPECT_EQ(s->stats().hits, 2u);
  EXPECT_EQ(s->stats().corrupt_dropped, 0u);
}

TEST_F(LargeValueTest, ALargeValueNotEndedByCrlfIsAnErrorNotAHit) {
  MisbehavingServer server(serve("XY", 1 << 20, std::chrono::milliseconds(0)));
  auto s = redis({server.url("timeout=2000")});
  auto got = s->get(make_key(1));
  ASSERT_FALSE(got.ok()) << "a value without its CRLF was served";
  EXPECT_EQ(got.status().code(), Code::data_loss) << got.status().to_string();
}

TEST_F(LargeValueTest, BytesAfterALargeValueNeverAnswerTheNextCall) {
  // Each answer carries a stray "+OK" after the value: a reply to no
  // command. Whether the first read takes it with the value or not, no call
  // may be answered by it: each returns the value or an error.
  MisbehavingServer server(serve("\r\n+OK\r\n", 1 << 20, std::chrono::milliseconds(0)));
  auto s = redis({server.url("timeout=2000")}, {.breaker_failures = 1000});
  for (int i = 0; i < 4; ++i) {
    auto got = s->get(make_key(1));
    if (!got.ok()) continue;
    ASSERT_TRUE(got->has_value()) << "call " << i << " was answered by the stray bytes";
    EXPECT_TRUE((*got)->artifacts()[0].data.view() == m_entry.artifacts()[0].data.view());
  }
  EXPECT_EQ(s->stats().corrupt_dropped, 0u);
}

TEST_F(LargeValueTest, AServerThatClosesInsideALargeValueIsAnErrorNotAHit) {
  const std::string reply = "$" + std::to_string(m_stored.size()) + "\r\n" + m_stored.substr(0, 100000);
  MisbehavingServer server([reply](int fd, const std::atomic<bool>& stop) {
    if (!MisbehavingServer::next_request(fd, stop)) return;
    ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  });  // the connection closes when this returns
  auto s = redis({server.url("timeout=2000")});
  auto got = s->get(make_key(1));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::unavailable) << got.status().to_string();
}

TEST(RedisDeadline, ALengthNearTheLargestSizeUnderNoLimitIsRefusedNotWrapped) {
  // max_value_bytes at its largest ("no limit"): the announced length plus
  // its CRLF would wrap to 0, and the value be read before its buffer.
  for (const char* head : {"$18446744073709551614\r\nab", "$18446744073709551615\r\nabc"}) {
    MisbehavingServer server([head = std::string(head)](int fd, const std::atomic<bool>& stop) {
      if (MisbehavingServer::next_request(fd, stop)) ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    });
    auto s = redis({server.url("timeout=2000")}, {.max_value_bytes = std::numeric_limits<std::size_t>::max()});
    auto r = s->get(make_key(1));
    ASSERT_FALSE(r.ok()) << head;
    EXPECT_EQ(r.status().code(), Code::resource_exhausted) << r.status().to_string();
  }
}

// ------------------------------------------------------------ tiered

class TieredTest : public ::testing::Test {
 protected:
  std::unique_ptr<TieredStore> machine(const std::string& name, const std::vector<std::string>& urls,
                                       RemoteStoreOptions ro = {}) {
    TieredStoreOptions o;
    o.memory = std::move(*make_memory_store({}));
    o.disk = std::move(*FileStore::open({.root = m_tmp.sub(name)}));
    if (!urls.empty()) {
      ro.urls = urls;
      o.remote = std::move(*make_remote_store(ro));
    }
    return make_tiered_store(std::move(o));
  }
  testing::TempDir m_tmp;
};

TEST_F(TieredTest, LowerTierHitsBackfillUpperTiers) {
  REQUIRE_REDIS();
  RedisServer server;
  auto m1 = machine("m1", {server.url()});
  ASSERT_TRUE(m1->put(make_key(1), make_entry("from m1")).ok());
  ASSERT_TRUE(m1->flush().ok());
  auto m2 = machine("m2", {server.url()});
  auto hit = m2->get(make_key(1));
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->primary().view(), "from m1");
  auto tiers = m2->tier_stats();
  ASSERT_EQ(tiers.size(), 3u);
  EXPECT_EQ(tiers[2].tier, "remote");
  EXPECT_EQ(tiers[2].stats.hits, 1u);
  // Backfilled: the next get is a memory hit; the disk has it too.
  ASSERT_TRUE(m2->get(make_key(1))->has_value());
  EXPECT_EQ(m2->tier_stats()[0].stats.hits, 1u);
  EXPECT_EQ(m2->tier_stats()[2].stats.hits, 1u);
  auto disk = FileStore::open({.root = m_tmp.sub("m2")});
  EXPECT_TRUE((*(*disk)->get(make_key(1))).has_value());
}

TEST_F(TieredTest, AFullRemoteQueueDropsAndCountsAndCloseFlushes) {
  REQUIRE_REDIS();
  RedisServer server;
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = m_tmp.sub("d")}));
  o.remote = std::move(*make_remote_store({.urls = {server.url()}}));
  o.remote_queue = 4;
  auto t = make_tiered_store(std::move(o));
  server.pause();  // the worker blocks on its first put; the queue fills
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(t->put(make_key(i), make_entry("v")).ok());
  server.resume();
  ASSERT_TRUE(t->close().ok());
  auto rs = t->remote_stats();
  ASSERT_TRUE(rs.has_value());
  EXPECT_GT(t->tiered_stats().dropped, 0u);
  // Every put is accounted for: written, dropped at the queue, or failed at
  // the remote. A SET that timed out on the client may still have been
  // applied once the server resumed, so it can count as both written and
  // failed; never as neither, and nothing dropped is ever written.
  const auto remote_errors = t->tier_stats().back().stats.errors;
  const auto written = std::stoull(server.command({"DBSIZE"}));
  EXPECT_GE(written + t->tiered_stats().dropped + remote_errors, 50u);
  EXPECT_LE(written + t->tiered_stats().dropped, 50u);
}

TEST_F(TieredTest, TwoMachinesShareCompilesThroughRedisAndSurviveItsOutage) {
  REQUIRE_REDIS();
  auto info = compiler_info();
  if (!info.ok() || info->nvrtc_path.empty()) GTEST_SKIP() << "no NVRTC";
  RedisServer server;
  Program p;
  p.code = "__global__ void shared_kernel(float* x) { x[threadIdx.x] *= 3.0f; } // " + std::to_string(::getpid());
  p.options = {"-arch=sm_80"};
  p.name = "shared.cu";
  auto m1 = machine("m1", {server.url()});
  auto first = compile(p, TargetType::cubin, {.cache = m1.get(), .state_dir = m_tmp.sub("m1")});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(first->from_cache);
  ASSERT_TRUE(m1->flush().ok());
  // Machine 2: its own cache directory, empty; the compile is a remote hit.
  auto m2 = machine("m2", {server.url()});
  const auto before = compile_stats().compiles;
  auto second = compile(p, TargetType::cubin, {.cache = m2.get(), .state_dir = m_tmp.sub("m2")});
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(compile_stats().compiles, before);
  EXPECT_EQ(second->code, first->code);
  EXPECT_EQ(m2->tier_stats()[2].stats.hits, 1u);
  // Redis dies: machine 3 compiles anyway, locally.
  server.kill();
  auto m3 = machine("m3", {server.url("timeout=50&connect_timeout=50")});
  auto third = compile(p, TargetType::cubin, {.cache = m3.get(), .state_dir = m_tmp.sub("m3")});
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_FALSE(third->from_cache);
  EXPECT_EQ(third->code, first->code);
  EXPECT_TRUE(compile(p, TargetType::cubin, {.cache = m3.get(), .state_dir = m_tmp.sub("m3")})->from_cache);
}

TEST_F(TieredTest, WrongPasswordLeavesLocalTiersWorking) {
  REQUIRE_REDIS();
  RedisServer server({"--requirepass", "pw-right"});
  auto m = machine("m", {"redis://:pw-wrong@127.0.0.1:" + std::to_string(server.port())});
  ASSERT_TRUE(m->put(make_key(1), make_entry("local")).ok());
  ASSERT_TRUE(m->flush().ok());
  EXPECT_EQ((*m->get(make_key(1)))->primary().view(), "local");
  EXPECT_FALSE(m->get(make_key(2))->has_value());  // a miss, not an error
  // A refused password is a refusal, counted apart from outages.
  EXPECT_GE(m->remote_stats()->refused, 1u);
  EXPECT_EQ(m->remote_stats()->failures, 0u);
}

}  // namespace
}  // namespace progcache
