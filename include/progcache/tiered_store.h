// progcache/tiered_store.h — tiers composed: memory → disk → remote.
//
// A get tries each tier top first; a hit in a lower tier is copied into the
// tiers above it. A put goes to memory and disk synchronously and to the
// remote asynchronously, through a bounded queue served by one background
// thread. Errors of a tier are counted and treated as misses there: the
// tiered store fails only when no tier can serve at all. Any tier may be
// absent, so memory → disk needs no remote, and no remote backend at all.
//
// Thread safety: thread-safe, as every Store.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "progcache/remote_store.h"
#include "progcache/store.h"

namespace progcache {

struct TieredStoreOptions {
  std::unique_ptr<Store> memory;        // may be null
  std::unique_ptr<Store> disk;          // may be null
  std::unique_ptr<RemoteStore> remote;  // may be null
  // Remote puts wait in a queue of this many; when it is full, new puts are
  // dropped and counted.
  std::size_t remote_queue = 256;
  // close() waits this long for queued remote puts.
  std::chrono::milliseconds flush_timeout{5000};
};

struct TierStats {
  std::string tier;  // the tier's Store::name(): "memory", "file", "remote"
  StoreStats stats;
};

// The tiered store's own counters.
struct TieredStats {
  std::uint64_t dropped = 0;  // remote puts dropped: the queue was full, or close() gave up on them
  std::uint64_t queued = 0;   // remote puts waiting now
};

class TieredStore : public Store {
 public:
  // Counters of every tier, top first.
  virtual std::vector<TierStats> tier_stats() = 0;
  virtual TieredStats tiered_stats() = 0;
  // The remote tier's own counters; nullopt without a remote.
  virtual std::optional<RemoteStats> remote_stats() = 0;
  // Waits until queued remote puts are written (or the flush timeout).
  virtual Status flush() = 0;
};

std::unique_ptr<TieredStore> make_tiered_store(TieredStoreOptions options);

}  // namespace progcache
