// progcache/redis_store.h — the remote tier on Redis, and the tiered store
// (memory → disk → remote) that puts it to work.
//
// URLs:
//   redis://[user:password@]host[:port][/db]?prefix=P&ttl=S&connect_timeout=MS&timeout=MS
//   redis+unix:///path/to/socket[?db=N&prefix=...]
// Defaults: port 6379, db 0, prefix "progcache:", no TTL, connect timeout
// 200 ms, call timeout 100 ms. `timeout` is a total deadline for one call
// (connecting when needed, sending, and reading the whole reply), not a
// bound on each socket read: a server that trickles its answer a byte at a
// time still costs at most `timeout`. Walks over the keyspace (count,
// size_bytes, clear) are bounded as a whole by `admin_timeout`. Several URLs split the keyspace by
// rendezvous hashing: adding a server moves only its share of keys, and losing
// one loses only its share.
//
// Failures are classified as errors or timeouts. After `breaker_failures`
// consecutive failures a server's circuit breaker opens: for `breaker_backoff`
// every call to it fails fast (unavailable, counted as skipped) instead of
// waiting, then one probe is let through. A server that is down, paused,
// slow, or returning garbage therefore costs at most one timeout per back-off
// period, never a failed compile: garbage values are misses, counted as
// corrupt.
//
// Passwords are never printed: RedisUrl::redacted() masks them, every error
// message uses the redacted form, and a URL that fails to parse is shown with
// everything up to its last '@' hidden. A password holding ',' (the URL
// separator of PROGCACHE_REMOTE) must be percent-encoded, or given through
// RedisStoreOptions::password.
//
// Thread safety: all stores here are thread-safe. Connections are pooled per
// server and reused.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "progcache/file_store.h"
#include "progcache/store.h"

namespace progcache {

struct RedisUrl {
  std::string host;  // empty for unix sockets
  int port = 6379;
  std::string unix_path;  // set for redis+unix://
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

struct RedisStoreOptions {
  std::vector<std::string> urls;  // one or more; keys are sharded across them
  // Password for the URLs that carry none, so that it need not appear on a
  // command line (see PROGCACHE_REMOTE_PASSWORD_FILE in config.h).
  std::string password;
  bool read_only = false;   // puts, erases and clears are skipped (counted)
  EntryCodecOptions codec;  // signing key, as for the file store
  int breaker_failures = 3;
  std::chrono::milliseconds breaker_backoff{5000};
  int max_idle_connections = 8;  // per server
  // Largest value sent or accepted; a bigger reply is abandoned part-way
  // (resource_exhausted) instead of being buffered whole. Default 256 MiB.
  std::size_t max_value_bytes = std::size_t{256} << 20;
  // Total deadline of a walk over the keyspace (count, size_bytes, clear).
  std::chrono::milliseconds admin_timeout{30000};
};

// Per-server counters, beyond StoreStats.
struct RemoteStats {
  std::uint64_t timeouts = 0;
  std::uint64_t failures = 0;  // errors other than timeouts
  std::uint64_t skipped = 0;   // calls not made because a breaker was open
  std::uint64_t breaker_trips = 0;
  std::uint64_t dropped = 0;  // async puts dropped: queue full (tiered store)
  std::uint64_t read_only_skips = 0;
  std::string last_error;  // the most recent timeout or failure ("" when none)
};

class RemoteStore : public Store {
 public:
  virtual RemoteStats remote_stats() = 0;
  // The server (its redacted URL) that owns `key`.
  [[nodiscard]] virtual std::string server_for(const Key& key) const = 0;
};

// Fails only on bad URLs; servers are contacted lazily.
Result<std::unique_ptr<RemoteStore>> make_redis_store(const RedisStoreOptions& options);

// ---------------------------------------------------------------- tiered

struct TieredStoreOptions {
  std::unique_ptr<Store> memory;        // may be null
  std::unique_ptr<Store> disk;          // may be null
  std::unique_ptr<RemoteStore> remote;  // may be null
  // Remote puts go through a bounded queue served by one background thread;
  // when it is full, new puts are dropped and counted.
  std::size_t remote_queue = 256;
  // close() waits this long for queued remote puts.
  std::chrono::milliseconds flush_timeout{5000};
};

struct TierStats {
  std::string tier;  // "memory", "file", "redis"
  StoreStats stats;
};

class TieredStore : public Store {
 public:
  // Counters of every tier, top first, then the remote-specific ones.
  virtual std::vector<TierStats> tier_stats() = 0;
  virtual std::optional<RemoteStats> remote_stats() = 0;
  // Waits until queued remote puts are written (or the flush timeout).
  virtual Status flush() = 0;
};

// A get tries memory, then disk, then remote; a hit in a lower tier is copied
// into the tiers above it. A put goes to memory and disk synchronously and to
// the remote asynchronously. Errors of a lower tier are counted and treated as
// misses: the tiered store fails only when no tier can serve at all.
std::unique_ptr<TieredStore> make_tiered_store(TieredStoreOptions options);

}  // namespace progcache
