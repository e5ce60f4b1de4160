#include "store/remote/redis_conn.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace progcache::redis {

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// The most one read takes from a socket, and the largest read buffer a
// pooled connection keeps between replies (a larger one is freed).
constexpr std::size_t k_read_chunk = std::size_t{256} << 10;
constexpr std::size_t k_kept_read_buffer = std::size_t{4} << 20;

// A bulk string reply at least this long is read straight into the buffer
// the caller gets (see Conn::read_first).
constexpr std::size_t k_direct_min = std::size_t{8} << 10;

char* read_chunk_buffer() {
  thread_local const std::unique_ptr<char[]> buf(new char[k_read_chunk]);
  return buf.get();
}

// The length announced by a bulk string header ("$<len>\r\n") at the start
// of `in`, and the header's size; nullopt when `in` does not start with a
// complete one (or announces a nil).
struct BulkHeader {
  std::size_t len;
  std::size_t header;
};
std::optional<BulkHeader> bulk_header(std::string_view in) {
  if (in.empty() || in[0] != '$') return std::nullopt;
  const std::size_t crlf = in.substr(0, 32).find("\r\n");
  if (crlf == std::string_view::npos || crlf < 2) return std::nullopt;
  std::size_t len = 0;
  const auto [end, ec] = std::from_chars(in.data() + 1, in.data() + crlf, len);
  if (ec != std::errc() || end != in.data() + crlf) return std::nullopt;
  return BulkHeader{len, crlf + 2};
}

}  // namespace

int millis_until(RemoteDeadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RemoteClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// ---------------------------------------------------------------- Conn

Result<Reply> Conn::exec(std::initializer_list<std::string_view> args) {
  return exec(std::vector<std::string_view>(args));
}

Result<Reply> Conn::exec(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  const std::string what(args.front());
  if (redisAppendCommandArgv(m_c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
    return broken(Code::unavailable, what + ": cannot format the command");
  }
  for (int done = 0; done == 0;) {
    PROGCACHE_TRY(wait_for(POLLOUT, what));
    if (redisBufferWrite(m_c, &done) != REDIS_OK) return classify(what);
  }
  Reply reply;
  void* r = nullptr;
  // Nothing of an earlier reply is left in the parser: the first bytes read
  // are this reply's start. The parser is not asked for a reply until it
  // has been fed: asked with a consumed buffer still held, hiredis starts a
  // read task (ridx 0), and a connection whose reply then took the direct
  // path would look mid-reply to the pool and be discarded.
  bool first = m_c->reader->ridx == -1 && m_c->reader->pos == m_c->reader->len;
  while (true) {
    if (!first) {
      if (redisGetReplyFromReader(m_c, &r) != REDIS_OK) return classify(what);
      if (r != nullptr) break;
      if (m_c->reader->len > m_max_reply) return too_large(what);
    }
    PROGCACHE_TRY(wait_for(POLLIN, what));
    if (first) {
      PROGCACHE_ASSIGN_OR_RETURN(redisReply * direct, read_first(what, &first));
      if (direct != nullptr) {
        reply.r = direct;
        return reply;
      }
    } else {
      PROGCACHE_TRY(read_available(what));
    }
  }
  reply.r = static_cast<redisReply*>(r);
  return reply;
}

Status Conn::too_large(const std::string& what) {
  return broken(Code::resource_exhausted,
                what + ": reply larger than the " + std::to_string(m_max_reply) + "-byte limit for one value");
}

// Reads what the socket holds, up to k_read_chunk at once (hiredis's own
// read takes 16 KiB, one poll and one read per 16 KiB of a reply), and
// feeds it to the reply parser.
Status Conn::read_available(const std::string& what) {
  PROGCACHE_ASSIGN_OR_RETURN(std::size_t n, read_some(read_chunk_buffer(), k_read_chunk, what));
  return feed(read_chunk_buffer(), n, what);
}

Status Conn::feed(const char* data, std::size_t n, const std::string& what) {
  if (n > 0 && redisReaderFeed(m_c->reader, data, n) != REDIS_OK) {
    return broken(Code::data_loss, what + ": " + m_c->reader->errstr);
  }
  return {};
}

Result<std::size_t> Conn::read_some(char* into, std::size_t room, const std::string& what) {
  const ssize_t n = ::read(m_c->fd, into, room);
  if (n > 0) return static_cast<std::size_t>(n);
  if (n == 0) return broken(Code::unavailable, what + ": the server closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return std::size_t{0};
  return broken(Code::unavailable, what + ": read: " + std::strerror(errno));
}

// The first read of a reply. A large bulk string (a hit) is read from the
// socket straight into the buffer the reply hands out: one copy, the
// kernel's, where hiredis's parser would copy it twice more (into its read
// buffer, then into a reply string), each copy landing in a different
// buffer per pooled connection. Anything else goes to hiredis's parser.
// Returns the reply when it took the direct path, else null; `*first` stays
// true while nothing was read (the next read is still the reply's first).
Result<redisReply*> Conn::read_first(const std::string& what, bool* first) {
  char* const buf = read_chunk_buffer();
  PROGCACHE_ASSIGN_OR_RETURN(std::size_t n, read_some(buf, k_read_chunk, what));
  if (n == 0) return nullptr;
  *first = false;
  const auto head = bulk_header(std::string_view(buf, n));
  if (!head || head->len < k_direct_min) {
    PROGCACHE_TRY(feed(buf, n, what));
    return nullptr;
  }
  // The second test keeps len + 2 from wrapping under a limit set to "none".
  if (head->len > m_max_reply || head->len > static_cast<std::size_t>(PTRDIFF_MAX) - 2) return too_large(what);
  const std::size_t want = head->len + 2;  // the value and its "\r\n"
  if (n - head->header > want) return broken(Code::data_loss, what + ": bytes after the reply");
  // malloc'ed, as freeReplyObject frees it.
  std::unique_ptr<char, decltype(&std::free)> value(static_cast<char*>(std::malloc(want)), &std::free);
  if (value == nullptr) return broken(Code::resource_exhausted, what + ": no memory for the reply");
  std::size_t have = n - head->header;
  std::memcpy(value.get(), buf + head->header, have);
  while (have < want) {
    PROGCACHE_ASSIGN_OR_RETURN(std::size_t got, read_some(value.get() + have, want - have, what));
    have += got;
    if (got == 0 && have < want) PROGCACHE_TRY(wait_for(POLLIN, what));
  }
  if (value.get()[head->len] != '\r' || value.get()[head->len + 1] != '\n') {
    return broken(Code::data_loss, what + ": protocol error: a bulk string not followed by CRLF");
  }
  value.get()[head->len] = '\0';
  auto* r = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (r == nullptr) return broken(Code::resource_exhausted, what + ": no memory for the reply");
  r->type = REDIS_REPLY_STRING;
  r->len = head->len;
  r->str = value.release();
  return r;
}

Status Conn::classify(const std::string& what) const {
  const std::string msg = "remote " + m_shown + ": " + what + ": " + m_c->errstr;
  return m_c->err == REDIS_ERR_EOF || m_c->err == REDIS_ERR_IO ? unavailable(msg) : data_loss(msg);
}

Status Conn::wait_for(short events, const std::string& what) {
  while (true) {
    const int left = millis_until(m_deadline);
    if (left == 0) return broken(Code::deadline_exceeded, what + ": no complete answer within the deadline");
    pollfd p{m_c->fd, events, 0};
    const int n = ::poll(&p, 1, left);
    if (n > 0) return {};
    if (n < 0 && errno != EINTR) return broken(Code::unavailable, what + ": poll: " + std::strerror(errno));
  }
}

Status Conn::broken(Code code, const std::string& why) {
  m_c->err = REDIS_ERR_IO;
  std::snprintf(m_c->errstr, sizeof(m_c->errstr), "%s", why.c_str());
  return Status(code, "remote " + m_shown + ": " + why);
}

// ---------------------------------------------------------------- errors

Status refused(const std::string& shown, std::string_view what, const Reply& r) {
  const std::string_view text = r.text();
  if (text.starts_with("NOAUTH") || text.starts_with("WRONGPASS")) {
    return permission_denied("remote " + shown + ": authentication failed (" + std::string(text) +
                             "): check the user and password");
  }
  const std::string msg = "remote " + shown + ": " + std::string(what) + " refused: " + std::string(text);
  if (text.starts_with("WRONGTYPE")) return data_loss(msg);  // something else lives at the key
  if (text.starts_with("LOADING") || text.starts_with("BUSY") || text.starts_with("MASTERDOWN") ||
      text.starts_with("TRYAGAIN") || text.starts_with("CLUSTERDOWN") || text.starts_with("MOVED") ||
      text.starts_with("ASK")) {
    return unavailable(msg);
  }
  return resource_exhausted(msg);
}

// ---------------------------------------------------------------- Node

Node::~Node() {
  for (auto* c : m_idle) redisFree(c);
}

Result<Reply> Node::exec(std::initializer_list<std::string_view> args, RemoteDeadline deadline) {
  Reply reply;
  PROGCACHE_TRY(with_connection(deadline, [&](Conn& c) -> Status {
    PROGCACHE_ASSIGN_OR_RETURN(reply, c.exec(args));
    return {};
  }));
  return reply;
}

// A pooled connection is reused only while it is quiet: nothing left unread
// in the parser or on the socket (bytes that answer no command would answer
// the next one) and not closed by the server (an idle timeout, a restart),
// which would cost the next call an error where a new connection serves it.
// One non-blocking peek per call.
namespace {
bool quiet(redisContext* c) {
  if (c->err != 0 || c->reader->ridx != -1 || c->reader->pos != c->reader->len) return false;
  char b = 0;
  const ssize_t n = ::recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
}  // namespace

Status Node::acquire(RemoteDeadline deadline, redisContext** out) {
  while (true) {
    redisContext* c = nullptr;
    {
      MutexLock l(m_mu);
      if (m_idle.empty()) break;
      c = m_idle.back();
      m_idle.pop_back();
    }
    if (quiet(c)) {
      *out = c;
      return {};
    }
    redisFree(c);
  }
  const auto connect_for =
      std::min<std::chrono::milliseconds>(m_o.connect_timeout, std::chrono::milliseconds(millis_until(deadline)));
  if (connect_for.count() <= 0) return deadline_exceeded("remote " + m_o.shown + ": no time left to connect");
  redisContext* c = m_o.unix_path.empty() ? redisConnectWithTimeout(m_o.host.c_str(), m_o.port, to_timeval(connect_for))
                                          : redisConnectUnixWithTimeout(m_o.unix_path.c_str(), to_timeval(connect_for));
  if (c == nullptr) return unavailable("remote " + m_o.shown + ": cannot allocate a connection");
  if (c->err != 0) {
    const bool timed_out = c->err == REDIS_ERR_IO && (errno == ETIMEDOUT || errno == EINPROGRESS ||
                                                      std::strstr(c->errstr, "timed out") != nullptr);
    const std::string msg = "remote " + m_o.shown + ": connect: " + c->errstr;
    redisFree(c);
    return timed_out ? deadline_exceeded(msg) : unavailable(msg);
  }
  // From here on the connection is driven by Conn: non-blocking, polled.
  const int flags = ::fcntl(c->fd, F_GETFL);
  if (flags < 0 || ::fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    redisFree(c);
    return unavailable("remote " + m_o.shown + ": cannot make the socket non-blocking");
  }
  c->flags &= ~REDIS_BLOCK;
  // hiredis frees its read buffer whenever a reply leaves more than 16 KiB
  // of it unused, so every reply of 64 KiB grew a buffer from nothing,
  // past glibc's mmap threshold: pages mapped, faulted and unmapped on
  // each hit (a 64 KiB hit cost 4.7 times a 4 KiB one). A pooled
  // connection keeps up to k_kept_read_buffer instead.
  c->reader->maxbuf = k_kept_read_buffer;
  Conn conn(c, m_o.shown, deadline, m_o.max_reply);
  // AUTH, SELECT and READONLY as the options ask: "" when accepted, else
  // the server's refusal.
  const auto setup = [&](std::initializer_list<std::string_view> args) -> Result<std::string> {
    PROGCACHE_ASSIGN_OR_RETURN(Reply r, conn.exec(args));
    return r.is_error()
               ? "remote " + m_o.shown + ": " + std::string(args.begin()[0]) + " refused: " + std::string(r.text())
               : std::string();
  };
  Status st;
  if (!m_o.password.empty()) {
    auto r = m_o.user.empty() ? setup({"AUTH", m_o.password}) : setup({"AUTH", m_o.user, m_o.password});
    if (!r.ok()) {
      st = r.status();
    } else if (!r->empty()) {
      st = permission_denied("remote " + m_o.shown + ": authentication failed (check the user and password)");
    }
  }
  if (st.ok() && m_o.db != 0) {
    auto r = setup({"SELECT", std::to_string(m_o.db)});
    st = !r.ok() ? r.status() : r->empty() ? Status() : unavailable(*r);
  }
  if (st.ok() && m_o.readonly) {
    auto r = setup({"READONLY"});
    st = !r.ok() ? r.status() : r->empty() ? Status() : unavailable(*r);
  }
  if (!st.ok()) {
    redisFree(c);
    return st;
  }
  *out = c;
  return {};
}

void Node::release(redisContext* c) {
  MutexLock l(m_mu);
  if (static_cast<int>(m_idle.size()) < m_o.max_idle) {
    m_idle.push_back(c);
  } else {
    redisFree(c);
  }
}

}  // namespace progcache::redis

namespace progcache::redis {

// ---------------------------------------------------------------- KeyedBackend

Result<std::optional<Bytes>> KeyedBackend::get(std::string_view name, RemoteDeadline deadline) {
  const std::string rkey = m_prefix + std::string(name);
  PROGCACHE_ASSIGN_OR_RETURN(Reply r, call(rkey, {"GET", rkey}, true, deadline));
  if (r->type == REDIS_REPLY_NIL) return std::optional<Bytes>();
  if (r.is_error()) {
    Status why = refused(m_id, "GET", r);
    if (why.code() != Code::data_loss) return why;
    return std::optional<Bytes>(Bytes());  // something else lives there: not an entry
  }
  if (r->type != REDIS_REPLY_STRING) return std::optional<Bytes>(Bytes());
  // Zero-copy: the bytes point into hiredis's reply, which lives as long as
  // they do.
  std::shared_ptr<redisReply> owner(std::exchange(r.r, nullptr), [](redisReply* p) { freeReplyObject(p); });
  return std::optional<Bytes>(Bytes::wrap(owner, owner->str, owner->len));
}

Status KeyedBackend::set(std::string_view name, std::string_view value, RemoteDeadline deadline) {
  const std::string rkey = m_prefix + std::string(name);
  const std::string ttl = m_ttl ? std::to_string(*m_ttl) : "";
  std::vector<std::string_view> args = {"SET", rkey, value};
  if (m_ttl) args.insert(args.end(), {"EX", ttl});
  PROGCACHE_ASSIGN_OR_RETURN(Reply r, call(rkey, args, false, deadline));
  if (r.is_error()) return refused(m_id, "SET", r);
  return {};
}

Result<bool> KeyedBackend::remove(std::string_view name, RemoteDeadline deadline) {
  PROGCACHE_ASSIGN_OR_RETURN(std::int64_t n, integer_command("DEL", name, deadline));
  return n > 0;
}

Result<std::uint64_t> KeyedBackend::size_of(std::string_view name, RemoteDeadline deadline) {
  PROGCACHE_ASSIGN_OR_RETURN(std::int64_t n, integer_command("STRLEN", name, deadline));
  return n > 0 ? static_cast<std::uint64_t>(n) : 0;
}

Result<std::int64_t> KeyedBackend::integer_command(const char* command, std::string_view name,
                                                   RemoteDeadline deadline) {
  const std::string rkey = m_prefix + std::string(name);
  PROGCACHE_ASSIGN_OR_RETURN(Reply r, call(rkey, {command, rkey}, std::string_view(command) == "STRLEN", deadline));
  if (r.is_error()) return refused(m_id, command, r);
  return r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
}

Result<std::string> KeyedBackend::scan_node(Node& node, std::string_view cursor, std::vector<std::string>* names,
                                            RemoteDeadline deadline) const {
  const std::string pattern = m_prefix + "*";
  const std::string from = cursor.empty() ? "0" : std::string(cursor);
  PROGCACHE_ASSIGN_OR_RETURN(Reply r, node.exec({"SCAN", from, "MATCH", pattern, "COUNT", "1000"}, deadline));
  if (r.is_error()) return refused(node.shown(), "SCAN", r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_ARRAY) {
    return unavailable("remote " + node.shown() + ": unexpected SCAN reply");
  }
  for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
    const redisReply* k = r->element[1]->element[i];
    const std::string_view full(k->str, k->len);
    if (k->type == REDIS_REPLY_STRING && full.starts_with(m_prefix)) names->emplace_back(full.substr(m_prefix.size()));
  }
  return std::string(r->element[0]->str, r->element[0]->len);
}

}  // namespace progcache::redis
