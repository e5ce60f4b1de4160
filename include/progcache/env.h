// progcache/env.h — the seam between progcache and the operating system.
//
// Every filesystem and clock call the stores make goes through an Env, so
// tests can inject faults (ENOSPC, EIO, a short write, a crash between two
// calls) without root or special mounts. `Env::posix()` is the real thing.
//
// Errors come back as Status made by errno_status(), naming the operation and
// the path. Thread safety: Env implementations must be thread-safe; the posix
// one is stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/bytes.h"
#include "progcache/status.h"

namespace progcache {

struct FileInfo {
  std::uint64_t size = 0;
  std::uint32_t mode = 0;  // st_mode: type and permission bits
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::uint64_t ino = 0;
  std::uint64_t dev = 0;
  std::int64_t atime_ns = 0;
  std::int64_t mtime_ns = 0;
  [[nodiscard]] bool is_regular() const;
  [[nodiscard]] bool is_dir() const;
  [[nodiscard]] bool is_symlink() const;
  // Same file object (device and inode) with the same modification time.
  [[nodiscard]] bool same_file(const FileInfo& o) const {
    return ino == o.ino && dev == o.dev && mtime_ns == o.mtime_ns && size == o.size;
  }
};

struct DirEntry {
  std::string name;
  enum class Type { regular, directory, symlink, other, unknown } type = Type::unknown;
};

enum class OpenMode {
  read,         // O_RDONLY | O_NOFOLLOW | O_NOATIME (where the caller owns the file)
  create_new,   // O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW
  read_write,   // O_RDWR | O_CREAT | O_NOFOLLOW (small control files)
  read_follow,  // O_RDONLY, following symlinks (a user's headers and key files)
};
// Reads open with O_NONBLOCK too: a FIFO or device where a file was expected
// must not block the open.

enum class LockKind { shared, exclusive };
enum class LockWait { block, try_only };

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide real environment.
  static Env* posix();

  // Returns a file descriptor. Never follows a symlink in the last component.
  virtual Result<int> open_file(const std::string& path, OpenMode mode, std::uint32_t perms) = 0;
  virtual Status close_file(int fd) = 0;
  // Reads up to `n` bytes at `offset`; returns the count (0 at end of file).
  virtual Result<std::size_t> pread(int fd, char* buf, std::size_t n, std::uint64_t offset) = 0;
  // Reads at `offset` into `pieces`, filling each before the next (one
  // preadv where pread would take one call per piece); returns the count, 0
  // at end of file. A short count may end in any piece. The default runs
  // pread per piece.
  virtual Result<std::size_t> preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset);
  // Writes all of `data` (retrying short writes) or fails.
  virtual Status write_all(int fd, std::string_view data) = 0;
  virtual Status fsync(int fd) = 0;
  virtual Status ftruncate(int fd, std::uint64_t size) = 0;
  // Reserves disk blocks for [0, size) (posix_fallocate), growing the file
  // if shorter. A file that will be written through a shared mapping must
  // have its blocks first: a page the filesystem cannot back is SIGBUS, not
  // an error. resource_exhausted when the disk is full.
  virtual Status allocate(int fd, std::uint64_t size) = 0;
  virtual Result<FileInfo> fstat(int fd) = 0;
  // Sets the access time of an open file, leaving its modification time.
  virtual Status set_atime(int fd, std::int64_t atime_ns) = 0;
  virtual Status fchmod(int fd, std::uint32_t perms) = 0;

  // Does not follow a symlink in the last component. not_found when absent.
  virtual Result<FileInfo> lstat(const std::string& path) = 0;
  // Follows symlinks.
  virtual Result<FileInfo> stat(const std::string& path) = 0;
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Fails with failed_precondition when `to` exists.
  virtual Status rename_noreplace(const std::string& from, const std::string& to) = 0;
  // Swaps two existing names atomically (renameat2 RENAME_EXCHANGE).
  // unavailable where the filesystem cannot; not_found when either is gone.
  virtual Status rename_exchange(const std::string& a, const std::string& b) = 0;
  virtual Status unlink(const std::string& path) = 0;
  // Fails with failed_precondition when the path exists.
  virtual Status mkdir(const std::string& path, std::uint32_t perms) = 0;
  virtual Status chmod(const std::string& path, std::uint32_t perms) = 0;
  virtual Result<std::vector<DirEntry>> list_dir(const std::string& path) = 0;
  // Opens a directory for fsync (durability of a rename).
  virtual Status fsync_dir(const std::string& path) = 0;
  // Asks the filesystem to place the directories later made in `dir` far
  // apart (ext4's top-directory flag, FS_TOPDIR_FL: its allocator then puts
  // each one, and so the files made in it, in a block group of its own).
  // unavailable where the filesystem has no such hint. A hint only:
  // nothing may depend on it.
  // The default says the hint is not available, so an Env written before
  // this call existed still builds.
  virtual Status spread_subdirectories(const std::string& dir);

  // flock(2) on an open file. Returns false when try_only found it held.
  virtual Result<bool> lock(int fd, LockKind kind, LockWait wait) = 0;
  virtual Status unlock(int fd) = 0;
  // Maps `size` bytes of `fd` shared and writable.
  virtual Result<void*> map_shared(int fd, std::size_t size) = 0;
  virtual void unmap(void* addr, std::size_t size) = 0;

  // Wall-clock time, Unix nanoseconds.
  virtual std::int64_t now_ns() = 0;
};

// An Env that forwards every call to another: derive from it and override
// only what you change (a test that fails one call, a fake clock), as
// leveldb's EnvWrapper. Does not own its target. preadv runs through the
// wrapper's own pread, so overriding pread covers every read.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : m_target(target) {}
  [[nodiscard]] Env* target() const { return m_target; }

  Result<int> open_file(const std::string& path, OpenMode mode, std::uint32_t perms) override;
  Status close_file(int fd) override;
  Result<std::size_t> pread(int fd, char* buf, std::size_t n, std::uint64_t offset) override;
  Result<std::size_t> preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset) override;
  Status write_all(int fd, std::string_view data) override;
  Status fsync(int fd) override;
  Status ftruncate(int fd, std::uint64_t size) override;
  Status allocate(int fd, std::uint64_t size) override;
  Result<FileInfo> fstat(int fd) override;
  Status set_atime(int fd, std::int64_t atime_ns) override;
  Status fchmod(int fd, std::uint32_t perms) override;
  Result<FileInfo> lstat(const std::string& path) override;
  Result<FileInfo> stat(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status rename_noreplace(const std::string& from, const std::string& to) override;
  Status rename_exchange(const std::string& a, const std::string& b) override;
  Status unlink(const std::string& path) override;
  Status mkdir(const std::string& path, std::uint32_t perms) override;
  Status chmod(const std::string& path, std::uint32_t perms) override;
  Result<std::vector<DirEntry>> list_dir(const std::string& path) override;
  Status fsync_dir(const std::string& path) override;
  Status spread_subdirectories(const std::string& dir) override;
  Result<bool> lock(int fd, LockKind kind, LockWait wait) override;
  Status unlock(int fd) override;
  Result<void*> map_shared(int fd, std::size_t size) override;
  void unmap(void* addr, std::size_t size) override;
  std::int64_t now_ns() override;

 private:
  Env* m_target;
};

enum class Durability {
  none,   // rename only: survives a process crash, not necessarily power loss
  fsync,  // fsync the file before the rename and its directory after it
};

// The one file-publishing helper: writes `data` to `temp_path` (created new,
// never following symlinks, with `perms`), optionally fsyncs, and renames it
// over `path`, so readers see the old file or the new one, never a part.
// `temp_path` must be in the same directory as `path`. On any failure the
// temp file is removed and `path` is untouched.
//
// With `replaced` non-null, tells whether an existing file was replaced (and
// its size): the rename is first tried without replacing, which makes "was
// this a new file?" exact even when several processes publish one path.
Status write_file_atomic(Env* env, const std::string& path, const std::string& temp_path, std::string_view data,
                         std::uint32_t perms, Durability durability, std::optional<FileInfo>* replaced = nullptr);

// The one whole-file reader for small files the library did not write itself
// (memos, headers, key files): opened non-blocking, checked to be a regular
// file on the open descriptor, so a FIFO or device is an error, never a
// hang; invalid_argument for anything not a regular file, resource_exhausted
// past `max_bytes`. `mode` is OpenMode::read or OpenMode::read_follow.
Result<std::string> read_regular_file(Env* env, const std::string& path, std::uint64_t max_bytes,
                                      OpenMode mode = OpenMode::read);

// A fresh path in `dir` for a temp file: "<prefix><pid>.<n>.<random>". The
// pid and a process-wide counter make it unique on the host at any instant
// (across threads too); the random part guards against a crashed process's
// pid being reused. Every temp file the library writes is named here (the
// file store's shard scans sweep stale ones by the prefix; elsewhere a
// temp file is removed by its writer, or left by a crash).
inline constexpr std::string_view k_temp_prefix = ".tmp.";
std::string unique_temp_path(std::string_view dir, std::string_view prefix = k_temp_prefix);
// unique_temp_path in the directory holding `path`, so a rename over `path`
// stays on one filesystem.
std::string temp_path_beside(std::string_view path, std::string_view prefix = k_temp_prefix);

// Returns `path` with a trailing '/' removed and `name` appended.
std::string join_path(std::string_view dir, std::string_view name);

}  // namespace progcache
