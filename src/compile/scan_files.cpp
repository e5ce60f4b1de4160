#include "scan_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "progcache/env.h"
#include "util/coding.h"

namespace progcache::detail {

namespace {

// Headers larger than this are refused rather than read into memory.
constexpr std::int64_t k_max_header_bytes = std::int64_t{256} << 20;

}  // namespace

std::int64_t ns_of(const struct timespec& t) {
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

Result<std::string> read_regular(const std::string& path) {
  auto r = read_regular_file(Env::posix(), path, k_max_header_bytes, OpenMode::read_follow);
  if (!r.ok()) return r.status().with_context("cannot read header");
  return r;
}

void add_field(Sha256& sha, std::string_view tag, std::string_view value) {
  sha.update(tag);
  std::string n;
  put_fixed<std::uint64_t>(n, value.size());
  sha.update(n);
  sha.update(value);
}

bool under(const std::string& path, const std::string& dir) {
  if (dir.empty()) return false;
  if (path.size() < dir.size() || path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || dir.back() == '/' || path[dir.size()] == '/';
}

std::string normal(std::string_view p, bool keep_dotdot) {
  const bool absolute = !p.empty() && p[0] == '/';
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i < p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    const std::string_view part = p.substr(i, j - i);
    if (part == ".." && !keep_dotdot) {
      if (!parts.empty() && parts.back() != "..")
        parts.pop_back();
      else if (!absolute)
        parts.push_back(part);
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k > 0) out += '/';
    out.append(parts[k]);
  }
  return out.empty() ? "." : out;
}

std::string real_or_normal(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) return buf;
  return normal(path);
}

std::string parent_of(const std::string& file) {
  const std::size_t slash = file.rfind('/');
  if (slash == std::string::npos) return {};
  return slash == 0 ? "/" : file.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U  // Linux 6.8; older headers lack the name
#endif

namespace {

constexpr std::uint64_t k_device_form = std::uint64_t{1} << 63;

// Set once statx is refused (a kernel before 4.11, or a seccomp filter of
// an older container runtime answering EPERM): stat's answer serves.
std::atomic<bool> g_statx_refused{false};

// File systems whose files' times are not the kernel's own record of the
// last change on this device: read-only images (squashfs, erofs, iso9660,
// cramfs, udf, romfs) carry the times they were built with, and overlayfs
// and FUSE pass on another file system's or a server's. Two such images
// built reproducibly hold the same inodes, sizes and times for files whose
// bytes differ, and the next one mounted where the other was, on a loop
// device or an anonymous device number given out again, has the same
// device number too. Everywhere else a change stamps ctime with the
// kernel's clock, so a device number, an inode and both times name one
// version of a file.
bool times_from_an_image(std::int64_t magic) {
  switch (static_cast<std::uint32_t>(magic)) {
    case 0x73717368U:  // squashfs
    case 0xE0F5E1E2U:  // erofs
    case 0x9660U:      // iso9660
    case 0x28cd3d45U:  // cramfs
    case 0x453dcd28U:  // cramfs, other byte order
    case 0x15013346U:  // udf
    case 0x7275U:      // romfs
    case 0x65735546U:  // FUSE (squashfuse, fuse-overlayfs, ...)
    case 0x794c7630U:  // overlayfs
      return true;
    default:
      return false;
  }
}

// Whether a block device of this major number is backed by a file or a
// server (loop, 7; network block device, 43): any file system on it holds
// the times it was built with, and the device goes to the next image set up.
bool on_an_image_device(unsigned major) {
  return major == 7 || major == 43;
}

// Whether the mount `mnt_id` (a unique ID) holds a file system of the kind
// above, learned once per mount (the ID is never given to another mount
// in this boot) from the file `dirfd`/`name` was found on. Unknown (the
// file gone, or now on another mount): yes, which costs a hit at most.
bool mount_times_from_an_image(std::uint64_t mnt_id, int dirfd, const char* name, int flags) {
  // The last mount this thread asked about (most stats in a row are of
  // one), then every mount this process learned.
  thread_local std::uint64_t last_mount = 0;
  thread_local bool last_image = true;
  if (mnt_id == last_mount && mnt_id != 0) return last_image;
  static std::mutex mu;
  static std::unordered_map<std::uint64_t, bool> known;
  {
    std::lock_guard lock(mu);
    if (auto it = known.find(mnt_id); it != known.end()) {
      last_mount = mnt_id;
      last_image = it->second;
      return it->second;
    }
  }
  const bool empty = (flags & AT_EMPTY_PATH) != 0 && name[0] == '\0';
  const int fd =
      empty ? dirfd : ::openat(dirfd, name, O_PATH | O_CLOEXEC | ((flags & AT_SYMLINK_NOFOLLOW) != 0 ? O_NOFOLLOW : 0));
  if (fd < 0) return true;
  struct statfs fs {};
  struct statx sx {};
  const bool ok = ::fstatfs(fd, &fs) == 0 && ::statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID_UNIQUE, &sx) == 0 &&
                  (sx.stx_mask & STATX_MNT_ID_UNIQUE) != 0 && sx.stx_mnt_id == mnt_id;
  if (!empty) ::close(fd);
  if (!ok) return true;
  const bool image = times_from_an_image(fs.f_type);
  std::lock_guard lock(mu);
  known.emplace(mnt_id, image);
  last_mount = mnt_id;
  last_image = image;
  return image;
}

}  // namespace

int identity_stat(int dirfd, const char* name, int flags, struct stat& st, dev_t* device) {
  struct statx sx {};
  if (g_statx_refused.load(std::memory_order_relaxed) ||
      ::statx(dirfd, name, flags, STATX_BASIC_STATS | STATX_MNT_ID_UNIQUE, &sx) != 0) {
    if (!g_statx_refused.load(std::memory_order_relaxed)) {
      if (errno != ENOSYS && errno != EPERM && errno != EINVAL) return -1;  // the path's own failure
      g_statx_refused.store(true, std::memory_order_relaxed);
    }
    if (::fstatat(dirfd, name, &st, flags) != 0) return -1;
    if (device != nullptr) *device = st.st_dev;
    st.st_dev = static_cast<dev_t>(static_cast<std::uint64_t>(st.st_dev) | k_device_form);
    return 0;
  }
  st = {};
  const dev_t dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  if (device != nullptr) *device = dev;
  // The mount's unique ID where a device number could name another file
  // system's files with the same inodes and times; else the device number,
  // which every mount namespace (every container) sees alike, so that they
  // share what they record.
  const bool by_mount =
      (sx.stx_mask & STATX_MNT_ID_UNIQUE) != 0 &&
      (on_an_image_device(sx.stx_dev_major) || mount_times_from_an_image(sx.stx_mnt_id, dirfd, name, flags));
  st.st_dev = static_cast<dev_t>(by_mount ? sx.stx_mnt_id : std::uint64_t{dev} | k_device_form);
  st.st_ino = static_cast<ino_t>(sx.stx_ino);
  st.st_mode = sx.stx_mode;
  st.st_nlink = sx.stx_nlink;
  st.st_uid = sx.stx_uid;
  st.st_gid = sx.stx_gid;
  st.st_rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
  st.st_size = static_cast<off_t>(sx.stx_size);
  st.st_blksize = static_cast<blksize_t>(sx.stx_blksize);
  st.st_blocks = static_cast<blkcnt_t>(sx.stx_blocks);
  auto ts = [](const struct statx_timestamp& t) {
    struct timespec out {};
    out.tv_sec = t.tv_sec;
    out.tv_nsec = t.tv_nsec;
    return out;
  };
  st.st_atim = ts(sx.stx_atime);
  st.st_mtim = ts(sx.stx_mtime);
  st.st_ctim = ts(sx.stx_ctime);
  return 0;
}

const std::string& boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(in, s);
    return s.size() == 36 ? s : std::string();
  }();
  return id;
}

const std::string& identity_epoch() {
  static const std::string epoch = boot_id().empty() ? std::string() : "boot " + boot_id();
  return epoch;
}

FileStamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_size), ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

}  // namespace progcache::detail
