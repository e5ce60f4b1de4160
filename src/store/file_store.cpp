#include "progcache/file_store.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "progcache/hash.h"

namespace progcache {

namespace {

constexpr int k_shards = 256;
constexpr std::uint64_t k_acct_magic = 0x31544e43434350ULL;  // "PCCCNT1"
constexpr std::uint64_t k_acct_version = 1;
constexpr std::uint64_t k_max_entry_file = std::uint64_t{8} << 30;
// Entry files up to this size are read whole in one go; larger ones have
// their header checked first.
constexpr std::uint64_t k_read_whole_up_to = std::uint64_t{1} << 20;
// How far ahead of the clock a file time may be before it is distrusted.
constexpr std::int64_t k_future_slack_ns = std::int64_t{60} * 1000000000;
constexpr std::string_view k_temp_prefix = ".tmp.";
constexpr std::string_view k_quarantine_prefix = ".q.";
// Trimming goes below the cap by this fraction so one scan pays for many puts.
constexpr double k_low_water = 0.9;
// Up to this many entries a trim scans every shard and removes in exact
// least-recently-used order (a few thousand stats, once per tenth of the cap
// written). Above it each trim visits the fullest shards and removes the
// older half of each: constant work per put, LRU within a shard, and across
// shards as close to LRU as the keys are uniform (they are digests).
constexpr std::int64_t k_exact_lru_entries = 4096;

// The shared counters. Lives at offset 0 of <root>/v1/accounting, mapped
// MAP_SHARED by every process; all fields are updated with atomic adds through
// std::atomic_ref, which is address-free for lock-free 8-byte types.
struct Accounting {
  std::int64_t magic;
  std::int64_t version;
  std::int64_t pad0[6];
  struct ShardCounters {
    std::int64_t bytes;
    std::int64_t count;
  } shards[k_shards];
  std::int64_t retired_total_bytes;  // totals are now sums of the shards
  std::int64_t retired_total_count;
  std::int64_t hits, misses, puts, evictions, corrupt, rejected, errors;
};
constexpr std::size_t k_acct_size = 8192;
static_assert(sizeof(Accounting) <= k_acct_size);

std::int64_t atomic_add(std::int64_t& field, std::int64_t delta) {
  return std::atomic_ref<std::int64_t>(field).fetch_add(delta, std::memory_order_relaxed) + delta;
}
std::int64_t atomic_load(std::int64_t& field) {
  return std::atomic_ref<std::int64_t>(field).load(std::memory_order_relaxed);
}
std::int64_t atomic_exchange(std::int64_t& field, std::int64_t v) {
  return std::atomic_ref<std::int64_t>(field).exchange(v, std::memory_order_relaxed);
}
std::uint64_t clamp0(std::int64_t v) {
  return v < 0 ? 0 : static_cast<std::uint64_t>(v);
}

bool is_hex_name(std::string_view s, std::size_t len) {
  if (s.size() != len) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool nlohmann_accept(std::string_view json) {
  return nlohmann::json::accept(json);
}

std::string shard_hex(int idx) {
  static constexpr char k_digits[] = "0123456789abcdef";
  return {k_digits[(idx >> 4) & 0xf], k_digits[idx & 0xf]};
}

struct ScannedFile {
  std::string name;
  FileInfo info;
};

class FileStoreImpl final : public FileStore {
 public:
  FileStoreImpl(FileStoreOptions o, std::string root) : m_opt(std::move(o)), m_root(std::move(root)) {
    m_env = m_opt.env != nullptr ? m_opt.env : Env::posix();
    m_dir = join_path(m_root, "v" + std::to_string(k_entry_format_version));
    const bool group = m_opt.sharing == Sharing::group;
    m_dir_perms = group ? 02770 : 0700;
    m_file_perms = group ? 0660 : 0600;
    for (auto& ok : m_shard_ok) ok.store(false);
  }

  ~FileStoreImpl() override { close().ignore(); }

  Status init() {
    PROGCACHE_TRY(check_root());
    PROGCACHE_TRY(ensure_dir(m_dir));
    PROGCACHE_TRY(open_accounting());
    // Each open visits one shard: sweeps its stale temps and reconciles its
    // counters, so even a store that never reaches its cap is tidied over time.
    std::random_device rd;
    scan_shard(static_cast<int>(rd() % k_shards), Reconcile::gross).status().ignore();
    return {};
  }

  // ---------------------------------------------------------- Store

  Result<std::optional<Entry>> get(const Key& key) override {
    PROGCACHE_TRY(check_open());
    const int idx = key.bytes[0];
    if (!shard_checked(idx, /*create=*/false)) {
      count_miss();
      return std::optional<Entry>();
    }
    const std::string path = entry_path(key);
    auto fd = m_env->open_file(path, OpenMode::read, 0);
    if (!fd.ok()) {
      if (fd.status().code() == Code::not_found) {
        count_miss();
        return std::optional<Entry>();
      }
      if (fd.status().code() == Code::failed_precondition) {
        // ELOOP: a symlink where an entry belongs. Never followed; removed.
        auto info = m_env->lstat(path);
        if (info.ok()) remove_if_same(idx, path, *info).status().ignore();
        count_corrupt();
        count_miss();
        return std::optional<Entry>();
      }
      return count_error(fd.status());
    }
    auto result = read_entry(*fd, path, key, /*stamp=*/true);
    m_env->close_file(*fd).ignore();
    if (!result.ok()) return count_error(result.status());
    if (!result->entry) {
      if (result->damaged) {
        remove_if_same(idx, path, result->info).status().ignore();
        result->rejected ? count_rejected() : count_corrupt();
      }
      count_miss();
      return std::optional<Entry>();
    }
    m_hits.fetch_add(1, std::memory_order_relaxed);
    if (m_acct != nullptr) atomic_add(m_acct->hits, 1);
    return std::move(result->entry);
  }

  Result<bool> get_primary_into(const Key& key, const std::function<char*(std::size_t)>& alloc) override {
    if (!m_opt.codec.hmac_key.empty()) {
      PROGCACHE_ASSIGN_OR_RETURN(auto e, get(key));
      if (!e) return false;
      const Bytes p = e->primary();
      char* dst = alloc(p.size());
      if (dst == nullptr) return internal_error("allocation for a cache hit failed");
      if (!p.empty()) std::memcpy(dst, p.data(), p.size());
      return true;
    }
    PROGCACHE_TRY(check_open());
    const int idx = key.bytes[0];
    if (!shard_checked(idx, /*create=*/false)) {
      count_miss();
      return false;
    }
    const std::string path = entry_path(key);
    auto fd = m_env->open_file(path, OpenMode::read, 0);
    if (!fd.ok()) {
      if (fd.status().code() == Code::not_found || fd.status().code() == Code::failed_precondition) {
        count_miss();
        return false;  // a symlink is left for get() or verify to remove
      }
      return count_error(fd.status());
    }
    FileInfo info;
    std::string reason;
    auto r = read_primary_into(*fd, key, alloc, &info, &reason);
    m_env->close_file(*fd).ignore();
    if (!r.ok()) return count_error(r.status());
    if (!*r) {
      if (!reason.empty()) {
        remove_if_same(idx, path, info).status().ignore();
        count_corrupt();
      }
      count_miss();
      return false;
    }
    m_hits.fetch_add(1, std::memory_order_relaxed);
    atomic_add(m_acct->hits, 1);
    return true;
  }

  Status put(const Key& key, const Entry& entry) override {
    PROGCACHE_TRY(check_open());
    auto encoded = encode_entry(key, entry, m_env->now_ns(), m_opt.codec);
    if (!encoded.ok()) return encoded.status();
    const int idx = key.bytes[0];
    // A shard never used by this process whose parents were removed under
    // the open store is made again with them, as a fresh store would.
    if (!shard_checked(idx, /*create=*/true) && !recreate_dirs(idx)) {
      return count_error(permission_denied("shard directory '" + shard_dir(idx) +
                                           "' is not a private directory of this user; refusing to write"));
    }
    const std::string path = entry_path(key);
    std::optional<FileInfo> old;
    Status st = write_file_atomic(m_env, path, temp_path(idx), *encoded, m_file_perms, m_opt.durability, &old);
    if (st.code() == Code::not_found && recreate_dirs(idx)) {
      // The shard (or the whole tree) was removed while the store was open,
      // by hand or by another tool: made again, as a fresh store would.
      st = write_file_atomic(m_env, path, temp_path(idx), *encoded, m_file_perms, m_opt.durability, &old);
    }
    if (!st.ok()) return count_error(st.with_context("storing entry " + key.hex()));
    // The entry count is exact (a new file is known by a non-replacing
    // rename); a replaced file's size can be stale if two processes replace
    // the same entry at once, and scans reconcile that.
    std::int64_t dbytes = static_cast<std::int64_t>(encoded->size());
    std::int64_t dcount = 1;
    if (old && old->is_regular()) {
      dbytes -= static_cast<std::int64_t>(old->size);
      dcount = 0;
    }
    charge(idx, dbytes, dcount);
    m_puts.fetch_add(1, std::memory_order_relaxed);
    atomic_add(m_acct->puts, 1);
    // The entry just written is the most recently used: a trim it causes
    // never removes it.
    maybe_trim(Written{idx, path.substr(path.size() - 62)});
    return {};
  }

  Result<bool> erase(const Key& key) override {
    PROGCACHE_TRY(check_open());
    const int idx = key.bytes[0];
    if (!shard_checked(idx, false)) return false;
    auto removed = take_out(idx, entry_path(key));
    if (!removed.ok()) return count_error(removed.status());
    return *removed;
  }

  Status clear() override {
    PROGCACHE_TRY(check_open());
    Status first_error;
    for (int idx = 0; idx < k_shards; ++idx) {
      auto files = m_env->list_dir(shard_dir(idx));
      if (!files.ok()) {
        if (files.status().code() != Code::not_found && first_error.ok()) first_error = files.status();
        continue;
      }
      const std::int64_t now = m_env->now_ns();
      for (const auto& f : *files) {
        if (f.type == DirEntry::Type::directory) continue;
        const std::string path = join_path(shard_dir(idx), f.name);
        if (std::string_view(f.name).starts_with(k_temp_prefix) ||
            std::string_view(f.name).starts_with(k_quarantine_prefix)) {
          // Another process's put or removal in flight: only stale ones go.
          auto info = m_env->lstat(path);
          if (info.ok() && stale_temp(*info, now, m_opt.stale_temp_ns)) m_env->unlink(path).ignore();
          continue;
        }
        // Each entry leaves through take_out, which charges exactly what it
        // removed: a put racing the clear is accounted, not zeroed away.
        auto removed = take_out(idx, path);
        if (!removed.ok() && first_error.ok()) first_error = removed.status();
      }
    }
    return first_error;
  }

  Result<std::uint64_t> count() override {
    PROGCACHE_TRY(check_open());
    return clamp0(total_count());
  }

  Result<std::uint64_t> size_bytes() override {
    PROGCACHE_TRY(check_open());
    return clamp0(total_bytes());
  }

  StoreStats stats() override {
    StoreStats s;
    s.hits = m_hits.load();
    s.misses = m_misses.load();
    s.puts = m_puts.load();
    s.evictions = m_evictions.load();
    s.corrupt_dropped = m_corrupt.load();
    s.rejected = m_rejected.load();
    s.errors = m_errors.load();
    std::lock_guard lock(m_close_mu);
    if (m_acct != nullptr) {
      s.bytes_stored = clamp0(total_bytes());
      s.entries = clamp0(total_count());
    }
    return s;
  }

  StoreStats host_stats() override {
    StoreStats s;
    std::lock_guard lock(m_close_mu);
    if (m_acct == nullptr) return s;
    s.hits = clamp0(atomic_load(m_acct->hits));
    s.misses = clamp0(atomic_load(m_acct->misses));
    s.puts = clamp0(atomic_load(m_acct->puts));
    s.evictions = clamp0(atomic_load(m_acct->evictions));
    s.corrupt_dropped = clamp0(atomic_load(m_acct->corrupt));
    s.rejected = clamp0(atomic_load(m_acct->rejected));
    s.errors = clamp0(atomic_load(m_acct->errors));
    s.bytes_stored = clamp0(total_bytes());
    s.entries = clamp0(total_count());
    return s;
  }

  Status close() override {
    std::lock_guard lock(m_close_mu);
    if (m_closed.exchange(true)) return {};
    if (m_acct != nullptr) m_env->unmap(m_acct, k_acct_size);
    m_acct = nullptr;
    if (m_acct_fd >= 0) m_env->close_file(m_acct_fd).ignore();
    if (m_evict_fd >= 0) m_env->close_file(m_evict_fd).ignore();
    m_acct_fd = m_evict_fd = -1;
    return {};
  }

  [[nodiscard]] std::string name() const override { return "file"; }
  [[nodiscard]] const std::string& root() const override { return m_root; }
  [[nodiscard]] std::optional<std::uint64_t> max_size_bytes() const override { return m_opt.max_size_bytes; }
  [[nodiscard]] std::optional<std::uint64_t> max_entries() const override { return m_opt.max_entries; }

  [[nodiscard]] std::string entry_path(const Key& key) const override {
    const std::string hex = key.hex();
    std::string p = m_dir;
    p += '/';
    p.append(hex, 0, 2);
    p += '/';
    p.append(hex, 2, std::string::npos);
    return p;
  }

  // ---------------------------------------------------------- maintenance

  Result<std::vector<FileEntryInfo>> list(const ProgressFn& progress) override {
    PROGCACHE_TRY(check_open());
    std::vector<FileEntryInfo> out;
    for (int idx = 0; idx < k_shards; ++idx) {
      if (progress) progress(idx, k_shards);
      auto files = scan_shard(idx, Reconcile::no);
      if (!files.ok()) return files.status();
      for (auto& f : *files) {
        FileEntryInfo e;
        e.path = join_path(shard_dir(idx), f.name);
        auto key = Key::from_hex(shard_hex(idx) + f.name);
        if (!key.ok()) continue;
        e.key = *key;
        e.size = f.info.size;
        e.last_used_ns = f.info.atime_ns;
        e.created_unix_ns = peek_created(e.path);
        out.push_back(std::move(e));
      }
    }
    if (progress) progress(k_shards, k_shards);
    return out;
  }

  Result<VerifyReport> verify(Repair repair, const ProgressFn& progress) override {
    PROGCACHE_TRY(check_open());
    VerifyReport report;
    const std::int64_t now = m_env->now_ns();
    for (int idx = 0; idx < k_shards; ++idx) {
      if (progress) progress(idx, k_shards);
      const std::string dir = shard_dir(idx);
      auto files = m_env->list_dir(dir);
      if (!files.ok()) {
        const Code code = files.status().code();
        if (code != Code::not_found && code != Code::failed_precondition) return files.status();
        // No shard directory, so nothing is stored here whatever the
        // counters say. Something else in its place (a symlink, a file) is
        // never followed: it is reported, and removed on repair.
        if (auto info = m_env->lstat(dir); info.ok() && !info->is_dir()) {
          VerifyProblem p{dir,
                          info->is_symlink() ? "shard directory is a symlink (never followed)"
                                             : "shard directory is not a directory",
                          false};
          if (repair == Repair::yes) {
            p.removed = m_env->unlink(dir).ok();
            m_shard_ok[idx].store(false, std::memory_order_release);
          }
          report.problems.push_back(std::move(p));
        }
        reconcile_shard(idx, 0, 0);
        continue;
      }
      std::int64_t bytes = 0, count = 0;
      for (const auto& f : *files) {
        const std::string path = join_path(dir, f.name);
        auto info = m_env->lstat(path);
        if (!info.ok()) continue;  // gone meanwhile
        if (std::string_view(f.name).starts_with(k_temp_prefix) ||
            std::string_view(f.name).starts_with(k_quarantine_prefix)) {
          if (stale_temp(*info, now, m_opt.stale_temp_ns) && m_env->unlink(path).ok()) ++report.temps_removed;
          continue;
        }
        ++report.checked;
        std::string reason;
        // Damage is removable; an I/O error is no evidence of damage, so an
        // entry that could not be read is reported but never removed.
        bool removable = true;
        auto key = Key::from_hex(shard_hex(idx) + f.name);
        if (!is_hex_name(f.name, 62) || !key.ok()) {
          reason = "not an entry name";
        } else if (info->is_symlink()) {
          reason = "symlink (never followed)";
        } else if (info->is_dir()) {
          reason = "a directory where an entry belongs";
          removable = false;
        } else if (!info->is_regular()) {
          reason = "not a regular file";  // a FIFO, socket or device: not ours, and a reader must not meet it
        } else {
          auto fd = m_env->open_file(path, OpenMode::read, 0);
          if (!fd.ok()) {
            if (fd.status().code() == Code::not_found) {
              --report.checked;
              continue;
            }
            reason = "could not check: " + fd.status().message();
            removable = false;
          } else {
            auto r = read_entry(*fd, path, *key, /*stamp=*/false);
            m_env->close_file(*fd).ignore();
            if (!r.ok()) {
              reason = "could not check: " + r.status().message();
              removable = false;
            } else if (!r->entry) {
              reason = r->reason;
              removable = r->damaged;
            }
          }
        }
        if (reason.empty()) {
          ++report.ok;
          bytes += static_cast<std::int64_t>(info->size);
          ++count;
          continue;
        }
        VerifyProblem p{path, reason, false};
        if (repair == Repair::yes && removable) {
          auto removed = remove_if_same(idx, path, *info);
          p.removed = removed.ok() && *removed;
        }
        if (!p.removed && info->is_regular()) {
          bytes += static_cast<std::int64_t>(info->size);
          ++count;
        }
        report.problems.push_back(std::move(p));
      }
      reconcile_shard(idx, bytes, count);
    }
    if (progress) progress(k_shards, k_shards);
    return report;
  }

  Result<PruneReport> prune(std::optional<std::uint64_t> max_size, std::optional<std::int64_t> older_than_ns,
                            const ProgressFn& progress) override {
    PROGCACHE_TRY(check_open());
    struct Item {
      int shard;
      ScannedFile file;
    };
    std::vector<Item> items;
    for (int idx = 0; idx < k_shards; ++idx) {
      if (progress) progress(idx, std::uint64_t{2} * k_shards);
      auto files = scan_shard(idx, Reconcile::gross);
      if (!files.ok()) return files.status();
      for (auto& f : *files) items.push_back({idx, std::move(f)});
    }
    const std::int64_t now = m_env->now_ns();
    std::sort(items.begin(), items.end(), [now](const Item& a, const Item& b) {
      return last_used(a.file.info, now) < last_used(b.file.info, now);
    });
    PruneReport report;
    std::uint64_t total = 0;
    for (const auto& it : items) total += it.file.info.size;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (progress && i % 64 == 0)
        progress(k_shards + (std::uint64_t{k_shards} * i) / items.size(), std::uint64_t{2} * k_shards);
      const auto& it = items[i];
      const bool too_old = older_than_ns && now - last_used(it.file.info, now) > *older_than_ns;
      const bool too_big = max_size && total > *max_size;
      if (!too_old && !too_big) continue;
      auto removed = remove_if_same(it.shard, join_path(shard_dir(it.shard), it.file.name), it.file.info);
      if (removed.ok() && *removed) {
        total -= it.file.info.size;
        ++report.removed;
        report.bytes_removed += it.file.info.size;
        charge(it.shard, -static_cast<std::int64_t>(it.file.info.size), -1);
        m_evictions.fetch_add(1);
        atomic_add(m_acct->evictions, 1);
      }
    }
    if (progress) progress(std::uint64_t{2} * k_shards, std::uint64_t{2} * k_shards);
    report.remaining = items.size() - report.removed;
    report.bytes_remaining = total;
    return report;
  }

 private:
  struct ReadResult {
    std::optional<Entry> entry;
    bool damaged = false;
    bool rejected = false;
    std::string reason;
    FileInfo info;
  };

  // Recency is the atime, which progcache stamps itself on hits (see get).
  // A time more than a minute ahead of the clock is no evidence of use (a
  // clock that jumped back, a planted date): such an entry counts as least
  // recently used, so it cannot outlive entries used since.
  static std::int64_t last_used(const FileInfo& i, std::int64_t now) {
    return i.atime_ns > now + k_future_slack_ns ? 0 : i.atime_ns;
  }
  // A temp or quarantine file left by a crash: older than `stale`, or dated
  // in the future (and so of unknown age).
  static bool stale_temp(const FileInfo& i, std::int64_t now, std::int64_t stale) {
    return now - i.mtime_ns > stale || i.mtime_ns > now + k_future_slack_ns;
  }
  // Should a hit re-stamp this entry's atime? Not more often than the
  // granularity; always when the stamp is in the future.
  bool needs_stamp(const FileInfo& i, std::int64_t now) const {
    return now - i.atime_ns > m_opt.recency_granularity_ns || i.atime_ns > now + k_future_slack_ns;
  }

  Status check_open() const {
    if (m_closed.load(std::memory_order_relaxed)) return failed_precondition("file store '" + m_root + "' is closed");
    return {};
  }

  void count_miss() {
    m_misses.fetch_add(1, std::memory_order_relaxed);
    if (m_acct != nullptr) atomic_add(m_acct->misses, 1);
  }
  void count_corrupt() {
    m_corrupt.fetch_add(1, std::memory_order_relaxed);
    if (m_acct != nullptr) atomic_add(m_acct->corrupt, 1);
  }
  void count_rejected() {
    m_rejected.fetch_add(1, std::memory_order_relaxed);
    if (m_acct != nullptr) atomic_add(m_acct->rejected, 1);
  }
  Status count_error(Status st) {
    m_errors.fetch_add(1, std::memory_order_relaxed);
    if (m_acct != nullptr) atomic_add(m_acct->errors, 1);
    return st;
  }

  [[nodiscard]] std::string shard_dir(int idx) const { return join_path(m_dir, shard_hex(idx)); }

  std::string temp_path(int idx) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const std::uint64_t n = m_temp_counter.fetch_add(1, std::memory_order_relaxed);
    // pid + counter are unique within the host at any instant; the random part
    // guards against pid reuse by a process that crashed mid-put.
    return join_path(shard_dir(idx), std::string(k_temp_prefix) + std::to_string(::getpid()) + "." + std::to_string(n) +
                                         "." + std::to_string(rng() & 0xffffffffu));
  }

  // Reads and verifies the entry open at `fd`. Errors are I/O failures;
  // damage is reported in the ReadResult, not as an error.
  Result<ReadResult> read_entry(int fd, const std::string& path, const Key& key, bool stamp) {
    ReadResult r;
    PROGCACHE_ASSIGN_OR_RETURN(r.info, m_env->fstat(fd));
    if (!r.info.is_regular()) {
      r.reason = "not a regular file";
      return r;
    }
    if (r.info.size > k_max_entry_file) {
      r.damaged = true;
      r.reason = "file of " + std::to_string(r.info.size) + " bytes is larger than any entry";
      return r;
    }
    // A file named like an entry may hold anything (a 2 GiB sparse file,
    // say): past 1 MiB, its header and artifact table are judged on its
    // first bytes before the rest is read, so junk costs 4 KiB, not its size.
    // Smaller files are read whole at once, and decode_entry judges them.
    std::string head;
    if (r.info.size > k_read_whole_up_to) {
      head.resize(4096);
      PROGCACHE_ASSIGN_OR_RETURN(std::size_t got, m_env->pread(fd, head.data(), head.size(), 0));
      head.resize(got);
      Status layout = entry_table_end(head).status();
      if (layout.ok()) {
        const std::uint64_t table_end = *entry_table_end(head);
        if (table_end > head.size() && table_end <= r.info.size) {
          head.resize(table_end);
          PROGCACHE_ASSIGN_OR_RETURN(std::size_t more, m_env->pread(fd, head.data() + got, table_end - got, got));
          head.resize(got + more);
        }
        layout = parse_entry_layout(head, r.info.size).status();
      }
      if (!layout.ok()) {
        r.damaged = true;
        r.reason = layout.message();
        return r;
      }
    }
    char* buf = nullptr;
    Bytes data = Bytes::allocate(r.info.size, &buf);
    std::copy(head.begin(), head.end(), buf);
    std::uint64_t done = head.size();
    while (done < r.info.size) {
      PROGCACHE_ASSIGN_OR_RETURN(std::size_t n, m_env->pread(fd, buf + done, r.info.size - done, done));
      if (n == 0) break;
      done += n;
    }
    if (done != r.info.size) {
      r.damaged = true;
      r.reason = "file shrank while being read";
      return r;
    }
    auto decoded = decode_entry(data, key, m_opt.codec);
    if (!decoded.ok()) {
      r.damaged = true;
      r.rejected = decoded.status().code() == Code::permission_denied;
      r.reason = decoded.status().message();
      (void)path;
      return r;
    }
    if (stamp) {
      const std::int64_t now = m_env->now_ns();
      if (needs_stamp(r.info, now)) m_env->set_atime(fd, now).ignore();
    }
    r.entry = std::move(*decoded);
    return r;
  }

  // The streaming read behind get_primary_into. Layout checks mirror
  // decode_entry; `reason` is set when the entry is damaged.
  Result<bool> read_primary_into(int fd, const Key& key, const std::function<char*(std::size_t)>& alloc, FileInfo* info,
                                 std::string* reason) {
    PROGCACHE_ASSIGN_OR_RETURN(*info, m_env->fstat(fd));
    if (!info->is_regular()) return false;
    const std::uint64_t size = info->size;
    auto read_at = [&](char* buf, std::uint64_t n, std::uint64_t off) -> Result<bool> {
      std::uint64_t done = 0;
      while (done < n) {
        PROGCACHE_ASSIGN_OR_RETURN(std::size_t got, m_env->pread(fd, buf + done, n - done, off + done));
        if (got == 0) return false;
        done += got;
      }
      return true;
    };
    auto damaged = [&](std::string why) -> Result<bool> {
      *reason = std::move(why);
      return false;
    };
    if (size < k_entry_fixed_header + k_entry_checksum_size || size > k_max_entry_file) {
      return damaged("bad size");
    }
    std::string head(std::min<std::uint64_t>(size, 4096), '\0');
    PROGCACHE_ASSIGN_OR_RETURN(bool ok, read_at(head.data(), head.size(), 0));
    if (!ok) return damaged("file shrank while being read");
    auto h = peek_entry_header(head);
    if (!h.ok()) return damaged(h.status().message());
    if (h->signed_entry || h->artifact_count == 0) {
      // Unusual entries take the ordinary path.
      auto whole = read_entry(fd, "", key, /*stamp=*/true);
      if (!whole.ok()) return whole.status();
      if (!whole->entry) return damaged(whole->reason.empty() ? "damaged" : whole->reason);
      const Bytes p = whole->entry->primary();
      char* dst = alloc(p.size());
      if (dst == nullptr) return internal_error("allocation for a cache hit failed");
      if (!p.empty()) std::memcpy(dst, p.data(), p.size());
      return true;
    }
    auto table_end = entry_table_end(head);
    if (!table_end.ok()) return damaged(table_end.status().message());
    if (*table_end > head.size() && *table_end <= size) {  // a big table: read it all
      head.resize(*table_end);
      PROGCACHE_ASSIGN_OR_RETURN(ok, read_at(head.data(), *table_end, 0));
      if (!ok) return damaged("file shrank while being read");
    }
    // The same layout checks as decode_entry, from the prefix alone.
    auto layout = parse_entry_layout(head, size);
    if (!layout.ok()) return damaged(layout.status().message());
    const std::uint64_t prefix = layout->artifacts.front().data_offset;
    const std::uint64_t first_len = layout->artifacts.front().data_size;
    if (prefix > head.size()) {
      const std::size_t old = head.size();
      head.resize(prefix);
      PROGCACHE_ASSIGN_OR_RETURN(ok, read_at(head.data() + old, prefix - old, old));
      if (!ok) return damaged("file shrank while being read");
    }
    head.resize(prefix);
    char* dst = alloc(first_len);
    if (dst == nullptr) return internal_error("allocation for a cache hit failed");
    Xxh3Stream sum;
    sum.update(head);
    // Read and hash in chunks that fit in L2, so the checksum reads bytes the
    // copy just brought into cache instead of making a second trip to memory.
    constexpr std::uint64_t k_chunk = std::uint64_t{128} * 1024;
    for (std::uint64_t off = 0; off < first_len; off += k_chunk) {
      const std::uint64_t n = std::min(k_chunk, first_len - off);
      PROGCACHE_ASSIGN_OR_RETURN(ok, read_at(dst + off, n, prefix + off));
      if (!ok) return damaged("file shrank while being read");
      sum.update(std::string_view(dst + off, n));
    }
    std::string tail(size - prefix - first_len, '\0');
    PROGCACHE_ASSIGN_OR_RETURN(ok, read_at(tail.data(), tail.size(), prefix + first_len));
    if (!ok) return damaged("file shrank while being read");
    sum.update(std::string_view(tail).substr(0, tail.size() - k_entry_checksum_size));
    const Digest128 d = sum.finish();
    if (std::memcmp(d.data(), tail.data() + tail.size() - k_entry_checksum_size, d.size()) != 0) {
      return damaged("checksum mismatch");
    }
    if (h->key != key) return damaged("key echo mismatch: entry belongs to key " + h->key.hex());
    if (!nlohmann_accept(std::string_view(head).substr(layout->metadata_offset, layout->metadata_size))) {
      return damaged("metadata is not valid JSON");
    }
    const std::int64_t now = m_env->now_ns();
    if (needs_stamp(*info, now)) m_env->set_atime(fd, now).ignore();
    return true;
  }

  std::int64_t peek_created(const std::string& path) {
    auto fd = m_env->open_file(path, OpenMode::read, 0);
    if (!fd.ok()) return 0;
    char buf[k_entry_fixed_header + k_entry_checksum_size];
    auto n = m_env->pread(*fd, buf, sizeof buf, 0);
    m_env->close_file(*fd).ignore();
    if (!n.ok()) return 0;
    auto h = peek_entry_header(std::string_view(buf, *n));
    return h.ok() ? h->created_unix_ns : 0;
  }

  // Removes `path` only if it is still the file described by `expected`. The
  // file is first moved aside atomically; if what was moved turns out to be a
  // newer file (another process replaced the entry meanwhile) it is moved
  // back, unless an even newer one has appeared, which then wins.
  // Moves whatever is at `path` out under a unique quarantine name (ours
  // alone), measures it, removes it and charges exactly that. false when
  // nothing was there.
  // Moves `path` to the fresh quarantine name `q`: false when nothing was
  // there. The one first step of every removal.
  Result<bool> move_to_quarantine(const std::string& path, const std::string& q) {
    Status st = m_env->rename(path, q);
    if (st.ok()) return true;
    if (st.code() == Code::not_found) return false;
    return st;
  }

  Result<bool> take_out(int idx, const std::string& path) {
    const std::string q = quarantine_path(idx);
    PROGCACHE_ASSIGN_OR_RETURN(const bool there, move_to_quarantine(path, q));
    if (!there) return false;
    auto moved = m_env->lstat(q);
    if (moved.ok() && moved->is_regular()) charge(idx, -static_cast<std::int64_t>(moved->size), -1);
    Status unlinked = m_env->unlink(q);
    // Gone already (a sweep of another process took the quarantine file):
    // removed all the same.
    if (unlinked.code() == Code::not_found) return true;
    if (!unlinked.ok() && moved.ok() && moved->is_regular()) {
      // Could not delete it: put it back, counted again, rather than leave
      // it hidden under a quarantine name.
      if (m_env->rename_noreplace(q, path).ok()) charge(idx, static_cast<std::int64_t>(moved->size), 1);
      return unlinked;
    }
    return true;
  }

  std::string quarantine_path(int idx) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return join_path(shard_dir(idx), std::string(k_quarantine_prefix) + std::to_string(::getpid()) + "." +
                                         std::to_string(m_temp_counter.fetch_add(1)) + "." +
                                         std::to_string(rng() & 0xffffffffu));
  }

  // Removes the entry at `path` if it is still the file `expected`
  // describes. true: it was removed and the caller charges it. A file that
  // left the path and vanished in between (its quarantine name swept by
  // another process) counts as removed: it is gone from the disk.
  Result<bool> remove_if_same(int idx, const std::string& path, const FileInfo& expected) {
    const std::string q = quarantine_path(idx);
    PROGCACHE_ASSIGN_OR_RETURN(const bool there, move_to_quarantine(path, q));
    if (!there) return false;
    auto moved = m_env->lstat(q);
    if (!moved.ok() && moved.status().code() == Code::not_found) {
      // Swept before we could look: it was at the path, so it was counted.
      charge(idx, -static_cast<std::int64_t>(expected.size), -1);
      return false;
    }
    if (moved.ok() && moved->same_file(expected)) {
      Status unlinked = m_env->unlink(q);
      if (unlinked.ok() || unlinked.code() == Code::not_found) return true;
      // Could not delete it: put it back rather than leave it hidden under
      // a quarantine name (unless a newer entry took its place meanwhile).
      if (!m_env->rename_noreplace(q, path).ok()) m_env->unlink(q).ignore();
      return unlinked;
    }
    // Not the file the caller meant (a newer entry took its place): put it
    // back. If yet another entry is there now, this one is removed, and
    // charged, as take_out would; so is one swept meanwhile.
    if (Status back = m_env->rename_noreplace(q, path); !back.ok()) {
      const bool gone = back.code() == Code::not_found || m_env->unlink(q).ok();
      if (moved.ok() && moved->is_regular() && gone) charge(idx, -static_cast<std::int64_t>(moved->size), -1);
    }
    return false;
  }

  void charge(int idx, std::int64_t dbytes, std::int64_t dcount) {
    atomic_add(m_acct->shards[idx].bytes, dbytes);
    atomic_add(m_acct->shards[idx].count, dcount);
  }

  // The totals are the sums of the shard counters, computed when read (256
  // loads): no second copy exists to drift from them, and a damaged shard
  // counter is repaired by the next scan of that shard.
  [[nodiscard]] std::int64_t total_bytes() const {
    std::int64_t sum = 0;
    for (auto& s : m_acct->shards) sum += std::max<std::int64_t>(0, atomic_load(s.bytes));
    return sum;
  }
  [[nodiscard]] std::int64_t total_count() const {
    std::int64_t sum = 0;
    for (auto& s : m_acct->shards) sum += std::max<std::int64_t>(0, atomic_load(s.count));
    return sum;
  }

  // Sets shard idx's counters to the truth found by a scan.
  void reconcile_shard(int idx, std::int64_t bytes, std::int64_t count) {
    atomic_exchange(m_acct->shards[idx].bytes, bytes);
    atomic_exchange(m_acct->shards[idx].count, count);
  }

  // When a scan resets a shard's counters to what it found.
  enum class Reconcile {
    no,
    // Only when they are far off (damaged, or drifted by crashes): a scan
    // racing puts and removals in the same shard would otherwise trade
    // exact counters for a listing that missed an operation.
    gross,
    yes,
  };

  // A counter slightly below zero is not damage: a remover can charge an
  // entry before the put that published it has charged it (the put charges
  // after its rename). Resetting such a shard to a listing would then let
  // the late charge count a file that is gone.
  static bool grossly_off(std::int64_t counted_bytes, std::int64_t counted, std::int64_t bytes, std::int64_t count) {
    return std::abs(counted - count) > 8 + count / 4 ||
           std::abs(counted_bytes - bytes) > bytes / 4 + (std::int64_t{4} << 20);
  }

  // Lists shard idx's entry files (lstat'ed), sweeping stale temps on the
  // way, and reconciles the shard's counters as `reconcile` says.
  // `sweep`: also remove stale temp and quarantine files on the way.
  Result<std::vector<ScannedFile>> scan_shard(int idx, Reconcile reconcile, bool sweep = true) {
    std::vector<ScannedFile> out;
    const std::string dir = shard_dir(idx);
    auto files = m_env->list_dir(dir);
    if (!files.ok()) {
      if (files.status().code() == Code::not_found) {
        if (m_acct != nullptr &&
            (reconcile == Reconcile::yes ||
             (reconcile == Reconcile::gross &&
              grossly_off(atomic_load(m_acct->shards[idx].bytes), atomic_load(m_acct->shards[idx].count), 0, 0)))) {
          reconcile_shard(idx, 0, 0);
        }
        return out;
      }
      return files.status();
    }
    const std::int64_t now = m_env->now_ns();
    std::int64_t bytes = 0;
    for (auto& f : *files) {
      const std::string path = join_path(dir, f.name);
      const bool temp = std::string_view(f.name).starts_with(k_temp_prefix) ||
                        std::string_view(f.name).starts_with(k_quarantine_prefix);
      if (!temp && !is_hex_name(f.name, 62)) continue;
      auto info = m_env->lstat(path);
      if (!info.ok() || !info->is_regular()) continue;
      if (temp) {
        if (sweep && stale_temp(*info, now, m_opt.stale_temp_ns)) m_env->unlink(path).ignore();
        continue;
      }
      bytes += static_cast<std::int64_t>(info->size);
      out.push_back({std::move(f.name), *info});
    }
    const auto count = static_cast<std::int64_t>(out.size());
    if (m_acct != nullptr &&
        (reconcile == Reconcile::yes ||
         (reconcile == Reconcile::gross &&
          grossly_off(atomic_load(m_acct->shards[idx].bytes), atomic_load(m_acct->shards[idx].count), bytes, count)))) {
      reconcile_shard(idx, bytes, count);
    }
    return out;
  }

  [[nodiscard]] bool over(double fraction) const {
    if (m_opt.max_size_bytes &&
        static_cast<double>(total_bytes()) > fraction * static_cast<double>(*m_opt.max_size_bytes)) {
      return true;
    }
    return m_opt.max_entries && static_cast<double>(total_count()) > fraction * static_cast<double>(*m_opt.max_entries);
  }

  struct Written {
    int shard = -1;
    std::string name;  // file name within the shard
  };

  void maybe_trim(const Written& written) {
    // The re-check after unlocking closes a race: a put that found the lock
    // held just before the holder finished would otherwise leave the store
    // over its cap until the next put.
    while (over(1.0)) {
      // flock is per open file description, so threads of this process are
      // excluded by a mutex and processes by the flock.
      std::unique_lock local(m_trim_mu, std::try_to_lock);
      if (!local.owns_lock()) return;
      auto got = m_env->lock(m_evict_fd, LockKind::exclusive, LockWait::try_only);
      if (!got.ok() || !*got) return;  // another process is trimming
      trim_to_low_water(written);
      m_env->unlock(m_evict_fd).ignore();
      if (!m_trim_progress) return;  // nothing removable (e.g. files of another user)
    }
  }

  // Requires the eviction lock. Removes least recently used entries until
  // the totals are under the low-water mark, never `written`. Small stores:
  // every shard scanned, exact LRU order. Large stores: shards visited
  // fullest first, in each the least recently used (at most half the shard
  // per visit); work per put stays constant as the store grows: a scan of S
  // files removes up to S/2 of them.
  void trim_to_low_water(const Written& written) {
    m_trim_progress = false;
    const auto evict = [&](int shard, const ScannedFile& f) {
      if (shard == written.shard && f.name == written.name) return;
      auto removed = remove_if_same(shard, join_path(shard_dir(shard), f.name), f.info);
      if (removed.ok() && *removed) {
        m_trim_progress = true;
        charge(shard, -static_cast<std::int64_t>(f.info.size), -1);
        m_evictions.fetch_add(1, std::memory_order_relaxed);
        atomic_add(m_acct->evictions, 1);
      }
    };
    const std::int64_t now = m_env->now_ns();
    const auto older = [now](const ScannedFile& a, const ScannedFile& b) {
      return last_used(a.info, now) < last_used(b.info, now);
    };
    if (total_count() <= k_exact_lru_entries) {
      std::vector<std::pair<int, ScannedFile>> all;
      for (int idx = 0; idx < k_shards; ++idx) {
        // Counts are exact: a shard counted empty holds nothing (a damaged
        // counter is not zero, so its shard is visited and healed).
        if (atomic_load(m_acct->shards[idx].count) == 0 && atomic_load(m_acct->shards[idx].bytes) == 0) continue;
        // Temps are left to the per-shard scans, as often as before.
        auto files = scan_shard(idx, Reconcile::gross, /*sweep=*/false);
        if (!files.ok()) continue;
        for (auto& f : *files) all.emplace_back(idx, std::move(f));
      }
      std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return older(a.second, b.second); });
      for (std::size_t i = 0; i < all.size() && over(k_low_water); ++i) evict(all[i].first, all[i].second);
      return;
    }
    const bool by_count = m_opt.max_entries.has_value() && (!m_opt.max_size_bytes || over_entries_more());
    std::array<bool, k_shards> visited{};
    for (int round = 0; round < k_shards && over(k_low_water); ++round) {
      int best = -1;
      std::int64_t best_v = 0;
      for (int i = 0; i < k_shards; ++i) {
        if (visited[i]) continue;
        const std::int64_t v = by_count ? atomic_load(m_acct->shards[i].count) : atomic_load(m_acct->shards[i].bytes);
        if (best < 0 || v > best_v) {
          best = i;
          best_v = v;
        }
      }
      if (best < 0) break;
      visited[best] = true;
      auto files = scan_shard(best, Reconcile::gross);
      if (!files.ok() || files->empty()) continue;
      std::sort(files->begin(), files->end(), older);
      const std::size_t limit = std::max<std::size_t>(1, files->size() / 2);
      for (std::size_t i = 0; i < limit && over(k_low_water); ++i) evict(best, (*files)[i]);
    }
  }

  [[nodiscard]] bool over_entries_more() const {
    const double b = static_cast<double>(total_bytes()) / static_cast<double>(*m_opt.max_size_bytes);
    const double c = static_cast<double>(total_count()) / static_cast<double>(*m_opt.max_entries);
    return c > b;
  }

  // A shard directory is used only once it is known to be a real directory
  // owned by this user (never a symlink). The answer is cached per process.
  bool shard_checked(int idx, bool create) {
    if (m_shard_ok[idx].load(std::memory_order_acquire)) return true;
    const std::string dir = shard_dir(idx);
    auto info = m_env->lstat(dir);
    if (!info.ok()) {
      if (!create || info.status().code() != Code::not_found) return false;
      if (!ensure_dir(dir).ok()) return false;
      info = m_env->lstat(dir);
      if (!info.ok()) return false;
    }
    if (!dir_acceptable(*info)) return false;
    m_shard_ok[idx].store(true, std::memory_order_release);
    return true;
  }

  // Makes the root, the version directory and shard `idx` again after they
  // were removed under an open store. false when any is unacceptable.
  bool recreate_dirs(int idx) {
    m_shard_ok[idx].store(false, std::memory_order_release);
    if (!check_root().ok() || !ensure_dir(m_dir).ok()) return false;
    return shard_checked(idx, /*create=*/true);
  }

  [[nodiscard]] bool dir_acceptable(const FileInfo& info) const {
    if (info.is_symlink() || !info.is_dir()) return false;
    if (m_opt.sharing == Sharing::private_only) {
      return info.uid == ::geteuid() && (info.mode & 022) == 0;
    }
    return (info.mode & 002) == 0;
  }

  // Creates `dir` (one level) with the store's permissions, or checks the
  // existing one.
  Status ensure_dir(const std::string& dir) {
    Status st = m_env->mkdir(dir, m_dir_perms);
    if (st.ok()) {
      if (m_opt.sharing == Sharing::group) PROGCACHE_TRY(m_env->chmod(dir, m_dir_perms));
    } else if (st.code() != Code::failed_precondition) {
      return st;
    }
    PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->lstat(dir));
    if (!dir_acceptable(info)) {
      return permission_denied("'" + dir + "' is a symlink, not a directory, or not private to this user; refusing it");
    }
    return {};
  }

  Status check_root() {
    // Create missing components, private by default (XDG asks 0700 for caches).
    std::filesystem::path p(m_root);
    std::filesystem::path acc;
    for (const auto& part : p) {
      acc /= part;
      if (acc == acc.root_path()) continue;
      Status st = m_env->mkdir(acc.string(), m_dir_perms);
      if (!st.ok() && st.code() != Code::failed_precondition) return st.with_context("creating cache root");
      if (st.ok() && m_opt.sharing == Sharing::group && acc == p)
        PROGCACHE_TRY(m_env->chmod(acc.string(), m_dir_perms));
    }
    // The root itself may be a symlink the user chose; judge its target.
    PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->stat(m_root));
    if (!info.is_dir()) return failed_precondition("cache root '" + m_root + "' is not a directory");
    if (m_opt.sharing == Sharing::private_only) {
      if (info.uid != ::geteuid()) {
        return permission_denied("cache root '" + m_root + "' is owned by uid " + std::to_string(info.uid) +
                                 ", not by you (uid " + std::to_string(::geteuid()) +
                                 "): someone else could plant programs there. Use a directory you own "
                                 "(PROGCACHE_DIR) or configure group sharing explicitly");
      }
      if ((info.mode & 022) != 0) {
        return permission_denied("cache root '" + m_root +
                                 "' is writable by group or others: anyone could plant programs there. "
                                 "Run 'chmod 700' on it, or configure group sharing explicitly");
      }
    } else if ((info.mode & 002) != 0) {
      return permission_denied("cache root '" + m_root + "' is writable by others; refusing it even in group mode");
    }
    return check_ancestors();
  }

  // Whoever can rename the cache root, or any directory above it, can move
  // it aside under a running process and put a tree of their own in its
  // place. So, as OpenSSH's StrictModes does, every directory on the way to
  // the root (as written and as resolved through symlinks) must be owned by
  // root or by this user, and writable by nobody else unless it is sticky
  // (as /tmp is: only an entry's owner may rename it there). Group mode
  // trusts the group: it checks only that no ancestor is open to others.
  Status check_ancestors() {
    const std::uint32_t me = ::geteuid();
    auto judge = [&](const std::filesystem::path& dir) -> Status {
      PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->stat(dir.string()));
      const bool sticky = (info.mode & S_ISVTX) != 0;
      const std::uint32_t foreign_write = m_opt.sharing == Sharing::private_only ? 022 : 002;
      if ((info.mode & foreign_write) != 0 && !sticky) {
        return permission_denied("'" + dir.string() + "', above the cache root '" + m_root + "', is writable by " +
                                 (m_opt.sharing == Sharing::private_only ? "group or " : "") +
                                 "others (and not sticky): they could move the root aside and plant programs. "
                                 "Use a cache directory under one only you (or root) can write");
      }
      if (m_opt.sharing == Sharing::private_only && info.uid != 0 && info.uid != me) {
        return permission_denied("'" + dir.string() + "', above the cache root '" + m_root + "', is owned by uid " +
                                 std::to_string(info.uid) +
                                 ": its owner could move the root aside and plant programs. Use a cache "
                                 "directory under one only you (or root) own");
      }
      return {};
    };
    std::error_code ec;
    const std::filesystem::path written = std::filesystem::absolute(m_root, ec).lexically_normal();
    const std::filesystem::path resolved = std::filesystem::canonical(m_root, ec);
    for (const auto& chain : {written, ec ? written : resolved}) {
      for (auto d = chain.parent_path(); !d.empty(); d = d.parent_path()) {
        PROGCACHE_TRY(judge(d));
        if (d == d.root_path()) break;
      }
    }
    return {};
  }

  Status open_accounting() {
    const std::string path = join_path(m_dir, "accounting");
    PROGCACHE_ASSIGN_OR_RETURN(m_acct_fd, m_env->open_file(path, OpenMode::read_write, m_file_perms));
    PROGCACHE_ASSIGN_OR_RETURN(m_evict_fd,
                               m_env->open_file(join_path(m_dir, "evict.lock"), OpenMode::read_write, m_file_perms));
    PROGCACHE_ASSIGN_OR_RETURN(bool locked, m_env->lock(m_acct_fd, LockKind::exclusive, LockWait::block));
    (void)locked;
    Status st = init_accounting_locked();
    m_env->unlock(m_acct_fd).ignore();
    return st;
  }

  Status init_accounting_locked() {
    PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->fstat(m_acct_fd));
    if (info.size < k_acct_size) PROGCACHE_TRY(m_env->ftruncate(m_acct_fd, k_acct_size));
    // The counters are written through the mapping: every page must have
    // its disk blocks before the first store, or a full disk is SIGBUS.
    // Done on every open (free when the blocks exist): a file left sparse
    // by a crash or an older version is filled in too.
    if (Status st = m_env->allocate(m_acct_fd, k_acct_size); !st.ok()) {
      return Status(st.code(), "cannot reserve disk space for the accounting file of '" + m_root +
                                   "' (is the disk full?): " + st.message());
    }
    PROGCACHE_ASSIGN_OR_RETURN(void* p, m_env->map_shared(m_acct_fd, k_acct_size));
    m_acct = static_cast<Accounting*>(p);
    // A file shorter than the layout was truncated (or is new): whatever
    // its first words say, the counters past the cut are zeros, not truth.
    const bool truncated = info.size < k_acct_size;
    if (!truncated && atomic_load(m_acct->magic) == static_cast<std::int64_t>(k_acct_magic) &&
        atomic_load(m_acct->version) == static_cast<std::int64_t>(k_acct_version)) {
      return {};
    }
    // New or damaged: rebuild from the files, then publish the magic last so
    // a crash part-way leaves the next opener to rebuild again.
    std::memset(static_cast<void*>(m_acct), 0, sizeof(Accounting));
    for (int idx = 0; idx < k_shards; ++idx) PROGCACHE_TRY(scan_shard(idx, Reconcile::yes).status());
    atomic_exchange(m_acct->version, static_cast<std::int64_t>(k_acct_version));
    atomic_exchange(m_acct->magic, static_cast<std::int64_t>(k_acct_magic));
    return {};
  }

  FileStoreOptions m_opt;
  std::string m_root;
  std::string m_dir;
  Env* m_env;
  std::uint32_t m_dir_perms;
  std::uint32_t m_file_perms;
  std::array<std::atomic<bool>, k_shards> m_shard_ok;
  int m_acct_fd = -1;
  int m_evict_fd = -1;
  Accounting* m_acct = nullptr;  // mapped; nullptr once closed
  std::mutex m_trim_mu;
  bool m_trim_progress = false;  // GUARDED_BY(m_trim_mu and the eviction flock)
  std::mutex m_close_mu;
  std::atomic<bool> m_closed{false};
  std::atomic<std::uint64_t> m_temp_counter{0};
  std::atomic<std::uint64_t> m_hits{0}, m_misses{0}, m_puts{0}, m_evictions{0}, m_corrupt{0}, m_rejected{0},
      m_errors{0};
};

}  // namespace

std::string default_cache_root(std::string* source) {
  auto set = [&](const char* s) {
    if (source != nullptr) *source = s;
  };
  if (const char* d = std::getenv("PROGCACHE_DIR"); d != nullptr && *d != '\0') {
    set("PROGCACHE_DIR");
    return d;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    set("XDG_CACHE_HOME");
    return join_path(x, "progcache");
  }
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    if (const struct passwd* pw = ::getpwuid(::geteuid()); pw != nullptr) home = pw->pw_dir;
  }
  set("HOME");
  return join_path(join_path(home != nullptr ? home : "/tmp", ".cache"), "progcache");
}

Result<std::unique_ptr<FileStore>> FileStore::open(FileStoreOptions options) {
  std::string root = options.root.empty() ? default_cache_root() : options.root;
  std::error_code ec;
  auto abs = std::filesystem::absolute(root, ec);
  if (!ec) root = abs.lexically_normal().string();
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  if (options.max_size_bytes && *options.max_size_bytes == 0) {
    return invalid_argument("file store max_size_bytes must be positive (or unbounded)");
  }
  if (options.max_entries && *options.max_entries == 0) {
    return invalid_argument("file store max_entries must be positive (or unbounded)");
  }
  auto store = std::make_unique<FileStoreImpl>(std::move(options), root);
  Status st = store->init();
  if (!st.ok()) return st;
  return std::unique_ptr<FileStore>(std::move(store));
}

}  // namespace progcache
