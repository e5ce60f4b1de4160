// progcache/file_store.h — the on-disk tier, shared safely by every process
// of a host.
//
// Layout: <root>/v1/<2 hex>/<62 hex>, one file per entry in 256 shard
// directories, plus <root>/v1/accounting (shared counters, mmap'd) and
// <root>/v1/evict.lock.
//
// Protocol (see docs/file-store.md):
//   * put writes a uniquely named temp file in the destination shard (same
//     filesystem, so no EXDEV), optionally fsyncs it, then renames it over the
//     target: a reader sees the old entry or the new one, never a part. The
//     temp file is removed on every failure path; temps older than an hour
//     are swept when a shard is scanned.
//   * get opens without following symlinks, reads, decodes and verifies. A
//     damaged, foreign or misplaced entry is counted, removed (only if it is
//     still the very file that was read), and reported as a miss.
//   * a hit stamps the file's atime explicitly when it is older than a
//     minute, so LRU order works on relatime and noatime mounts.
//   * caps: bytes and entries are counted per shard in the shared accounting
//     file with atomic adds (O(1) per put). Over a cap, one process at a time
//     (non-blocking lock) trims the fullest shards, oldest first, to 90% of
//     the cap; a shard scan also reconciles that shard's counters with the
//     files. Eviction removes a file only after checking, by inode, that it is
//     still the file the scan saw, so an entry another process has just
//     replaced is never lost.
//   * permissions: the root is created 0700 and entries 0600. A root owned by
//     another user, or writable by group or others, is refused unless
//     Sharing::group is configured (then: directories 2770, entries 0660,
//     and only "others" writing is refused).
//
// Thread safety: all methods are thread-safe; any number of processes may
// open the same root.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/env.h"
#include "progcache/store.h"

namespace progcache {

enum class Sharing {
  private_only,  // root 0700, entries 0600, owner must be the current user
  group,         // setgid root 2770, entries 0660; shared by one group
};

inline constexpr std::uint64_t k_default_max_size = std::uint64_t{10} << 30;  // 10 GiB

struct FileStoreOptions {
  // Cache root. Empty: default_cache_root().
  std::string root;
  // Byte cap over entry file sizes; nullopt: unbounded. Default 10 GiB.
  std::optional<std::uint64_t> max_size_bytes = k_default_max_size;
  // Entry-count cap; nullopt (default): unbounded.
  std::optional<std::uint64_t> max_entries;
  // When set, the caps bound every store of this cache root together (one
  // cap per root): the root's own store (<cap_root>/v1) and each companion
  // store (<cap_root>/<subdir>, companion_stores()) that exists. The
  // totals are the stores' shared counters added (O(1) per check); a trim
  // removes the least recently used entries across them, and prune()
  // prunes them all. Config::file_store_options() sets it to the root.
  std::string cap_root;
  // Whether lookups count as hits and misses in the host's statistics.
  // False for a memo an integration keeps beside its entries (Triton's
  // warm-start memo of triton_key()): its lookups are no program's.
  bool count_lookups = true;
  Durability durability = Durability::none;
  Sharing sharing = Sharing::private_only;
  // Signing (HMAC-SHA256) of entries; empty key: unsigned.
  EntryCodecOptions codec;
  // OS seam; nullptr means Env::posix().
  Env* env = nullptr;
  // Temp files older than this are swept (default one hour).
  std::int64_t stale_temp_ns = std::int64_t{3600} * 1'000'000'000;
  // A hit re-stamps the entry file's atime only when it is older than this
  // (default 60 s); every read is recorded at once in the store's recency
  // table all the same, which eviction reads with the atime
  // (docs/file-store.md, "Recency follows every read").
  std::int64_t recency_granularity_ns = std::int64_t{60} * 1'000'000'000;
};

// $PROGCACHE_DIR, else $XDG_CACHE_HOME/progcache, else $HOME/.cache/progcache.
// `source` (optional) receives the name of the variable that decided.
std::string default_cache_root(std::string* source = nullptr);

// Stores kept inside a cache root beside its own entries, each a FileStore
// of its own (so clearing one never touches another): Python's KernelCache
// keeps multi-artifact kernels in <root>/kernels and its CubinCache
// pyptx-style cubins in <root>/pyptx, progcache.triton its kernel groups in
// <root>/triton, progcache.tilelang its kernels in <root>/tilelang and the
// nvcc launcher (`progcache nvcc`) its outputs in <root>/nvcc. The
// CLI's ls, stats, verify, prune and
// clear visit every one that exists.
struct CompanionStore {
  std::string_view name;    // "kernels"
  std::string_view subdir;  // relative to the cache root
};
std::span<const CompanionStore> companion_stores();

// One entry file as seen by a scan.
struct FileEntryInfo {
  Key key;
  std::string path;
  std::uint64_t size = 0;
  std::int64_t created_unix_ns = 0;  // from the entry header; 0 if unreadable
  std::int64_t last_used_ns = 0;     // atime
  // The "name" and "kind" strings of the entry's metadata ("" when it has
  // none or cannot be read): the program's name and what it is ("cubin",
  // "triton-group", ...). Read for display: a listing verifies nothing.
  std::string name;
  std::string kind;
};

struct VerifyProblem {
  std::string path;
  std::string reason;
  bool removed = false;
};

struct VerifyReport {
  std::uint64_t checked = 0;
  std::uint64_t ok = 0;
  std::vector<VerifyProblem> problems;
  std::uint64_t temps_removed = 0;
};

struct PruneReport {
  std::uint64_t removed = 0;
  std::uint64_t bytes_removed = 0;
  std::uint64_t remaining = 0;
  std::uint64_t bytes_remaining = 0;
  std::uint64_t stores = 1;  // the stores pruned together (a cap per root: every store of the root)
};

// Called with (done, total) during long scans: verify counts the bytes of
// the entries read (of the bytes the store's counters hold), list and prune
// count steps of their own. The last call has done == total; a total of 0
// means there is nothing to measure.
using ProgressFn = std::function<void(std::uint64_t, std::uint64_t)>;

enum class Repair { no, yes };

class FileStore : public Store {
 public:
  // Opens (creating if needed) the store. permission_denied for a foreign or
  // group/other-writable root; the Status from the OS otherwise.
  static Result<std::unique_ptr<FileStore>> open(FileStoreOptions options);

  // `key`'s entry in the store `options` names, judged as a lookup judges
  // it (the root, version and shard directories checked; the entry's size,
  // checksum, key echo and signature verified), with nothing changed: the
  // store is not opened, no directory made or tidied, nothing counted,
  // stamped or removed. nullopt: no entry, or a shard a lookup would not
  // look in; data_loss or permission_denied (with the reason): an entry a
  // lookup would drop as damaged or unsigned. What `progcache explain` reads.
  static Result<std::optional<Entry>> peek(const FileStoreOptions& options, const Key& key);

  [[nodiscard]] virtual const std::string& root() const = 0;
  // Path where `key`'s entry lives.
  [[nodiscard]] virtual std::string entry_path(const Key& key) const = 0;
  // The caps this store enforces (nullopt: none), as opened.
  [[nodiscard]] virtual std::optional<std::uint64_t> max_size_bytes() const = 0;
  [[nodiscard]] virtual std::optional<std::uint64_t> max_entries() const = 0;
  // Host-wide counters (all processes), from the shared accounting file.
  virtual StoreStats host_stats() = 0;
  // Zeroes the host-wide event counts, bytes read and written, and timings
  // (ccache's -z); what the store holds (entries, bytes) is not a counter
  // and stays.
  virtual void zero_stats() = 0;
  // Every entry file, in shard order. Damaged headers are listed with
  // created_unix_ns 0.
  virtual Result<std::vector<FileEntryInfo>> list(const ProgressFn& progress = {}) = 0;
  // Fully decodes every entry; with Repair::yes removes the damaged ones.
  // Also sweeps stale temps and reconciles the accounting with the files.
  virtual Result<VerifyReport> verify(Repair repair, const ProgressFn& progress = {}) = 0;
  // Removes entries unused for `older_than_ns`, then least recently used
  // entries until the total is at most `max_size` bytes.
  virtual Result<PruneReport> prune(std::optional<std::uint64_t> max_size, std::optional<std::int64_t> older_than_ns,
                                    const ProgressFn& progress = {}) = 0;

  // The entry of `key` as stored (its encoded bytes: header, checksum, any
  // signature), after checking that it decodes under this store's codec
  // (checksum, key echo, signature when the store requires one): what
  // `progcache export` carries. nullopt when absent; data_loss or
  // permission_denied (with the reason) for an entry this store would not
  // serve. Counts nothing and leaves the entry's recency as it was.
  virtual Result<std::optional<std::string>> get_encoded(const Key& key) = 0;
  // Publishes already-encoded entry bytes under `key` as put() publishes an
  // entry (atomically, charged to the caps), after the same check as
  // get_encoded: a store never takes bytes it would not serve. So a signed
  // entry keeps its signature, and one signed by an untrusted key, damaged,
  // or echoing another key is refused (data_loss or permission_denied) and
  // nothing is written. What `progcache import` uses.
  virtual Status put_encoded(const Key& key, std::string encoded) = 0;
};

}  // namespace progcache
