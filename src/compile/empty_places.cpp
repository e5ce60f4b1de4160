// compile/empty_places.cpp — watching an empty place by the deepest
// directory on its path that exists (empty_places.h).
#include "compile/empty_places.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>

#include "compile/scan_files.h"

namespace progcache::detail {

namespace {

// The devices of this machine's mounts of file systems whose directories
// change their times with every entry.
std::set<dev_t> read_local_devices() {
  static constexpr std::string_view k_types[] = {"ext2",  "ext3",    "ext4", "xfs",  "btrfs",
                                                 "tmpfs", "overlay", "zfs",  "f2fs", "bcachefs"};
  std::set<dev_t> found;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id;
    std::string parent;
    std::string majmin;
    if (!(head >> id >> parent >> majmin)) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type;
    if (!(tail >> type) || std::find(std::begin(k_types), std::end(k_types), type) == std::end(k_types)) continue;
    const auto colon = majmin.find(':');
    if (colon == std::string::npos) continue;
    try {
      found.insert(makedev(std::stoul(majmin.substr(0, colon)), std::stoul(majmin.substr(colon + 1))));
    } catch (const std::exception&) {
      continue;
    }
  }
  return found;
}

}  // namespace

std::optional<EmptyWatch> watch_of_empty(const std::string& place) {
  std::string child = place;
  while (child.size() > 1 && child.back() == '/') child.pop_back();
  for (int depth = 0; depth < 256; ++depth) {
    const std::string parent = parent_of(child);
    const std::string dir = parent.empty() ? std::string(".") : parent;
    EmptyWatch w;
    w.dir = dir;
    if (identity_stat(AT_FDCWD, dir.c_str(), 0, w.st, &w.device) == 0 && S_ISDIR(w.st.st_mode)) {
      // Any answer but an entry (none there, or none this user may see: a
      // change of the directory's mode changes its times too) is watched.
      struct stat there {};
      if (::lstat(child.c_str(), &there) == 0 || entries_hidden(dir)) return std::nullopt;
      return w;
    }
    if (dir == "." || dir == "/") break;
    child = dir;
  }
  return std::nullopt;
}

bool entries_hidden(const std::string& dir) {
  struct statx sx {};
  if (::statx(AT_FDCWD, dir.c_str(), 0, STATX_BASIC_STATS, &sx) != 0) return true;
  return (sx.stx_attributes_mask & STATX_ATTR_ENCRYPTED) != 0 && (sx.stx_attributes & STATX_ATTR_ENCRYPTED) != 0;
}

bool watch_settled(const EmptyWatch& w, std::int64_t before) {
  return names_mount(w.st) && times_follow_entries(w.device) &&
         std::max(ns_of(w.st.st_mtim), ns_of(w.st.st_ctim)) < before - k_recent_ns;
}

bool times_follow_entries(dev_t device) {
  static std::once_flag once;
  static std::set<dev_t>* local = nullptr;
  std::call_once(once, [] { local = new std::set<dev_t>(read_local_devices()); });  // never freed: read at exit too
  return local->count(device) != 0;
}

}  // namespace progcache::detail
