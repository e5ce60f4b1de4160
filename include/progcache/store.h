// progcache/store.h — the Store interface every tier implements.
//
// A Store maps a 32-byte Key to an Entry. Users who think in raw keys (the
// CLI, cuda.core-style mappings) turn bytes or UTF-8 strings into a Key with
// key_from_user(), so "k" and b"k" name one entry, and use get_bytes /
// put_bytes for the bytes-in / bytes-out contract.
//
// Contract for every implementation:
//   * get: a miss is std::nullopt, never an error. A damaged entry is
//     dropped, counted in corrupt_dropped, and reported as a miss.
//   * put: either the whole new entry becomes visible or nothing changes.
//   * erase: true when an entry was removed.
//   * count/size: entries and bytes currently charged against the caps.
//   * close: later calls fail with failed_precondition. It is not a barrier:
//     a call already past its check finishes (a put may still write its
//     entry); what such calls use is released with the store itself.
// There is deliberately no `contains`: "check then read" races with other
// writers and eviction; get answers both questions in one step.
//
// Thread safety: every Store is safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "progcache/entry.h"
#include "progcache/key.h"
#include "progcache/status.h"

namespace progcache {

struct StoreStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t puts = 0;
  std::uint64_t evictions = 0;
  std::uint64_t corrupt_dropped = 0;  // damaged or foreign entries removed
  std::uint64_t rejected = 0;         // entries refused for a missing/bad signature
  std::uint64_t errors = 0;           // operations that failed with an error
  std::uint64_t bytes_stored = 0;     // bytes currently held
  std::uint64_t entries = 0;          // entries currently held
  std::uint64_t bytes_read = 0;       // bytes of the hits served
  std::uint64_t bytes_written = 0;    // bytes of the puts taken
  // Time per lookup (hit or miss) and per put, from one call in 16 of each
  // thread (sampled: see util/latency.h): how many were timed, and the
  // median and 99th percentile in nanoseconds, within 12.5 %.
  std::uint64_t get_samples = 0;
  std::uint64_t get_p50_ns = 0;
  std::uint64_t get_p99_ns = 0;
  std::uint64_t put_samples = 0;
  std::uint64_t put_p50_ns = 0;
  std::uint64_t put_p99_ns = 0;
};

// hits / (hits + misses); 0 before any lookup.
double hit_rate(const StoreStats& s);

// One row per StoreStats counter, in the order they are shown: the CLI's
// text and JSON and Python's stats() dict are all made from this table, so a
// counter is named in one place.
struct StatField {
  enum class Unit { count, bytes, nanoseconds };
  const char* name;   // JSON and Python key, e.g. "corrupt_dropped"
  const char* label;  // text, e.g. "corrupt dropped"
  std::uint64_t StoreStats::*member;
  Unit unit = Unit::count;
  // Prometheus: a counter (only grows until zeroed) or a gauge.
  bool counter = true;
};
std::span<const StatField> store_stat_fields();

class Store {
 public:
  virtual ~Store() = default;

  virtual Result<std::optional<Entry>> get(const Key& key) = 0;
  virtual Status put(const Key& key, const Entry& entry) = 0;
  virtual Result<bool> erase(const Key& key) = 0;
  virtual Status clear() = 0;
  virtual Result<std::uint64_t> count() = 0;
  virtual Result<std::uint64_t> size_bytes() = 0;
  virtual StoreStats stats() = 0;
  // Counts a lookup the caller answered from its own copy of an entry of
  // this store (Triton's materialised kernel directory): a hit, so that the
  // statistics count every served lookup wherever it was answered. A disk
  // store counts it host-wide; a tiered store in its own and its local
  // tier's counters. Others ignore it.
  virtual void count_copy_hit() {}
  // Takes back the miss of a lookup that was then served after all (the
  // caller waited for another process's compile of the same key and found
  // its entry, counted as a hit): one lookup, counted once, as what it
  // ended as. Never below zero. Others ignore it.
  virtual void uncount_miss() {}
  // A lookup of a tiered store whose disk this store is, answered by another
  // tier (its memory, or its remote after this store missed): counted in
  // this store's host-wide statistics, the root's, as the hit it was, the
  // miss this store counted first (`missed_here`) taken back there; its own
  // counters (what it answered) stay. Others ignore it.
  virtual void count_served_above(bool /*missed_here*/) {}
  virtual Status close() = 0;
  // "memory", "file", "remote", "tiered": for messages and stats.
  [[nodiscard]] virtual std::string name() const = 0;

  // A hit's primary artifact written into memory the caller provides:
  // `alloc(n)` is called once with its size and returns where to put it (a
  // Python bytes object, say). false on a miss. The whole entry is verified
  // as get() does, and damage is handled as get() handles it (dropped,
  // counted, a miss); the memory holds the artifact only when this returns
  // true. The default copies from get(); the file store streams the file
  // into the memory, so a hit costs one allocation and no copy.
  virtual Result<bool> get_primary_into(const Key& key, const EntryReader::Alloc& alloc);

  // Bytes-in / bytes-out convenience: the entry's primary artifact.
  Result<std::optional<Bytes>> get_bytes(const Key& key);
  Status put_bytes(const Key& key, Bytes payload);
};

// Parses "10G", "512M", "64k", "1.5GiB", "1000" (bytes). Units are powers of
// 1024 (K, M, G, T, with optional "i" and "B"); the arithmetic is exact and a
// fraction rounds down to whole bytes. invalid_argument naming the text for
// anything else ("10Q", "", "-1", "1e9"), for sizes of 2^63 bytes or more,
// and for a nonzero size below one byte ("0.4": a cap of zero was surely not
// meant; "0" is accepted and callers read it as "no limit").
Result<std::uint64_t> parse_size(std::string_view text);
// invalid_argument naming `name` where `text` is a nonzero number without a
// unit ("5", "1.5"): ccache reads a bare max_size as gigabytes, and a cap of
// 5 bytes would empty a cache. "0" and anything with a unit ("5G", "5000B")
// pass; parse_size judges the rest.
Status check_size_unit(std::string_view name, std::string_view text);
// Parses "30s", "15m", "2h", "7d", "1w" into nanoseconds.
Result<std::int64_t> parse_duration(std::string_view text);
// "1.5 GiB"-style rendering.
std::string format_size(std::uint64_t bytes);

}  // namespace progcache
