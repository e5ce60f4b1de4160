// The HTTP tier against a real nginx with its WebDAV module on a loopback
// port, started and stopped by the tests (skipped when nginx is absent), and,
// for the faults nginx cannot be made to show, a misbehaving server.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "progcache/file_store.h"
#include "progcache/http_backend.h"
#include "progcache/tiered_store.h"
#include "testing/misbehaving_server.h"
#include "testing/nginx_server.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::make_entry;
using testing::make_key;
using testing::MisbehavingServer;
using testing::NginxServer;

#define REQUIRE_NGINX()                                                                             \
  do {                                                                                              \
    if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx not installed (Debian: nginx-light)"; \
  } while (false)

std::unique_ptr<RemoteStore> http(const std::vector<std::string>& urls, RemoteStoreOptions o = {}) {
  o.urls = urls;
  auto s = make_remote_store(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

std::chrono::milliseconds since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

TEST(HttpUrl, ParsesEveryFormAndRefusesAPasswordWithoutEchoingIt) {
  auto u = parse_http_url("https://ci@cache.example:8443/team/progcache/?timeout=50&connect_timeout=75&ca_file=/x.pem");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->user, "ci");
  EXPECT_EQ(u->host, "cache.example");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(u->prefix, "/team/progcache");
  EXPECT_EQ(u->timeout.count(), 50);
  EXPECT_EQ(u->connect_timeout.count(), 75);
  EXPECT_EQ(u->ca_file, "/x.pem");
  EXPECT_EQ(u->entry_url(std::string(64, 'a')),
            "https://ci@cache.example:8443/team/progcache/ac/" + std::string(64, 'a'));
  auto plain = parse_http_url("http://127.0.0.1");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->shown(), "http://127.0.0.1");
  EXPECT_EQ(plain->timeout.count(), 1000);
  auto v6 = parse_http_url("http://[::1]:9090/c");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "[::1]");
  EXPECT_EQ(v6->shown(), "http://[::1]:9090/c");
  for (const char* bad : {"redis://h", "http://", "http://h:0", "http://h:99999", "http://h:", "http://h?bogus=1",
                          "http://h?timeout", "http://h?timeout=-5", "http://h/a//b", "http://h/../x", "http://h/a b",
                          "http://h?ca_file=/x.pem", "http://[::1", "http://h/%2e%2e"}) {
    auto r = parse_http_url(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::invalid_argument) << bad;
  }
  // Credentials never ride in a URL: refused, and never echoed.
  auto pw = parse_http_url("https://ci:hunter2@cache.example/p");
  ASSERT_FALSE(pw.ok());
  EXPECT_EQ(pw.status().message().find("hunter2"), std::string::npos) << pw.status().message();
  EXPECT_NE(pw.status().message().find("PROGCACHE_REMOTE_PASSWORD_FILE"), std::string::npos);
  auto checked = check_remote_url("http://ci:hunter2@h/p");
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().message().find("hunter2"), std::string::npos);
  const auto schemes = remote_schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "http"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "https"), schemes.end());
}

TEST(HttpStore, RoundTripsEntriesInTheDocumentedLayout) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  auto s = http({server.url("cache/team")});
  std::string binary =
      "\x7f"
      "ELF";
  binary += std::string("\0\0\x01\xff", 4) + testing::make_payload(300000, 4);
  ASSERT_TRUE(s->put_bytes(make_key(1), Bytes::copy_of(binary)).ok());
  auto got = s->get_bytes(make_key(1));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().to_string();
  EXPECT_EQ((*got)->str(), binary);
  // One resource per entry, <prefix>/ac/<64 hex digits>, holding the entry.
  const std::string file = server.file("cache", "team/ac/" + make_key(1).hex());
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_GT(std::filesystem::file_size(file), binary.size());
  EXPECT_EQ(*s->get(make_key(2)), std::nullopt);  // absent: a plain miss
  EXPECT_TRUE(*s->erase(make_key(1)));
  EXPECT_FALSE(*s->erase(make_key(1)));
  EXPECT_FALSE(std::filesystem::exists(file));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.puts, 1u);
  EXPECT_EQ(st.errors, 0u);
  // The server cannot list its entries: walks say so instead of guessing.
  auto n = s->count();
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("cannot list"), std::string::npos);
}

TEST(HttpStore, TwoRootsShareEntriesThroughTheServer) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  testing::TempDir tmp;
  auto machine = [&](const std::string& name) {
    TieredStoreOptions o;
    o.disk = std::move(*FileStore::open({.root = tmp.sub(name)}));
    o.remote = std::move(*make_remote_store({.urls = {server.url("cache")}}));
    return make_tiered_store(std::move(o));
  };
  auto a = machine("a");
  const std::string payload = testing::make_payload(65536, 7);
  ASSERT_TRUE(a->put(make_key(5), make_entry(payload)).ok());
  ASSERT_TRUE(a->flush().ok());
  auto b = machine("b");
  auto hit = b->get(make_key(5));
  ASSERT_TRUE(hit.ok() && hit->has_value()) << hit.status().to_string();
  EXPECT_EQ((*hit)->artifacts().at(0).data.view(), payload);
  // Backfilled into b's own disk: the next read needs no server.
  EXPECT_EQ(testing::entry_files_on_disk(tmp.sub("b")), 1u);
}

TEST(HttpStore, ReadOnlyTierNeverWrites) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  auto ro = http({server.url("cache")}, {.read_only = true});
  ASSERT_TRUE(ro->put(make_key(1), make_entry("never sent")).ok());
  EXPECT_EQ(ro->remote_stats().read_only_skips, 1u);
  EXPECT_FALSE(std::filesystem::exists(server.file("cache", "ac/" + make_key(1).hex())));
  auto rw = http({server.url("cache")});
  ASSERT_TRUE(rw->put(make_key(2), make_entry("from CI")).ok());
  EXPECT_EQ((*ro->get_bytes(make_key(2)))->view(), "from CI");
}

TEST(HttpStore, BodiesThatAreNotThisEntryAreCountedMissesNeverServed) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  auto s = http({server.url("cache")});
  ASSERT_TRUE(s->put(make_key(1), make_entry(testing::make_payload(4096, 1))).ok());
  const std::string one = server.file("cache", "ac/" + make_key(1).hex());
  // Another key's bytes under this key's name.
  std::filesystem::copy_file(one, server.file("cache", "ac/" + make_key(2).hex()));
  // A truncated entry (a whole HTTP answer whose body is cut).
  const std::string whole = testing::read_all(one);
  testing::write_all(server.file("cache", "ac/" + make_key(3).hex()), whole.substr(0, whole.size() / 2));
  // Something else entirely.
  testing::write_all(server.file("cache", "ac/" + make_key(4).hex()), "<html><body>404 Not Found</body></html>");
  for (int k : {2, 3, 4}) {
    auto r = s->get(make_key(k));
    ASSERT_TRUE(r.ok()) << k << ": " << r.status().to_string();
    EXPECT_FALSE(r->has_value()) << k;
  }
  EXPECT_EQ(s->stats().corrupt_dropped, 3u);
  // A server answering every request with an HTML page.
  auto html = http({server.url("html")});
  ASSERT_TRUE(html->put(make_key(1), make_entry("x")).ok());  // it says 200; nothing is stored
  EXPECT_FALSE(html->get(make_key(1))->has_value());
  EXPECT_EQ(html->stats().corrupt_dropped, 1u);
  EXPECT_TRUE((*s->get(make_key(1))).has_value());  // the real entry is untouched
}

TEST(HttpStore, AServerAnswering500IsACountedErrorAndTripsTheBreaker) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  auto s = http({server.url("err500")}, {.breaker_failures = 2, .breaker_backoff = std::chrono::milliseconds(60000)});
  for (int i = 0; i < 2; ++i) {
    auto r = s->get(make_key(1));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::unavailable);
    EXPECT_NE(r.status().message().find("HTTP 500"), std::string::npos) << r.status().to_string();
  }
  EXPECT_EQ(s->put(make_key(1), make_entry("x")).code(), Code::unavailable);  // skipped: breaker open
  const RemoteStats rs = s->remote_stats();
  EXPECT_EQ(rs.failures, 2u);
  EXPECT_EQ(rs.breaker_trips, 1u);
  EXPECT_EQ(rs.skipped, 1u);
  EXPECT_EQ(s->stats().errors, 3u);
}

TEST(HttpStore, ASlowBodyCostsAtMostTheCallTimeout) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  // /slow/ serves /cache/'s files at 2 KiB/s: a 64 KiB entry takes 30 s.
  auto writer = http({server.url("cache")});
  ASSERT_TRUE(writer->put(make_key(1), make_entry(testing::make_payload(65536, 3))).ok());
  auto slow = http({server.url("slow", "timeout=300")});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = slow->get(make_key(1));
  const auto waited = since(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::deadline_exceeded) << r.status().to_string();
  EXPECT_LT(waited, std::chrono::milliseconds(2000)) << "a slow body held a lookup past its timeout";
  EXPECT_EQ(slow->remote_stats().timeouts, 1u);
}

TEST(HttpStore, RefusedCredentialsAreAnErrorAndTheRightOnesWork) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  const std::string basic = "http://ci@127.0.0.1:" + std::to_string(server.port()) + "/auth";
  auto none = http({server.url("auth")});
  auto wrong = http({basic}, {.password = "not-it"});
  for (auto* s : {none.get(), wrong.get()}) {
    auto r = s->get(make_key(1));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::permission_denied) << r.status().to_string();
    EXPECT_NE(r.status().message().find("HTTP 401"), std::string::npos);
    EXPECT_EQ(r.status().message().find("not-it"), std::string::npos);
    EXPECT_EQ(s->put(make_key(1), make_entry("x")).code(), Code::permission_denied);
    // Refusals, counted apart from outages: a setting to fix, not a server down.
    EXPECT_EQ(s->remote_stats().refused, 2u);
    EXPECT_EQ(s->remote_stats().failures, 0u);
  }
  auto right = http({basic}, {.password = NginxServer::basic_password()});
  ASSERT_TRUE(right->put(make_key(1), make_entry("behind basic auth")).ok());
  EXPECT_EQ((*right->get_bytes(make_key(1)))->view(), "behind basic auth");
  // Without a user in the URL the secret is a bearer token.
  auto bearer = http({server.url("bearer")}, {.password = NginxServer::bearer_token()});
  ASSERT_TRUE(bearer->put(make_key(2), make_entry("behind a token")).ok());
  EXPECT_EQ((*bearer->get_bytes(make_key(2)))->view(), "behind a token");
  auto no_token = http({server.url("bearer")});
  EXPECT_EQ(no_token->get(make_key(2)).status().code(), Code::permission_denied);
}

TEST(HttpStore, SignedEntriesAcceptedAndUnsignedOrForeignRejected) {
  REQUIRE_NGINX();
  NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  auto signer = http({server.url("cache")}, {.codec = {"team-signing-key-0123456789"}});
  auto other = http({server.url("cache")}, {.codec = {"someone-elses-key-0123456789"}});
  auto plain = http({server.url("cache")});
  ASSERT_TRUE(signer->put(make_key(1), make_entry("signed")).ok());
  EXPECT_EQ((*signer->get_bytes(make_key(1)))->view(), "signed");
  EXPECT_FALSE(other->get(make_key(1))->has_value());
  EXPECT_EQ(other->stats().rejected, 1u);
  ASSERT_TRUE(plain->put(make_key(2), make_entry("unsigned, maybe poisoned")).ok());
  EXPECT_FALSE(signer->get(make_key(2))->has_value());
  EXPECT_EQ(signer->stats().rejected, 1u);
}

TEST(HttpStore, ADeadServerIsAnErrorWithinTheConnectTimeout) {
  const int port = testing::free_loopback_port();  // nothing listens there
  auto s = http({"http://127.0.0.1:" + std::to_string(port) + "/c?timeout=200&connect_timeout=100"});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s->get(make_key(1));
  EXPECT_EQ(r.status().code(), Code::unavailable) << r.status().to_string();
  EXPECT_LT(since(t0), std::chrono::milliseconds(2000));
}

// A request's bytes; the requests here (GETs) arrive in one read.
bool read_request(int fd, const std::atomic<bool>& stop) {
  return MisbehavingServer::next_request(fd, stop);
}

TEST(HttpDeadline, ABodyCutShortOfItsLengthIsAnErrorNotAValue) {
  MisbehavingServer server([](int fd, const std::atomic<bool>& stop) {
    if (!read_request(fd, stop)) return;
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n";
    const std::string part(5000, 'e');
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    ::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
  });  // then the connection closes
  auto s = http({"http://127.0.0.1:" + std::to_string(server.port()) + "/c?timeout=2000"});
  auto r = s->get(make_key(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::data_loss) << r.status().to_string();
  EXPECT_EQ(s->stats().errors, 1u);
  EXPECT_EQ(s->stats().hits, 0u);
}

TEST(HttpDeadline, AnOversizedBodyIsAbandonedNotBuffered) {
  MisbehavingServer server([](int fd, const std::atomic<bool>& stop) {
    if (!read_request(fd, stop)) return;
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    const std::string chunk(65536, 'z');
    while (!stop && ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
    }
  });
  auto s =
      http({"http://127.0.0.1:" + std::to_string(server.port()) + "/c?timeout=5000"}, {.max_value_bytes = 1 << 20});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s->get(make_key(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::resource_exhausted) << r.status().to_string();
  EXPECT_LT(since(t0), std::chrono::milliseconds(4000));
}

// Peak resident memory of this process, and its current size, in bytes.
std::uint64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::strlen(field))) * 1024;
  }
  return 0;
}

// An endless body (chunked, or under a length larger than the limit) costs
// at most the limit in memory, and the lookup is an error, never a value.
// Measured in a child process, whose peak is its own.
// Peak memory measures the allocator under a sanitizer, not the code: its
// realloc never grows a block in place and freed blocks sit in quarantine,
// so a body grown to the limit peaks at about twice it there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PROGCACHE_SANITIZED_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PROGCACHE_SANITIZED_ALLOCATOR 1
#endif
#endif

TEST(HttpDeadline, AnEndlessBodyCostsNoMoreMemoryThanTheLimit) {
#ifdef PROGCACHE_SANITIZED_ALLOCATOR
  GTEST_SKIP() << "built with a sanitizer, whose allocator decides peak memory (realloc copies, frees are "
                  "quarantined); the bound is measured in the plain build";
#endif
  if (status_kib("VmHWM:") == 0) GTEST_SKIP() << "no /proc/self/status to read peak memory from";
  constexpr std::size_t k_limit = std::size_t{64} << 20;
  for (const bool chunked : {true, false}) {
    MisbehavingServer server([chunked](int fd, const std::atomic<bool>& stop) {
      if (!read_request(fd, stop)) return;
      const std::string head = chunked ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                       : "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n";
      ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
      const std::string data(65536, 'z');
      const std::string chunk = chunked ? "10000\r\n" + data + "\r\n" : data;
      while (!stop && ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
      }
    });
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/c?timeout=30000";
    int report[2];
    ASSERT_EQ(::pipe(report), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(report[0]);
      auto s = make_remote_store({.urls = {url}, .max_value_bytes = k_limit});
      const std::uint64_t before = status_kib("VmRSS:");
      // The peak from here on (where the kernel lets it be reset).
      if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w"); f != nullptr) {
        std::fputs("5", f);
        std::fclose(f);
      }
      auto r = s.ok() ? (*s)->get(make_key(1)) : Result<std::optional<Entry>>(s.status());
      const std::uint64_t peak = status_kib("VmHWM:");
      const std::string line = std::to_string(static_cast<int>(r.ok() ? Code::ok : r.status().code())) + " " +
                               std::to_string(peak > before ? peak - before : 0) + " " +
                               std::to_string(s.ok() ? (*s)->stats().errors : 0) + " " +
                               std::to_string(r.ok() && r->has_value() ? 1 : 0);
      const ssize_t wrote = ::write(report[1], line.data(), line.size());
      ::_exit(wrote == static_cast<ssize_t>(line.size()) ? 0 : 1);
    }
    ::close(report[1]);
    std::string line;
    char buf[256];
    for (ssize_t n; (n = ::read(report[0], buf, sizeof buf)) > 0;) line.append(buf, static_cast<std::size_t>(n));
    ::close(report[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
    std::istringstream in(line);
    int code = -1;
    std::uint64_t grew = 0, errors = 0, hit = 0;
    in >> code >> grew >> errors >> hit;
    const char* what = chunked ? "endless chunked body" : "endless body under a 1 GiB length";
    EXPECT_EQ(code, static_cast<int>(Code::resource_exhausted)) << what;
    EXPECT_EQ(hit, 0u) << what;
    EXPECT_EQ(errors, 1u) << what;
    // The body itself may reach the limit; the rest (libcurl's buffers, the
    // connection) is small. A buffer grown by doubling held twice the limit.
    EXPECT_LE(grew, k_limit + k_limit / 4) << what << ": peak memory grew by " << grew << " bytes";
  }
}

TEST(HttpStore, ConnectionsAreReusedAcrossRequests) {
  std::atomic<int> connections{0}, requests{0};
  MisbehavingServer server([&](int fd, const std::atomic<bool>& stop) {
    ++connections;
    while (read_request(fd, stop)) {
      ++requests;
      const std::string reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
      if (::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL) <= 0) return;
    }
  });
  auto s = http({"http://127.0.0.1:" + std::to_string(server.port()) + "/c"});
  for (int i = 0; i < 50; ++i) {
    auto r = s->get(make_key(static_cast<std::uint64_t>(i)));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->has_value());
  }
  EXPECT_EQ(requests.load(), 50);
  EXPECT_EQ(connections.load(), 1) << "each lookup opened a connection of its own";
}

}  // namespace
}  // namespace progcache
