// progcache/remote_store.h — the remote tier: stores shared across machines.
//
// The tier is split as ccache splits its remote storage: a RemoteBackend is
// dumb (one server: get, set, delete, walk its keys, each call bounded by a
// deadline), and the RemoteStore above it holds every policy once, for every
// backend:
//   * sharding: several backends split the keyspace by rendezvous hashing:
//     adding a server moves only its share of keys, and losing one loses
//     only its share;
//   * deadlines: each call gets the backend's call timeout; walks over the
//     keyspace (count, size_bytes, clear) are bounded as a whole by
//     `admin_timeout`;
//   * circuit breaker: after `breaker_failures` consecutive outages,
//     timeouts or refused credentials, a backend's calls fail fast
//     (unavailable, counted as skipped) for `breaker_backoff`, then one probe
//     is let through. A server that is down, paused, slow or returning
//     garbage therefore costs at most one timeout per back-off period, never
//     a failed compile: garbage values are misses, counted as corrupt;
//   * read-only: puts are skipped and counted, erase and clear refused;
//   * the entry format (signing, verification) and the statistics.
// A new backend is one class implementing RemoteBackend and one row in the
// scheme table (remote/schemes.cpp); nothing above it changes.
//
// URLs (PROGCACHE_REMOTE, RemoteStoreOptions::urls) name their backend by
// scheme: redis://, redis+unix:// and redis+cluster:// (see redis_backend.h) when progcache is
// built with hiredis; remote_schemes() lists what this build understands.
//
// Thread safety: a RemoteStore is thread-safe; a backend must be too.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/store.h"

namespace progcache {

using RemoteClock = std::chrono::steady_clock;
using RemoteDeadline = RemoteClock::time_point;

// One server. Names are the store's keys as 64 hex digits; a backend maps
// them into its own namespace (a prefix) and walks only that namespace.
// Every call must return by `deadline`: deadline_exceeded when it cannot,
// unavailable for an outage, permission_denied for refused credentials,
// data_loss for an answer that is not a value. These codes feed the breaker.
class RemoteBackend {
 public:
  virtual ~RemoteBackend() = default;

  // nullopt: no such name. A value of a foreign kind may be returned as
  // empty bytes: it then fails to decode and counts as a corrupt miss.
  virtual Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) = 0;
  virtual Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) = 0;
  // true when something was removed.
  virtual Result<bool> remove(std::string_view name, RemoteDeadline deadline) = 0;
  // Bytes held under `name` (0 when absent).
  virtual Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) = 0;
  // One batch of a walk over the namespace: appends names to `names` and
  // returns the cursor of the next batch; "" starts a walk and, returned,
  // ends it. A name may be seen twice; names added during a walk may be
  // missed.
  virtual Result<std::string> scan(std::string_view cursor, std::vector<std::string>* names,
                                   RemoteDeadline deadline) = 0;

  // The backend as messages show it (its URL with any password masked);
  // also its identity for sharding, so it must be stable.
  [[nodiscard]] virtual std::string id() const = 0;
  // The deadline of one call starts this long after it is made.
  [[nodiscard]] virtual std::chrono::milliseconds call_timeout() const = 0;
};

struct RemoteStoreOptions {
  std::vector<std::string> urls;  // one or more; keys are sharded across them
  // Password for the URLs that carry none, so that it need not appear on a
  // command line (see PROGCACHE_REMOTE_PASSWORD_FILE in config.h).
  std::string password;
  bool read_only = false;   // puts skipped (counted), erase and clear refused
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

// Counters of the remote tier, beyond StoreStats.
struct RemoteStats {
  std::uint64_t timeouts = 0;
  std::uint64_t failures = 0;  // errors other than timeouts and refusals
  // Calls the server refused for a cause every call meets again (refused
  // credentials, a missing bucket, a skewed clock): the first is said once
  // on stderr, and each opens the breaker like an outage.
  std::uint64_t refused = 0;
  std::uint64_t skipped = 0;  // calls not made because a breaker was open
  std::uint64_t breaker_trips = 0;
  std::uint64_t read_only_skips = 0;
  std::string last_error;  // the most recent timeout, failure or refusal ("" when none)
};

class RemoteStore : public Store {
 public:
  virtual RemoteStats remote_stats() = 0;
  // The backend (its id) that owns `key`.
  [[nodiscard]] virtual std::string server_for(const Key& key) const = 0;
};

// The remote tier over the backends the URLs name. Fails only on bad or
// unsupported URLs (unavailable for a scheme this build lacks); servers are
// contacted lazily.
Result<std::unique_ptr<RemoteStore>> make_remote_store(const RemoteStoreOptions& options);
// The remote tier over backends the caller made (`options.urls`,
// `password` and `max_idle_connections` are not used).
Result<std::unique_ptr<RemoteStore>> make_remote_store(std::vector<std::unique_ptr<RemoteBackend>> backends,
                                                       const RemoteStoreOptions& options);

// One URL checked without contacting anything. invalid_argument for a bad
// URL, unavailable for a scheme this build lacks.
struct RemoteUrlInfo {
  std::string shown;          // as messages show it: any password masked
  bool has_password = false;  // the URL itself carries a password
};
Result<RemoteUrlInfo> check_remote_url(std::string_view url);
// A list of URLs separated by ',' (PROGCACHE_REMOTE) split into URLs. The
// seeds of a redis+cluster:// URL are separated by ',' too: an item without
// "://" that follows a cluster URL is one more of its seeds. Empty items are
// dropped.
std::vector<std::string> split_remote_urls(std::string_view list);
// The schemes this build understands ("redis", "redis+unix" with hiredis).
std::vector<std::string> remote_schemes();

}  // namespace progcache
