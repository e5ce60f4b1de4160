#include "scan_files.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
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

// Set once statx is found missing (a kernel before 4.11): stat serves.
std::atomic<bool> g_no_statx{false};

// One 63-bit name for a mount's unique ID and a device number (the top
// bit clear: never the device form).
std::uint64_t mount_and_device(std::uint64_t mnt_id, std::uint64_t dev) {
  char both[16];
  std::memcpy(both, &mnt_id, 8);
  std::memcpy(both + 8, &dev, 8);
  return xxh3_64(std::string_view(both, sizeof both)) & ~k_device_form;
}

}  // namespace

int identity_stat(int dirfd, const char* name, int flags, struct stat& st, dev_t* device) {
  struct statx sx {};
  // Mount IDs are named only where records can be tied to the boot they
  // were taken in (they are counted afresh in every boot).
  const bool named_mounts = !boot_id().empty();
  if (g_no_statx.load(std::memory_order_relaxed) ||
      ::statx(dirfd, name, flags, STATX_BASIC_STATS | STATX_MNT_ID_UNIQUE, &sx) != 0) {
    // Whatever statx answered (ENOSYS: none; EPERM or another errno from an
    // older container runtime's seccomp filter), stat decides, in the
    // device form: the scan fails only where stat fails.
    if (errno == ENOSYS) g_no_statx.store(true, std::memory_order_relaxed);
    if (::fstatat(dirfd, name, &st, flags) != 0) return -1;
    if (device != nullptr) *device = st.st_dev;
    st.st_dev = static_cast<dev_t>(static_cast<std::uint64_t>(st.st_dev) | k_device_form);
    return 0;
  }
  st = {};
  const dev_t dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  if (device != nullptr) *device = dev;
  const bool by_mount = named_mounts && (sx.stx_mask & STATX_MNT_ID_UNIQUE) != 0;
  // The mount and the device both: within one mount, btrfs and bcachefs
  // subvolumes each have a device number of their own, and inode numbers
  // that repeat between them.
  st.st_dev = static_cast<dev_t>(by_mount ? mount_and_device(sx.stx_mnt_id, dev) : std::uint64_t{dev} | k_device_form);
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

bool names_mount(const struct stat& st) {
  return (static_cast<std::uint64_t>(st.st_dev) & k_device_form) == 0;
}

std::string mount_namespace_id() {
  // Asked each time (one statx): a process may enter another namespace
  // (unshare, setns) after its first lookup.
  // The root's inode too: a chroot whose root is no mount point has the
  // mount of the directory it was made in.
  struct statx sx {};
  if (boot_id().empty() || g_no_statx.load(std::memory_order_relaxed) ||
      ::statx(AT_FDCWD, "/", 0, STATX_INO | STATX_MNT_ID_UNIQUE, &sx) != 0 ||
      (sx.stx_mask & STATX_MNT_ID_UNIQUE) == 0) {
    return std::string();
  }
  return std::to_string(sx.stx_mnt_id) + ":" + std::to_string(sx.stx_ino);
}

void keep_newest_files(const std::string& dir, std::size_t max_files) {
  auto names = Env::posix()->list_dir(dir);
  if (!names.ok() || names->size() <= max_files) return;
  std::vector<std::pair<std::int64_t, std::string>> by_age;
  for (const auto& e : *names) {
    struct stat st {};
    const std::string path = join_path(dir, e.name);
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) by_age.emplace_back(ns_of(st.st_mtim), path);
  }
  std::sort(by_age.begin(), by_age.end());
  const std::size_t keep = max_files * 3 / 4;
  for (std::size_t i = 0; i + keep < by_age.size(); ++i) ::unlink(by_age[i].second.c_str());
}

namespace {

// A small file of /proc, whole; nullopt where it cannot be read.
std::optional<std::string> read_proc(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      ::close(fd);
      return n == 0 ? std::optional<std::string>(std::move(out)) : std::nullopt;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string credentials_id() {
  std::string out = std::to_string(::geteuid()) + ":" + std::to_string(::getegid()) + ":";
  std::vector<gid_t> groups(64);
  int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  if (n < 0 && errno == EINVAL) {
    n = ::getgroups(0, nullptr);
    groups.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    n = n > 0 ? ::getgroups(n, groups.data()) : n;
  }
  if (n < 0) return std::string();
  groups.resize(static_cast<std::size_t>(n));
  std::sort(groups.begin(), groups.end());
  for (const gid_t g : groups) out += std::to_string(g) + ",";
  // The effective capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH let
  // the compiler read past permissions); no wrapper in glibc.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): the raw system call
  if (::syscall(SYS_capget, &header, data) != 0) return std::string();
  out += ":" + std::to_string(data[0].effective) + "," + std::to_string(data[1].effective);
  // The user namespace those IDs and capabilities hold in, by its ID maps
  // (user 0 with every capability inside `unshare -U -r` is an ordinary
  // user outside it) and its inode (inodes of namespaces that have ended are
  // given again, so never alone).
  struct stat ns {};
  const auto uid_map = read_proc("/proc/self/uid_map");
  const auto gid_map = read_proc("/proc/self/gid_map");
  if (::stat("/proc/self/ns/user", &ns) != 0 || !uid_map || !gid_map) return std::string();
  out += ":" + std::to_string(ns.st_ino) + ":" + *uid_map + ":" + *gid_map;
  // no_new_privs, which a Landlock or seccomp sandbox of an ordinary user
  // sets: such a process may be refused reads that permissions allow.
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): prctl is variadic
  out += ":" + std::to_string(::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
  // The security module's label (AppArmor, SELinux), whose policy may
  // refuse reads too. Read once: a process rarely changes its own label.
  static const std::string label = [] {
    std::ifstream in("/proc/self/attr/current");
    std::string l;
    return in && std::getline(in, l) ? l : std::string();
  }();
  return out + ":" + label;
}

bool may_read(const std::string& path) {
  // Opened, as the compiler opens it: faccessat can say yes where open says
  // no (a Landlock or AppArmor policy) and no where open says yes (a seccomp
  // filter refusing faccessat2).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  ::close(fd);
  return true;
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
  // Without a boot ID, identities are device numbers (identity_stat), kept
  // as they always were.
  static const std::string epoch = boot_id().empty() ? std::string("devices") : "boot " + boot_id();
  return epoch;
}

FileStamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_size), ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

}  // namespace progcache::detail
