// Maintenance: shard scans (which sweep stale temps and reconcile the
// counters), and the list, verify and prune commands built on them.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "store/file/file_store_impl.h"

namespace progcache::file_store {

namespace {
// How far ahead of the clock a file time may be before it is distrusted.
constexpr std::int64_t k_future_slack_ns = std::int64_t{60} * 1000000000;
}  // namespace

// A temp or quarantine file left by a crash: older than `stale`, or dated in
// the future (and so of unknown age).
bool FileStoreImpl::stale_transient(const FileInfo& info, std::int64_t now, std::int64_t stale) {
  return now - info.mtime_ns > stale || info.mtime_ns > now + k_future_slack_ns;
}

bool FileStoreImpl::remove_if_writer_gone(const std::string& path, std::uint64_t* size) {
  // A process of that pid still running (in this pid namespace) may be the
  // writer: its temp is left alone, even where the lock is free, as it is
  // for an instant after the create, and when a replacing put's exchange
  // has just put the displaced entry under the temp's name. (A pid reused
  // meanwhile only delays the sweep to the age rule.)
  if (const long pid = Layout::temp_writer_pid(path.substr(path.find_last_of('/') + 1));
      pid != 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) {
    return false;
  }
  auto fd = m_env->open_file(path, OpenMode::read, 0);
  if (!fd.ok()) return false;
  bool removed = false;
  // No lock (a filesystem without flock): no evidence either way; age decides.
  auto got = m_env->lock(*fd, LockKind::exclusive, LockWait::try_only);
  if (got.ok() && *got) {
    // Still the temp under that name? A writer that renamed it into place
    // and closed it just now left this descriptor on its entry.
    auto mine = m_env->fstat(*fd);
    auto there = m_env->lstat(path);
    if (mine.ok() && there.ok() && there->same_file(*mine) && m_env->unlink(path).ok()) {
      removed = true;
      *size = mine->size;
    }
  }
  m_env->close_file(*fd).ignore();
  return removed;
}

bool FileStoreImpl::sweep_transient(int shard, const std::string& name, const FileInfo& info, std::int64_t now) {
  const std::string path = join_path(m_layout.shard_dir(shard), name);
  const bool charged = Layout::is_locked_temp(name);
  std::uint64_t size = info.size;
  bool removed = false;
  if (stale_transient(info, now, m_opt.stale_temp_ns)) {
    removed = m_env->unlink(path).ok();
  } else if (charged) {
    removed = remove_if_writer_gone(path, &size);
  }
  if (removed && charged) m_acct.charge(shard, -static_cast<std::int64_t>(size), 0);
  return removed;
}

// Lists a shard's entry files (lstat'ed) and reconciles the shard's counters
// as `reconcile` says. `sweep`: also remove temps whose writers are gone and
// stale temp and quarantine files. The counters hold the temps of live
// writers too (each charged its size before writing), so a reconcile counts
// them.
Result<std::vector<ScannedFile>> FileStoreImpl::scan_shard(int shard, Reconcile reconcile, bool sweep) {
  std::vector<ScannedFile> out;
  const std::string dir = m_layout.shard_dir(shard);
  std::int64_t bytes = 0;
  auto files = m_env->list_dir(dir);
  if (!files.ok() && files.status().code() != Code::not_found) return files.status();
  if (files.ok()) {
    const std::int64_t now = m_env->now_ns();
    for (auto& f : *files) {
      const NameKind kind = Layout::classify(f.name);
      if (kind == NameKind::other) continue;
      const std::string path = join_path(dir, f.name);
      auto info = m_env->lstat(path);
      if (!info.ok() || !info->is_regular()) continue;
      if (kind == NameKind::transient) {
        if (sweep && sweep_transient(shard, f.name, *info, now)) continue;
        if (Layout::is_locked_temp(f.name)) bytes += static_cast<std::int64_t>(info->size);
        continue;
      }
      bytes += static_cast<std::int64_t>(info->size);
      out.push_back({std::move(f.name), *info});
    }
  }
  const auto count = static_cast<std::int64_t>(out.size());
  if (reconcile == Reconcile::yes || (reconcile == Reconcile::gross && m_acct.grossly_off(shard, bytes, count))) {
    m_acct.reconcile(shard, bytes, count);
  }
  return out;
}

void FileStoreImpl::peek_entry(FileEntryInfo& e) {
  auto fd = m_env->open_file(e.path, OpenMode::read, 0);
  if (!fd.ok()) return;
  // One read holds the header, the table and the metadata of nearly every
  // entry; a larger table or metadata is read as far as its stated size,
  // bounded so that a damaged length cannot make a listing allocate much.
  constexpr std::size_t k_first_read = 4096;
  constexpr std::uint64_t k_max_metadata = std::uint64_t{1} << 20;
  std::string buf(k_first_read, '\0');
  auto read = [&](std::uint64_t offset, std::size_t n) -> bool {
    if (buf.size() < n) buf.resize(n);
    auto got = m_env->pread(*fd, buf.data(), n, offset);
    if (!got.ok()) return false;
    buf.resize(*got);
    return true;
  };
  [&] {
    if (!read(0, k_first_read)) return;
    auto header = peek_entry_header(buf);
    if (!header.ok()) return;
    e.created_unix_ns = header->created_unix_ns;
    auto table_end = entry_table_end(buf);
    if (!table_end.ok() || (*table_end > buf.size() && !read(0, *table_end))) return;
    auto layout = parse_entry_layout(buf, e.size);
    if (!layout.ok() || layout->metadata_size > k_max_metadata) return;
    std::string_view meta;
    if (layout->metadata_offset + layout->metadata_size <= buf.size()) {
      meta = std::string_view(buf).substr(layout->metadata_offset, layout->metadata_size);
    } else if (read(layout->metadata_offset, layout->metadata_size)) {
      meta = buf;
    }
    const auto j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return;
    auto field = [&j](const char* name) {
      auto it = j.find(name);
      return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    e.name = field("name");
    e.kind = field("kind");
    // pyptx's CubinCache names its entries by function and architecture.
    if (e.name.empty() && !field("fn_id").empty()) {
      e.name = field("fn_id") + (field("arch").empty() ? "" : " (" + field("arch") + ")");
      if (e.kind.empty()) e.kind = "pyptx-cubin";
    }
  }();
  m_env->close_file(*fd).ignore();
}

Result<std::vector<FileEntryInfo>> FileStoreImpl::list(const ProgressFn& progress) {
  PROGCACHE_TRY(check_open());
  std::vector<FileEntryInfo> out;
  for (int shard = 0; shard < k_shards; ++shard) {
    if (progress) progress(shard, k_shards);
    auto files = scan_shard(shard, Reconcile::no);
    if (!files.ok()) return files.status();
    for (auto& f : *files) {
      auto key = Layout::key_of(shard, f.name);
      if (!key.ok()) continue;
      FileEntryInfo e;
      e.path = join_path(m_layout.shard_dir(shard), f.name);
      e.key = *key;
      e.size = f.info.size;
      e.last_used_ns = std::max(f.info.atime_ns, m_recency.last_read(*key));
      peek_entry(e);
      out.push_back(std::move(e));
    }
  }
  if (progress) progress(k_shards, k_shards);
  return out;
}

Result<VerifyReport> FileStoreImpl::verify(Repair repair, const ProgressFn& progress) {
  PROGCACHE_TRY(check_open());
  VerifyReport report;
  const std::int64_t now = m_env->now_ns();
  // Progress in bytes: those of the shards read (their counters set to what
  // the scan found) and, still to read, what the others' counters say.
  std::uint64_t done = 0;
  const auto left_from = [&](int first) {
    std::uint64_t left = 0;
    for (int s = first; s < k_shards; ++s)
      left += static_cast<std::uint64_t>(std::max<std::int64_t>(m_acct.shard_bytes(s), 0));
    return left;
  };
  for (int shard = 0; shard < k_shards; ++shard) {
    // Never done == total before the end: that call ends the progress line.
    if (progress) progress(done, done + std::max<std::uint64_t>(left_from(shard), 1));
    const std::string dir = m_layout.shard_dir(shard);
    auto files = m_env->list_dir(dir);
    if (files.ok()) {
      verify_shard(shard, *files, repair, now, report);
      done += static_cast<std::uint64_t>(std::max<std::int64_t>(m_acct.shard_bytes(shard), 0));
      continue;
    }
    const Code code = files.status().code();
    if (code != Code::not_found && code != Code::failed_precondition) return files.status();
    // No shard directory, so nothing is stored here whatever the counters
    // say. Something else in its place (a symlink, a file) is never
    // followed: it is reported, and removed on repair.
    if (auto info = m_env->lstat(dir); info.ok() && !info->is_dir()) {
      VerifyProblem p{
          dir,
          info->is_symlink() ? "shard directory is a symlink (never followed)" : "shard directory is not a directory",
          false};
      if (repair == Repair::yes) {
        p.removed = m_env->unlink(dir).ok();
        m_shard_ok[shard].store(false, std::memory_order_release);
      }
      report.problems.push_back(std::move(p));
    }
    m_acct.reconcile(shard, 0, 0);
  }
  if (progress) progress(std::max<std::uint64_t>(done, 1), std::max<std::uint64_t>(done, 1));
  return report;
}

void FileStoreImpl::verify_shard(int shard, const std::vector<DirEntry>& files, Repair repair, std::int64_t now,
                                 VerifyReport& report) {
  const std::string dir = m_layout.shard_dir(shard);
  std::int64_t bytes = 0, count = 0;
  for (const auto& f : files) {
    const std::string path = join_path(dir, f.name);
    auto info = m_env->lstat(path);
    if (!info.ok()) continue;  // gone meanwhile
    if (Layout::classify(f.name) == NameKind::transient) {
      if (info->is_regular() && sweep_transient(shard, f.name, *info, now)) {
        ++report.temps_removed;
      } else if (info->is_regular() && Layout::is_locked_temp(f.name)) {
        bytes += static_cast<std::int64_t>(info->size);  // a live writer's, charged by it
      }
      continue;
    }
    ++report.checked;
    std::string reason;
    // Damage is removable; an I/O error is no evidence of damage, so an entry
    // that could not be read is reported but never removed.
    bool removable = true;
    auto key = Layout::key_of(shard, f.name);
    if (!key.ok()) {
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
        auto r = read_entry(*fd, *key, /*stamp=*/false);
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
      auto removed = remove_if_same(shard, path, *info);
      p.removed = removed.ok() && *removed;
    }
    if (!p.removed && info->is_regular()) {
      bytes += static_cast<std::int64_t>(info->size);
      ++count;
    }
    report.problems.push_back(std::move(p));
  }
  m_acct.reconcile(shard, bytes, count);
}

// Under a cap per root, prunes every store of the root together: the least
// recently used entries of all of them go first.
Result<PruneReport> FileStoreImpl::prune(std::optional<std::uint64_t> max_size,
                                         std::optional<std::int64_t> older_than_ns, const ProgressFn& progress) {
  PROGCACHE_TRY(check_open());
  refresh_peers(true);
  const std::vector<std::shared_ptr<FileStoreImpl>> held = peers();  // alive for this prune
  std::vector<FileStoreImpl*> stores{this};
  for (const auto& p : held) stores.push_back(p.get());
  struct Item {
    FileStoreImpl* store;
    int shard;
    ScannedFile file;
    std::int64_t used;
  };
  std::vector<Item> items;
  const std::uint64_t scan_steps = std::uint64_t{k_shards} * stores.size();
  const std::int64_t now = m_env->now_ns();
  for (std::size_t s = 0; s < stores.size(); ++s) {
    for (int shard = 0; shard < k_shards; ++shard) {
      if (progress) progress(s * k_shards + shard, 2 * scan_steps);
      auto files = stores[s]->scan_shard(shard, Reconcile::gross);
      if (!files.ok()) return files.status();
      for (auto& f : *files) {
        const std::int64_t used = stores[s]->last_used(shard, f.name, f.info, now);
        items.push_back({stores[s], shard, std::move(f), used});
      }
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.used < b.used; });
  PruneReport report;
  report.stores = stores.size();
  std::uint64_t total = 0;
  for (const auto& it : items) total += it.file.info.size;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (progress && i % 64 == 0) progress(scan_steps + (scan_steps * i) / items.size(), 2 * scan_steps);
    const auto& it = items[i];
    const bool too_old = older_than_ns && now - it.used > *older_than_ns;
    const bool too_big = max_size && total > *max_size;
    if (!too_old && !too_big) continue;
    auto removed = it.store->remove_if_same(it.shard, join_path(it.store->m_layout.shard_dir(it.shard), it.file.name),
                                            it.file.info);
    if (removed.ok() && *removed) {
      total -= it.file.info.size;
      ++report.removed;
      report.bytes_removed += it.file.info.size;
      it.store->count_eviction(it.shard, it.file.name, it.file.info);
    }
  }
  if (progress) progress(2 * scan_steps, 2 * scan_steps);
  report.remaining = items.size() - report.removed;
  report.bytes_remaining = total;
  return report;
}

}  // namespace progcache::file_store
