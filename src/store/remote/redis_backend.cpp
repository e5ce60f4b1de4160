#include "progcache/redis_backend.h"

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
#include "store/remote/url_parts.h"
#include "util/mutex.h"

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

using remote_url::parse_int;

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
    const remote_url::QueryParam param = remote_url::take_query_param(query);
    if (!param.has_value) return bad("query parameter '" + std::string(param.text) + "' has no value");
    const std::string_view k = param.key, v = param.value;
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

// ---------------------------------------------------------------- backend

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

int millis_until(RemoteDeadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RemoteClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// The most one read takes from a socket, and the largest read buffer a
// pooled connection keeps between replies (a larger one is freed).
constexpr std::size_t k_read_chunk = std::size_t{256} << 10;
constexpr std::size_t k_kept_read_buffer = std::size_t{4} << 20;

// One connection, driven without blocking: every command it runs must finish
// by the deadline of the call it serves, however the server trickles bytes.
// hiredis's blocking mode bounds each read, not the call, so the socket is
// non-blocking and this class waits with poll() for what is left of the
// deadline. Any failure leaves the connection marked broken (c->err), and
// the pool discards it: a half-read reply must never meet the next command.
class Conn {
 public:
  Conn(redisContext* c, const RedisUrl& url, RemoteDeadline deadline, std::size_t max_reply)
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
      PROGCACHE_TRY(read_available(what));
    }
    reply.r = static_cast<redisReply*>(r);
    return reply;
  }

  // Reads what the socket holds, up to k_read_chunk at once (hiredis's own
  // read takes 16 KiB, one poll and one read per 16 KiB of a reply), and
  // feeds it to the reply parser.
  Status read_available(const std::string& what) {
    thread_local const std::unique_ptr<char[]> buf(new char[k_read_chunk]);
    const ssize_t n = ::read(m_c->fd, buf.get(), k_read_chunk);
    if (n > 0) {
      if (redisReaderFeed(m_c->reader, buf.get(), static_cast<std::size_t>(n)) != REDIS_OK) {
        return broken(Code::data_loss, what + ": " + m_c->reader->errstr);
      }
      return {};
    }
    if (n == 0) return broken(Code::unavailable, what + ": the server closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return {};
    return broken(Code::unavailable, what + ": read: " + std::strerror(errno));
  }

  Status classify(const std::string& what) const {
    const std::string msg = "remote " + m_url.redacted() + ": " + what + ": " + m_c->errstr;
    return m_c->err == REDIS_ERR_EOF || m_c->err == REDIS_ERR_IO ? unavailable(msg) : data_loss(msg);
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
  RemoteDeadline m_deadline;
  std::size_t m_max_reply;
};

// An error reply: the server answered, and said no. Authentication errors
// are named as such; a value of another type is data_loss; a server busy
// loading or failing over is unavailable; the rest (out of memory...) is
// resource_exhausted.
Status refused(const RedisUrl& url, const char* what, const Reply& r) {
  const std::string text(r->str, r->len);
  if (text.starts_with("NOAUTH") || text.starts_with("WRONGPASS")) {
    return permission_denied("remote " + url.redacted() + ": authentication failed (" + text +
                             "): check the user and password");
  }
  const std::string msg = "remote " + url.redacted() + ": " + what + " refused: " + text;
  if (text.starts_with("WRONGTYPE")) return data_loss(msg);  // something else lives at the key
  if (text.starts_with("LOADING") || text.starts_with("BUSY") || text.starts_with("MASTERDOWN") ||
      text.starts_with("TRYAGAIN")) {
    return unavailable(msg);
  }
  return resource_exhausted(msg);
}

// One Redis server and a pool of idle connections to it.
class RedisBackend final : public RemoteBackend {
 public:
  RedisBackend(RedisUrl url, const RedisBackendOptions& o)
      : m_url(std::move(url)),
        m_id(m_url.redacted()),
        m_max_reply(o.max_reply_bytes),
        m_max_idle(o.max_idle_connections) {}
  ~RedisBackend() override {
    for (auto* c : m_idle) redisFree(c);
  }

  Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) override {
    const std::string rkey = m_url.prefix + std::string(name);
    std::optional<Bytes> found;
    PROGCACHE_TRY(with_connection(deadline, [&](Conn& c) -> Status {
      PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({"GET", rkey}));
      if (r->type == REDIS_REPLY_NIL) return {};
      if (r->type == REDIS_REPLY_ERROR) {
        Status why = refused(m_url, "GET", r);
        if (why.code() != Code::data_loss) return why;
        found = Bytes();  // something else lives there: not an entry
        return {};
      }
      if (r->type != REDIS_REPLY_STRING) {
        found = Bytes();
        return {};
      }
      // Zero-copy: the bytes point into hiredis's reply, which lives as long
      // as they do.
      std::shared_ptr<redisReply> owner(std::exchange(r.r, nullptr), [](redisReply* p) { freeReplyObject(p); });
      found = Bytes::wrap(owner, owner->str, owner->len);
      return {};
    }));
    return found;
  }

  Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) override {
    const std::string rkey = m_url.prefix + std::string(name);
    return with_connection(deadline, [&](Conn& c) -> Status {
      const std::string ttl = m_url.ttl_seconds ? std::to_string(*m_url.ttl_seconds) : "";
      auto r = m_url.ttl_seconds ? c.exec({"SET", rkey, value, "EX", ttl}) : c.exec({"SET", rkey, value});
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR) return refused(m_url, "SET", *r);
      return {};
    });
  }

  Result<bool> remove(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(std::int64_t n, integer_command("DEL", name, deadline));
    return n > 0;
  }

  Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(std::int64_t n, integer_command("STRLEN", name, deadline));
    return n > 0 ? static_cast<std::uint64_t>(n) : 0;
  }

  Result<std::string> scan(std::string_view cursor, std::vector<std::string>* names, RemoteDeadline deadline) override {
    const std::string pattern = m_url.prefix + "*";
    std::string next;
    PROGCACHE_TRY(with_connection(deadline, [&](Conn& c) -> Status {
      const std::string from = cursor.empty() ? "0" : std::string(cursor);
      PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({"SCAN", from, "MATCH", pattern, "COUNT", "1000"}));
      if (r->type == REDIS_REPLY_ERROR) return refused(m_url, "SCAN", r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
          r->element[1]->type != REDIS_REPLY_ARRAY) {
        return unavailable("remote " + m_id + ": unexpected SCAN reply");
      }
      next.assign(r->element[0]->str, r->element[0]->len);
      for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
        const redisReply* k = r->element[1]->element[i];
        const std::string_view full(k->str, k->len);
        if (k->type == REDIS_REPLY_STRING && full.starts_with(m_url.prefix)) {
          names->emplace_back(full.substr(m_url.prefix.size()));
        }
      }
      return {};
    }));
    return next == "0" ? std::string() : next;
  }

  [[nodiscard]] std::string id() const override { return m_id; }
  [[nodiscard]] std::chrono::milliseconds call_timeout() const override { return m_url.timeout; }

 private:
  Result<std::int64_t> integer_command(const char* command, std::string_view name, RemoteDeadline deadline) {
    const std::string rkey = m_url.prefix + std::string(name);
    std::int64_t n = 0;
    PROGCACHE_TRY(with_connection(deadline, [&](Conn& c) -> Status {
      PROGCACHE_ASSIGN_OR_RETURN(Reply r, c.exec({command, rkey}));
      if (r->type == REDIS_REPLY_ERROR) return refused(m_url, command, r);
      if (r->type == REDIS_REPLY_INTEGER) n = r->integer;
      return {};
    }));
    return n;
  }

  // Runs `fn(conn)` on a pooled connection; every command `fn` sends must be
  // answered by `deadline`, the connect (when the pool is empty) included.
  // A connection that failed is discarded, never pooled.
  template <typename Fn>
  Status with_connection(RemoteDeadline deadline, Fn&& fn) {
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
    return st;
  }

  Status acquire(RemoteDeadline deadline, redisContext** out) {
    {
      MutexLock l(m_mu);
      if (!m_idle.empty()) {
        *out = m_idle.back();
        m_idle.pop_back();
        return {};
      }
    }
    const auto connect_for =
        std::min<std::chrono::milliseconds>(m_url.connect_timeout, std::chrono::milliseconds(millis_until(deadline)));
    if (connect_for.count() <= 0) return deadline_exceeded("remote " + m_id + ": no time left to connect");
    redisContext* c = m_url.unix_path.empty()
                          ? redisConnectWithTimeout(m_url.host.c_str(), m_url.port, to_timeval(connect_for))
                          : redisConnectUnixWithTimeout(m_url.unix_path.c_str(), to_timeval(connect_for));
    if (c == nullptr) return unavailable("remote " + m_id + ": cannot allocate a connection");
    if (c->err != 0) {
      const bool timed_out = c->err == REDIS_ERR_IO && (errno == ETIMEDOUT || errno == EINPROGRESS ||
                                                        std::strstr(c->errstr, "timed out") != nullptr);
      const std::string msg = "remote " + m_id + ": connect: " + c->errstr;
      redisFree(c);
      return timed_out ? deadline_exceeded(msg) : unavailable(msg);
    }
    // From here on the connection is driven by Conn: non-blocking, polled.
    const int flags = ::fcntl(c->fd, F_GETFL);
    if (flags < 0 || ::fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      redisFree(c);
      return unavailable("remote " + m_id + ": cannot make the socket non-blocking");
    }
    c->flags &= ~REDIS_BLOCK;
    // hiredis frees its read buffer whenever a reply leaves more than 16 KiB
    // of it unused, so every reply of 64 KiB grew a buffer from nothing,
    // past glibc's mmap threshold: pages mapped, faulted and unmapped on
    // each hit (a 64 KiB hit cost 4.7 times a 4 KiB one). A pooled
    // connection keeps up to k_kept_read_buffer instead.
    c->reader->maxbuf = k_kept_read_buffer;
    Conn conn(c, m_url, deadline, m_max_reply);
    if (!m_url.password.empty()) {
      auto r =
          m_url.user.empty() ? conn.exec({"AUTH", m_url.password}) : conn.exec({"AUTH", m_url.user, m_url.password});
      if (!r.ok() || (*r)->type == REDIS_REPLY_ERROR) {
        Status st = !r.ok()
                        ? r.status()
                        : permission_denied("remote " + m_id + ": authentication failed (check the user and password)");
        redisFree(c);
        return st;
      }
    }
    if (m_url.db != 0) {
      const std::string db = std::to_string(m_url.db);
      auto r = conn.exec({"SELECT", db});
      if (!r.ok() || (*r)->type == REDIS_REPLY_ERROR) {
        Status st = !r.ok() ? r.status() : unavailable("remote " + m_id + ": cannot select database " + db);
        redisFree(c);
        return st;
      }
    }
    *out = c;
    return {};
  }

  void release(redisContext* c) {
    MutexLock l(m_mu);
    if (static_cast<int>(m_idle.size()) < m_max_idle) {
      m_idle.push_back(c);
    } else {
      redisFree(c);
    }
  }

  const RedisUrl m_url;
  const std::string m_id;
  const std::size_t m_max_reply;
  const int m_max_idle;
  Mutex m_mu;
  std::vector<redisContext*> m_idle PROGCACHE_GUARDED_BY(m_mu);
};

}  // namespace

std::unique_ptr<RemoteBackend> make_redis_backend(RedisUrl url, const RedisBackendOptions& options) {
  return std::make_unique<RedisBackend>(std::move(url), options);
}

}  // namespace progcache
