// store/file/accounting.h — a file store's counters: bytes and entries per
// shard, and the host-wide event counts, in <root>/v1/accounting, mapped
// MAP_SHARED by every process that opens the store and updated with atomic
// adds (std::atomic_ref is address-free for lock-free 8-byte types). This
// process's own event counts are kept beside them.
//
// The shard counters are exact for the common paths (a put charges what its
// rename added, a removal what it moved out); scans of a shard reconcile
// them with the files when they are far off (grossly_off), so a crash
// between a rename and its charge, or a damaged file, heals.
//
// Thread safety: all methods are thread-safe once open() has returned;
// close() must not race other calls: the store calls it only from its
// destructor, when no call is running.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "progcache/env.h"
#include "progcache/store.h"
#include "store/file/layout.h"
#include "store/store_meters.h"
#include "util/latency.h"

namespace progcache::file_store {

enum class Event { hit, miss, put, eviction, corrupt, rejected, error };

class Accounting {
 public:
  // Rebuilds the shard counters from the files (a scan of every shard that
  // calls reconcile()). Called with the file locked when it is new or damaged.
  using Rebuild = std::function<Status()>;

  Accounting() = default;
  Accounting(const Accounting&) = delete;
  Accounting& operator=(const Accounting&) = delete;
  ~Accounting() { close(); }

  // Opens and maps the file at `path` (created with `file_perms`). Space for
  // every page is reserved first: counters written through a mapping of a
  // sparse file on a full disk would be SIGBUS.
  Status open(Env* env, const std::string& path, std::uint32_t file_perms, const Rebuild& rebuild);
  // Maps a file another store initialised (a peer's under a cap per root),
  // never initialising, rebuilding or waiting: unavailable when it is not
  // initialised now.
  Status open_initialised(Env* env, const std::string& path, std::uint32_t file_perms);
  void close();
  // The mapped file's device and inode ({0, 0} when not open): which file
  // this is, whatever path led to it.
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> identity() const;

  // Counts one event, for this process and for the host.
  void count(Event e);
  // Takes back one miss counted earlier, for this process and the host (a
  // lookup served after all: see Store::uncount_miss); never below zero.
  void uncount_miss();
  // The same for the host alone (Store::count_served_above): what this
  // process's store answered stays as it was.
  void count_host(Event e);
  void uncount_host_miss();
  // Bytes of a hit served and of a put taken, for this process and the host.
  void read(std::uint64_t n);
  void wrote(std::uint64_t n);
  // Records a lookup's or a put's time, when its timer was sampled.
  void finish_get(SampledTimer& t);
  void finish_put(SampledTimer& t);
  // Zeroes the host's event counts, bytes and times (`progcache stats
  // --zero`); the shard counters (what is held) stay.
  void zero();
  void charge(int shard, std::int64_t dbytes, std::int64_t dcount);
  // Sets a shard's counters to the truth a scan found.
  void reconcile(int shard, std::int64_t bytes, std::int64_t count);
  // True when a shard's counters are far from what a scan found (damaged, or
  // drifted by crashes). A counter slightly off is not damage: a scan racing
  // puts and removals in the same shard may have missed one.
  [[nodiscard]] bool grossly_off(int shard, std::int64_t bytes, std::int64_t count) const;
  [[nodiscard]] std::int64_t shard_bytes(int shard) const;
  [[nodiscard]] std::int64_t shard_count(int shard) const;
  // Sums of the shard counters, computed when read: no second copy exists
  // to drift from them.
  [[nodiscard]] std::int64_t total_bytes() const;
  [[nodiscard]] std::int64_t total_count() const;

  // This process's events plus the totals.
  [[nodiscard]] StoreStats process_stats() const;
  // Every process's events plus the totals.
  [[nodiscard]] StoreStats host_stats() const;

 private:
  struct Shared;  // the mapped layout
  Status init_locked(const Rebuild& rebuild);
  // Maps the file when another process has initialised it; false otherwise.
  bool map_if_initialised();

  Env* m_env = nullptr;
  std::string m_path;
  int m_fd = -1;
  Shared* m_map = nullptr;                     // nullptr until open and once closed
  mutable std::atomic<bool> m_faulted{false};  // an access met the file cut short (util/mapped_access.h)
  mutable std::atomic<std::int64_t> m_next_heal_ns{0};
  template <typename F>
  bool touch(F&& f) const;
  bool heal() const;
  std::atomic<std::uint64_t> m_events[7] = {};
  StoreMeters m_meters;
};

}  // namespace progcache::file_store
