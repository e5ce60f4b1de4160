// compile/empty_places.h — one rule for a place found empty (where a header
// created later would be read first): it is watched by the deepest
// directory on its path that exists. An entry made in a directory changes
// its modification and change times, and the change time cannot be set
// back, so while that directory's identity and times are what they were,
// the place is still empty, and a check looks at one directory instead of
// every place in it. The NVRTC path's manifests (deps_manifest.cpp), the
// nvcc launcher's (src/nvcc/manifest.cpp) and progcache.torch's check
// (python/src/held_places.cpp) all watch places so.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace progcache::detail {

// The directory that watches an empty place.
struct EmptyWatch {
  std::string dir;    // as the place spells it; "." for a relative place's working directory
  struct stat st {};  // its identity, as identity_stat takes it
  dev_t device = 0;   // its device number
};

// The deepest directory on `place`'s path that exists, found by stat from
// the place's parent upwards; nullopt where the entry of that directory
// the path goes through exists (lstat finds it) (a dangling link, a link to a
// file, a file where a directory would be: each can come to lead elsewhere
// without the directory changing), where that directory's entries can
// appear without a change to it (entries_hidden), where no directory above
// it exists, or where the place is not empty.
std::optional<EmptyWatch> watch_of_empty(const std::string& place);

// Whether entries can appear in `dir` without a change to its times: an
// encrypted directory (fscrypt), whose names are hidden while its key is
// absent and shown when the key is added, the directory untouched; also
// true where `dir` cannot be looked at.
bool entries_hidden(const std::string& dir);

// Whether a watch can be kept for other processes and later checks: the
// identity names its mount (not the device form, whose numbers a later
// mount may be given), the file system changes a directory's times with
// every entry made in it (ext4, xfs, btrfs, tmpfs, overlayfs, zfs, f2fs,
// bcachefs; not network, FUSE, FAT or procfs), and the directory's last
// change is older than `before` by the recent-change window (a change
// within one timestamp tick, a second on a file system that keeps whole
// seconds, keeps the times). On overlayfs a directory's times are its upper
// layer's: a layer changed under a mount (which overlayfs leaves undefined)
// is not seen.
bool watch_settled(const EmptyWatch& w, std::int64_t before);

// Whether `device` is a mount of a file system whose directories change
// their times with every entry made in them (/proc/self/mountinfo, read
// once per process).
bool times_follow_entries(dev_t device);

}  // namespace progcache::detail
