#include "progcache/redis_store.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "progcache/hash.h"

namespace progcache {

// ---------------------------------------------------------------- URLs

std::string RedisUrl::redacted() const {
  std::string auth;
  if (!user.empty() || !password.empty()) auth = (user.empty() ? "" : user) + (password.empty() ? "" : ":***") + "@";
  std::string out;
  if (!unix_path.empty()) {
    out = "redis+unix://" + auth + unix_path;
  } else {
    out = "redis://" + auth + host + ":" + std::to_string(port);
  }
  if (db != 0) out += (unix_path.empty() ? "/" : "?db=") + std::to_string(db);
  return out;
}

namespace {

bool parse_int(std::string_view s, std::int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      auto hex = from_hex(s.substr(i + 1, 2));
      if (hex.ok()) {
        out += *hex;
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

namespace {

// The URL as error messages may show it. Credentials end at the last '@'
// (a password may itself hold '@', '?', ':' or '/'), and all of them are
// hidden. Without an '@', what follows the first ':' after the scheme is
// hidden too: "redis://user:secret" (the '@' forgotten) or a fragment of a
// password cut at a ',' must not be echoed either.
std::string shown_url(std::string_view url) {
  const auto scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const std::string_view scheme = url.substr(0, start);
  const std::string_view rest = url.substr(start);
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    return std::string(scheme) + "<credentials>@" + std::string(rest.substr(at + 1));
  }
  if (const auto colon = rest.find(':'); colon != std::string_view::npos) {
    return std::string(scheme) + std::string(rest.substr(0, colon)) + ":<hidden>";
  }
  return std::string(url);
}

}  // namespace

Result<RedisUrl> parse_redis_url(std::string_view url) {
  RedisUrl u;
  const auto bad = [&](const std::string& why) {
    return invalid_argument("bad remote URL '" + shown_url(url) + "': " + why);
  };
  std::string_view rest;
  bool is_unix = false;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("redis+unix://")) {
    rest = url.substr(13);
    is_unix = true;
  } else {
    return bad("use redis://host[:port][/db] or redis+unix:///path");
  }
  // Credentials first, up to the last '@', so that a '?' or '/' inside a
  // password cannot be taken for the query or the database.
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (auto colon = cred.find(':'); colon != std::string_view::npos) {
      u.user = percent_decode(cred.substr(0, colon));
      u.password = percent_decode(cred.substr(colon + 1));
    } else {
      u.password = percent_decode(cred);  // redis://secret@host: a password alone
    }
  }
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (is_unix) {
    if (rest.empty() || rest[0] != '/') return bad("a unix socket URL needs an absolute path");
    u.unix_path = std::string(rest);
  } else {
    std::string_view hostport = rest;
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      std::int64_t db = 0;
      const auto dbs = rest.substr(slash + 1);
      if (!dbs.empty() && (!parse_int(dbs, &db) || db < 0 || db > 1000))
        return bad("db must be a number from 0 to 1000");
      u.db = static_cast<int>(db);
    }
    if (hostport.starts_with("[")) {  // [::1]:6379
      const auto close = hostport.find(']');
      if (close == std::string_view::npos) return bad("unclosed '[' in host");
      u.host = std::string(hostport.substr(1, close - 1));
      hostport = hostport.substr(close + 1);
      if (hostport.starts_with(":")) {
        std::int64_t port = 0;
        if (!parse_int(hostport.substr(1), &port) || port <= 0 || port > 65535) return bad("port must be 1-65535");
        u.port = static_cast<int>(port);
      }
    } else {
      const auto colon = hostport.rfind(':');
      u.host = std::string(hostport.substr(0, colon));
      if (colon != std::string_view::npos) {
        std::int64_t port = 0;
        if (!parse_int(hostport.substr(colon + 1), &port) || port <= 0 || port > 65535) {
          return bad("port must be 1-65535");
        }
        u.port = static_cast<int>(port);
      }
    }
    if (u.host.empty()) return bad("missing host");
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) return bad("query parameter '" + std::string(kv) + "' has no value");
    const std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    std::int64_t n = 0;
    if (k == "prefix") {
      u.prefix = percent_decode(v);
    } else if (k == "ttl") {
      if (!parse_int(v, &n) || n <= 0) return bad("ttl must be a positive number of seconds");
      u.ttl_seconds = n;
    } else if (k == "timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("timeout must be positive milliseconds");
      u.timeout = std::chrono::milliseconds(n);
    } else if (k == "connect_timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("connect_timeout must be positive milliseconds");
      u.connect_timeout = std::chrono::milliseconds(n);
    } else if (k == "db") {
      if (!parse_int(v, &n) || n < 0 || n > 1000) return bad("db must be a number from 0 to 1000");
      u.db = static_cast<int>(n);
    } else {
      return bad("unknown parameter '" + std::string(k) + "' (prefix, ttl, timeout, connect_timeout, db)");
    }
  }
  return u;
}

// ---------------------------------------------------------------- store

namespace {

struct Reply {
  redisReply* r = nullptr;
  Reply() = default;
  Reply(Reply&& o) noexcept : r(std::exchange(o.r, nullptr)) {}
  Reply& operator=(Reply&&) = delete;
  ~Reply() {
    if (r != nullptr) freeReplyObject(r);
  }
  redisReply* operator->() const { return r; }
};

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

using Clock = std::chrono::steady_clock;

int millis_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// One connection, driven without blocking: every command it runs must finish
// by the deadline of the call it serves, however the server trickles bytes.
// hiredis's blocking mode bounds each read, not the call, so the socket is
// non-blocking and this class waits with poll() for what is left of the
// deadline. Any failure leaves the connection marked broken (c->err), and
// the pool discards it: a half-read reply must never meet the next command.
class Conn {
 public:
  Conn(redisContext* c, const RedisUrl& url, Clock::time_point deadline, std::size_t max_reply)
      : m_c(c), m_url(url), m_deadline(deadline), m_max_reply(max_reply) {}

  // Sends one command (each argument binary-safe) and reads its reply.
  Result<Reply> exec(std::initializer_list<std::string_view> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (auto a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    const std::string what(*args.begin());
    if (redisAppendCommandArgv(m_c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      return broken(Code::unavailable, what + ": cannot format the command");
    }
    for (int done = 0; done == 0;) {
      PROGCACHE_TRY(wait_for(POLLOUT, what));
      if (redisBufferWrite(m_c, &done) != REDIS_OK) return classify(what);
    }
    Reply reply;
    void* r = nullptr;
    while (true) {
      if (redisGetReplyFromReader(m_c, &r) != REDIS_OK) return classify(what);
      if (r != nullptr) break;
      if (m_c->reader->len > m_max_reply) {
        return broken(Code::resource_exhausted,
                      what + ": reply larger than the " + std::to_string(m_max_reply) + "-byte limit for one value");
      }
      PROGCACHE_TRY(wait_for(POLLIN, what));
      if (redisBufferRead(m_c) != REDIS_OK) return classify(what);
    }
    reply.r = static_cast<redisReply*>(r);
    return reply;
  }

  Status classify(const std::string& what) const {
    const std::string msg = "remote " + m_url.redacted() + ": " + what + ": " + m_c->errstr;
    return m_c->err == REDIS_ERR_EOF || m_c->err == REDIS_ERR_IO ? unavailable(msg) : Status(Code::data_loss, msg);
  }

 private:
  Status wait_for(short events, const std::string& what) {
    while (true) {
      const int left = millis_until(m_deadline);
      if (left == 0) return broken(Code::deadline_exceeded, what + ": no complete answer within the deadline");
      pollfd p{m_c->fd, events, 0};
      const int n = ::poll(&p, 1, left);
      if (n > 0) return {};
      if (n < 0 && errno != EINTR) return broken(Code::unavailable, what + ": poll: " + std::strerror(errno));
    }
  }

  Status broken(Code code, const std::string& why) {
    m_c->err = REDIS_ERR_IO;
    std::snprintf(m_c->errstr, sizeof(m_c->errstr), "%s", why.c_str());
    return Status(code, "remote " + m_url.redacted() + ": " + why);
  }

  redisContext* m_c;
  const RedisUrl& m_url;
  Clock::time_point m_deadline;
  std::size_t m_max_reply;
};

// One Redis server: its URL, a pool of idle connections, a circuit breaker.
class Server {
 public:
  Server(RedisUrl url, std::size_t max_reply, int max_idle, int breaker_failures, std::chrono::milliseconds backoff)
      : m_url(std::move(url)),
        m_max_reply(max_reply),
        m_max_idle(max_idle),
        m_breaker_failures(breaker_failures),
        m_backoff(backoff) {
    m_id_hash = xxh3_64(m_url.redacted());
  }
  ~Server() {
    for (auto* c : m_idle) redisFree(c);
  }

  const RedisUrl& url() const { return m_url; }
  std::uint64_t id_hash() const { return m_id_hash; }

  // Runs `fn(conn)` on a pooled connection; every command `fn` sends must
  // be answered by `deadline`, the connect (when the pool is empty)
  // included. A connection that failed is discarded, never pooled.
  template <typename Fn>
  Status with_connection(Clock::time_point deadline, Fn&& fn, RemoteStats& stats, std::mutex& stats_mu) {
    if (!breaker_allows()) {
      std::lock_guard l(stats_mu);
      ++stats.skipped;
      return unavailable("remote " + m_url.redacted() + " skipped: circuit breaker open after repeated failures");
    }
    redisContext* c = nullptr;
    Status st = acquire(deadline, &c);
    if (st.ok()) {
      Conn conn(c, m_url, deadline, m_max_reply);
      st = fn(conn);
      if (c->err != 0) {
        redisFree(c);
        c = nullptr;
      }
    }
    if (c != nullptr) release(c);
    record(st, stats, stats_mu);
    return st;
  }

  // The deadline of one call made now.
  [[nodiscard]] Clock::time_point call_deadline() const { return Clock::now() + m_url.timeout; }

 private:
  bool breaker_allows() {
    std::lock_guard l(m_mu);
    if (m_failures < m_breaker_failures) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now < m_open_until) return false;
    // Half-open: let one probe through, and hold the others off until it
    // reports.
    m_open_until = now + m_backoff;
    return true;
  }

  void record(const Status& st, RemoteStats& stats, std::mutex& stats_mu) {
    // Outages, timeouts and refused credentials all open the breaker: each
    // would otherwise cost every call the same wait or the same refusal.
    const bool infra = !st.ok() && (st.code() == Code::unavailable || st.code() == Code::deadline_exceeded ||
                                    st.code() == Code::permission_denied);
    std::lock_guard l(m_mu);
    if (!infra) {
      m_failures = 0;
      return;
    }
    ++m_failures;
    std::lock_guard sl(stats_mu);
    (st.code() == Code::deadline_exceeded ? stats.timeouts : stats.failures)++;
    stats.last_error = st.message();  // messages carry only redacted URLs
    if (m_failures == m_breaker_failures) {
      ++stats.breaker_trips;
      m_open_until = std::chrono::steady_clock::now() + m_backoff;
    }
  }

  Status acquire(Clock::time_point deadline, redisContext** out) {
    {
      std::lock_guard l(m_mu);
      if (!m_idle.empty()) {
        *out = m_idle.back();
        m_idle.pop_back();
        return {};
      }
    }
    const auto connect_for =
        std::min<std::chrono::milliseconds>(m_url.connect_timeout, std::chrono::milliseconds(millis_until(deadline)));
    if (connect_for.count() <= 0) {
      return deadline_exceeded("remote " + m_url.redacted() + ": no time left to connect");
    }
    redisContext* c = m_url.unix_path.empty()
                          ? redisConnectWithTimeout(m_url.host.c_str(), m_url.port, to_timeval(connect_for))
                          : redisConnectUnixWithTimeout(m_url.unix_path.c_str(), to_timeval(connect_for));
    if (c == nullptr) return unavailable("remote " + m_url.redacted() + ": cannot allocate a connection");
    if (c->err != 0) {
      const bool timed_out = c->err == REDIS_ERR_IO && (errno == ETIMEDOUT || errno == EINPROGRESS ||
                                                        std::strstr(c->errstr, "timed out") != nullptr);
      const std::string msg = "remote " + m_url.redacted() + ": connect: " + c->errstr;
      redisFree(c);
      return timed_out ? deadline_exceeded(msg) : unavailable(msg);
    }
    // From here on the connection is driven by Conn: non-blocking, polled.
    const int flags = ::fcntl(c->fd, F_GETFL);
    if (flags < 0 || ::fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      redisFree(c);
      return unavailable("remote " + m_url.redacted() + ": cannot make the socket non-blocking");
    }
    c->flags &= ~REDIS_BLOCK;
    Conn conn(c, m_url, deadline, m_max_reply);
    if (!m_url.password.empty()) {
      auto r =
          m_url.user.empty() ? conn.exec({"AUTH", m_url.password}) : conn.exec({"AUTH", m_url.user, m_url.password});
      if (!r.ok() || (*r)->type == REDIS_REPLY_ERROR) {
        Status st = !r.ok() ? r.status()
                            : permission_denied("remote " + m_url.redacted() +
                                                ": authentication failed (check the user and password)");
        redisFree(c);
        return st;
      }
    }
    if (m_url.db != 0) {
      const std::string db = std::to_string(m_url.db);
      auto r = conn.exec({"SELECT", db});
      if (!r.ok() || (*r)->type == REDIS_REPLY_ERROR) {
        Status st = !r.ok() ? r.status() : unavailable("remote " + m_url.redacted() + ": cannot select database " + db);
        redisFree(c);
        return st;
      }
    }
    *out = c;
    return {};
  }

  void release(redisContext* c) {
    std::lock_guard l(m_mu);
    if (static_cast<int>(m_idle.size()) < m_max_idle) {
      m_idle.push_back(c);
    } else {
      redisFree(c);
    }
  }

 private:
  RedisUrl m_url;
  std::uint64_t m_id_hash = 0;
  std::size_t m_max_reply;
  int m_max_idle;
  int m_breaker_failures;
  std::chrono::milliseconds m_backoff;
  std::mutex m_mu;
  std::vector<redisContext*> m_idle;                   // GUARDED_BY(m_mu)
  int m_failures = 0;                                  // GUARDED_BY(m_mu)
  std::chrono::steady_clock::time_point m_open_until;  // GUARDED_BY(m_mu)
};

// Framing around one value in a reply ("$<len>\r\n" ... "\r\n"), and more.
constexpr std::size_t k_reply_overhead = 64;

// An error reply: the server answered, and said no. Authentication errors
// are named as such; a value of another type is data_loss; a server busy
// loading or failing over is unavailable; the rest (out of memory...) is
// resource_exhausted.
Status refused(const Server& s, const char* what, const Reply& r) {
  const std::string text(r->str, r->len);
  if (text.starts_with("NOAUTH") || text.starts_with("WRONGPASS")) {
    return permission_denied("remote " + s.url().redacted() + ": authentication failed (" + text +
                             "): check the user and password");
  }
  const std::string msg = "remote " + s.url().redacted() + ": " + what + " refused: " + text;
  if (text.starts_with("WRONGTYPE")) return data_loss(msg);  // something else lives at the key
  if (text.starts_with("LOADING") || text.starts_with("BUSY") || text.starts_with("MASTERDOWN") ||
      text.starts_with("TRYAGAIN")) {
    return unavailable(msg);
  }
  return resource_exhausted(msg);
}

class RedisStore final : public RemoteStore {
 public:
  explicit RedisStore(const RedisStoreOptions& o) : m_opt(o) {}

  Status init() {
    if (m_opt.urls.empty()) return invalid_argument("a remote store needs at least one URL");
    for (const auto& u : m_opt.urls) {
      PROGCACHE_ASSIGN_OR_RETURN(RedisUrl url, parse_redis_url(u));
      if (url.password.empty()) url.password = m_opt.password;
      m_servers.push_back(std::make_unique<Server>(std::move(url), m_opt.max_value_bytes + k_reply_overhead,
                                                   m_opt.max_idle_connections, m_opt.breaker_failures,
                                                   m_opt.breaker_backoff));
    }
    return {};
  }

  Result<std::optional<Entry>> get(const Key& key) override {
    Server& s = server(key);
    const std::string rkey = s.url().prefix + key.hex();
    std::optional<Entry> found;
    bool corrupt = false, rejected = false;
    Status st = s.with_connection(
        s.call_deadline(),
        [&](Conn& c) -> Status {
          PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({"GET", rkey}));
          if (r->type == REDIS_REPLY_NIL) return {};
          if (r->type == REDIS_REPLY_ERROR) {
            Status why = refused(s, "GET", r);
            if (why.code() != Code::data_loss) return why;
            corrupt = true;  // not an entry: a counted miss
            return {};
          }
          if (r->type != REDIS_REPLY_STRING) {
            corrupt = true;
            return {};
          }
          // Zero-copy: the entry's artifacts point into hiredis's reply,
          // which lives as long as they do.
          std::shared_ptr<redisReply> owner(std::exchange(r.r, nullptr), [](redisReply* p) { freeReplyObject(p); });
          auto e = decode_entry(Bytes::wrap(owner, owner->str, owner->len), key, m_opt.codec);
          if (!e.ok()) {
            (e.status().code() == Code::permission_denied ? rejected : corrupt) = true;
            return {};
          }
          found = std::move(*e);
          return {};
        },
        m_remote, m_stats_mu);
    std::lock_guard l(m_stats_mu);
    if (!st.ok()) {
      ++m_base.errors;
      return st;
    }
    if (corrupt) ++m_base.corrupt_dropped;
    if (rejected) ++m_base.rejected;
    (found ? m_base.hits : m_base.misses)++;
    return found;
  }

  Status put(const Key& key, const Entry& entry) override {
    if (m_opt.read_only) {
      std::lock_guard l(m_stats_mu);
      ++m_remote.read_only_skips;
      return {};
    }
    PROGCACHE_ASSIGN_OR_RETURN(std::string value, encode_entry(key, entry, now_ns(), m_opt.codec));
    if (value.size() > m_opt.max_value_bytes) {
      std::lock_guard l(m_stats_mu);
      ++m_base.errors;
      return resource_exhausted("entry of " + std::to_string(value.size()) + " bytes exceeds the remote's " +
                                std::to_string(m_opt.max_value_bytes) + "-byte limit for one value; not sent");
    }
    Server& s = server(key);
    const std::string rkey = s.url().prefix + key.hex();
    Status st = s.with_connection(
        s.call_deadline(),
        [&](Conn& c) -> Status {
          const std::string ttl = s.url().ttl_seconds ? std::to_string(*s.url().ttl_seconds) : "";
          auto r = s.url().ttl_seconds ? c.exec({"SET", rkey, value, "EX", ttl}) : c.exec({"SET", rkey, value});
          if (!r.ok()) return r.status();
          if ((*r)->type == REDIS_REPLY_ERROR) return refused(s, "SET", *r);
          return {};
        },
        m_remote, m_stats_mu);
    std::lock_guard l(m_stats_mu);
    if (!st.ok())
      ++m_base.errors;
    else
      ++m_base.puts;
    return st;
  }

  Result<bool> erase(const Key& key) override {
    if (m_opt.read_only) return failed_precondition("remote store is read-only");
    Server& s = server(key);
    const std::string rkey = s.url().prefix + key.hex();
    bool removed = false;
    PROGCACHE_TRY(s.with_connection(
        s.call_deadline(),
        [&](Conn& c) -> Status {
          PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({"DEL", rkey}));
          if (r->type == REDIS_REPLY_ERROR) return refused(s, "DEL", r);
          removed = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
          return {};
        },
        m_remote, m_stats_mu));
    return removed;
  }

  // Visits every key under the prefix on every server (SCAN, never KEYS).
  // Each call has its own deadline and the whole walk has
  // `admin_timeout`: a server whose cursor never comes back to 0 cannot keep
  // stats, count or clear busy for ever.
  template <typename Fn>
  Status scan_all(Fn&& per_batch) {
    const auto walk_deadline = Clock::now() + m_opt.admin_timeout;
    for (auto& sp : m_servers) {
      Server& s = *sp;
      const std::string pattern = s.url().prefix + "*";
      std::string cursor = "0";
      do {
        if (Clock::now() >= walk_deadline) {
          return deadline_exceeded("remote " + s.url().redacted() + ": SCAN did not finish within " +
                                   std::to_string(m_opt.admin_timeout.count()) + " ms");
        }
        std::vector<std::string> keys;
        PROGCACHE_TRY(s.with_connection(
            std::min(s.call_deadline(), walk_deadline),
            [&](Conn& c) -> Status {
              PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}));
              if (r->type == REDIS_REPLY_ERROR) return refused(s, "SCAN", r);
              if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
                  r->element[1]->type != REDIS_REPLY_ARRAY) {
                return unavailable("remote " + s.url().redacted() + ": unexpected SCAN reply");
              }
              cursor.assign(r->element[0]->str, r->element[0]->len);
              for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
                const redisReply* k = r->element[1]->element[i];
                if (k->type == REDIS_REPLY_STRING) keys.emplace_back(k->str, k->len);
              }
              return {};
            },
            m_remote, m_stats_mu));
        PROGCACHE_TRY(per_batch(s, keys, walk_deadline));
      } while (cursor != "0");
    }
    return {};
  }

  // Runs one command per key, each within its own deadline and the walk's.
  Status for_each_key(Server& s, const std::vector<std::string>& keys, Clock::time_point walk_deadline,
                      const char* command, const std::function<void(const redisReply&)>& on_reply) {
    for (const auto& k : keys) {
      PROGCACHE_TRY(s.with_connection(
          std::min(s.call_deadline(), walk_deadline),
          [&](Conn& c) -> Status {
            PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({command, k}));
            if (r->type == REDIS_REPLY_ERROR) return refused(s, command, r);
            on_reply(*r.r);
            return {};
          },
          m_remote, m_stats_mu));
    }
    return {};
  }

  Status clear() override {
    if (m_opt.read_only) return failed_precondition("remote store is read-only");
    return scan_all([&](Server& s, const std::vector<std::string>& keys, Clock::time_point walk) {
      return for_each_key(s, keys, walk, "DEL", [](const redisReply&) {});
    });
  }

  Result<std::uint64_t> count() override {
    std::uint64_t n = 0;
    PROGCACHE_TRY(scan_all([&](Server&, const std::vector<std::string>& keys, Clock::time_point) -> Status {
      n += keys.size();
      return {};
    }));
    return n;
  }

  Result<std::uint64_t> size_bytes() override {
    std::uint64_t n = 0;
    PROGCACHE_TRY(scan_all([&](Server& s, const std::vector<std::string>& keys, Clock::time_point walk) {
      return for_each_key(s, keys, walk, "STRLEN", [&](const redisReply& r) {
        if (r.type == REDIS_REPLY_INTEGER && r.integer > 0) n += static_cast<std::uint64_t>(r.integer);
      });
    }));
    return n;
  }

  StoreStats stats() override {
    std::lock_guard l(m_stats_mu);
    return m_base;
  }
  RemoteStats remote_stats() override {
    std::lock_guard l(m_stats_mu);
    return m_remote;
  }
  Status close() override { return {}; }
  [[nodiscard]] std::string name() const override { return "redis"; }
  [[nodiscard]] std::string server_for(const Key& key) const override {
    return const_cast<RedisStore*>(this)->server(key).url().redacted();
  }

 private:
  // Rendezvous (highest random weight) hashing: each server scores the key;
  // the highest score owns it.
  Server& server(const Key& key) {
    if (m_servers.size() == 1) return *m_servers[0];
    std::size_t best = 0;
    std::uint64_t best_score = 0;
    for (std::size_t i = 0; i < m_servers.size(); ++i) {
      const std::uint64_t score = xxh3_64(key.view(), m_servers[i]->id_hash());
      if (i == 0 || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    return *m_servers[best];
  }

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  RedisStoreOptions m_opt;
  std::vector<std::unique_ptr<Server>> m_servers;
  std::mutex m_stats_mu;
  StoreStats m_base;     // GUARDED_BY(m_stats_mu)
  RemoteStats m_remote;  // GUARDED_BY(m_stats_mu)
};

}  // namespace

Result<std::unique_ptr<RemoteStore>> make_redis_store(const RedisStoreOptions& options) {
  auto s = std::make_unique<RedisStore>(options);
  PROGCACHE_TRY(s->init());
  return std::unique_ptr<RemoteStore>(std::move(s));
}

}  // namespace progcache
