// progcache/redis_backend.h — Redis as a backend of the remote tier.
//
// URLs:
//   redis://[user:password@]host[:port][/db]?prefix=P&ttl=S&connect_timeout=MS&timeout=MS
//   redis+unix:///path/to/socket[?db=N&prefix=...]
//   redis+cluster://[user:password@]host:port[,host:port...]?prefix=P&ttl=S&
//       connect_timeout=MS&timeout=MS&read_from=primaries|replicas
// Defaults: port 6379, db 0, prefix "progcache:", no TTL, connect timeout
// 200 ms, call timeout 100 ms. `timeout` is a total deadline for one call
// (connecting when needed, sending, and reading the whole reply), not a
// bound on each socket read: a server that trickles its answer a byte at a
// time still costs at most `timeout`. Keys live under the prefix; walks use
// SCAN, never KEYS.
//
// Passwords are never printed: RedisUrl::redacted() masks them, every error
// message uses the redacted form, and a URL that fails to parse is shown with
// everything up to its last '@' hidden. A password holding ',' (the URL
// separator of PROGCACHE_REMOTE) must be percent-encoded, or given through
// RemoteStoreOptions::password.
//
// A Redis Cluster is one backend: any node of the list is a seed, from which
// the slot map is learnt (CLUSTER SLOTS). Each key goes to the primary of
// its hash slot (CRC16 of the key, or of its {hash tag}: a prefix holding a
// tag puts every entry on one slot, so leave tags out of it); MOVED updates
// the map and is followed, ASK is followed once with ASKING, and the map is
// learnt again after a redirection or a node that does not answer (at most
// once per 100 ms). Every hop of one call shares that call's deadline, and
// a call gives up after 5 redirections. read_from=replicas sends reads to a
// replica of the slot (READONLY), the primary when it has none or it does
// not answer. A cluster has database 0 only.
//
// Sharding, the breaker, read-only mode and the entry format are the remote
// tier's (remote_store.h); this backend is one server and its connections.
//
// Thread safety: thread-safe. Connections are pooled and reused.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/remote_store.h"

namespace progcache {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  [[nodiscard]] std::string shown() const;  // host:port, [v6]:port
};

struct RedisUrl {
  std::string host;  // empty for unix sockets; the first seed of a cluster
  int port = 6379;
  bool cluster = false;              // redis+cluster://
  std::vector<RedisEndpoint> seeds;  // a cluster's seeds, in the URL's order
  bool read_from_replicas = false;   // a cluster's reads go to replicas
  std::string unix_path;             // set for redis+unix://
  std::string user;
  std::string password;
  int db = 0;
  std::string prefix = "progcache:";
  std::optional<std::int64_t> ttl_seconds;
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds timeout{100};

  // The URL with the password replaced by "***".
  [[nodiscard]] std::string redacted() const;
};

// invalid_argument naming the problem (never echoing a password).
Result<RedisUrl> parse_redis_url(std::string_view url);

struct RedisBackendOptions {
  int max_idle_connections = 8;
  // A reply larger than this is abandoned part-way (resource_exhausted).
  std::size_t max_reply_bytes = (std::size_t{256} << 20) + 64;
};

std::unique_ptr<RemoteBackend> make_redis_backend(const RedisUrl& url, const RedisBackendOptions& options);

}  // namespace progcache
