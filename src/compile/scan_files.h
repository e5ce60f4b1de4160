// What the include scan knows of files: paths in normal form, a file's stat
// identity, the recent-change window, and the framed digest fields every
// part of the scan hashes with.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "progcache/hash.h"
#include "progcache/status.h"

namespace progcache::detail {

// A file changed this recently may change again within one timestamp tick
// without its stat changing: such files are hashed by content.
inline constexpr std::int64_t k_recent_ns = std::int64_t{2} * 1000 * 1000 * 1000;

std::int64_t ns_of(const struct timespec& t);
std::int64_t now_ns();

// Reads a header whole (following symlinks, as the compiler does); never
// blocks on a FIFO or device. Headers over 256 MiB are refused.
Result<std::string> read_regular(const std::string& path);

// One length-framed field of a digest: the tag, then the value's length and bytes.
void add_field(Sha256& sha, std::string_view tag, std::string_view value);

// Whether `path` is `dir` or lies below it (both in the same normal form).
bool under(const std::string& path, const std::string& dir);
// Lexical normal form ("a/./b//c/../d" -> "a/b/d"). With `keep_dotdot`,
// ".." stays: "link/../x" need not be "x" when link is a symbolic link, so
// the key under which a probe is recorded once keeps it. Plain string work:
// this runs for every probe, thousands per lookup with a large include tree.
std::string normal(std::string_view p, bool keep_dotdot = false);
// The path with every symbolic link and '..' resolved (realpath), or its
// textual normal form when it does not exist.
std::string real_or_normal(const std::string& path);
// "a/b/c.h" -> "a/b"; "c.h" -> ""; "/c.h" -> "/".
std::string parent_of(const std::string& file);
std::string join(const std::string& dir, const std::string& name);

// A file's identity and times: while they are unchanged, so is what it holds
// (files changed within k_recent_ns excepted).
struct FileStamp {
  std::uint64_t dev = 0, ino = 0;
  std::int64_t size = 0, mtime = 0, ctime = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};
FileStamp stamp_of(const struct stat& st);

// stat(2) of `name` (relative to `dirfd`; flags as fstatat's:
// AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH), through statx, with st_dev naming
// the mount the path is reached through by its unique ID (Linux 6.8+),
// never given again within a boot, together with the device number (one
// 63-bit digest of both). A device number is given again to the next file
// system mounted, and a file system that holds the times it was built with
// (an image on a loop device, however partitioned or mapped; squashfs; a
// btrfs or ext4 image, whose device number is anonymous or the loop's) can
// show the same inodes, sizes and times for other bytes; no rule on device
// numbers or file system types tells those apart from the rest, so none is
// used. Where the kernel gives no unique mount ID, or the boot's ID cannot
// be read, st_dev is the device number with the top bit set (the two forms
// never meet); where statx fails for a call (ENOSYS, or an older container
// runtime's filter), stat decides, so. Every stat identity the include
// scan, its manifests and the compiler identity memo record is taken so,
// and those kept for other processes belong to identity_epoch(). 0, or -1
// with errno set, as stat returns; `device`, when given, receives the
// device number.
int identity_stat(int dirfd, const char* name, int flags, struct stat& st, dev_t* device = nullptr);
// Whether an identity identity_stat took names its mount (not the device
// form, whose numbers a later mount may be given).
bool names_mount(const struct stat& st);
inline int identity_stat(const std::string& path, struct stat& st) {
  return identity_stat(AT_FDCWD, path.c_str(), 0, st);
}
inline int identity_lstat(const std::string& path, struct stat& st) {
  return identity_stat(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, st);
}

// Keeps a directory of records to `max_files` regular files: past it, the
// oldest written go until three quarters are left.
void keep_newest_files(const std::string& dir, std::size_t max_files);

// This boot's ID, as the kernel gives it; "" where it cannot be read.
const std::string& boot_id();
// The unique ID of the mount "/" is in, and the root's inode (a chroot):
// one per mount namespace (a container, a sandbox), so that records of
// identities, which differ between namespaces, are kept apart per
// namespace instead of each namespace rewriting the other's; "" where
// identities are device numbers.
std::string mount_namespace_id();
// What identities kept for other processes (manifests, the scan memo, the
// compiler identity memo) are valid in: this boot (unique mount IDs are
// counted afresh in every boot); "devices" where identities are device
// numbers (no boot ID), kept as they always were.
const std::string& identity_epoch();

// Who this process is to the file system: effective user and group, the
// supplementary groups, the effective capabilities, the user namespace they
// hold in (its inode and ID maps), no_new_privs and the security module's
// label. What the compiler can search and read depends on them (a directory
// without search permission, a header without read permission,
// CAP_DAC_OVERRIDE, a sandbox), so a record of what a scan found holds only
// for the same credentials. Asked each time (a process may change them),
// but for the label, read once. "" where any part cannot be told (no /proc):
// then nothing is recorded for other processes.
std::string credentials_id();
// Whether this process can open the regular file `path` for reading: it is
// opened (and closed). False with errno set where it cannot.
bool may_read(const std::string& path);

}  // namespace progcache::detail
