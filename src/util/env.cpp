// The Env helpers every layer shares (publishing a file atomically, reading
// a small file safely, joining paths) and EnvWrapper. The POSIX Env itself is
// in env_posix.cpp.
#include "progcache/env.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <random>

namespace progcache {

bool FileInfo::is_regular() const {
  return S_ISREG(mode);
}
bool FileInfo::is_dir() const {
  return S_ISDIR(mode);
}
bool FileInfo::is_symlink() const {
  return S_ISLNK(mode);
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out.push_back('/');
  out += name;
  return out;
}

namespace {

// A seed from the kernel (getrandom), else the clock: std::random_device
// asks CPUID whether the processor has RDRAND first, which traps to the
// hypervisor on a virtual machine (22 us a construction, measured on one),
// and every launcher call that writes a file is a process of its own.
std::uint64_t seed() {
  std::uint64_t s = 0;
  if (::getrandom(&s, sizeof s, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof s)) return s;
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (static_cast<std::uint64_t>(::getpid()) << 32);
}

}  // namespace

std::string unique_temp_path(std::string_view dir, std::string_view prefix) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{seed()};
  const std::uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  return join_path(dir, std::string(prefix) + std::to_string(::getpid()) + "." + std::to_string(n) + "." +
                            std::to_string(rng() & 0xffffffffu));
}

std::string temp_path_beside(std::string_view path, std::string_view prefix) {
  const auto slash = path.find_last_of('/');
  return unique_temp_path(slash == std::string_view::npos ? std::string_view(".") : path.substr(0, slash + 1), prefix);
}

Result<std::string> read_regular_file(Env* env, const std::string& path, std::uint64_t max_bytes, OpenMode mode) {
  PROGCACHE_ASSIGN_OR_RETURN(const int fd, env->open_file(path, mode, 0));
  struct Closer {
    Env* env;
    int fd;
    ~Closer() { env->close_file(fd).ignore(); }
  } closer{env, fd};
  PROGCACHE_ASSIGN_OR_RETURN(const FileInfo info, env->fstat(fd));
  if (!info.is_regular()) return invalid_argument("'" + path + "' is not a regular file");
  if (info.size > max_bytes) {
    return resource_exhausted("'" + path + "' is larger than " + std::to_string(max_bytes) + " bytes");
  }
  std::string out(static_cast<std::size_t>(info.size), '\0');
  std::size_t done = 0;
  while (done < out.size()) {
    PROGCACHE_ASSIGN_OR_RETURN(const std::size_t n, env->pread(fd, out.data() + done, out.size() - done, done));
    if (n == 0) break;
    done += n;
  }
  out.resize(done);  // a file that shrank meanwhile: what was there
  return out;
}

namespace {

// A temp file being written: `fd` to write it, and `lock_fd`, a second open
// file of it holding its writer's lock (-1 where the filesystem has none).
// The lock lives on its own descriptor so that the written one is closed,
// and its close checked, before the rename, while the file stays locked
// until it has left its temp name.
struct LockedTemp {
  int fd = -1;
  int lock_fd = -1;
};

// Creates `temp_path` and takes its writer's lock (see write_file_atomic).
// A sweeper that found the lock free in the instant between the create and
// the lock may have removed the file: then it is made again under the same
// name (ours alone). Where the filesystem has no flock, the file is written
// unlocked, and sweepers, which cannot lock it either, judge it by its age.
Result<LockedTemp> create_locked_temp(Env* env, const std::string& temp_path, std::uint32_t perms) {
  for (int attempt = 0;; ++attempt) {
    LockedTemp t;
    PROGCACHE_ASSIGN_OR_RETURN(t.fd, env->open_file(temp_path, OpenMode::create_new, perms));
    auto lock_fd = env->open_file(temp_path, OpenMode::read, 0);
    if (lock_fd.ok()) {
      if (!env->lock(*lock_fd, LockKind::exclusive, LockWait::block).ok()) {
        env->close_file(*lock_fd).ignore();
        return t;  // no flock here: unlocked
      }
      // Only this writer makes this name: a file there is ours. One that
      // cannot be looked at is taken to be ours too.
      auto there = env->lstat(temp_path);
      if (there.ok() || there.status().code() != Code::not_found || attempt == 3) {
        t.lock_fd = *lock_fd;
        return t;
      }
      env->close_file(*lock_fd).ignore();
    } else if (lock_fd.status().code() != Code::not_found || attempt == 3) {
      return t;  // unlocked
    }
    env->close_file(t.fd).ignore();  // removed under us before we locked it: made again
  }
}

}  // namespace

Status write_file_atomic(Env* env, const std::string& path, const std::string& temp_path, std::string_view data,
                         std::uint32_t perms, Durability durability, std::optional<FileInfo>* replaced) {
  auto temp = create_locked_temp(env, temp_path, perms);
  if (!temp.ok()) return temp.status();
  const int fd = temp->fd;
  // Released only once the temp has left its name (renamed or removed):
  // while it is locked, a sweeper knows its writer lives.
  struct Unlock {
    Env* env;
    int fd;
    ~Unlock() {
      if (fd >= 0) env->close_file(fd).ignore();
    }
  } unlock{env, temp->lock_fd};
  // The file is given its full size first, so that a writer killed part-way
  // leaves a temp as large as what it was charged for (file_store.h).
  env->ftruncate(fd, data.size()).ignore();
  Status st = env->fchmod(fd, perms);  // umask must not widen or narrow the mode
  if (st.ok()) st = env->write_all(fd, data);
  if (st.ok() && durability == Durability::fsync) st = env->fsync(fd);
  Status cst = env->close_file(fd);
  if (st.ok()) st = cst;
  if (st.ok()) {
    if (replaced == nullptr) {
      st = env->rename(temp_path, path);
    } else {
      replaced->reset();
      // New entry: a non-replacing rename. Existing entry: an exchange, so
      // the replaced file lands under our temp name, ours alone: what it
      // held is measured exactly, never guessed from an lstat another writer
      // may have outdated. Readers see the old entry or the new one
      // throughout. When the entry comes and goes between the two (other
      // writers, eviction), try again: a plain rename here could replace a
      // file nobody measured, and its charge would never be taken back.
      st = Status(Code::failed_precondition, "not tried");
      for (int attempt = 0; attempt < 16 && st.code() == Code::failed_precondition; ++attempt) {
        st = env->rename_noreplace(temp_path, path);
        if (st.code() != Code::failed_precondition) break;  // done, or a real error
        Status ex = env->rename_exchange(temp_path, path);
        if (ex.ok()) {
          auto old = env->lstat(temp_path);
          *replaced = old.ok() ? *old : FileInfo{};
          env->unlink(temp_path).ignore();  // a leftover is a stale temp, swept later
          st = Status();
        } else if (ex.code() == Code::not_found) {
          st = Status(Code::failed_precondition, "the entry went meanwhile");  // try the new-entry rename again
        } else if (ex.code() == Code::unavailable) {
          auto old = env->lstat(path);  // no exchange on this filesystem: the lstat is a best guess
          if (old.ok()) *replaced = *old;
          st = env->rename(temp_path, path);
        } else {
          st = ex;
        }
      }
    }
  }
  if (!st.ok()) {
    env->unlink(temp_path).ignore();
    return st;
  }
  if (durability == Durability::fsync) {
    const auto slash = path.find_last_of('/');
    return env->fsync_dir(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)));
  }
  return {};
}

Result<std::size_t> Env::preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset) {
  std::size_t done = 0;
  for (const ReadPiece& p : pieces) {
    PROGCACHE_ASSIGN_OR_RETURN(const std::size_t got, pread(fd, p.data, p.size, offset + done));
    done += got;
    if (got < p.size) break;
  }
  return done;
}

Result<int> EnvWrapper::open_file(const std::string& path, OpenMode mode, std::uint32_t perms) {
  return m_target->open_file(path, mode, perms);
}
Status EnvWrapper::close_file(int fd) {
  return m_target->close_file(fd);
}
Result<std::size_t> EnvWrapper::pread(int fd, char* buf, std::size_t n, std::uint64_t offset) {
  return m_target->pread(fd, buf, n, offset);
}
// Through this wrapper's own pread, piece by piece: a wrapper that overrides
// pread alone (to fail or shorten reads) sees every read. One that wants the
// target's single vectored call overrides preadv too, as FaultEnv does.
Result<std::size_t> EnvWrapper::preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset) {
  return Env::preadv(fd, pieces, offset);
}
Status EnvWrapper::write_all(int fd, std::string_view data) {
  return m_target->write_all(fd, data);
}
Status EnvWrapper::fsync(int fd) {
  return m_target->fsync(fd);
}
Status EnvWrapper::ftruncate(int fd, std::uint64_t size) {
  return m_target->ftruncate(fd, size);
}
Status EnvWrapper::allocate(int fd, std::uint64_t size) {
  return m_target->allocate(fd, size);
}
Result<FileInfo> EnvWrapper::fstat(int fd) {
  return m_target->fstat(fd);
}
Status EnvWrapper::set_atime(int fd, std::int64_t atime_ns) {
  return m_target->set_atime(fd, atime_ns);
}
Status EnvWrapper::fchmod(int fd, std::uint32_t perms) {
  return m_target->fchmod(fd, perms);
}
Result<FileInfo> EnvWrapper::lstat(const std::string& path) {
  return m_target->lstat(path);
}
Result<FileInfo> EnvWrapper::stat(const std::string& path) {
  return m_target->stat(path);
}
Status EnvWrapper::rename(const std::string& from, const std::string& to) {
  return m_target->rename(from, to);
}
Status EnvWrapper::rename_noreplace(const std::string& from, const std::string& to) {
  return m_target->rename_noreplace(from, to);
}
Status EnvWrapper::rename_exchange(const std::string& a, const std::string& b) {
  return m_target->rename_exchange(a, b);
}
Status EnvWrapper::unlink(const std::string& path) {
  return m_target->unlink(path);
}
Status EnvWrapper::mkdir(const std::string& path, std::uint32_t perms) {
  return m_target->mkdir(path, perms);
}
Status EnvWrapper::chmod(const std::string& path, std::uint32_t perms) {
  return m_target->chmod(path, perms);
}
Result<std::vector<DirEntry>> EnvWrapper::list_dir(const std::string& path) {
  return m_target->list_dir(path);
}
Status EnvWrapper::fsync_dir(const std::string& path) {
  return m_target->fsync_dir(path);
}
Status Env::spread_subdirectories(const std::string& dir) {
  return unavailable("this Env takes no placement hint for '" + dir + "'");
}
Status EnvWrapper::spread_subdirectories(const std::string& dir) {
  return m_target->spread_subdirectories(dir);
}
Result<bool> EnvWrapper::lock(int fd, LockKind kind, LockWait wait) {
  return m_target->lock(fd, kind, wait);
}
Status EnvWrapper::unlock(int fd) {
  return m_target->unlock(fd);
}
Result<void*> EnvWrapper::map_shared(int fd, std::size_t size) {
  return m_target->map_shared(fd, size);
}
void EnvWrapper::unmap(void* addr, std::size_t size) {
  m_target->unmap(addr, size);
}
std::int64_t EnvWrapper::now_ns() {
  return m_target->now_ns();
}

}  // namespace progcache
