// The file store's Store operations: open, get, put, erase, clear, stats.
// Names, permissions, counters, eviction and maintenance live in their own
// rooms (file_store_impl.h lists them).
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include "store/file/file_store_impl.h"

namespace progcache {

namespace file_store {

namespace {

// No entry is larger: a file that claims to be is damage, not a program.
constexpr std::uint64_t k_max_entry_file = std::uint64_t{8} << 30;
// Entry files up to this size are read whole with one pread and decoded in
// memory; larger ones are streamed, header first, so junk costs 4 KiB.
constexpr std::uint64_t k_read_whole_up_to = std::uint64_t{1} << 20;
// How far ahead of the clock a file time may be before it is distrusted.
constexpr std::int64_t k_future_slack_ns = std::int64_t{60} * 1000000000;

EntryReader::ReadAt pread_of(Env* env, int fd) {
  return [env, fd](std::uint64_t off, char* dst, std::size_t n) { return env->pread(fd, dst, n, off); };
}
EntryReader::ReadAtV preadv_of(Env* env, int fd) {
  return [env, fd](std::uint64_t off, std::span<const ReadPiece> pieces) { return env->preadv(fd, pieces, off); };
}

}  // namespace

FileStoreImpl::FileStoreImpl(FileStoreOptions options, std::string root)
    : m_opt(std::move(options)),
      m_env(m_opt.env != nullptr ? m_opt.env : Env::posix()),
      m_layout(std::move(root)),
      m_dirs(m_env, m_opt.sharing) {
  for (auto& ok : m_shard_ok) ok.store(false);
}

Status FileStoreImpl::init() {
  PROGCACHE_TRY(m_dirs.check_root(m_layout.root()));
  PROGCACHE_TRY(ensure_version_dir());
  PROGCACHE_ASSIGN_OR_RETURN(m_evict_fd,
                             m_env->open_file(m_layout.evict_lock_path(), OpenMode::read_write, m_dirs.file_perms()));
  PROGCACHE_TRY(m_acct.open(m_env, m_layout.accounting_path(), m_dirs.file_perms(), [this]() -> Status {
    for (int shard = 0; shard < k_shards; ++shard) PROGCACHE_TRY(scan_shard(shard, Reconcile::yes).status());
    return {};
  }));
  // Without the table every read stamps its file: slower, never wrong.
  m_recency.open(m_env, m_layout.recency_path(), m_dirs.file_perms()).ignore();
  // Each open visits one shard: sweeps its stale temps and reconciles its
  // counters, so even a store that never reaches its cap is tidied over time.
  // Which one needs no more than the clock and the process (a
  // std::random_device asks CPUID, which traps on a virtual machine).
  const auto pick = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                    static_cast<std::uint64_t>(::getpid());
  scan_shard(static_cast<int>(pick % k_shards), Reconcile::gross).status().ignore();
  return {};
}

Status FileStoreImpl::init_peer() {
  PROGCACHE_TRY(m_dirs.check_root(m_layout.root()));
  // The version directory too, as init() judges it: a link there could lead
  // into another root.
  auto dir = m_env->lstat(m_layout.dir());
  if (!dir.ok()) return dir.status();
  if (!m_dirs.acceptable(*dir)) {
    return Status(Code::permission_denied, "'" + m_layout.dir() + "' is not a directory the store trusts");
  }
  PROGCACHE_ASSIGN_OR_RETURN(m_evict_fd,
                             m_env->open_file(m_layout.evict_lock_path(), OpenMode::read_write, m_dirs.file_perms()));
  PROGCACHE_TRY(m_acct.open_initialised(m_env, m_layout.accounting_path(), m_dirs.file_perms()));
  m_recency.open(m_env, m_layout.recency_path(), m_dirs.file_perms()).ignore();
  return {};
}

Status FileStoreImpl::check_open() const {
  if (m_closed.load(std::memory_order_relaxed)) {
    return failed_precondition("file store '" + m_layout.root() + "' is closed");
  }
  return {};
}

Status FileStoreImpl::count_error(Status st) {
  m_acct.count(Event::error);
  return st;
}

Result<std::optional<int>> FileStoreImpl::open_entry(const Key& key, const std::string& path) {
  const int shard = Layout::shard_of(key);
  if (!shard_checked(shard, /*create=*/false)) {
    count_lookup(Event::miss);
    return std::optional<int>();
  }
  auto fd = m_env->open_file(path, OpenMode::read, 0);
  if (fd.ok()) return std::optional<int>(*fd);
  if (fd.status().code() == Code::failed_precondition) {
    // ELOOP: a symlink where an entry belongs. Never followed; removed.
    auto info = m_env->lstat(path);
    if (info.ok()) remove_if_same(shard, path, *info).status().ignore();
    m_acct.count(Event::corrupt);
  } else if (fd.status().code() != Code::not_found) {
    return count_error(fd.status());
  }
  count_lookup(Event::miss);
  return std::optional<int>();
}

// Every read is recorded, so eviction follows reads exactly: in the shared
// table (a store to memory), or where the table cannot take it in the
// file's atime. The atime, which progcache stamps itself so LRU works on
// relatime and noatime mounts, is also refreshed once per granularity (for
// a table lost or a version of progcache without one), and always when it
// is in the future (a clock that jumped back).
void FileStoreImpl::stamp_use(int fd, const Key& key, const FileInfo& info) {
  const std::int64_t now = m_env->now_ns();
  std::optional<RecencyTable::Displaced> displaced;
  const bool recorded = m_recency.record(key, now, &displaced);
  if (!recorded || now - info.atime_ns > m_opt.recency_granularity_ns || info.atime_ns > now + k_future_slack_ns) {
    m_env->set_atime(fd, now).ignore();
  }
  if (displaced) write_back(*displaced);
}

void FileStoreImpl::write_back(const RecencyTable::Displaced& d) {
  const std::int64_t now = m_env->now_ns();
  if (d.read_ns <= 0 || d.read_ns > now + k_future_slack_ns) return;
  if (!shard_checked(Layout::shard_of(d.key), /*create=*/false)) return;
  auto fd = m_env->open_file(m_layout.entry_path(d.key), OpenMode::read, 0);
  if (!fd.ok()) return;  // gone since: nothing to keep
  if (auto info = m_env->fstat(*fd); info.ok() && info->is_regular() && info->atime_ns < d.read_ns) {
    m_env->set_atime(*fd, d.read_ns).ignore();
  }
  m_env->close_file(*fd).ignore();
}

Result<EntryRead> read_entry_file(Env* env, int fd, const Key& key, const EntryCodecOptions& codec) {
  EntryRead r;
  PROGCACHE_ASSIGN_OR_RETURN(r.info, env->fstat(fd));
  if (!r.info.is_regular()) {
    r.reason = "not a regular file";
    return r;
  }
  if (r.info.size > k_max_entry_file) {
    r.damaged = true;
    r.reason = "file of " + std::to_string(r.info.size) + " bytes is larger than any entry";
    return r;
  }
  Result<Entry> decoded = Status();
  if (r.info.size <= k_read_whole_up_to) {
    char* buf = nullptr;
    Bytes data;
    try {
      data = Bytes::allocate(r.info.size, &buf);
    } catch (const std::bad_alloc&) {
      return resource_exhausted("no memory to read an entry of " + std::to_string(r.info.size) + " bytes");
    }
    std::uint64_t done = 0;
    while (done < r.info.size) {
      PROGCACHE_ASSIGN_OR_RETURN(std::size_t n, env->pread(fd, buf + done, r.info.size - done, done));
      if (n == 0) break;
      done += n;
    }
    decoded = done == r.info.size ? EntryReader(std::move(data), codec).read(key)
                                  : Result<Entry>(data_loss("truncated: the file shrank while being read"));
  } else {
    decoded = EntryReader(pread_of(env, fd), preadv_of(env, fd), r.info.size, codec).read(key);
  }
  if (!decoded.ok()) {
    const Code code = decoded.status().code();
    if (code != Code::data_loss && code != Code::permission_denied) return decoded.status();
    r.damaged = true;
    r.rejected = code == Code::permission_denied;
    r.reason = decoded.status().message();
    return r;
  }
  r.entry = std::move(*decoded);
  return r;
}

Result<FileStoreImpl::ReadResult> FileStoreImpl::read_entry(int fd, const Key& key, bool stamp) {
  PROGCACHE_ASSIGN_OR_RETURN(EntryRead r, read_entry_file(m_env, fd, key, m_opt.codec));
  if (stamp && r.entry) stamp_use(fd, key, r.info);
  return r;
}

Result<std::optional<Entry>> FileStoreImpl::get(const Key& key) {
  PROGCACHE_TRY(check_open());
  SampledTimer timer(sample_this_call<file_get>());
  const std::string path = m_layout.entry_path(key);
  PROGCACHE_ASSIGN_OR_RETURN(std::optional<int> fd, open_entry(key, path));
  if (!fd) {
    m_acct.finish_get(timer);
    return std::optional<Entry>();
  }
  auto result = read_entry(*fd, key, /*stamp=*/true);
  m_env->close_file(*fd).ignore();
  if (!result.ok()) return count_error(result.status());
  if (!result->entry) {
    if (result->damaged) {
      remove_if_same(Layout::shard_of(key), path, result->info).status().ignore();
      m_acct.count(result->rejected ? Event::rejected : Event::corrupt);
    }
    count_lookup(Event::miss);
    m_acct.finish_get(timer);
    return std::optional<Entry>();
  }
  count_lookup(Event::hit);
  m_acct.read(result->info.size);
  m_acct.finish_get(timer);
  return std::move(result->entry);
}

Result<bool> FileStoreImpl::get_primary_into(const Key& key, const EntryReader::Alloc& alloc) {
  PROGCACHE_TRY(check_open());
  SampledTimer timer(sample_this_call<file_get>());
  const std::string path = m_layout.entry_path(key);
  PROGCACHE_ASSIGN_OR_RETURN(std::optional<int> fd, open_entry(key, path));
  if (!fd) {
    m_acct.finish_get(timer);
    return false;
  }
  Status read;
  auto info = m_env->fstat(*fd);
  if (!info.ok()) {
    read = info.status();
  } else if (!info->is_regular()) {
    read = data_loss("not a regular file");
  } else if (info->size > k_max_entry_file) {
    read = data_loss("larger than any entry");
  } else {
    read = EntryReader(pread_of(m_env, *fd), preadv_of(m_env, *fd), info->size, m_opt.codec).read_primary(key, alloc);
    if (read.ok()) stamp_use(*fd, key, *info);
  }
  m_env->close_file(*fd).ignore();
  if (read.ok()) {
    count_lookup(Event::hit);
    m_acct.read(info->size);
    m_acct.finish_get(timer);
    return true;
  }
  const Code code = read.code();
  if (code != Code::data_loss && code != Code::permission_denied) return count_error(read);
  // Damaged, as get() would find it: removed if it is still that file, and
  // counted. A FIFO or device is never ours to remove (verify reports it).
  if (info.ok() && info->is_regular()) {
    remove_if_same(Layout::shard_of(key), path, *info).status().ignore();
    m_acct.count(code == Code::permission_denied ? Event::rejected : Event::corrupt);
  }
  count_lookup(Event::miss);
  m_acct.finish_get(timer);
  return false;
}

Status FileStoreImpl::put(const Key& key, const Entry& entry) {
  PROGCACHE_TRY(check_open());
  SampledTimer timer(sample_this_call<file_put>());
  auto encoded = encode_entry(key, entry, m_env->now_ns(), m_opt.codec);
  if (!encoded.ok()) return encoded.status();
  Status st = publish(key, *encoded);
  if (st.ok()) m_acct.finish_put(timer);
  return st;
}

Status FileStoreImpl::check_encoded(const Key& key, const std::string& encoded) const {
  if (encoded.size() > k_max_entry_file) return data_loss("larger than any entry");
  return verify_encoded_entry(key, encoded, m_opt.codec);
}

Status FileStoreImpl::put_encoded(const Key& key, std::string encoded) {
  PROGCACHE_TRY(check_open());
  PROGCACHE_TRY(check_encoded(key, encoded));
  return publish(key, encoded);
}

Result<std::optional<std::string>> FileStoreImpl::get_encoded(const Key& key) {
  PROGCACHE_TRY(check_open());
  const std::string path = m_layout.entry_path(key);
  PROGCACHE_ASSIGN_OR_RETURN(std::optional<int> fd, open_entry(key, path));
  if (!fd) return std::optional<std::string>();
  std::string data;
  Status read = [&]() -> Status {
    PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->fstat(*fd));
    if (!info.is_regular()) return data_loss("not a regular file");
    if (info.size > k_max_entry_file) return data_loss("larger than any entry");
    data.resize(info.size);
    std::size_t done = 0;
    while (done < data.size()) {
      PROGCACHE_ASSIGN_OR_RETURN(std::size_t n, m_env->pread(*fd, data.data() + done, data.size() - done, done));
      if (n == 0) return data_loss("entry file shrank while being read");
      done += n;
    }
    return {};
  }();
  m_env->close_file(*fd).ignore();
  if (!read.ok()) return read.with_context("entry " + key.hex());
  PROGCACHE_TRY(check_encoded(key, data));
  return std::optional<std::string>(std::move(data));
}

Status FileStoreImpl::publish(const Key& key, const std::string& encoded) {
  const int shard = Layout::shard_of(key);
  // A shard never used by this process whose parents were removed under the
  // open store is made again with them, as a fresh store would.
  if (!shard_checked(shard, /*create=*/true) && !recreate_dirs(shard)) {
    return count_error(permission_denied("shard directory '" + m_layout.shard_dir(shard) +
                                         "' is not a private directory of this user; refusing to write"));
  }
  const std::string path = m_layout.entry_path(key);
  // The temp's bytes count from before it exists: a writer killed part-way
  // leaves a temp of this size (write_file_atomic sizes it first), still
  // charged, so the cap holds while it lies there, and the sweep that finds
  // its writer gone charges it back. The next trim, forced by the charge,
  // is such a sweep.
  const auto pending = static_cast<std::int64_t>(encoded.size());
  m_acct.charge(shard, pending, 0);
  std::optional<FileInfo> old;
  Status st =
      write_file_atomic(m_env, path, m_layout.temp_path(shard), encoded, m_dirs.file_perms(), m_opt.durability, &old);
  if (st.code() == Code::not_found && recreate_dirs(shard)) {
    // The shard (or the whole tree) was removed while the store was open,
    // by hand or by another tool: made again, as a fresh store would.
    st =
        write_file_atomic(m_env, path, m_layout.temp_path(shard), encoded, m_dirs.file_perms(), m_opt.durability, &old);
  }
  if (!st.ok()) {
    m_acct.charge(shard, -pending, 0);
    return count_error(st.with_context("storing entry " + key.hex()));
  }
  // The entry count is exact (a new file is known by a non-replacing
  // rename); a replaced file's size can be stale if two processes replace
  // the same entry at once, and scans reconcile that.
  std::int64_t dbytes = 0;  // the new entry's bytes: charged as pending
  std::int64_t dcount = 1;
  if (old && old->is_regular()) {
    dbytes -= static_cast<std::int64_t>(old->size);
    dcount = 0;
  }
  m_acct.charge(shard, dbytes, dcount);
  m_acct.count(Event::put);
  m_acct.wrote(encoded.size());
  // Its time of use is the put's, by the clock reads are recorded with (a
  // file's own times come from the kernel's coarser clock, a tick behind).
  // Where the table has no room the file's time serves.
  std::optional<RecencyTable::Displaced> displaced;
  m_recency.record(key, m_env->now_ns(), &displaced);
  if (displaced) write_back(*displaced);
  // The entry just written is the most recently used: a trim it causes
  // never removes it.
  maybe_trim(Written{shard, path.substr(path.size() - k_entry_name_size)});
  return {};
}

Result<bool> FileStoreImpl::erase(const Key& key) {
  PROGCACHE_TRY(check_open());
  const int shard = Layout::shard_of(key);
  if (!shard_checked(shard, false)) return false;
  auto removed = take_out(shard, m_layout.entry_path(key));
  if (!removed.ok()) return count_error(removed.status());
  if (*removed) m_recency.forget(key);
  return *removed;
}

Status FileStoreImpl::clear() {
  PROGCACHE_TRY(check_open());
  Status first_error;
  for (int shard = 0; shard < k_shards; ++shard) {
    auto files = m_env->list_dir(m_layout.shard_dir(shard));
    if (!files.ok()) {
      if (files.status().code() != Code::not_found && first_error.ok()) first_error = files.status();
      continue;
    }
    const std::int64_t now = m_env->now_ns();
    for (const auto& f : *files) {
      if (f.type == DirEntry::Type::directory) continue;
      const std::string path = join_path(m_layout.shard_dir(shard), f.name);
      if (Layout::classify(f.name) == NameKind::transient) {
        // Another process's put or removal in flight: only those left
        // behind (a dead writer's, or stale) go.
        auto info = m_env->lstat(path);
        if (info.ok() && info->is_regular()) sweep_transient(shard, f.name, *info, now);
        continue;
      }
      // Each entry leaves through take_out, which charges exactly what it
      // removed: a put racing the clear is accounted, not zeroed away.
      auto removed = take_out(shard, path);
      if (!removed.ok() && first_error.ok()) first_error = removed.status();
    }
  }
  return first_error;
}

Result<std::uint64_t> FileStoreImpl::count() {
  PROGCACHE_TRY(check_open());
  return static_cast<std::uint64_t>(m_acct.total_count());
}

Result<std::uint64_t> FileStoreImpl::size_bytes() {
  PROGCACHE_TRY(check_open());
  return static_cast<std::uint64_t>(m_acct.total_bytes());
}

StoreStats FileStoreImpl::stats() {
  return m_acct.process_stats();
}

StoreStats FileStoreImpl::host_stats() {
  return m_acct.host_stats();
}

// Closing refuses every later call; what a call already in flight on
// another thread uses (the shared accounting's mapping, the eviction lock's
// descriptor) stays until the store is destroyed. Unmapping or closing them
// here raced such a call: a counter written through a mapping just removed,
// a lock taken on a descriptor number the process had reused.
Status FileStoreImpl::close() {
  m_closed.store(true);
  return {};
}

// What calls in flight used is released here, with the store (close() only
// refuses later calls); the accounting's mapping goes with its destructor.
FileStoreImpl::~FileStoreImpl() {
  if (m_evict_fd >= 0) m_env->close_file(m_evict_fd).ignore();
}

// A shard directory is used only once it is known to be a real directory
// the store trusts (never a symlink). The answer is cached per process.
bool FileStoreImpl::shard_checked(int shard, bool create) {
  if (m_shard_ok[shard].load(std::memory_order_acquire)) return true;
  const std::string dir = m_layout.shard_dir(shard);
  auto info = m_env->lstat(dir);
  if (!info.ok()) {
    if (!create || info.status().code() != Code::not_found) return false;
    if (!m_dirs.ensure_dir(dir).ok()) return false;
    info = m_env->lstat(dir);
    if (!info.ok()) return false;
  }
  if (!m_dirs.acceptable(*info)) return false;
  m_shard_ok[shard].store(true, std::memory_order_release);
  return true;
}

bool FileStoreImpl::recreate_dirs(int shard) {
  m_shard_ok[shard].store(false, std::memory_order_release);
  if (!m_dirs.check_root(m_layout.root()).ok() || !ensure_version_dir().ok()) return false;
  return shard_checked(shard, /*create=*/true);
}

// Every shard made in the version directory lands, with its entries, in a
// block group of its own where the filesystem takes the hint (ext4). Each
// put makes an inode and each replacement or eviction frees one; ext4
// without a journal will not reuse an inode freed in the last minute, and
// scans past every such inode of the group on each allocation, so with all
// shards in one group a busy store spent most of its time in that scan
// (docs/benchmarks.md, "many processes"). Stores whose shards already exist
// keep their placement.
Status FileStoreImpl::ensure_version_dir() {
  PROGCACHE_TRY(m_dirs.ensure_dir(m_layout.dir()));
  m_env->spread_subdirectories(m_layout.dir()).ignore();
  return {};
}

}  // namespace file_store

std::span<const CompanionStore> companion_stores() {
  static constexpr CompanionStore k_companions[] = {{"kernels", "kernels"},   {"pyptx", "pyptx"}, {"triton", "triton"},
                                                    {"tilelang", "tilelang"}, {"nvcc", "nvcc"},   {"torch", "torch"},
                                                    {"jax", "jax"},           {"cupy", "cupy"}};
  return k_companions;
}

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

namespace {

// A store's root as open() spells it: absolute, normal, no trailing '/'.
std::string spelled_root(const std::string& given) {
  std::string root = given.empty() ? default_cache_root() : given;
  std::error_code ec;
  auto abs = std::filesystem::absolute(root, ec);
  if (!ec) root = abs.lexically_normal().string();
  if (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

}  // namespace

Result<std::optional<Entry>> FileStore::peek(const FileStoreOptions& options, const Key& key) {
  using file_store::Layout;
  Env* env = options.env != nullptr ? options.env : Env::posix();
  const Layout layout(spelled_root(options.root));
  const file_store::DirPolicy dirs(env, options.sharing);
  // The directories as init() and a lookup judge them; none is made.
  PROGCACHE_TRY(dirs.check_root(layout.root()));
  auto version = env->lstat(layout.dir());
  if (!version.ok()) {
    if (version.status().code() == Code::not_found) return std::optional<Entry>();
    return version.status();
  }
  if (!dirs.acceptable(*version)) {
    return Status(Code::permission_denied, "'" + layout.dir() + "' is not a directory the store trusts");
  }
  auto shard = env->lstat(layout.shard_dir(Layout::shard_of(key)));
  if (!shard.ok() || !dirs.acceptable(*shard)) return std::optional<Entry>();  // a lookup's miss
  auto fd = env->open_file(layout.entry_path(key), OpenMode::read, 0);
  if (!fd.ok()) {
    if (fd.status().code() == Code::not_found) return std::optional<Entry>();
    if (fd.status().code() == Code::failed_precondition) {
      return data_loss("a symbolic link where an entry belongs (a lookup removes it)");
    }
    return fd.status();
  }
  auto read = file_store::read_entry_file(env, *fd, key, options.codec);
  env->close_file(*fd).ignore();
  PROGCACHE_TRY(read.status());
  if (read->entry) return std::move(read->entry);
  if (read->damaged) {
    return Status(read->rejected ? Code::permission_denied : Code::data_loss, read->reason);
  }
  return std::optional<Entry>();  // not a regular file: a lookup's miss
}

Result<std::unique_ptr<FileStore>> FileStore::open(FileStoreOptions options) {
  std::string root = spelled_root(options.root);
  std::error_code ec;
  if (!options.cap_root.empty()) {
    // Spelled as the stores' roots are, so that each is known by its name.
    auto cap = std::filesystem::absolute(options.cap_root, ec);
    if (!ec) options.cap_root = cap.lexically_normal().string();
    if (options.cap_root.size() > 1 && options.cap_root.back() == '/') options.cap_root.pop_back();
  }
  if (options.max_size_bytes && *options.max_size_bytes == 0) {
    return invalid_argument("file store max_size_bytes must be positive (or unbounded)");
  }
  if (options.max_entries && *options.max_entries == 0) {
    return invalid_argument("file store max_entries must be positive (or unbounded)");
  }
  auto store = std::make_unique<file_store::FileStoreImpl>(std::move(options), root);
  Status st = store->init();
  if (!st.ok()) return st;
  return std::unique_ptr<FileStore>(std::move(store));
}

}  // namespace progcache
