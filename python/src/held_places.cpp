// The check behind progcache.torch's C++ builds (docs/torch.md, "The C++
// builds"): a build is served only while every header it read has its bytes
// and every place where an include operand could have been found has its
// presence. A warm start checks thousands of places per build, a dozen or
// more builds per process; written in Python, the loop alone cost more than
// the rest of the served start. Here it runs without the GIL, with one
// process-wide memo:
//
// - a file's SHA-256 by its stat identity (device, inode, size, times):
//   hashed once per process while the identity holds, and, where the
//   caller names a file for them (keep_header_digests: a private root's),
//   once per boot for every process: the digests are kept there as the
//   NVRTC path's include scan keeps its own (ScanMemo), under the identity
//   of the mount the file was read through (statx's unique mount ID, Linux
//   6.8 and later: never given to another mount while the machine runs)
//   instead of the device number (which a file system mounted later may
//   be given, holding other bytes at the same inode, size and times), and
//   for this boot only (the kernel's boot ID); where the kernel gives no
//   unique mount ID, nothing is kept for other processes;
// - a place seen empty by the identity of the deepest directory on its
//   path that exists. A place can fill only if an entry is added to that
//   directory, which changes its modification and change times (the change
//   time cannot be set back). So it is known empty while that identity is
//   what it was before the place was looked at: one stat per directory, not
//   per place, in every later check. Directories changed within the clock
//   slack are not trusted (a change in the same clock tick keeps the times),
//   nor directories on file systems whose times do not follow their entries
//   (procfs, network and FUSE file systems, FAT), nor places reached through
//   an existing entry that is not a directory (a symbolic link can be made
//   to lead elsewhere without changing it).
//
// What holds a header is what g++ opens as one: any entry that stat(2)
// reaches and that is not a directory (a FIFO, a device, a link to
// /dev/null are included as files; a dangling link or a directory is
// skipped). A place that cannot be looked at (no permission, a loop of
// links, a name too long) fails the compile, so it holds nothing a served
// build could stand for: the manifest does not hold.
//
// Every call keeps the GIL: a thread that forks (os.fork) then never leaves
// the memo's lock held in the child, and a daemon thread at interpreter exit
// is never made to take the GIL back from C++. The loop in C++ is what
// makes the check cheap, not threads.
#include <fcntl.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compile/depfile.h"
#include "compile/deps_manifest.h"
#include "compile/empty_places.h"
#include "compile/include_places.h"
#include "compile/scan_files.h"
#include "progcache/bytes.h"
#include "progcache/hash.h"

namespace nb = nanobind;

namespace {

using progcache::detail::boot_id;
using progcache::detail::FileStamp;
using progcache::detail::join;
using progcache::detail::now_ns;
using progcache::detail::ns_of;
using progcache::detail::stamp_of;

// A file system may stamp a change with whole seconds: a directory (or a
// file) is trusted to change its times with every change only once its last
// change is older than this when a check begins (the include scan's window).
constexpr std::int64_t k_dir_slack_ns = progcache::detail::k_recent_ns;

// stat(2) or lstat(2); a name no file system accepts (a NUL byte) is an
// error other than "not there", as Python's os.stat makes it.
int stat_path(const std::string& path, struct stat& st, bool follow) {
  if (path.find('\0') != std::string::npos) return EINVAL;
  const int rc = follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
  return rc == 0 ? 0 : errno;
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U  // Linux 6.8; older headers lack the name
#endif

// The identity a digest is kept under for other processes: the file's, with
// the unique ID of the mount it was reached through in place of the device
// number; nullopt where the kernel gives none, or the file is no longer the
// one `id` describes.
std::optional<FileStamp> kept_identity(const std::string& path, const FileStamp& id) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_BASIC_STATS | STATX_MNT_ID_UNIQUE, &sx) != 0 ||
      (sx.stx_mask & STATX_MNT_ID_UNIQUE) == 0) {
    return std::nullopt;
  }
  auto ns = [](const struct statx_timestamp& t) { return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; };
  const FileStamp now{makedev(sx.stx_dev_major, sx.stx_dev_minor), sx.stx_ino, static_cast<std::int64_t>(sx.stx_size),
                      ns(sx.stx_mtime), ns(sx.stx_ctime)};
  if (!(now == id)) return std::nullopt;
  return FileStamp{sx.stx_mnt_id, id.ino, id.size, id.mtime, id.ctime};
}

// What a place holds now, as g++ sees it.
enum class Place { header, none, unknown };

Place place_now(const std::string& path) {
  struct stat st {};
  const int err = stat_path(path, st, true);
  // A directory holds no header, but a directory NAME.gch holds g++'s
  // precompiled headers for NAME, one of which it may use.
  if (err == 0) return S_ISDIR(st.st_mode) && !path.ends_with(".gch") ? Place::none : Place::header;
  // A name with a NUL byte reaches no file (the scan can record one from
  // a branch not taken).
  return err == ENOENT || err == ENOTDIR || err == EINVAL ? Place::none : Place::unknown;
}

struct DirId {
  std::uint64_t dev = 0, ino = 0;
  std::int64_t mtime = 0, ctime = 0;
  friend bool operator==(const DirId&, const DirId&) = default;
};

// A directory's identity, or nullopt where the path is not one.
std::optional<DirId> dir_id(const std::string& path) {
  struct stat st {};
  if (stat_path(path, st, true) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return DirId{st.st_dev, st.st_ino, ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

struct Memo {
  std::mutex mu;
  std::unordered_map<std::string, std::pair<FileStamp, std::string>> digests;  // path -> (identity, hex)
  std::unordered_map<std::string, std::pair<std::string, DirId>> absent;       // place -> (directory, identity)
  // The digests kept for every process (keep_header_digests), and whether
  // this process may write them.
  progcache::detail::ScanMemo* kept = nullptr;
  bool write_kept = false;
};

Memo& memo() {
  static Memo* m = new Memo;  // never destroyed: checks may run in threads at exit
  return *m;
}

// Whether a device's directories change their times with every entry made
// in them (the library's one rule: compile/empty_places.h).
bool local_device(std::uint64_t dev) {
  return progcache::detail::times_follow_entries(static_cast<dev_t>(dev));
}

// SHA-256 (hex) of a regular file's bytes, remembered by its identity;
// nullopt when it is not one, cannot be read, or changed while read.
std::optional<std::string> digest(const std::string& path) {
  struct stat st {};
  if (stat_path(path, st, true) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const FileStamp id = stamp_of(st);
  Memo& m = memo();
  progcache::detail::ScanMemo* kept = nullptr;
  {
    std::lock_guard lock(m.mu);
    auto it = m.digests.find(path);
    if (it != m.digests.end() && it->second.first == id) return it->second.second;
    kept = m.kept;
  }
  const std::int64_t started = now_ns();
  const bool settled = std::max(id.mtime, id.ctime) < started - k_dir_slack_ns && local_device(id.dev);
  const std::optional<FileStamp> kept_id =
      kept != nullptr && settled ? kept_identity(path, id) : std::optional<FileStamp>();
  if (kept_id) {
    if (auto f = kept->find(path, *kept_id); f && f->sha256.size() == 32) {
      std::string hex = progcache::to_hex(f->sha256);
      std::lock_guard lock(m.mu);
      m.digests[path] = {id, hex};
      return hex;
    }
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode) || stamp_of(opened) != id) {
    ::close(fd);  // replaced between the stat and the open (by a device that never ends, say)
    return std::nullopt;
  }
  progcache::Sha256 sha;
  std::vector<char> buf(std::size_t{1} << 20);
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    sha.update(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  }
  ::close(fd);
  struct stat after {};
  ok = ok && stat_path(path, after, true) == 0 && stamp_of(after) == id;
  if (!ok) return std::nullopt;
  const auto raw = sha.finish();
  std::string hex = progcache::digest_hex(raw);
  // Remembered only where the identity must change with the bytes: a file
  // changed within the slack, or on a file system with coarse or cached
  // times, may be written again with the same size and times.
  if (settled) {
    {
      std::lock_guard lock(m.mu);
      m.digests[path] = {id, hex};
    }
    if (kept_id) kept->add(path, {*kept_id, std::string(reinterpret_cast<const char*>(raw.data()), raw.size()), {}});
  }
  return hex;
}

// Python's os.path.split: the head keeps no trailing slashes unless it is
// all slashes.
std::pair<std::string, std::string> split(const std::string& p) {
  const auto cut = p.rfind('/');
  if (cut == std::string::npos) return {"", p};
  std::string head = p.substr(0, cut + 1);
  std::string tail = p.substr(cut + 1);
  if (head.find_first_not_of('/') != std::string::npos) {
    while (!head.empty() && head.back() == '/') head.pop_back();
  }
  return {head, tail};
}

// One check: directories' identities read once, and the places it saw
// empty (with their deepest existing directory) to remember after.
class Check {
 public:
  const std::optional<DirId>& dir(const std::string& path) {
    auto it = m_dirs.find(path);
    if (it == m_dirs.end()) it = m_dirs.emplace(path, dir_id(path)).first;
    return it->second;
  }

  bool remembered(const std::string& place) {
    std::optional<std::pair<std::string, DirId>> known;
    {
      Memo& m = memo();
      std::lock_guard lock(m.mu);
      auto it = m.absent.find(place);
      if (it != m.absent.end()) known = it->second;
    }
    if (!known) return false;
    const auto& now = dir(known->first);
    return now && *now == known->second;
  }

  // Whether a place holds no header now (a place that is a directory or a
  // dangling link is not one, as the compiler sees it).
  bool still_absent(const std::string& place) {
    if (remembered(place)) return true;
    if (place.empty() || place.front() != '/' || place.size() > PATH_MAX) return place_now(place) == Place::none;
    auto [parent, child] = split(place);
    while (!dir(parent)) {
      auto [up, name] = split(parent);
      if (up == parent) return place_now(place) == Place::none;
      parent = up;
      child = name;
    }
    struct stat st {};
    const int err = stat_path(join(parent, child), st, false);
    if (err == ENOENT) {
      m_seen.emplace_back(place, parent);
      return true;
    }
    return place_now(place) == Place::none;
  }

  // Remembers the places this check saw empty, by directories on local file
  // systems, last changed well before the check began, whose identity read
  // before the places were looked at is still theirs after.
  void remember(std::int64_t started) {
    if (m_seen.empty()) return;
    const std::int64_t limit = started - k_dir_slack_ns;
    std::unordered_map<std::string, std::optional<DirId>> after;
    std::vector<std::pair<std::string, std::pair<std::string, DirId>>> keep;
    for (const auto& [place, parent] : m_seen) {
      const auto& before = m_dirs[parent];
      if (!before || !local_device(before->dev) || std::max(before->mtime, before->ctime) >= limit) continue;
      if (progcache::detail::entries_hidden(parent))
        continue;  // fscrypt: names shown with a key, the directory untouched
      auto it = after.find(parent);
      if (it == after.end()) it = after.emplace(parent, dir_id(parent)).first;
      if (it->second != before) continue;
      keep.push_back({place, {parent, *before}});
    }
    Memo& m = memo();
    std::lock_guard lock(m.mu);
    for (auto& [place, where] : keep) m.absent[place] = std::move(where);
  }

 private:
  std::unordered_map<std::string, std::optional<DirId>> m_dirs;
  std::vector<std::pair<std::string, std::string>> m_seen;
};

// A str as the file system's bytes (surrogate escapes back to the bytes
// they stand for, as os.stat encodes a name); nullopt for anything else.
std::optional<std::string> fs_string(nb::handle h) {
  if (!PyUnicode_CheckExact(h.ptr())) return std::nullopt;
  if (PyUnicode_IS_ASCII(h.ptr())) {  // the common case, the same bytes in any file system encoding
    Py_ssize_t size = 0;
    const char* ascii = PyUnicode_AsUTF8AndSize(h.ptr(), &size);  // the str's own buffer
    if (ascii != nullptr) return std::string(ascii, static_cast<std::size_t>(size));
    PyErr_Clear();
  }
  PyObject* bytes = PyUnicode_EncodeFSDefault(h.ptr());
  if (bytes == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  std::string out(PyBytes_AS_STRING(bytes), static_cast<std::size_t>(PyBytes_GET_SIZE(bytes)));
  Py_DECREF(bytes);
  return out;
}

// [path, sha256] pairs and [path, present] pairs: what a manifest holds.
struct Lists {
  std::vector<std::pair<std::string, std::string>> deps;
  std::vector<std::pair<std::string, bool>> probes;
};

// Exact lists and strs only: their items are read with no Python code run,
// so nothing can change them under the loop. nullopt for any other shape.
std::optional<Lists> lists_of(nb::handle deps, nb::handle probes) {
  if (!PyList_CheckExact(deps.ptr()) || !PyList_CheckExact(probes.ptr())) return std::nullopt;
  auto pair = [](PyObject* list, Py_ssize_t i) -> std::optional<std::pair<PyObject*, PyObject*>> {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (!PyList_CheckExact(item) || PyList_GET_SIZE(item) != 2) return std::nullopt;
    return std::pair{PyList_GET_ITEM(item, 0), PyList_GET_ITEM(item, 1)};
  };
  Lists out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(deps.ptr()); ++i) {
    auto item = pair(deps.ptr(), i);
    if (!item) return std::nullopt;
    auto path = fs_string(item->first);
    auto sum = fs_string(item->second);
    if (!path || !sum) return std::nullopt;
    out.deps.emplace_back(std::move(*path), std::move(*sum));
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(probes.ptr()); ++i) {
    auto item = pair(probes.ptr(), i);
    if (!item || !PyBool_Check(item->second)) return std::nullopt;
    auto path = fs_string(item->first);
    if (!path) return std::nullopt;
    out.probes.emplace_back(std::move(*path), item->second == Py_True);
  }
  return out;
}

// A manifest as stored: a header line, then one record per header read
// ('h', its path, its SHA-256 in 64 hex digits) and per place ('p' held a
// header, 'a' held none, its path), each path framed by its length (four
// bytes, little-endian), so that any byte of a name survives, and '.' last
// (a manifest cut short anywhere is damaged, not a shorter one). Read here in
// C++ as it comes from the store: a warm start's manifests name tens of
// thousands of places, which as JSON cost more to decode than to check.
constexpr std::string_view k_manifest_magic = "progcache-torch-manifest 1\n";
constexpr std::size_t k_hex_sha256 = 64;

bool is_hex_sha256(std::string_view s) {
  return s.size() == k_hex_sha256 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::optional<std::string> encode(const Lists& l) {
  std::string out(k_manifest_magic);
  auto put = [&out](char kind, const std::string& path) {
    if (path.size() > UINT32_MAX) return false;
    const auto n = static_cast<std::uint32_t>(path.size());
    out.push_back(kind);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xffU));
    out += path;
    return true;
  };
  for (const auto& [path, sum] : l.deps) {
    if (!is_hex_sha256(sum) || !put('h', path)) return std::nullopt;
    out += sum;
  }
  for (const auto& [place, present] : l.probes) {
    if (!put(present ? 'p' : 'a', place)) return std::nullopt;
  }
  out.push_back('.');
  return out;
}

// nullopt for anything encode() did not write (a damaged manifest).
std::optional<Lists> decode(std::string_view b) {
  if (b.substr(0, k_manifest_magic.size()) != k_manifest_magic) return std::nullopt;
  b.remove_prefix(k_manifest_magic.size());
  Lists out;
  while (b != ".") {
    const char kind = b.empty() ? '\0' : b.front();
    if ((kind != 'h' && kind != 'p' && kind != 'a') || b.size() < 5) return std::nullopt;
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(b[1 + i])) << (8 * i);
    b.remove_prefix(5);
    if (b.size() < n) return std::nullopt;
    std::string path(b.substr(0, n));
    b.remove_prefix(n);
    if (kind == 'h') {
      if (b.size() < k_hex_sha256 || !is_hex_sha256(b.substr(0, k_hex_sha256))) return std::nullopt;
      out.deps.emplace_back(std::move(path), std::string(b.substr(0, k_hex_sha256)));
      b.remove_prefix(k_hex_sha256);
    } else {
      out.probes.emplace_back(std::move(path), kind == 'p');
    }
  }
  return out;
}

bool holds(const Lists& l) {
  for (const auto& [path, sum] : l.deps) {
    if (digest(path) != sum) return false;
  }
  const std::int64_t started = now_ns();
  Check check;
  for (const auto& [place, present] : l.probes) {
    if (present ? place_now(place) != Place::header : !check.still_absent(place)) return false;
  }
  check.remember(started);
  return true;
}

// Writes the kept digests if this process added any and may write them.
void save_kept() {
  Memo& m = memo();
  progcache::detail::ScanMemo* kept = nullptr;
  {
    std::lock_guard lock(m.mu);
    if (m.write_kept) kept = m.kept;
  }
  if (kept == nullptr) return;
  try {
    kept->save();  // best effort: a memo not written costs the next process reads
  } catch (const std::exception&) {
  }
}

// A path's identity for a memo other processes use: the unique ID of the
// mount it is reached through, inode, size, modification and change times,
// file type; nullopt where it cannot be looked at or the kernel gives no
// unique mount ID (a mount ID reused by a later mount could stand for other
// bytes at the same inode, size and times).
std::optional<std::array<std::int64_t, 6>> memo_identity(const std::string& path, bool follow) {
  if (path.find('\0') != std::string::npos) return std::nullopt;
  struct statx sx {};
  // AT_STATX_FORCE_SYNC: a network or FUSE file system asks its server
  // instead of answering from attributes it cached (local ones answer as
  // always).
  const int flags = AT_STATX_FORCE_SYNC | (follow ? 0 : AT_SYMLINK_NOFOLLOW);
  if (::statx(AT_FDCWD, path.c_str(), flags, STATX_BASIC_STATS | STATX_MNT_ID_UNIQUE, &sx) != 0 ||
      (sx.stx_mask & STATX_MNT_ID_UNIQUE) == 0) {
    return std::nullopt;
  }
  auto ns = [](const struct statx_timestamp& t) { return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; };
  return std::array<std::int64_t, 6>{static_cast<std::int64_t>(sx.stx_mnt_id),
                                     static_cast<std::int64_t>(sx.stx_ino),
                                     static_cast<std::int64_t>(sx.stx_size),
                                     ns(sx.stx_mtime),
                                     ns(sx.stx_ctime),
                                     static_cast<std::int64_t>(sx.stx_mode & S_IFMT)};
}

}  // namespace

void bind_held_places(nb::module_& m) {
  m.def(
      "file_sha256",
      [](nb::handle name) -> std::optional<std::string> {
        auto path = fs_string(name);
        if (!path) throw nb::type_error("file_sha256: the path must be a str");
        return digest(*path);
      },
      nb::arg("path"),
      "SHA-256 (hex) of a regular file, remembered for the process by its stat identity; None when the path "
      "is not a readable regular file or changed while read.");
  m.def(
      "keep_header_digests",
      [](std::optional<std::string> file, bool write) {
        Memo& m = memo();
        std::lock_guard lock(m.mu);
        m.kept = file && !file->empty() && !boot_id().empty() ? &progcache::detail::ScanMemo::for_file(*file, boot_id())
                                                              : nullptr;
        m.write_kept = write;
      },
      nb::arg("file").none(), nb::arg("write") = true,
      "Keeps the files' digests for every process of this boot in `file` (a private directory's: it is read only "
      "when it is this user's and no one else may write it), by the unique ID of the mount each file was read "
      "through (none where the kernel gives no such ID); written when a check or save_header_digests() added "
      "some and `write`. None keeps them for this process alone.");
  m.def(
      "save_header_digests", [] { save_kept(); },
      "Writes the digests kept for every process, if this process added any (see keep_header_digests).");
  m.def(
      "encode_manifest",
      [](nb::handle deps, nb::handle probes) -> std::optional<nb::bytes> {
        auto l = lists_of(deps, probes);
        if (!l) return std::nullopt;
        auto blob = encode(*l);
        if (!blob) return std::nullopt;
        return nb::bytes(blob->data(), blob->size());
      },
      nb::arg("deps").none(), nb::arg("probes").none(),
      "A manifest as stored, from [path, sha256 hex] pairs (the headers read) and [place, present] pairs (the "
      "places an include operand could be found); None for lists of any other shape.");
  m.def(
      "keeps_digests_for_other_processes",
      [](nb::handle name) {
        auto path = fs_string(name);
        if (!path) throw nb::type_error("keeps_digests_for_other_processes: the path must be a str");
        struct stat st {};
        return !boot_id().empty() && stat_path(*path, st, true) == 0 && kept_identity(*path, stamp_of(st)).has_value();
      },
      nb::arg("path"), "Whether this kernel gives the identity a file's digest is kept under for other processes.");
  m.def(
      "memo_identities",
      [](nb::handle paths, bool follow) -> nb::list {
        if (!PyList_CheckExact(paths.ptr())) throw nb::type_error("memo_identities: the paths must be a list");
        nb::list out;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(paths.ptr()); ++i) {
          auto path = fs_string(PyList_GET_ITEM(paths.ptr(), i));
          const auto id = path ? memo_identity(*path, follow) : std::nullopt;
          if (!id) {
            out.append(nb::none());
            continue;
          }
          nb::list one;
          for (const std::int64_t v : *id) one.append(v);
          out.append(one);
        }
        return out;
      },
      nb::arg("paths"), nb::arg("follow") = true,
      "For each path, [unique mount ID, inode, size, mtime ns, ctime ns, file type] as statx gives them "
      "(following links, or of the link itself); None where the path cannot be looked at or the kernel gives no "
      "unique mount ID (Linux 6.8 and later do).");
  m.def(
      "boot_id", [] { return boot_id(); }, "This boot's ID (the kernel's), or \"\" where it cannot be read.");
  m.def(
      "manifest_holds",
      [](nb::handle manifest) {
        if (!PyBytes_CheckExact(manifest.ptr())) return false;
        auto l = decode(std::string_view(PyBytes_AS_STRING(manifest.ptr()),
                                         static_cast<std::size_t>(PyBytes_GET_SIZE(manifest.ptr()))));
        if (!l) return false;
        const bool held = holds(*l);
        save_kept();
        return held;
      },
      nb::arg("manifest").none(),
      "Whether every header a manifest (encode_manifest) names has those bytes and every place it names holds "
      "a header exactly when it did; False for bytes encode_manifest did not write.");
  m.def(
      "header_at",
      [](nb::handle name) -> std::optional<bool> {
        auto place = fs_string(name);
        if (!place) throw nb::type_error("header_at: the place must be a str");
        const Place now = place_now(*place);
        if (now == Place::unknown) return std::nullopt;
        return now == Place::header;
      },
      nb::arg("place"),
      "Whether a place holds what g++ would open as a header (anything but a directory that a path reaches); "
      "None where it cannot be looked at (no permission, a loop of links, a name too long).");
  m.def(
      "include_places",
      [](nb::handle files, nb::handle dirs, bool precompiled, nb::handle implicit) -> nb::object {
        auto strings = [](nb::handle list, const char* what) {
          if (!PyList_CheckExact(list.ptr())) throw nb::type_error(what);
          std::vector<std::string> out;
          for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.ptr()); ++i) {
            auto one = fs_string(PyList_GET_ITEM(list.ptr(), i));
            if (!one) throw nb::type_error(what);
            out.push_back(std::move(*one));
          }
          return out;
        };
        progcache::detail::IncludeSearch search{
            strings(dirs, "include_places: the directories must be a list of str"), precompiled,
            strings(implicit, "include_places: the implicit names must be a list of str")};
        auto found = progcache::detail::include_places(
            strings(files, "include_places: the files must be a list of str"), search);
        if (!found.ok()) return nb::none();
        auto str = [](const std::string& path) {
          return nb::steal(PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
        };
        nb::dict places;
        for (const auto* list : {&found->headers, &found->precompiled}) {
          for (const auto& place : *list) {
            const Place now = place_now(place);
            if (now == Place::unknown) return nb::none();
            places[str(place)] = nb::bool_(now == Place::header);
          }
        }
        nb::list computed;
        for (const auto& c : found->computed) computed.append(str(c));
        return nb::make_tuple(places, computed);
      },
      nb::arg("files"), nb::arg("dirs"), nb::arg("precompiled"), nb::arg("implicit"),
      "For every include operand of every file (the include lexer's: any #if branch, line splices and comments "
      "read as the preprocessor reads them), whether each place it could be found holds a header now: the "
      "including file's directory for a quoted name, then `dirs`; with `precompiled` (g++) also NAME.gch in each, "
      "a directory of them included; and each of `implicit` (the compiler's own first include, g++'s stdc-predef.h) "
      "in every one of `dirs`. Returns (places, computed), computed naming each include through a macro as "
      "FILE:LINE; None where a file cannot be read or a place cannot be looked at.");
  m.def(
      "parse_depfile",
      [](nb::handle text) -> nb::object {
        auto bytes = fs_string(text);
        if (!bytes) throw nb::type_error("parse_depfile: the text must be a str");
        auto files = progcache::detail::parse_depfile(*bytes);
        if (!files.ok()) return nb::none();
        nb::list out;
        for (const auto& f : *files) {
          out.append(nb::steal(PyUnicode_DecodeFSDefaultAndSize(f.data(), static_cast<Py_ssize_t>(f.size()))));
        }
        return out;
      },
      nb::arg("text"),
      "The files a make-style dependency file (g++'s -MD) names, every prerequisite of every rule once, in "
      "order; None for text that holds no rule.");
  m.def(
      "place_remembered_empty",
      [](nb::handle name) {
        auto place = fs_string(name);
        if (!place) throw nb::type_error("place_remembered_empty: the place must be a str");
        return Check().remembered(*place);
      },
      nb::arg("place"), "Whether a place is known empty without looking at it (its directory unchanged).");
  m.def(
      "on_local_file_system",
      [](nb::handle name) {
        auto path = fs_string(name);
        if (!path) throw nb::type_error("on_local_file_system: the path must be a str");
        struct stat st {};
        return stat_path(*path, st, true) == 0 && local_device(st.st_dev);
      },
      nb::arg("path"), "Whether a path lies on a file system whose directories' times follow their entries.");
}
