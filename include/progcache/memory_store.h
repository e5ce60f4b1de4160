// progcache/memory_store.h — the in-process tier: a sharded, byte-capped LRU.
//
// Keys are split over up to 16 shards by their bits; each shard is an O(1)
// LRU (hash map + intrusive recency list) under its own mutex, holding an
// equal share of the caps. A hit returns the stored Entry itself: its
// payloads are shared immutable buffers, so no byte is copied.
//
// When a put pushes a shard over its share, least recently used entries of
// that shard are evicted until it fits. An entry larger than a shard's share
// is not stored (it could never fit) and counts as an eviction; with one
// shard that means "larger than the whole cap".
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <optional>

#include "progcache/store.h"

namespace progcache {

struct MemoryStoreOptions {
  // Cap on the sum of Entry::payload_size(). nullopt: unbounded. 0 disables
  // the store (every get misses, every put is dropped).
  std::optional<std::uint64_t> max_size_bytes;
  // Optional cap on the number of entries. nullopt: unbounded.
  std::optional<std::uint64_t> max_entries;
  // Number of shards (a power of two, at most 256), or 0 for automatic: 16
  // shards when unbounded, fewer for small caps so that every shard's share
  // is at least 256 MiB; a cap under 512 MiB is one exact LRU.
  unsigned shards = 0;
};

// Never fails for valid options; invalid_argument for a bad shard count.
Result<std::unique_ptr<Store>> make_memory_store(const MemoryStoreOptions& options = {});

}  // namespace progcache
