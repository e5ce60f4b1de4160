// store/file/file_store_impl.h — the file store, assembled from its rooms:
//
//   layout.h        every name (entries, temps, quarantine, shards, files)
//   permissions.h   which directories the store trusts, and how it makes them
//   accounting.h    the shared, mapped counters
//   recency.h       the shared, mapped record of each entry's last read
//   file_store.cpp  open, get, put, erase, clear, stats: the Store operations
//   eviction.cpp    removal by inode, caps, trimming in LRU order
//   maintenance.cpp shard scans, list, verify, prune
//
// Entries are decoded by the one EntryReader (entry.h). The protocol is in
// file_store.h and docs/file-store.md.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "progcache/file_store.h"
#include "store/file/accounting.h"
#include "store/file/layout.h"
#include "store/file/permissions.h"
#include "store/file/recency.h"
#include "util/mutex.h"

namespace progcache::file_store {

// An entry file found by a shard scan.
struct ScannedFile {
  std::string name;
  FileInfo info;
};

// When a shard scan resets the shard's counters to what it found.
enum class Reconcile {
  no,
  // Only when they are far off (damaged, or drifted by crashes): a scan
  // racing puts and removals in the same shard would otherwise trade exact
  // counters for a listing that missed an operation.
  gross,
  yes,
};

// What reading one entry file found. An I/O failure is an error of the
// Result instead: it is no evidence of damage.
struct EntryRead {
  std::optional<Entry> entry;
  bool damaged = false;   // removable: the file is not a valid entry for the key
  bool rejected = false;  // damaged because its signature does not verify
  std::string reason;     // why there is no entry
  FileInfo info;
};

// Reads and verifies the entry file open at `fd` (size, checksum, key echo,
// signature under `codec`): the one judgement of an entry's bytes that
// get(), verify() and peek() share. Changes nothing.
Result<EntryRead> read_entry_file(Env* env, int fd, const Key& key, const EntryCodecOptions& codec);

class FileStoreImpl final : public FileStore {
 public:
  FileStoreImpl(FileStoreOptions options, std::string root);
  ~FileStoreImpl() override;

  Status init();
  // Opens the store as a peer of another under a cap per root: its root
  // judged, its accounting mapped only if initialised; nothing made,
  // rebuilt, swept or waited for.
  Status init_peer();

  // Store
  Result<std::optional<Entry>> get(const Key& key) override;
  Result<bool> get_primary_into(const Key& key, const EntryReader::Alloc& alloc) override;
  Status put(const Key& key, const Entry& entry) override;
  Result<std::optional<std::string>> get_encoded(const Key& key) override;
  Status put_encoded(const Key& key, std::string encoded) override;
  Result<bool> erase(const Key& key) override;
  Status clear() override;
  Result<std::uint64_t> count() override;
  Result<std::uint64_t> size_bytes() override;
  StoreStats stats() override;
  void count_copy_hit() override { count_lookup(Event::hit); }
  void count_served_above(bool missed_here) override {
    if (!m_opt.count_lookups) return;
    if (missed_here) m_acct.uncount_host_miss();
    m_acct.count_host(Event::hit);
  }
  void uncount_miss() override {
    if (m_opt.count_lookups) m_acct.uncount_miss();
  }
  Status close() override;
  [[nodiscard]] std::string name() const override { return "file"; }

  // FileStore
  [[nodiscard]] const std::string& root() const override { return m_layout.root(); }
  [[nodiscard]] std::string entry_path(const Key& key) const override { return m_layout.entry_path(key); }
  [[nodiscard]] std::optional<std::uint64_t> max_size_bytes() const override { return m_opt.max_size_bytes; }
  [[nodiscard]] std::optional<std::uint64_t> max_entries() const override { return m_opt.max_entries; }
  StoreStats host_stats() override;
  void zero_stats() override { m_acct.zero(); }
  Result<std::vector<FileEntryInfo>> list(const ProgressFn& progress) override;     // maintenance.cpp
  Result<VerifyReport> verify(Repair repair, const ProgressFn& progress) override;  // maintenance.cpp
  Result<PruneReport> prune(std::optional<std::uint64_t> max_size, std::optional<std::int64_t> older_than_ns,
                            const ProgressFn& progress) override;  // maintenance.cpp

 private:
  using ReadResult = EntryRead;
  // The entry named by a write, never trimmed by the trim that write causes.
  struct Written {
    int shard = -1;
    std::string name;
  };

  // file_store.cpp
  Status check_open() const;
  // Counts a hit or a miss, unless this store's lookups are not counted.
  void count_lookup(Event e) {
    if (m_opt.count_lookups) m_acct.count(e);
  }
  Status count_error(Status st);
  // Opens `key`'s entry for reading; nullopt (counted as a miss) when there
  // is none, its shard is not one the store trusts, or it is a symlink
  // (removed and counted as corrupt).
  Result<std::optional<int>> open_entry(const Key& key, const std::string& path);
  // Reads and verifies the entry open at `fd`; `stamp`: record the use.
  Result<ReadResult> read_entry(int fd, const Key& key, bool stamp);
  // Records a read of `key` (open at `fd`): in the recency table, and in
  // the file's atime when that is older than the granularity, in the
  // future, or the table could not take it.
  void stamp_use(int fd, const Key& key, const FileInfo& info);
  // Writes a read the table displaced to its entry's atime, unless the file
  // records a later one already.
  void write_back(const RecencyTable::Displaced& d);
  // When the entry `name` of `shard` (lstat'ed as `info`) was last used:
  // the later of its atime and its read in the table; 0 for a time in the
  // future (no evidence of use).
  [[nodiscard]] std::int64_t last_used(int shard, const std::string& name, const FileInfo& info,
                                       std::int64_t now) const;
  // Whether shard `shard` is a directory the store trusts (cached per process).
  bool shard_checked(int shard, bool create);
  // Makes the root, the version directory and a shard again after they were
  // removed under an open store; false when any is unacceptable.
  bool recreate_dirs(int shard);
  // Makes the version directory and asks for its shards to be spread.
  Status ensure_version_dir();

  // eviction.cpp
  // The totals the caps bound: this store's, plus its peers' under a cap
  // per root.
  struct Totals {
    std::int64_t bytes = 0;
    std::int64_t count = 0;
  };
  [[nodiscard]] Totals totals() const;
  [[nodiscard]] bool over(double fraction) const;
  [[nodiscard]] bool over_entries_more() const;
  // Opens the stores of the cap's root that exist and are not open yet (at
  // most once a second unless `now`); every store of the root but this one.
  void refresh_peers(bool now);
  // Each peer, for a trim or a prune across the root (shared: a peer found
  // gone is dropped by the next refresh, never under a trim that holds it).
  std::vector<std::shared_ptr<FileStoreImpl>> peers();
  void maybe_trim(const Written& written);
  void trim_to_low_water(const Written& written) PROGCACHE_REQUIRES(m_trim_mu);
  Result<bool> take_out(int shard, const std::string& path);
  Result<bool> remove_if_same(int shard, const std::string& path, const FileInfo& expected);
  // Charges and counts the removal of entry `name` and forgets its reads.
  void count_eviction(int shard, const std::string& name, const FileInfo& removed);

  // maintenance.cpp
  static bool stale_transient(const FileInfo& info, std::int64_t now, std::int64_t stale);
  // Removes the transient file `name` of `shard` (lstat'ed as `info`) when
  // it is left behind: a temp whose writer is gone (its lock is free),
  // whatever its age, or any transient file older than stale_temp_ns. A
  // temp's bytes were charged by its writer and are charged back here.
  // Returns whether it was removed.
  bool sweep_transient(int shard, const std::string& name, const FileInfo& info, std::int64_t now);
  // Removes the temp at `path` if its writer's lock can be taken (the
  // writer is gone), holding the lock meanwhile so a live writer is never
  // robbed; the removed file's size in `*size`.
  bool remove_if_writer_gone(const std::string& path, std::uint64_t* size);
  Result<std::vector<ScannedFile>> scan_shard(int shard, Reconcile reconcile, bool sweep = true);
  // Fills e.created_unix_ns, e.name and e.kind from the entry at e.path
  // (left empty where it cannot be read).
  void peek_entry(FileEntryInfo& e);
  // Writes encoded entry bytes under `key` (atomically) and charges them.
  Status publish(const Key& key, const std::string& encoded);
  // OK when `encoded` decodes as `key`'s entry under this store's codec.
  Status check_encoded(const Key& key, const std::string& encoded) const;
  void verify_shard(int shard, const std::vector<DirEntry>& files, Repair repair, std::int64_t now,
                    VerifyReport& report);

  FileStoreOptions m_opt;
  Env* m_env;
  Layout m_layout;
  DirPolicy m_dirs;
  Accounting m_acct;
  RecencyTable m_recency;
  std::array<std::atomic<bool>, k_shards> m_shard_ok;
  int m_evict_fd = -1;
  Mutex m_trim_mu;
  // Set by a trim that removed something; read after it under the same lock.
  bool m_trim_progress PROGCACHE_GUARDED_BY(m_trim_mu) = false;
  std::atomic<bool> m_closed{false};
  // The other stores of the cap's root (options.cap_root), opened as they
  // appear; each is opened without a cap root of its own.
  mutable Mutex m_peer_mu;
  struct Peer {
    std::shared_ptr<FileStoreImpl> store;
    std::pair<std::uint64_t, std::uint64_t> identity;  // its accounting file's device and inode
  };
  std::vector<Peer> m_peers PROGCACHE_GUARDED_BY(m_peer_mu);
  std::int64_t m_peers_checked_ns PROGCACHE_GUARDED_BY(m_peer_mu) = 0;
};

}  // namespace progcache::file_store
