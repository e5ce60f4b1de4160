#include "testing/fault_env.h"

namespace progcache::testing {

const char* op_name(Op op) {
  static const char* k_names[] = {"open_read", "open_create", "open_rw",   "close",           "pread",
                                  "write",     "fsync",       "ftruncate", "fstat",           "set_atime",
                                  "fchmod",    "lstat",       "stat",      "rename",          "rename_noreplace",
                                  "unlink",    "mkdir",       "chmod",     "list_dir",        "fsync_dir",
                                  "lock",      "map_shared",  "allocate",  "rename_exchange", "spread_subdirectories"};
  return k_names[static_cast<int>(op)];
}

void FaultEnv::fail(Op op, int err, std::uint64_t nth, bool sticky, bool short_write) {
  std::lock_guard lock(m_mu);
  m_rules[static_cast<int>(op)] = Rule{true, err, calls(op) + nth, sticky, short_write};
}

void FaultEnv::clear_faults() {
  std::lock_guard lock(m_mu);
  for (auto& r : m_rules) r = Rule{};
}

int FaultEnv::check(Op op, bool* short_write) {
  const std::uint64_t n = m_calls[static_cast<int>(op)].fetch_add(1);
  std::lock_guard lock(m_mu);
  Rule& r = m_rules[static_cast<int>(op)];
  if (!r.active || n < r.at || (!r.sticky && n != r.at)) return 0;
  m_fired.fetch_add(1);
  if (short_write != nullptr) *short_write = r.short_write;
  return r.err;
}

#define PROGCACHE_FAULT(op, what)                 \
  if (int err = check(op); err != 0) {            \
    return errno_status(err, what " (injected)"); \
  }

Result<int> FaultEnv::open_file(const std::string& path, OpenMode mode, std::uint32_t perms) {
  const Op op = mode == OpenMode::read ? Op::open_read : mode == OpenMode::create_new ? Op::open_create : Op::open_rw;
  if (int err = check(op); err != 0) return errno_status(err, "open (injected)", path);
  return target()->open_file(path, mode, perms);
}
Status FaultEnv::close_file(int fd) {
  if (int err = check(Op::close); err != 0) {
    target()->close_file(fd).ignore();  // the descriptor is gone either way, as on Linux
    return errno_status(err, "close (injected)");
  }
  return target()->close_file(fd);
}
Result<std::size_t> FaultEnv::pread(int fd, char* buf, std::size_t n, std::uint64_t offset) {
  PROGCACHE_FAULT(Op::pread, "read");
  return target()->pread(fd, buf, n, offset);
}
Result<std::size_t> FaultEnv::preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset) {
  PROGCACHE_FAULT(Op::pread, "read");
  return target()->preadv(fd, pieces, offset);
}
Status FaultEnv::write_all(int fd, std::string_view data) {
  bool short_write = false;
  if (int err = check(Op::write, &short_write); err != 0) {
    if (short_write) target()->write_all(fd, data.substr(0, data.size() / 2)).ignore();
    return errno_status(err, "write (injected)");
  }
  return target()->write_all(fd, data);
}
Status FaultEnv::fsync(int fd) {
  PROGCACHE_FAULT(Op::fsync, "fsync");
  return target()->fsync(fd);
}
Status FaultEnv::ftruncate(int fd, std::uint64_t size) {
  PROGCACHE_FAULT(Op::ftruncate, "ftruncate");
  return target()->ftruncate(fd, size);
}
Status FaultEnv::allocate(int fd, std::uint64_t size) {
  PROGCACHE_FAULT(Op::allocate, "allocate");
  return target()->allocate(fd, size);
}
Result<FileInfo> FaultEnv::fstat(int fd) {
  PROGCACHE_FAULT(Op::fstat, "fstat");
  return target()->fstat(fd);
}
Status FaultEnv::set_atime(int fd, std::int64_t atime_ns) {
  PROGCACHE_FAULT(Op::set_atime, "futimens");
  return target()->set_atime(fd, atime_ns);
}
Status FaultEnv::fchmod(int fd, std::uint32_t perms) {
  PROGCACHE_FAULT(Op::fchmod, "fchmod");
  return target()->fchmod(fd, perms);
}
Result<FileInfo> FaultEnv::lstat(const std::string& path) {
  PROGCACHE_FAULT(Op::lstat, "lstat");
  return target()->lstat(path);
}
Result<FileInfo> FaultEnv::stat(const std::string& path) {
  PROGCACHE_FAULT(Op::stat, "stat");
  return target()->stat(path);
}
Status FaultEnv::rename(const std::string& from, const std::string& to) {
  PROGCACHE_FAULT(Op::rename, "rename");
  return target()->rename(from, to);
}
Status FaultEnv::rename_noreplace(const std::string& from, const std::string& to) {
  PROGCACHE_FAULT(Op::rename_noreplace, "rename");
  return target()->rename_noreplace(from, to);
}
Status FaultEnv::rename_exchange(const std::string& a, const std::string& b) {
  PROGCACHE_FAULT(Op::rename_exchange, "rename");
  return target()->rename_exchange(a, b);
}
Status FaultEnv::unlink(const std::string& path) {
  PROGCACHE_FAULT(Op::unlink, "unlink");
  return target()->unlink(path);
}
Status FaultEnv::mkdir(const std::string& path, std::uint32_t perms) {
  PROGCACHE_FAULT(Op::mkdir, "mkdir");
  return target()->mkdir(path, perms);
}
Status FaultEnv::chmod(const std::string& path, std::uint32_t perms) {
  PROGCACHE_FAULT(Op::chmod, "chmod");
  return target()->chmod(path, perms);
}
Result<std::vector<DirEntry>> FaultEnv::list_dir(const std::string& path) {
  PROGCACHE_FAULT(Op::list_dir, "opendir");
  return target()->list_dir(path);
}
Status FaultEnv::fsync_dir(const std::string& path) {
  PROGCACHE_FAULT(Op::fsync_dir, "fsync directory");
  return target()->fsync_dir(path);
}
Status FaultEnv::spread_subdirectories(const std::string& dir) {
  PROGCACHE_FAULT(Op::spread_subdirectories, "ioctl FS_IOC_SETFLAGS");
  return target()->spread_subdirectories(dir);
}
Result<bool> FaultEnv::lock(int fd, LockKind kind, LockWait wait) {
  PROGCACHE_FAULT(Op::lock, "flock");
  return target()->lock(fd, kind, wait);
}
Result<void*> FaultEnv::map_shared(int fd, std::size_t size) {
  PROGCACHE_FAULT(Op::map_shared, "mmap");
  return target()->map_shared(fd, size);
}
std::int64_t FaultEnv::now_ns() {
  return m_fixed_clock.load() ? m_now.load() : target()->now_ns();
}

}  // namespace progcache::testing
