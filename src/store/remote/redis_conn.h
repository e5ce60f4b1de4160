// What the single-server and the cluster Redis backends share: a reply
// handle, one connection driven against a call's deadline, a pool of
// connections to one node, and the reading of error replies.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "progcache/remote_store.h"
#include "util/mutex.h"

namespace progcache::redis {

// Owns one hiredis reply.
struct Reply {
  redisReply* r = nullptr;
  Reply() = default;
  Reply(Reply&& o) noexcept : r(std::exchange(o.r, nullptr)) {}
  Reply& operator=(Reply&& o) noexcept {
    std::swap(r, o.r);
    return *this;
  }
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;
  ~Reply() {
    if (r != nullptr) freeReplyObject(r);
  }
  redisReply* operator->() const { return r; }
  [[nodiscard]] bool is_error() const { return r != nullptr && r->type == REDIS_REPLY_ERROR; }
  [[nodiscard]] std::string_view text() const {
    return r != nullptr && r->str != nullptr ? std::string_view(r->str, r->len) : std::string_view();
  }
};

// Milliseconds left until `deadline` (0 when it has passed).
int millis_until(RemoteDeadline deadline);

// One connection, driven without blocking: every command it runs must finish
// by the deadline of the call it serves, however the server trickles bytes.
// hiredis's blocking mode bounds each read, not the call, so the socket is
// non-blocking and this class waits with poll() for what is left of the
// deadline. Any failure leaves the connection marked broken (c->err), and
// the pool discards it: a half-read reply must never meet the next command.
class Conn {
 public:
  Conn(redisContext* c, const std::string& shown, RemoteDeadline deadline, std::size_t max_reply)
      : m_c(c), m_shown(shown), m_deadline(deadline), m_max_reply(max_reply) {}

  // Sends one command (each argument binary-safe) and reads its reply.
  Result<Reply> exec(std::initializer_list<std::string_view> args);
  Result<Reply> exec(const std::vector<std::string_view>& args);

 private:
  Status read_available(const std::string& what);
  Result<redisReply*> read_first(const std::string& what, bool* first);
  Result<std::size_t> read_some(char* into, std::size_t room, const std::string& what);
  Status feed(const char* data, std::size_t n, const std::string& what);
  Status too_large(const std::string& what);
  Status classify(const std::string& what) const;
  Status wait_for(short events, const std::string& what);
  Status broken(Code code, const std::string& why);

  redisContext* m_c;
  const std::string& m_shown;
  RemoteDeadline m_deadline;
  std::size_t m_max_reply;
};

// An error reply: the server answered, and said no. Authentication errors
// are named as such; a value of another type is data_loss; a server busy
// loading or failing over, or a cluster that is down, is unavailable; the
// rest (out of memory...) is resource_exhausted.
Status refused(const std::string& shown, std::string_view what, const Reply& r);

// Where and how to reach one Redis server.
struct NodeOptions {
  std::string host;  // empty for a unix socket
  int port = 6379;
  std::string unix_path;  // set for a unix socket
  std::string user;
  std::string password;
  int db = 0;
  std::chrono::milliseconds connect_timeout{200};
  bool readonly = false;  // send READONLY on connect (cluster replicas serve reads)
  std::string shown;      // as messages show the server (no password)
  std::size_t max_reply = (std::size_t{256} << 20) + 64;
  int max_idle = 8;
};

// One server and a pool of idle connections to it. Thread-safe.
class Node {
 public:
  explicit Node(NodeOptions o) : m_o(std::move(o)) {}
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Runs `fn(conn)` on a pooled connection; every command `fn` sends must be
  // answered by `deadline`, the connect (when the pool is empty) included.
  // A connection that failed is discarded, never pooled.
  template <typename Fn>
  Status with_connection(RemoteDeadline deadline, Fn&& fn) {
    redisContext* c = nullptr;
    Status st = acquire(deadline, &c);
    if (st.ok()) {
      Conn conn(c, m_o.shown, deadline, m_o.max_reply);
      st = fn(conn);
      if (c->err != 0) {
        redisFree(c);
        c = nullptr;
      }
    }
    if (c != nullptr) release(c);
    return st;
  }

  // One command on a pooled connection; its reply, error replies included.
  Result<Reply> exec(std::initializer_list<std::string_view> args, RemoteDeadline deadline);

  [[nodiscard]] const std::string& shown() const { return m_o.shown; }

 private:
  Status acquire(RemoteDeadline deadline, redisContext** out);
  void release(redisContext* c);

  const NodeOptions m_o;
  Mutex m_mu;
  std::vector<redisContext*> m_idle PROGCACHE_GUARDED_BY(m_mu);
};

}  // namespace progcache::redis

namespace progcache::redis {

// The part of a Redis backend that is the same on one server and on a
// cluster: the keys live under `prefix`, and each call's reply is read the
// same way. Subclasses say where a command about one key runs.
class KeyedBackend : public RemoteBackend {
 public:
  KeyedBackend(std::string prefix, std::optional<std::int64_t> ttl_seconds, std::string id,
               std::chrono::milliseconds timeout)
      : m_prefix(std::move(prefix)), m_ttl(ttl_seconds), m_id(std::move(id)), m_timeout(timeout) {}

  Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) override;
  Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) override;
  Result<bool> remove(std::string_view name, RemoteDeadline deadline) override;
  Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) override;

  [[nodiscard]] std::string id() const override { return m_id; }
  [[nodiscard]] std::chrono::milliseconds call_timeout() const override { return m_timeout; }

 protected:
  // Runs `args`, a command about `rkey` alone, where that key lives, and
  // returns its reply (error replies included). `read`: the command changes
  // nothing, so a replica may serve it.
  virtual Result<Reply> call(std::string_view rkey, const std::vector<std::string_view>& args, bool read,
                             RemoteDeadline deadline) = 0;

  // One SCAN batch of `node` over the prefix: appends names, returns the
  // node's next cursor ("0" at the end).
  Result<std::string> scan_node(Node& node, std::string_view cursor, std::vector<std::string>* names,
                                RemoteDeadline deadline) const;

  [[nodiscard]] const std::string& prefix() const { return m_prefix; }

 private:
  Result<std::int64_t> integer_command(const char* command, std::string_view name, RemoteDeadline deadline);

  const std::string m_prefix;
  const std::optional<std::int64_t> m_ttl;
  const std::string m_id;
  const std::chrono::milliseconds m_timeout;
};

}  // namespace progcache::redis
