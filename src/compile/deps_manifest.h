// What the include scan remembers between lookups, so a warm one stats
// files instead of reading and lexing them:
//   * the scan memo: per header (by normal path), its content digest and
//     include operands, valid while its stat identity holds;
//   * the manifest: per program, what one whole scan consulted (every file
//     read, every place found empty, every directory fingerprinted whole)
//     and the answer it gave, so the next lookup of the same program checks
//     stats alone (ccache's direct mode, for a compiler that reports no
//     dependencies). Any difference, or a damaged manifest, means a scan.
// Both are caches of the scan in the state directory: losing either costs
// time, never a wrong key. Nothing changed in the last two seconds is
// recorded (an edit within one timestamp tick would keep its stat).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "include_lexer.h"
#include "scan_files.h"
#include "source_deps.h"
#include "util/mutex.h"

namespace progcache::detail {

// What one header held when it was read: its content digest and include
// operands, valid while the file's identity and times are unchanged.
struct ScannedFile {
  FileStamp stamp;
  std::string sha256;  // raw digest
  std::vector<Directive> directives;
  bool used = false;  // looked up or added by this process (not saved)
};

// The scan memo of one state directory, in memory and in
// <state_dir>/deps-memo.json. Entries are made only for files unchanged for
// two seconds; a stamp that differs means a re-read. Everything read from
// the file is type-checked; a damaged memo is ignored. Thread-safe.
//
// for_file() keeps a memo of digests alone (no directives) in a file of its
// own: progcache.torch's headers (python/src/held_places.cpp). That file is
// read only when it is a regular file of this user's that no one else may
// write (through one descriptor, never through a link), and only when it was
// written in the same epoch (the caller's: a boot).
class ScanMemo {
 public:
  static ScanMemo& for_dir(const std::string& state_dir);
  static ScanMemo& for_file(const std::string& file, const std::string& epoch);

  ScanMemo(std::string file, bool own_file_only, std::string epoch)
      : m_file(std::move(file)), m_own_file_only(own_file_only), m_epoch(std::move(epoch)) {}

  std::optional<ScannedFile> find(const std::string& path, const FileStamp& stamp);
  void add(const std::string& path, ScannedFile f);
  // Best effort: a memo that cannot be written costs the next process reads.
  void save();

 private:
  void load_once() PROGCACHE_REQUIRES(m_mu);
  // The entries of the file as it is now (none where it is missing,
  // damaged, not trusted or of another epoch).
  std::map<std::string, ScannedFile> read() const;

  const std::string m_file;  // empty: kept in memory only
  const bool m_own_file_only;
  const std::string m_epoch;
  Mutex m_mu;
  std::map<std::string, ScannedFile> m_files PROGCACHE_GUARDED_BY(m_mu);
  bool m_dirty PROGCACHE_GUARDED_BY(m_mu) = false;
  bool m_loaded PROGCACHE_GUARDED_BY(m_mu) = false;
};

// One stat-level fact about a path.
struct Check {
  std::string path;  // as the scan used it (relative to the working directory, or absolute)
  bool exists = true;
  FileStamp stamp;
  std::uint32_t type = 0;  // st_mode & S_IFMT
};

// The facts one scan consulted, in order: what a manifest records.
class CheckLog {
 public:
  void exists(const std::string& path, const struct stat& st) {
    m_checks.push_back({path, true, stamp_of(st), static_cast<std::uint32_t>(st.st_mode & S_IFMT)});
  }
  void absent(const std::string& path) { m_checks.push_back({path, false, {}, 0}); }
  // A place found empty: the deepest directory on its path that exists
  // stands for it (empty_places.h).
  void empty_place(const std::string& path);
  bool broken() const { return m_broken; }
  const std::vector<Check>& checks() const { return m_checks; }

 private:
  std::vector<Check> m_checks;
  bool m_broken = false;
};

namespace manifest {

// The manifest of one program: everything the scan's answer depends on
// besides the files themselves (scanner rules, working directory, name,
// code, canonical options, in-memory headers).
std::string key_of(const Program& p, const std::vector<std::string>& canonical_options);
// The recorded answer when every check still holds.
std::optional<SourceDeps> check(const std::string& state_dir, const std::string& key);
// Best effort: a manifest that cannot be written costs the next lookup a scan.
void write(const std::string& state_dir, const std::string& key, const SourceDeps& deps, const CheckLog& log);

}  // namespace manifest

}  // namespace progcache::detail
