// store/file/recency.h — when each entry was last read, recorded in memory
// that every process of the store maps (<root>/v1/recency), so that
// eviction follows reads exactly without a file-system write per hit.
//
// Why not the atime alone: stamping an entry's atime costs a metadata write
// (about 4 µs on ext4, most of a 4 KiB hit), so the file's own atime is
// refreshed only once a minute (FileStoreOptions::recency_granularity_ns),
// and within that minute eviction would be first-in first-out. A read is
// recorded here instead: a store of 8 bytes into a slot of the entry's key.
// An entry's recency is the later of its atime and its slot's time.
//
// The table: k_slots slots of 64 bytes in groups of four; a key may live in
// any slot of the group its key hashes to. A read finds its key's slot, or
// takes an empty one, or takes over the slot of a key not read for a minute
// (that key's time is handed back to the caller, which writes it to the
// entry's atime, so no read is forgotten), or, when the group is busy with
// four keys read in the last minute, says so and the caller stamps the
// file's atime itself. Every read is recorded one way or the other.
//
// Trust: anyone who may write the store may write the table, as they may
// set an entry's atime or delete it; values are sanity-checked (a time far
// in the future counts as no evidence of use), never trusted for more than
// the order of eviction.
//
// A table that cannot be opened or mapped costs speed only: record() then
// returns false and every read stamps the file. A slot left half-written by
// a process killed inside record() (a few stores long) stays out of use.
//
// Thread safety: all methods are thread-safe once open() has returned, and
// across processes; close() must not race other calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "progcache/env.h"
#include "progcache/key.h"
#include "progcache/status.h"

namespace progcache::file_store {

class RecencyTable {
 public:
  static constexpr std::size_t k_slots = 4096;
  static constexpr std::size_t k_file_size = k_slots * 64;

  // A record displaced from the table: `key` was last read at `read_ns`.
  struct Displaced {
    Key key;
    std::int64_t read_ns = 0;
  };

  RecencyTable() = default;
  RecencyTable(const RecencyTable&) = delete;
  RecencyTable& operator=(const RecencyTable&) = delete;
  ~RecencyTable() { close(); }

  // Opens (creating with `file_perms`) and maps the table at `path`, its
  // blocks reserved first (a write through a mapping of a sparse file on a
  // full disk would be SIGBUS). A failure leaves the table closed.
  Status open(Env* env, const std::string& path, std::uint32_t file_perms);
  void close();
  // Open, and its last access did not meet the file cut short under its
  // mapping (another writer of the store truncated it): until the next call
  // extends the file back (at most once a second), every call acts as if
  // the table were closed.
  [[nodiscard]] bool is_open() const { return m_slots != nullptr && !m_faulted.load(std::memory_order_relaxed); }

  // Records that `key` was read at `now_ns`. false: not recorded (the table
  // is closed, or the key's group is taken by keys read in the last
  // minute); the caller stamps the entry's atime. A record taken over is
  // put in `*displaced` for the caller to write to that entry's atime.
  bool record(const Key& key, std::int64_t now_ns, std::optional<Displaced>* displaced);
  // Drops what is recorded for `key` (its entry is gone, or its file's times
  // are to speak for it alone).
  void forget(const Key& key);
  // The last read of `key` recorded here, 0 when none is.
  [[nodiscard]] std::int64_t last_read(const Key& key) const;
  // The group of k_ways slots `key` may live in.
  static std::size_t group_of(const Key& key);
  static constexpr std::size_t k_ways = 4;

 private:
  // The layout is the on-disk format (a new layout gets a new file name).
  struct Slot {
    std::uint64_t state;
    std::uint64_t key[4];
    std::uint64_t read_ns;  // an int64 of CLOCK_REALTIME nanoseconds, as atimes are
    std::uint64_t pad[2];
  };
  static_assert(sizeof(Slot) * k_slots == k_file_size);

  // The accesses themselves, run under detail::guarded (a SIGBUS from a
  // file another process truncated ends them, and sets m_faulted).
  bool record_mapped(const Key& key, std::int64_t now_ns, std::optional<Displaced>* displaced);
  void forget_mapped(const Key& key);
  [[nodiscard]] std::int64_t last_read_mapped(const Key& key) const;

  Env* m_env = nullptr;
  int m_fd = -1;
  Slot* m_slots = nullptr;
  // After a fault: the file extended back to its size (its lost slots read
  // as empty). false: not now (tried in the last second) or it failed.
  bool heal() const;

  mutable std::atomic<bool> m_faulted{false};
  mutable std::atomic<std::int64_t> m_next_heal_ns{0};
};

}  // namespace progcache::file_store
