#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "progcache/env.h"

namespace progcache {

namespace {

std::int64_t to_ns(const struct timespec& ts) {
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

FileInfo to_info(const struct stat& st) {
  FileInfo fi;
  fi.size = static_cast<std::uint64_t>(st.st_size);
  fi.mode = st.st_mode;
  fi.uid = st.st_uid;
  fi.gid = st.st_gid;
  fi.ino = st.st_ino;
  fi.dev = st.st_dev;
  fi.atime_ns = to_ns(st.st_atim);
  fi.mtime_ns = to_ns(st.st_mtim);
  return fi;
}

class PosixEnv final : public Env {
 public:
  Result<int> open_file(const std::string& path, OpenMode mode, std::uint32_t perms) override {
    int flags = O_CLOEXEC | O_NOFOLLOW;
    switch (mode) {
      // O_NONBLOCK: a FIFO or device where a file was expected must not
      // block the open (it changes nothing for regular files).
      // O_NOATIME: a store's reads (a listing, an export, a verify) are not
      // uses; recency is the atime the store stamps itself on hits, and a
      // relatime mount would otherwise bump it on the first read after a
      // write. Only the file's owner may ask: others open without it.
      case OpenMode::read:
        flags |= O_RDONLY | O_NONBLOCK | O_NOATIME;
        break;
      case OpenMode::read_follow:
        flags = O_CLOEXEC | O_RDONLY | O_NONBLOCK | O_NOCTTY;
        break;
      case OpenMode::create_new:
        flags |= O_WRONLY | O_CREAT | O_EXCL;
        break;
      case OpenMode::read_write:
        flags |= O_RDWR | O_CREAT;
        break;
    }
    int fd;
    do {
      fd = ::open(path.c_str(), flags, static_cast<mode_t>(perms));
      if (fd < 0 && errno == EPERM && (flags & O_NOATIME) != 0) {
        flags &= ~O_NOATIME;  // not the file's owner (a group-shared store)
        errno = EINTR;        // try again at once
      }
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno_status(errno, "open", path);
    return fd;
  }

  Status close_file(int fd) override {
    // close(2) must not be retried on EINTR on Linux: the descriptor is gone.
    if (::close(fd) != 0 && errno != EINTR) return errno_status(errno, "close");
    return {};
  }

  Result<std::size_t> pread(int fd, char* buf, std::size_t n, std::uint64_t offset) override {
    ssize_t r;
    do {
      r = ::pread(fd, buf, n, static_cast<off_t>(offset));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return errno_status(errno, "read");
    return static_cast<std::size_t>(r);
  }

  Result<std::size_t> preadv(int fd, std::span<const ReadPiece> pieces, std::uint64_t offset) override {
    constexpr std::size_t k_max_pieces = 8;  // what progcache asks for at once; more go through the default
    if (pieces.size() > k_max_pieces) return Env::preadv(fd, pieces, offset);
    struct iovec iov[k_max_pieces];
    for (std::size_t i = 0; i < pieces.size(); ++i) iov[i] = {pieces[i].data, pieces[i].size};
    ssize_t r;
    do {
      r = ::preadv(fd, iov, static_cast<int>(pieces.size()), static_cast<off_t>(offset));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return errno_status(errno, "read");
    return static_cast<std::size_t>(r);
  }

  Status write_all(int fd, std::string_view data) override {
    while (!data.empty()) {
      const ssize_t r = ::write(fd, data.data(), data.size());
      if (r < 0) {
        if (errno == EINTR) continue;
        return errno_status(errno, "write");
      }
      data.remove_prefix(static_cast<std::size_t>(r));
    }
    return {};
  }

  Status fsync(int fd) override {
    if (::fsync(fd) != 0) return errno_status(errno, "fsync");
    return {};
  }

  Status ftruncate(int fd, std::uint64_t size) override {
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return errno_status(errno, "ftruncate");
    return {};
  }

  Status allocate(int fd, std::uint64_t size) override {
    int rc;
    do {
      rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    } while (rc == EINTR);
    if (rc != 0) return errno_status(rc, "allocate disk blocks");
    return {};
  }

  Result<FileInfo> fstat(int fd) override {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno_status(errno, "fstat");
    return to_info(st);
  }

  Status set_atime(int fd, std::int64_t atime_ns) override {
    struct timespec ts[2];
    ts[0].tv_sec = atime_ns / 1'000'000'000;
    ts[0].tv_nsec = atime_ns % 1'000'000'000;
    ts[1].tv_sec = 0;
    ts[1].tv_nsec = UTIME_OMIT;
    if (::futimens(fd, ts) != 0) return errno_status(errno, "futimens");
    return {};
  }

  Status fchmod(int fd, std::uint32_t perms) override {
    if (::fchmod(fd, static_cast<mode_t>(perms)) != 0) return errno_status(errno, "fchmod");
    return {};
  }

  Result<FileInfo> lstat(const std::string& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return errno_status(errno, "lstat", path);
    return to_info(st);
  }

  Result<FileInfo> stat(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errno_status(errno, "stat", path);
    return to_info(st);
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_status(errno, "rename", from + "' -> '" + to);
    return {};
  }

  Status rename_noreplace(const std::string& from, const std::string& to) override {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) return failed_precondition("rename target exists '" + to + "'");
      return errno_status(errno, "rename", from + "' -> '" + to);
    }
    return {};
  }

  Status rename_exchange(const std::string& a, const std::string& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
        return Status(Code::unavailable, "this filesystem cannot exchange names ('" + b + "')");
      }
      return errno_status(errno, "rename (exchange)", a + "' <-> '" + b);
    }
    return {};
  }

  Status unlink(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return errno_status(errno, "unlink", path);
    return {};
  }

  Status mkdir(const std::string& path, std::uint32_t perms) override {
    if (::mkdir(path.c_str(), static_cast<mode_t>(perms)) != 0) {
      if (errno == EEXIST) return failed_precondition("already exists '" + path + "'");
      return errno_status(errno, "mkdir", path);
    }
    return {};
  }

  Status chmod(const std::string& path, std::uint32_t perms) override {
    if (::chmod(path.c_str(), static_cast<mode_t>(perms)) != 0) return errno_status(errno, "chmod", path);
    return {};
  }

  Result<std::vector<DirEntry>> list_dir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno_status(errno, "open directory", path);
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      const int err = errno;
      ::close(fd);
      return errno_status(err, "opendir", path);
    }
    std::vector<DirEntry> out;
    errno = 0;
    while (struct dirent* d = ::readdir(dir)) {
      const std::string_view name(d->d_name);
      if (name == "." || name == "..") continue;
      DirEntry e;
      e.name = std::string(name);
      switch (d->d_type) {
        case DT_REG:
          e.type = DirEntry::Type::regular;
          break;
        case DT_DIR:
          e.type = DirEntry::Type::directory;
          break;
        case DT_LNK:
          e.type = DirEntry::Type::symlink;
          break;
        case DT_UNKNOWN:
          e.type = DirEntry::Type::unknown;
          break;
        default:
          e.type = DirEntry::Type::other;
          break;
      }
      out.push_back(std::move(e));
    }
    const int err = errno;
    ::closedir(dir);
    if (err != 0) return errno_status(err, "readdir", path);
    return out;
  }

  Status fsync_dir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_status(errno, "open directory", path);
    const int r = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (r != 0) return errno_status(err, "fsync directory", path);
    return {};
  }

  Status spread_subdirectories(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno_status(errno, "open directory", dir);
    int flags = 0;
    int r = ::ioctl(fd, FS_IOC_GETFLAGS, &flags);
    if (r == 0 && (flags & FS_TOPDIR_FL) == 0) {
      flags |= FS_TOPDIR_FL;
      r = ::ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    const int err = errno;
    ::close(fd);
    if (r == 0) return {};
    if (err == ENOTTY || err == EOPNOTSUPP || err == EINVAL) {
      return unavailable("the filesystem of '" + dir + "' takes no placement hint");
    }
    return errno_status(err, "ioctl FS_IOC_SETFLAGS", dir);
  }

  Result<bool> lock(int fd, LockKind kind, LockWait wait) override {
    int op = kind == LockKind::shared ? LOCK_SH : LOCK_EX;
    if (wait == LockWait::try_only) op |= LOCK_NB;
    int r;
    do {
      r = ::flock(fd, op);
    } while (r != 0 && errno == EINTR && wait == LockWait::block);
    if (r != 0) {
      if (errno == EWOULDBLOCK) return false;
      return errno_status(errno, "flock");
    }
    return true;
  }

  Status unlock(int fd) override {
    if (::flock(fd, LOCK_UN) != 0) return errno_status(errno, "flock unlock");
    return {};
  }

  Result<void*> map_shared(int fd, std::size_t size) override {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return errno_status(errno, "mmap");
    return p;
  }

  void unmap(void* addr, std::size_t size) override { ::munmap(addr, size); }

  std::int64_t now_ns() override {
    struct timespec ts {};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return to_ns(ts);
  }
};

}  // namespace

Env* Env::posix() {
  static PosixEnv env;
  return &env;
}

}  // namespace progcache
