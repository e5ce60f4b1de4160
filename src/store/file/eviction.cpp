// Eviction: removing an entry only while it is still the file the caller
// meant (by inode), and keeping the store under its caps by trimming least
// recently used entries.
#include <algorithm>

#include "store/file/file_store_impl.h"

namespace progcache::file_store {

namespace {

// How far ahead of the clock a file time may be before it is distrusted.
constexpr std::int64_t k_future_slack_ns = std::int64_t{60} * 1000000000;
// Trimming goes below the cap by this fraction so one scan pays for many puts.
constexpr double k_low_water = 0.9;
// Up to this many entries a trim scans every shard and removes in exact
// least-recently-used order (a few thousand stats, once per tenth of the cap
// written). Above it each trim visits the fullest shards and removes the
// older half of each: constant work per put, LRU within a shard, and across
// shards as close to LRU as the keys are uniform (they are digests).
constexpr std::int64_t k_exact_lru_entries = 4096;
// How often a store with a cap per root looks for stores of its root that
// appeared since (a companion made by another program).
constexpr std::int64_t k_peer_recheck_ns = 1'000'000'000;

// Moves `path` to the fresh quarantine name `q`: false when nothing was
// there. The one first step of every removal, so a removal is atomic and a
// reader never meets half of one.
Result<bool> move_to_quarantine(Env* env, const std::string& path, const std::string& q) {
  Status st = env->rename(path, q);
  if (st.ok()) return true;
  if (st.code() == Code::not_found) return false;
  return st;
}

}  // namespace

// Recency is the later of the atime (stamped on hits once a minute) and the
// read the table records (recency.h). A time more than a minute ahead of the
// clock is no evidence of use (a clock that jumped back, a planted date):
// such an entry counts as least recently used, so it cannot outlive entries
// used since.
std::int64_t FileStoreImpl::last_used(int shard, const std::string& name, const FileInfo& info,
                                      std::int64_t now) const {
  const auto trusted = [now](std::int64_t t) { return t > now + k_future_slack_ns ? 0 : t; };
  std::int64_t read = 0;
  if (auto key = Layout::key_of(shard, name); key.ok()) read = m_recency.last_read(*key);
  return std::max(trusted(info.atime_ns), trusted(read));
}

// Moves whatever is at `path` out under a unique quarantine name (ours
// alone), measures it, removes it and charges exactly that. false when
// nothing was there.
Result<bool> FileStoreImpl::take_out(int shard, const std::string& path) {
  const std::string q = m_layout.quarantine_path(shard);
  PROGCACHE_ASSIGN_OR_RETURN(const bool there, move_to_quarantine(m_env, path, q));
  if (!there) return false;
  auto moved = m_env->lstat(q);
  if (moved.ok() && moved->is_regular()) m_acct.charge(shard, -static_cast<std::int64_t>(moved->size), -1);
  Status unlinked = m_env->unlink(q);
  // Gone already (a sweep of another process took the quarantine file):
  // removed all the same.
  if (unlinked.code() == Code::not_found) return true;
  if (!unlinked.ok() && moved.ok() && moved->is_regular()) {
    // Could not delete it: put it back, counted again, rather than leave
    // it hidden under a quarantine name.
    if (m_env->rename_noreplace(q, path).ok()) m_acct.charge(shard, static_cast<std::int64_t>(moved->size), 1);
    return unlinked;
  }
  return true;
}

// Removes the entry at `path` if it is still the file `expected` describes.
// true: it was removed and the caller charges it. A file that left the path
// and vanished in between (its quarantine name swept by another process)
// counts as removed: it is gone from the disk.
Result<bool> FileStoreImpl::remove_if_same(int shard, const std::string& path, const FileInfo& expected) {
  const std::string q = m_layout.quarantine_path(shard);
  PROGCACHE_ASSIGN_OR_RETURN(const bool there, move_to_quarantine(m_env, path, q));
  if (!there) return false;
  auto moved = m_env->lstat(q);
  if (!moved.ok() && moved.status().code() == Code::not_found) {
    // Swept before we could look: it was at the path, so it was counted.
    m_acct.charge(shard, -static_cast<std::int64_t>(expected.size), -1);
    return false;
  }
  if (moved.ok() && moved->same_file(expected)) {
    Status unlinked = m_env->unlink(q);
    if (unlinked.ok() || unlinked.code() == Code::not_found) return true;
    // Could not delete it: put it back rather than leave it hidden under a
    // quarantine name (unless a newer entry took its place meanwhile).
    if (!m_env->rename_noreplace(q, path).ok()) m_env->unlink(q).ignore();
    return unlinked;
  }
  // Not the file the caller meant (a newer entry took its place): put it
  // back. If yet another entry is there now, this one is removed, and
  // charged, as take_out would; so is one swept meanwhile.
  if (Status back = m_env->rename_noreplace(q, path); !back.ok()) {
    const bool gone = back.code() == Code::not_found || m_env->unlink(q).ok();
    if (moved.ok() && moved->is_regular() && gone) m_acct.charge(shard, -static_cast<std::int64_t>(moved->size), -1);
  }
  return false;
}

void FileStoreImpl::count_eviction(int shard, const std::string& name, const FileInfo& removed) {
  m_acct.charge(shard, -static_cast<std::int64_t>(removed.size), -1);
  m_acct.count(Event::eviction);
  if (auto key = Layout::key_of(shard, name); key.ok()) m_recency.forget(*key);
}

FileStoreImpl::Totals FileStoreImpl::totals() const {
  Totals t{m_acct.total_bytes(), m_acct.total_count()};
  MutexLock lock(m_peer_mu);
  for (const auto& p : m_peers) {
    t.bytes += p.store->m_acct.total_bytes();
    t.count += p.store->m_acct.total_count();
  }
  return t;
}

bool FileStoreImpl::over(double fraction) const {
  const Totals t = totals();
  if (m_opt.max_size_bytes && static_cast<double>(t.bytes) > fraction * static_cast<double>(*m_opt.max_size_bytes)) {
    return true;
  }
  return m_opt.max_entries && static_cast<double>(t.count) > fraction * static_cast<double>(*m_opt.max_entries);
}

bool FileStoreImpl::over_entries_more() const {
  const Totals t = totals();
  const double b = static_cast<double>(t.bytes) / static_cast<double>(*m_opt.max_size_bytes);
  const double c = static_cast<double>(t.count) / static_cast<double>(*m_opt.max_entries);
  return c > b;
}

// The root's other stores: the root's own (<cap_root>/v1) and each companion
// directory, each only where it is a real directory (never a link, which
// could lead into another root or back into this one) holding an
// initialised accounting file, each file once (by device and inode), never
// this store's own. A peer whose accounting file is gone or was replaced
// (the store removed, or removed and made again) is dropped, and the store
// there now is opened in its place. Opening a peer never waits.
void FileStoreImpl::refresh_peers(bool now) {
  if (m_opt.cap_root.empty()) return;
  MutexLock lock(m_peer_mu);
  const std::int64_t t = m_env->now_ns();
  if (!now && m_peers_checked_ns != 0 && t - m_peers_checked_ns < k_peer_recheck_ns) return;
  m_peers_checked_ns = t;
  const auto identity_at = [this](const std::string& path) -> std::pair<std::uint64_t, std::uint64_t> {
    auto info = m_env->lstat(path);
    return info.ok() && info->is_regular() ? std::pair{info->dev, info->ino}
                                           : std::pair<std::uint64_t, std::uint64_t>{0, 0};
  };
  std::erase_if(m_peers, [&](const Peer& p) { return identity_at(p.store->m_layout.accounting_path()) != p.identity; });
  const auto own = m_acct.identity();
  std::vector<std::string> dirs{m_opt.cap_root};
  for (const auto& c : companion_stores()) dirs.push_back(join_path(m_opt.cap_root, c.subdir));
  for (const auto& dir : dirs) {
    if (dir == m_layout.root()) continue;
    if (dir != m_opt.cap_root) {
      auto d = m_env->lstat(dir);
      if (!d.ok() || !d->is_dir()) continue;  // absent, or a link: not this root's store
    }
    const auto id = identity_at(Layout(dir).accounting_path());
    if (id.second == 0 || id == own) continue;
    if (std::any_of(m_peers.begin(), m_peers.end(), [&](const Peer& p) { return p.identity == id; })) continue;
    FileStoreOptions o = m_opt;
    o.root = dir;
    o.cap_root.clear();
    auto peer = std::make_shared<FileStoreImpl>(std::move(o), dir);
    if (!peer->init_peer().ok() || peer->m_acct.identity() != id) continue;
    m_peers.push_back({std::move(peer), id});
  }
}

std::vector<std::shared_ptr<FileStoreImpl>> FileStoreImpl::peers() {
  std::vector<std::shared_ptr<FileStoreImpl>> out;
  MutexLock lock(m_peer_mu);
  for (const auto& p : m_peers) out.push_back(p.store);
  return out;
}

void FileStoreImpl::maybe_trim(const Written& written) {
  refresh_peers(false);
  // The re-check after unlocking closes a race: a put that found the lock
  // held just before the holder finished would otherwise leave the store
  // over its cap until the next put.
  while (over(1.0)) {
    // flock is per open file description, so threads of this process are
    // excluded by a mutex and processes by the flock.
    if (!m_trim_mu.try_lock()) return;
    auto got = m_env->lock(m_evict_fd, LockKind::exclusive, LockWait::try_only);
    if (!got.ok() || !*got) {  // another process is trimming
      m_trim_mu.unlock();
      return;
    }
    trim_to_low_water(written);
    m_env->unlock(m_evict_fd).ignore();
    const bool progress = m_trim_progress;
    m_trim_mu.unlock();
    if (!progress) return;  // nothing removable (e.g. files of another user)
  }
}

// Requires the eviction lock. Removes least recently used entries until the
// totals are under the low-water mark, never `written`. Under a cap per
// root the entries of every store of the root compete (each peer whose own
// eviction lock is free now; one held is being trimmed by another process).
// Small roots: every shard scanned, exact LRU order. Large ones: each round
// visits the fullest shard left of each store and removes the least recently
// used half of what those shards hold together; work per put stays constant
// as the root grows (a scan of S files removes up to S/2 of them), LRU
// within a shard, and across shards and stores as close to LRU as keys are
// uniform (they are digests: a shard is a sample of its store).
void FileStoreImpl::trim_to_low_water(const Written& written) {
  std::vector<FileStoreImpl*> stores{this};
  const std::vector<std::shared_ptr<FileStoreImpl>> held = peers();  // alive for this trim
  for (const auto& peer : held) {
    auto got = m_env->lock(peer->m_evict_fd, LockKind::exclusive, LockWait::try_only);
    if (got.ok() && *got) stores.push_back(peer.get());
  }
  struct Candidate {
    FileStoreImpl* store;
    int shard;
    ScannedFile file;
    std::int64_t used;
  };
  bool progress = false;
  const auto evict = [&](const Candidate& c) {
    if (c.store == this && c.shard == written.shard && c.file.name == written.name) return;
    auto removed =
        c.store->remove_if_same(c.shard, join_path(c.store->m_layout.shard_dir(c.shard), c.file.name), c.file.info);
    if (removed.ok() && *removed) {
      progress = true;
      c.store->count_eviction(c.shard, c.file.name, c.file.info);
    }
  };
  const std::int64_t now = m_env->now_ns();
  const auto older = [](const Candidate& a, const Candidate& b) { return a.used < b.used; };
  const auto scan = [now](FileStoreImpl* store, int shard, std::vector<Candidate>& into) {
    // Swept too: a dead writer's temp is charged until it is removed, so
    // a store over its cap by such temps is brought back by this trim.
    auto files = store->scan_shard(shard, Reconcile::gross);
    if (!files.ok()) return;
    for (auto& f : *files) {
      const std::int64_t used = store->last_used(shard, f.name, f.info, now);
      into.push_back({store, shard, std::move(f), used});
    }
  };
  if (totals().count <= k_exact_lru_entries) {
    std::vector<Candidate> all;
    for (FileStoreImpl* store : stores) {
      for (int shard = 0; shard < k_shards; ++shard) {
        // Counts are exact: a shard counted empty holds nothing (a damaged
        // counter is not zero, so its shard is visited and healed).
        if (store->m_acct.shard_count(shard) == 0 && store->m_acct.shard_bytes(shard) == 0) continue;
        scan(store, shard, all);
      }
    }
    std::sort(all.begin(), all.end(), older);
    for (std::size_t i = 0; i < all.size() && over(k_low_water); ++i) evict(all[i]);
  } else {
    const bool by_count = m_opt.max_entries.has_value() && (!m_opt.max_size_bytes || over_entries_more());
    std::vector<std::array<bool, k_shards>> visited(stores.size());
    for (int round = 0; round < k_shards && over(k_low_water); ++round) {
      std::vector<Candidate> sample;
      for (std::size_t s = 0; s < stores.size(); ++s) {
        const Accounting& acct = stores[s]->m_acct;
        int best = -1;
        std::int64_t best_v = 0;
        for (int i = 0; i < k_shards; ++i) {
          if (visited[s][i]) continue;
          const std::int64_t v = by_count ? acct.shard_count(i) : acct.shard_bytes(i);
          if (best < 0 || v > best_v) {
            best = i;
            best_v = v;
          }
        }
        if (best < 0 || best_v == 0) continue;
        visited[s][best] = true;
        scan(stores[s], best, sample);
      }
      if (sample.empty()) break;
      std::sort(sample.begin(), sample.end(), older);
      const std::size_t limit = std::max<std::size_t>(1, sample.size() / 2);
      for (std::size_t i = 0; i < limit && over(k_low_water); ++i) evict(sample[i]);
    }
  }
  for (std::size_t s = 1; s < stores.size(); ++s) m_env->unlock(stores[s]->m_evict_fd).ignore();
  m_trim_progress = progress;
}

}  // namespace progcache::file_store
