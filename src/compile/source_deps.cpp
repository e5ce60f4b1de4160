#include "source_deps.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string_view>

#include "deps_manifest.h"
#include "include_lexer.h"
#include "progcache/hash.h"
#include "progcache/key.h"
#include "scan_files.h"

namespace progcache {

namespace detail {

namespace {

class Scanner {
 public:
  Scanner(const Program& p, std::vector<std::string> include_dirs, bool no_source_include, ScanMemo& memo,
          CheckLog& log)
      : m_program(p),
        m_include_dirs(std::move(include_dirs)),
        m_no_source_include(no_source_include),
        m_memo(memo),
        m_log(log) {
    for (const auto& d : m_include_dirs) m_covered.push_back(real_or_normal(d));
  }

  // Scans `text`, the content of `file` (the program itself when `is_source`).
  Status scan_text(std::string_view text, const std::string& file, bool is_source) {
    return scan_directives(directives(text), file, is_source);
  }

  Status scan_directives(const std::vector<Directive>& found, const std::string& file, bool is_source) {
    const std::string dir = parent_of(file);
    for (const Directive& d : found) {
      if (d.kind == Operand::computed) {
        if (covered(file)) {
          // It can name any file of the -I directories: fingerprint them
          // whole (once).
          m_needs_trees = true;
          continue;
        }
        return invalid_argument(
            "'" + file + "' line " + std::to_string(d.line) + ": '#include " + d.name +
            "' names its header through a macro, so progcache cannot tell which file the compiler reads. Put the "
            "directory that holds the header on the include path (-I DIR: progcache then fingerprints all of it), "
            "or pass the header as an in-memory header");
      }
      if (d.name.empty()) continue;
      // In-memory headers of that name are part of the key already; scan
      // what they include too.
      for (const auto& h : m_program.headers) {
        if (h.name == d.name && m_memory_seen.insert(h.name).second) {
          PROGCACHE_TRY(scan_text(h.content, h.name, false));
        }
      }
      std::vector<std::string> candidates;
      if (d.name.starts_with('/')) {
        candidates.push_back(d.name);
      } else {
        if (d.kind == Operand::quoted && !(is_source && m_no_source_include)) candidates.push_back(join(dir, d.name));
        for (const auto& inc : m_include_dirs) candidates.push_back(join(inc, d.name));
      }
      for (const auto& c : candidates) PROGCACHE_TRY(consult(c, d.name));
    }
    return {};
  }

  // Records what is at `path` (absent, a file and its content, or something
  // else) and follows a file's own includes.
  Status consult(const std::string& path, const std::string& operand) {
    const std::string key = normal(path, /*keep_dotdot=*/true);
    if (!m_seen.insert(key).second) return {};
    struct stat st {};
    if (identity_stat(path, st) != 0) {
      // Nothing the compiler can open: not there, or not reachable by this
      // process (a directory on the way it may not search, a loop of
      // links). NVRTC goes on to the next directory of the search path, as
      // for a missing file, and so does the key. Whether a directory is
      // searchable depends on who asks: manifests are kept per credentials
      // (manifest::key_of).
      add_field(m_sha, "absent", key);
      m_log.empty_place(key);
      return {};
    }
    m_log.exists(key, st);
    if (!S_ISREG(st.st_mode)) {
      // A directory or a FIFO where a header could be: the compiler cannot
      // use it; record its kind, never open it.
      add_field(m_sha, "other", key + "|" + std::to_string(st.st_mode & S_IFMT));
      return {};
    }
    // A file this process cannot open, NVRTC skips as if it were not there.
    // Asked before the memo too: the memo is shared by every user of the
    // root, and another may read what this one may not. A change of its
    // mode changes its ctime, which the manifest checks.
    if (!may_read(path) && (errno == EACCES || errno == EPERM)) {
      add_field(m_sha, "unreadable", key);
      return {};
    }
    const FileStamp stamp = stamp_of(st);
    std::optional<ScannedFile> known = m_memo.find(key, stamp);
    if (!known) {
      PROGCACHE_ASSIGN_OR_RETURN(std::string content, read_regular(path));
      const Digest256 d = sha256(content);
      known.emplace();
      known->stamp = stamp;
      known->sha256.assign(as_view(d));
      known->directives = directives(content);
      // Only files settled for two seconds are remembered (see ScanMemo);
      // and only if the file was not replaced between the stat and the read.
      struct stat after {};
      const std::int64_t now = now_ns();
      if (identity_stat(path, after) == 0 && stamp_of(after) == stamp && now - stamp.mtime >= k_recent_ns &&
          now - stamp.ctime >= k_recent_ns) {
        m_memo.add(key, *known);
      }
    }
    add_field(m_sha, "file", key);
    add_field(m_sha, "sha256", known->sha256);
    m_files.push_back({key, to_hex(known->sha256), operand});
    return scan_directives(known->directives, path, false);
  }

  Sha256& sha() { return m_sha; }
  bool needs_trees() const { return m_needs_trees; }
  std::vector<DepFile> take_files() { return std::move(m_files); }

 private:
  // On resolved paths: "inc/link/../x" names wherever the link leads, and
  // "./a.h" lies under ".".
  bool covered(const std::string& file) const {
    const std::string n = real_or_normal(file);
    return std::any_of(m_covered.begin(), m_covered.end(), [&](const std::string& d) { return under(n, d); });
  }

  const Program& m_program;
  std::vector<std::string> m_include_dirs;
  std::vector<std::string> m_covered;
  bool m_no_source_include;
  ScanMemo& m_memo;
  CheckLog& m_log;
  bool m_needs_trees = false;
  std::set<std::string> m_seen;
  std::set<std::string> m_memory_seen;
  std::vector<DepFile> m_files;
  Sha256 m_sha;
};

// One line per file below `dir` (symbolic links followed, each directory
// visited once): relative path, type, size, mtime, ctime, device, inode; a
// file changed in the last two seconds adds its content digest.
// `log` (the include scan's): also a missing directory is fine, recorded as
// absent, since NVRTC skips it; for fingerprint_directories() it is an error.
Status fingerprint_tree(const std::string& dir, Sha256& sha, CheckLog* log = nullptr) {
  std::vector<std::string> lines;
  std::set<std::pair<dev_t, ino_t>> visited;
  const std::int64_t now = now_ns();
  std::vector<std::string> stack{""};
  struct stat root {};
  if (identity_stat(dir, root) != 0) {
    if (log == nullptr) return errno_status(errno, "cannot read include directory", dir);
    // NVRTC skips an include directory that is not there, or that this
    // process cannot reach: so does the fingerprint, and one created (or
    // opened to it) later changes it.
    add_field(sha, "tree-absent", dir);
    log->empty_place(normal(dir, /*keep_dotdot=*/true));
    return {};
  }
  if (!S_ISDIR(root.st_mode)) return invalid_argument("include directory '" + dir + "' is not a directory");
  visited.insert({root.st_dev, root.st_ino});
  if (log != nullptr) log->exists(normal(dir, /*keep_dotdot=*/true), root);
  while (!stack.empty()) {
    const std::string rel = stack.back();
    stack.pop_back();
    const std::string abs = rel.empty() ? dir : join(dir, rel);
    DIR* d = ::opendir(abs.c_str());
    if (d == nullptr) {
      // A directory this process may neither list nor search: the compiler
      // can open nothing below it either. One it may search but not list
      // could hold files the compiler opens by name: that cannot be keyed.
      struct stat dot {};
      if ((errno == EACCES || errno == EPERM) && ::stat((abs + "/.").c_str(), &dot) != 0 && errno == EACCES) {
        lines.push_back(rel + "|closed");  // "." cannot be looked up in it: not searchable
        continue;
      }
      return errno_status(errno, "cannot read include directory", abs);
    }
    struct DirCloser {
      DIR* d;
      ~DirCloser() { ::closedir(d); }
    } closer{d};
    const int dfd = ::dirfd(d);
    errno = 0;
    while (const struct dirent* ent = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe): one stream, one thread
      const std::string_view name = ent->d_name;
      if (name == "." || name == "..") continue;
      std::string child_rel = rel.empty() ? std::string(name) : rel + "/" + std::string(name);
      struct stat st {};
      const std::string child_path = normal(join(dir, child_rel), /*keep_dotdot=*/true);
      dev_t device = 0;  // the fingerprint names the device (a key must outlive the boot)
      if (identity_stat(dfd, ent->d_name, 0, st, &device) != 0) {
        lines.push_back(child_rel + "|dangling");  // a broken link: the compiler finds nothing there
        if (log != nullptr) log->absent(child_path);
        errno = 0;  // readdir's end is told by errno: this failure is not its
        continue;
      }
      if (log != nullptr) log->exists(child_path, st);
      if (S_ISDIR(st.st_mode)) {
        if (visited.insert({st.st_dev, st.st_ino}).second) stack.push_back(child_rel);
        lines.push_back(child_rel + "|dir");
        continue;
      }
      std::string l = child_rel + "|" + std::to_string(st.st_mode & S_IFMT) + "|" + std::to_string(st.st_size) + "|" +
                      std::to_string(ns_of(st.st_mtim)) + "|" + std::to_string(ns_of(st.st_ctim)) + "|" +
                      std::to_string(device) + "|" + std::to_string(st.st_ino);
      if (S_ISREG(st.st_mode)) {
        // Whether the compiler can read it depends on who asks, and keys are
        // shared by every user of a store: every file's line says whether
        // this process can. A file whose permission bits let every class
        // read it is readable to all; only the others are opened to tell
        // (no reasoning about owners, groups, capabilities or user
        // namespaces, where the kernel's answer is the only exact one). Not
        // every file: the compiler opens only what it includes, and an open
        // can block (a FUSE server), cost a round trip (NFS) or break a
        // lease. A recent file is read, or found unreadable.
        const std::string file = join(dir, child_rel);
        constexpr mode_t k_all_read = S_IRUSR | S_IRGRP | S_IROTH;
        const bool recent = now - ns_of(st.st_mtim) < k_recent_ns || now - ns_of(st.st_ctim) < k_recent_ns;
        if ((recent || (st.st_mode & k_all_read) != k_all_read) && !may_read(file) &&
            (errno == EACCES || errno == EPERM)) {
          l += "|unreadable";
        } else if (recent) {
          PROGCACHE_ASSIGN_OR_RETURN(std::string content, read_regular(file));
          l += "|" + digest_hex(sha256(content));
        }
      }
      lines.push_back(std::move(l));
      errno = 0;
    }
    if (errno != 0) return errno_status(errno, "cannot read include directory", abs);
  }
  std::sort(lines.begin(), lines.end());
  add_field(sha, "tree", dir);
  for (const auto& l : lines) add_field(sha, "entry", l);
  return {};
}

}  // namespace

Result<SourceDeps> scan_source_deps(const Program& p, const std::string& state_dir) {
  // A source with no directive, compiled with no option that could include
  // a file (every spelling of -include names "include"), reads nothing: its
  // digest is the one the scan below gives such a program, without parsing
  // options or building a scanner.
  if (!may_hold_directives(p.code) && std::none_of(p.options.begin(), p.options.end(), [](const std::string& o) {
        return o.find("include") != std::string::npos;
      })) {
    static const std::string k_nothing_read = [] {
      Sha256 sha;
      add_field(sha, "deps-v1", "");
      return digest_hex(sha.finish());
    }();
    return SourceDeps{k_nothing_read, {}};
  }
  // The one option parser decides what -I and -include mean.
  PROGCACHE_ASSIGN_OR_RETURN(auto opts, canonicalize_options(p.options, /*have_extra_digest=*/true));
  std::vector<std::string> include_dirs, pre_includes;
  bool no_source_include = false;
  for (const auto& o : opts) {
    if (o.starts_with("--include-path="))
      include_dirs.push_back(o.substr(15));
    else if (o.starts_with("--pre-include="))
      pre_includes.push_back(o.substr(14));
    else if (o == "--no-source-include")
      no_source_include = true;
  }
  // A program that includes nothing is scanned faster than a manifest is
  // read: manifests are for programs with headers.
  const bool includes = !pre_includes.empty() || !directives(p.code).empty();
  const std::string manifest_key = includes ? manifest::key_of(p, opts) : std::string();
  if (!manifest_key.empty()) {
    if (auto known = manifest::check(state_dir, manifest_key)) return std::move(*known);
  }
  ScanMemo& memo = ScanMemo::for_dir(state_dir);
  CheckLog log;
  Scanner scanner(p, include_dirs, no_source_include, memo, log);
  add_field(scanner.sha(), "deps-v1", "");
  // A pre-include is looked for as written (relative to the working
  // directory) and in each -I directory.
  for (const auto& f : pre_includes) {
    PROGCACHE_TRY(scanner.consult(f, f));
    if (!f.starts_with('/')) {
      for (const auto& d : include_dirs) PROGCACHE_TRY(scanner.consult(join(d, f), f));
    }
  }
  PROGCACHE_TRY(scanner.scan_text(p.code, p.name, /*is_source=*/true));
  if (scanner.needs_trees()) {
    // A directory inside another is covered by the outer one's fingerprint.
    std::vector<std::string> norm;
    norm.reserve(include_dirs.size());
    for (const auto& d : include_dirs) norm.push_back(real_or_normal(d));
    for (std::size_t i = 0; i < include_dirs.size(); ++i) {
      bool nested = false;
      for (std::size_t j = 0; j < include_dirs.size(); ++j) {
        nested |= j != i && norm[j] != norm[i] && under(norm[i], norm[j]);
      }
      if (!nested) PROGCACHE_TRY(fingerprint_tree(include_dirs[i], scanner.sha(), &log));
    }
  }
  memo.save();
  SourceDeps out;
  out.digest = digest_hex(scanner.sha().finish());
  out.files = scanner.take_files();
  if (!manifest_key.empty()) manifest::write(state_dir, manifest_key, out, log);
  return out;
}

}  // namespace detail

Result<std::string> fingerprint_directories(const std::vector<std::string>& dirs) {
  Sha256 sha;
  for (const auto& d : dirs) PROGCACHE_TRY(detail::fingerprint_tree(d, sha));
  return digest_hex(sha.finish());
}

}  // namespace progcache
