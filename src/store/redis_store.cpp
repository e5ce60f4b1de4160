#include "progcache/redis_store.h"

#include <hiredis/hiredis.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>

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

Result<RedisUrl> parse_redis_url(std::string_view url) {
  RedisUrl u;
  // Messages show the URL only up to the scheme: it may hold a password.
  const auto bad = [&](const std::string& why) {
    const auto at = url.find('@');
    std::string shown(at == std::string_view::npos ? url : "<credentials>@" + std::string(url.substr(at + 1)));
    return invalid_argument("bad remote URL '" + shown + "': " + why);
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
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
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
  if (is_unix) {
    if (rest.empty() || rest[0] != '/') return bad("a unix socket URL needs an absolute path");
    u.unix_path = std::string(rest);
  } else {
    std::string_view hostport = rest;
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      std::int64_t db = 0;
      const auto dbs = rest.substr(slash + 1);
      if (!dbs.empty() && (!parse_int(dbs, &db) || db < 0 || db > 1000)) return bad("database must be a number");
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
      if (!parse_int(v, &n) || n < 0) return bad("db must be a number");
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
  ~Reply() {
    if (r != nullptr) freeReplyObject(r);
  }
};

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// One Redis server: its URL, a pool of idle connections, a circuit breaker.
class Server {
 public:
  Server(RedisUrl url, int max_idle, int breaker_failures, std::chrono::milliseconds backoff)
      : m_url(std::move(url)), m_max_idle(max_idle), m_breaker_failures(breaker_failures), m_backoff(backoff) {
    m_id_hash = xxh3_64(m_url.redacted());
  }
  ~Server() {
    for (auto* c : m_idle) redisFree(c);
  }

  const RedisUrl& url() const { return m_url; }
  std::uint64_t id_hash() const { return m_id_hash; }

  // Runs `fn(context)` on a pooled connection. `fn` returns a Status; a
  // connection whose context reports an error is discarded.
  template <typename Fn>
  Status with_connection(Fn&& fn, RemoteStats& stats, std::mutex& stats_mu) {
    if (!breaker_allows()) {
      std::lock_guard l(stats_mu);
      ++stats.skipped;
      return unavailable("remote " + m_url.redacted() + " skipped: circuit breaker open after repeated failures");
    }
    redisContext* c = nullptr;
    Status st = acquire(&c);
    if (st.ok()) {
      st = fn(c);
      if (c->err != 0) {
        redisFree(c);
        c = nullptr;
      }
    }
    if (c != nullptr) release(c);
    record(st, stats, stats_mu);
    return st;
  }

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
    const bool infra = !st.ok() && (st.code() == Code::unavailable || st.code() == Code::deadline_exceeded);
    std::lock_guard l(m_mu);
    if (!infra) {
      m_failures = 0;
      return;
    }
    ++m_failures;
    std::lock_guard sl(stats_mu);
    (st.code() == Code::deadline_exceeded ? stats.timeouts : stats.failures)++;
    if (m_failures == m_breaker_failures) {
      ++stats.breaker_trips;
      m_open_until = std::chrono::steady_clock::now() + m_backoff;
    }
  }

  Status acquire(redisContext** out) {
    {
      std::lock_guard l(m_mu);
      if (!m_idle.empty()) {
        *out = m_idle.back();
        m_idle.pop_back();
        return {};
      }
    }
    redisContext* c = m_url.unix_path.empty()
                          ? redisConnectWithTimeout(m_url.host.c_str(), m_url.port, to_timeval(m_url.connect_timeout))
                          : redisConnectUnixWithTimeout(m_url.unix_path.c_str(), to_timeval(m_url.connect_timeout));
    if (c == nullptr) return unavailable("remote " + m_url.redacted() + ": cannot allocate a connection");
    if (c->err != 0) {
      Status st = classify(c, "connect");
      redisFree(c);
      return st;
    }
    redisSetTimeout(c, to_timeval(m_url.timeout));
    if (!m_url.password.empty()) {
      Reply r;
      r.r = static_cast<redisReply*>(
          m_url.user.empty() ? redisCommand(c, "AUTH %b", m_url.password.data(), m_url.password.size())
                             : redisCommand(c, "AUTH %b %b", m_url.user.data(), m_url.user.size(),
                                            m_url.password.data(), m_url.password.size()));
      if (r.r == nullptr || r.r->type == REDIS_REPLY_ERROR) {
        Status st = r.r == nullptr ? classify(c, "AUTH")
                                   : permission_denied("remote " + m_url.redacted() +
                                                       ": authentication failed (check the user and password)");
        redisFree(c);
        // A wrong password is a configuration error, but it must trip the
        // breaker like an outage so it costs nothing per compile.
        return st.code() == Code::permission_denied ? unavailable(st.message()) : st;
      }
    }
    if (m_url.db != 0) {
      Reply r;
      r.r = static_cast<redisReply*>(redisCommand(c, "SELECT %d", m_url.db));
      if (r.r == nullptr || r.r->type == REDIS_REPLY_ERROR) {
        Status st = r.r == nullptr ? classify(c, "SELECT")
                                   : unavailable("remote " + m_url.redacted() + ": cannot select database " +
                                                 std::to_string(m_url.db));
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

 public:
  Status classify(redisContext* c, const char* what) const {
    const std::string err = c->errstr;
    const bool timeout = c->err == REDIS_ERR_IO &&
                         (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT || errno == EINPROGRESS ||
                          err.find("timed out") != std::string::npos ||
                          err.find("temporarily unavailable") != std::string::npos);
    const std::string msg = "remote " + m_url.redacted() + ": " + what + ": " + err;
    return timeout ? Status(Code::deadline_exceeded, msg) : unavailable(msg);
  }

 private:
  RedisUrl m_url;
  std::uint64_t m_id_hash = 0;
  int m_max_idle;
  int m_breaker_failures;
  std::chrono::milliseconds m_backoff;
  std::mutex m_mu;
  std::vector<redisContext*> m_idle;  // GUARDED_BY(m_mu)
  int m_failures = 0;                  // GUARDED_BY(m_mu)
  std::chrono::steady_clock::time_point m_open_until;  // GUARDED_BY(m_mu)
};

class RedisStore final : public RemoteStore {
 public:
  explicit RedisStore(const RedisStoreOptions& o) : m_opt(o) {}

  Status init() {
    if (m_opt.urls.empty()) return invalid_argument("a remote store needs at least one URL");
    for (const auto& u : m_opt.urls) {
      PROGCACHE_ASSIGN_OR_RETURN(RedisUrl url, parse_redis_url(u));
      m_servers.push_back(
          std::make_unique<Server>(std::move(url), m_opt.max_idle_connections, m_opt.breaker_failures, m_opt.breaker_backoff));
    }
    return {};
  }

  Result<std::optional<Entry>> get(const Key& key) override {
    Server& s = server(key);
    const std::string rkey = s.url().prefix + key.hex();
    std::optional<Entry> found;
    bool corrupt = false, rejected = false;
    Status st = s.with_connection(
        [&](redisContext* c) -> Status {
          Reply r;
          r.r = static_cast<redisReply*>(redisCommand(c, "GET %b", rkey.data(), rkey.size()));
          if (r.r == nullptr) return s.classify(c, "GET");
          if (r.r->type == REDIS_REPLY_NIL) return {};
          if (r.r->type != REDIS_REPLY_STRING) {
            corrupt = true;
            return {};
          }
          // Zero-copy: the entry's artifacts point into hiredis's reply,
          // which lives as long as they do.
          std::shared_ptr<redisReply> owner(r.r, [](redisReply* p) { freeReplyObject(p); });
          r.r = nullptr;
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
    Server& s = server(key);
    const std::string rkey = s.url().prefix + key.hex();
    Status st = s.with_connection(
        [&](redisContext* c) -> Status {
          Reply r;
          r.r = static_cast<redisReply*>(
              s.url().ttl_seconds
                  ? redisCommand(c, "SET %b %b EX %lld", rkey.data(), rkey.size(), value.data(), value.size(),
                                 static_cast<long long>(*s.url().ttl_seconds))
                  : redisCommand(c, "SET %b %b", rkey.data(), rkey.size(), value.data(), value.size()));
          if (r.r == nullptr) return s.classify(c, "SET");
          if (r.r->type == REDIS_REPLY_ERROR) {
            return Status(Code::resource_exhausted, "remote " + s.url().redacted() + ": SET refused: " +
                                                        std::string(r.r->str, r.r->len));
          }
          return {};
        },
        m_remote, m_stats_mu);
    std::lock_guard l(m_stats_mu);
    if (!st.ok()) ++m_base.errors;
    else ++m_base.puts;
    return st;
  }

  Result<bool> erase(const Key& key) override {
    if (m_opt.read_only) return failed_precondition("remote store is read-only");
    Server& s = server(key);
    const std::string rkey = s.url().prefix + key.hex();
    bool removed = false;
    PROGCACHE_TRY(s.with_connection(
        [&](redisContext* c) -> Status {
          Reply r;
          r.r = static_cast<redisReply*>(redisCommand(c, "DEL %b", rkey.data(), rkey.size()));
          if (r.r == nullptr) return s.classify(c, "DEL");
          removed = r.r->type == REDIS_REPLY_INTEGER && r.r->integer > 0;
          return {};
        },
        m_remote, m_stats_mu));
    return removed;
  }

  // Visits every key under the prefix on every server (SCAN, never KEYS).
  template <typename Fn>
  Status scan_all(Fn&& per_batch) {
    for (auto& sp : m_servers) {
      Server& s = *sp;
      const std::string pattern = s.url().prefix + "*";
      std::string cursor = "0";
      do {
        std::vector<std::string> keys;
        PROGCACHE_TRY(s.with_connection(
            [&](redisContext* c) -> Status {
              Reply r;
              r.r = static_cast<redisReply*>(
                  redisCommand(c, "SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(), pattern.size()));
              if (r.r == nullptr) return s.classify(c, "SCAN");
              if (r.r->type != REDIS_REPLY_ARRAY || r.r->elements != 2) {
                return unavailable("remote " + s.url().redacted() + ": unexpected SCAN reply");
              }
              cursor.assign(r.r->element[0]->str, r.r->element[0]->len);
              for (std::size_t i = 0; i < r.r->element[1]->elements; ++i) {
                keys.emplace_back(r.r->element[1]->element[i]->str, r.r->element[1]->element[i]->len);
              }
              return {};
            },
            m_remote, m_stats_mu));
        PROGCACHE_TRY(per_batch(s, keys));
      } while (cursor != "0");
    }
    return {};
  }

  Status clear() override {
    if (m_opt.read_only) return failed_precondition("remote store is read-only");
    return scan_all([&](Server& s, const std::vector<std::string>& keys) -> Status {
      for (const auto& k : keys) {
        PROGCACHE_TRY(s.with_connection(
            [&](redisContext* c) -> Status {
              Reply r;
              r.r = static_cast<redisReply*>(redisCommand(c, "DEL %b", k.data(), k.size()));
              return r.r == nullptr ? s.classify(c, "DEL") : Status();
            },
            m_remote, m_stats_mu));
      }
      return {};
    });
  }

  Result<std::uint64_t> count() override {
    std::uint64_t n = 0;
    PROGCACHE_TRY(scan_all([&](Server&, const std::vector<std::string>& keys) -> Status {
      n += keys.size();
      return {};
    }));
    return n;
  }

  Result<std::uint64_t> size_bytes() override {
    std::uint64_t n = 0;
    PROGCACHE_TRY(scan_all([&](Server& s, const std::vector<std::string>& keys) -> Status {
      for (const auto& k : keys) {
        PROGCACHE_TRY(s.with_connection(
            [&](redisContext* c) -> Status {
              Reply r;
              r.r = static_cast<redisReply*>(redisCommand(c, "STRLEN %b", k.data(), k.size()));
              if (r.r == nullptr) return s.classify(c, "STRLEN");
              if (r.r->type == REDIS_REPLY_INTEGER) n += static_cast<std::uint64_t>(r.r->integer);
              return {};
            },
            m_remote, m_stats_mu));
      }
      return {};
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
