#include "source_deps.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "progcache/env.h"
#include "progcache/hash.h"
#include "progcache/key.h"
#include "util/coding.h"
#include "util/mutex.h"

namespace progcache {

namespace {

// Headers larger than this are refused rather than read into memory.
constexpr std::int64_t k_max_header_bytes = std::int64_t{256} << 20;
// A file changed this recently may change again within one timestamp tick
// without its stat changing: such files are hashed by content.
constexpr std::int64_t k_recent_ns = std::int64_t{2} * 1000 * 1000 * 1000;

std::int64_t ns_of(const struct timespec& t) {
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

// Reads a header whole (following symlinks, as the compiler does); never
// blocks on a FIFO or device.
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

// The scan memo's format. 2: directives found on logical lines (comments,
// literals and digraphs understood); memos of version 1 may lack some.
// 3: trigraphs, and __has_include named through a macro. 4: macros whose
// body is a header name.
constexpr int k_memo_version = 4;

enum class Operand { quoted, angled, computed };
struct Directive {
  Operand kind;
  std::string name;
  int line;
};

bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

// Reads the operand at `s[i]`: "name", <name>, or anything else (computed).
Directive read_operand(std::string_view s, std::size_t i, int line) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  if (i < s.size() && (s[i] == '"' || s[i] == '<')) {
    const char close = s[i] == '"' ? '"' : '>';
    const std::size_t end = s.find(close, i + 1);
    if (end != std::string_view::npos) {
      return {s[i] == '"' ? Operand::quoted : Operand::angled, std::string(s.substr(i + 1, end - i - 1)), line};
    }
  }
  return {Operand::computed, std::string(s.substr(i)), line};
}

// A logical line, as the preprocessor sees it: after line splices are joined
// and every comment has become one space (translation phases 2 and 3).
struct LogicalLine {
  std::string text;
  int line;  // the physical line it starts on
};

// Splits `text` into logical lines. String and character literals (raw
// strings included) pass through untouched, so "/*" inside one opens no
// comment; a block comment's newlines vanish with it, as the standard says,
// so a '#' after "/* ... */" on a later line is not at the start of one.
// A quote after a digit run is a digit separator (1'000), not a literal.
std::vector<LogicalLine> logical_lines(std::string_view text) {
  // Phase 2: join splices, drop the '\r' of CRLF, and remember on which
  // physical line each remaining character stood.
  std::string src;
  std::vector<int> line_of;
  src.reserve(text.size());
  line_of.reserve(text.size());
  int phys = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      std::size_t j = i + 1;
      if (j < text.size() && text[j] == '\r') ++j;
      if (j < text.size() && text[j] == '\n') {
        i = j;
        ++phys;
        continue;
      }
    }
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    src.push_back(c);
    line_of.push_back(phys);
    if (c == '\n') ++phys;
  }
  // Phase 3: comments, literals, lines.
  std::vector<LogicalLine> out;
  LogicalLine cur{"", 1};
  bool fresh = true;  // no character of `cur` seen yet
  auto put = [&](char c, std::size_t at) {
    if (fresh) {
      cur.line = line_of[at];
      fresh = false;
    }
    cur.text.push_back(c);
  };
  std::size_t run_start = std::string::npos;  // start of the identifier or number run before i
  for (std::size_t i = 0; i < src.size();) {
    const char c = src[i];
    if (c == '\n') {
      out.push_back(std::move(cur));
      cur = LogicalLine{"", 1};
      fresh = true;
      run_start = std::string::npos;
      ++i;
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
      while (i < src.size() && src[i] != '\n') ++i;  // to the end of the line
      put(' ', i - 1);
      run_start = std::string::npos;
      continue;
    }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
      const std::size_t start = i;
      const std::size_t end = src.find("*/", i + 2);
      i = end == std::string::npos ? src.size() : end + 2;
      put(' ', start);
      run_start = std::string::npos;
      continue;
    }
    if (c == '"' || (c == '\'' && !(run_start != std::string::npos &&
                                    std::isdigit(static_cast<unsigned char>(src[run_start])) != 0))) {
      const std::string_view prefix =
          run_start == std::string::npos ? std::string_view() : std::string_view(src).substr(run_start, i - run_start);
      const bool raw =
          c == '"' && (prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR");
      std::size_t end = std::string::npos;
      if (raw) {
        const std::size_t open = src.find('(', i + 1);
        if (open != std::string::npos && open - i - 1 <= 16) {
          const std::string close = ")" + src.substr(i + 1, open - i - 1) + "\"";
          const std::size_t found = src.find(close, open + 1);
          if (found != std::string::npos) end = found + close.size();
        }
      } else {
        for (std::size_t j = i + 1; j < src.size() && src[j] != '\n'; ++j) {
          if (src[j] == '\\') {
            ++j;
          } else if (src[j] == c) {
            end = j + 1;
            break;
          }
        }
      }
      if (end == std::string::npos) end = std::min(src.size(), src.find('\n', i));  // unterminated
      // A raw string may span lines: its newlines belong to the literal.
      for (std::size_t j = i; j < end; ++j) put(src[j] == '\n' ? ' ' : src[j], j);
      i = end;
      run_start = std::string::npos;
      continue;
    }
    if (is_ident(c) || (c == '\'' && run_start != std::string::npos)) {
      if (run_start == std::string::npos) run_start = i;
    } else {
      run_start = std::string::npos;
    }
    put(c, i);
    ++i;
  }
  if (!fresh) out.push_back(std::move(cur));
  return out;
}

// Every include-like operand in `text`, whatever preprocessor branch it sits
// in (a superset of what the compiler reads), found on logical lines: after
// splices and comments, with '%:' (the digraph) standing for '#'.
std::vector<Directive> directives_of(std::string_view text) {
  std::vector<Directive> out;
  for (const LogicalLine& ll : logical_lines(text)) {
    const std::string_view l = ll.text;
    const int first_line = ll.line;
    // __has_include(...) may appear anywhere on a line (#if, #elif, macros).
    for (std::size_t at = l.find("__has_include"); at != std::string_view::npos; at = l.find("__has_include", at + 1)) {
      std::size_t i = at + std::string_view("__has_include").size();
      if (l.substr(i).starts_with("_next")) i += 5;
      while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
      if (i < l.size() && l[i] == '(') {
        out.push_back(read_operand(l, i + 1, first_line));
      } else {
        // Not called here: named through a macro (#define HAS __has_include),
        // so its operands cannot be told apart. As for #include MACRO.
        out.push_back({Operand::computed, "__has_include", first_line});
      }
    }
    std::size_t i = 0;
    while (i < l.size() && (l[i] == ' ' || l[i] == '\t' || l[i] == '\f' || l[i] == '\v')) ++i;
    if (i < l.size() && l[i] == '#') {
      ++i;
    } else if (l.substr(i).starts_with("%:")) {
      i += 2;
    } else {
      continue;
    }
    while (i < l.size() && (l[i] == ' ' || l[i] == '\t' || l[i] == '\f' || l[i] == '\v')) ++i;
    std::size_t j = i;
    while (j < l.size() && is_ident(l[j])) ++j;
    const std::string_view word = l.substr(i, j - i);
    if (word == "include" || word == "include_next" || word == "import") {
      Directive d = read_operand(l, j, first_line);
      if (d.kind != Operand::computed || !d.name.empty()) out.push_back(std::move(d));
    } else if (word == "define") {
      // A macro whose whole body is a header name ("x.h" or <x.h>) is what a
      // computed include usually expands to: its operand is looked for as
      // if included, so a path that leads outside every -I directory is
      // seen too. Any other such macro costs a few probes of absent paths.
      std::size_t k = j;
      while (k < l.size() && (l[k] == ' ' || l[k] == '\t')) ++k;
      while (k < l.size() && is_ident(l[k])) ++k;  // the macro's name
      if (k < l.size() && l[k] == '(') continue;   // function-like: its body is not one name
      Directive d = read_operand(l, k, first_line);
      if (d.kind == Operand::computed || d.name.empty()) continue;
      const std::size_t close = l.find(d.kind == Operand::quoted ? '"' : '>', l.find_first_of("\"<", k) + 1);
      std::size_t rest = close + 1;
      while (rest < l.size() && (l[rest] == ' ' || l[rest] == '\t')) ++rest;
      if (rest >= l.size()) out.push_back(std::move(d));
    }
  }
  return out;
}

// Trigraphs (??= for #, ??/ for a backslash, ...), which NVRTC replaces
// under -std=c++03, c++11 and c++14.
std::string replace_trigraphs(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '?' && i + 2 < text.size() && text[i + 1] == '?') {
      static constexpr std::string_view k_from = "=/'()!<>-", k_to = "#\\^[]|{}~";
      if (const auto k = k_from.find(text[i + 2]); k != std::string_view::npos) {
        out.push_back(k_to[k]);
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// The directives with trigraphs read both ways, united: whether they are
// replaced depends on the language standard, and reading them the wrong way
// could hide an include (a "??/" ending a comment would splice the next line
// into it).
// Whether `text` may hold a directive: a '#', or what can become one (the
// digraph '%:', also with a splice between its two characters, and any
// trigraph), or __has_include. A program with none of them has nothing to
// scan; scanning one that includes nothing was most of a warm hit's time.
bool may_hold_directives(std::string_view text) {
  constexpr auto k_npos = std::string_view::npos;
  if (text.find('#') != k_npos || text.find("??") != k_npos || text.find("__has_include") != k_npos) return true;
  for (std::size_t p = text.find('%'); p != k_npos; p = text.find('%', p + 1)) {
    if (p + 1 < text.size() && (text[p + 1] == ':' || text[p + 1] == '\\')) return true;
  }
  return false;
}

std::vector<Directive> directives(std::string_view text) {
  if (!may_hold_directives(text)) return {};
  std::vector<Directive> out = directives_of(text);
  if (text.find("??") != std::string_view::npos) {
    for (auto& d : directives_of(replace_trigraphs(text))) out.push_back(std::move(d));
  }
  return out;
}

bool under(const std::string& path, const std::string& dir) {
  if (dir.empty()) return false;
  if (path.size() < dir.size() || path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || dir.back() == '/' || path[dir.size()] == '/';
}

// Lexical normal form ("a/./b//c/../d" -> "a/b/d"). With `keep_dotdot`,
// ".." stays: "link/../x" need not be "x" when link is a symbolic link, so
// the key under which a probe is recorded once keeps it. Plain string work:
// this runs for every probe, thousands per lookup with a large include tree.
std::string normal(std::string_view p, bool keep_dotdot = false) {
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

// The path with every symbolic link and '..' resolved (realpath), or its
// textual normal form when it does not exist.
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

// What one header held when it was read: its content digest and include
// operands, valid while the file's identity and times are unchanged.
struct FileStamp {
  std::uint64_t dev = 0, ino = 0;
  std::int64_t size = 0, mtime = 0, ctime = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};
struct ScannedFile {
  FileStamp stamp;
  std::string sha256;  // raw digest
  std::vector<Directive> directives;
  bool used = false;  // looked up or added by this process (not saved)
};

FileStamp stamp_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_size), ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

// The scan memo: normalised path -> what the file held, per state
// directory, in memory and in <state_dir>/deps-memo.json, so a warm process
// stats headers instead of reading them. Entries are made only for files
// unchanged for two seconds (an edit within one timestamp tick of the read
// would otherwise keep its stamp); a stamp that differs means a re-read.
// Everything read from the file is type-checked; a damaged memo is ignored.
class ScanMemo {
 public:
  static ScanMemo& for_dir(const std::string& state_dir) {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<ScanMemo>> memos;
    std::lock_guard lock(mu);
    auto& m = memos[state_dir];
    if (!m) m = std::make_unique<ScanMemo>(state_dir);
    return *m;
  }

  explicit ScanMemo(std::string state_dir) : m_dir(std::move(state_dir)) {}

  std::optional<ScannedFile> find(const std::string& path, const FileStamp& stamp) {
    MutexLock lock(m_mu);
    load_once();  // only programs that include files pay for the memo
    auto it = m_files.find(path);
    if (it == m_files.end() || !(it->second.stamp == stamp)) return std::nullopt;
    it->second.used = true;
    return it->second;
  }

  void add(const std::string& path, ScannedFile f) {
    MutexLock lock(m_mu);
    f.used = true;
    m_files[path] = std::move(f);
    m_dirty = true;
  }

  // Best effort: a memo that cannot be written costs the next process reads.
  void save() {
    MutexLock lock(m_mu);
    if (!m_dirty || m_dir.empty()) return;
    m_dirty = false;
    // Bounded: past the cap, only what this process used is kept.
    if (m_files.size() > k_max_memo_files) std::erase_if(m_files, [](const auto& kv) { return !kv.second.used; });
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [path, f] : m_files) {
      nlohmann::json incs = nlohmann::json::array();
      for (const auto& d : f.directives) incs.push_back({static_cast<int>(d.kind), d.name, d.line});
      files[path] = {{"stamp", {f.stamp.dev, f.stamp.ino, f.stamp.size, f.stamp.mtime, f.stamp.ctime}},
                     {"sha256", to_hex(f.sha256)},
                     {"includes", std::move(incs)}};
    }
    const nlohmann::json doc{{"version", k_memo_version}, {"files", std::move(files)}};
    Env* env = Env::posix();
    const std::string path = join_path(m_dir, "deps-memo.json");
    if (Status s = env->mkdir(m_dir, 0700); !s.ok() && s.code() != Code::failed_precondition) return;
    write_file_atomic(env, path, temp_path_beside(path), doc.dump(), 0600, Durability::none).ignore();
  }

 private:
  static constexpr std::size_t k_max_memo_files = 50000;

  void load_once() PROGCACHE_REQUIRES(m_mu) {
    if (m_loaded) return;
    m_loaded = true;
    if (!m_dir.empty()) load();
  }

  void load() PROGCACHE_REQUIRES(m_mu) {
    auto text = read_regular(join_path(m_dir, "deps-memo.json"));
    if (!text.ok()) return;
    const auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || doc.value("version", nlohmann::json()) != k_memo_version) return;
    auto files = doc.find("files");
    if (files == doc.end() || !files->is_object()) return;
    for (const auto& [path, f] : files->items()) {
      if (!f.is_object()) continue;
      auto st = f.find("stamp");
      auto sha = f.find("sha256");
      auto incs = f.find("includes");
      if (st == f.end() || sha == f.end() || incs == f.end() || !st->is_array() || st->size() != 5 ||
          !sha->is_string() || !incs->is_array()) {
        continue;
      }
      bool ok = std::all_of(st->begin(), st->end(), [](const auto& v) { return v.is_number_integer(); });
      auto raw = from_hex(sha->get<std::string>());
      if (!ok || !raw.ok() || raw->size() != 32) continue;
      ScannedFile sf;
      sf.stamp = {(*st)[0].get<std::uint64_t>(), (*st)[1].get<std::uint64_t>(), (*st)[2].get<std::int64_t>(),
                  (*st)[3].get<std::int64_t>(), (*st)[4].get<std::int64_t>()};
      sf.sha256 = std::move(*raw);
      for (const auto& d : *incs) {
        if (!d.is_array() || d.size() != 3 || !d[0].is_number_integer() || !d[1].is_string() ||
            !d[2].is_number_integer() || d[0].get<int>() < 0 || d[0].get<int>() > 2) {
          ok = false;
          break;
        }
        sf.directives.push_back({static_cast<Operand>(d[0].get<int>()), d[1].get<std::string>(), d[2].get<int>()});
      }
      if (ok) m_files.emplace(path, std::move(sf));
    }
  }

  std::string m_dir;
  Mutex m_mu;
  std::map<std::string, ScannedFile> m_files PROGCACHE_GUARDED_BY(m_mu);
  bool m_dirty PROGCACHE_GUARDED_BY(m_mu) = false;
  bool m_loaded PROGCACHE_GUARDED_BY(m_mu) = false;
};

// ---------------------------------------------------------------- manifest
//
// What a scan consulted, so the next lookup of the same program can check
// it with stats alone instead of scanning again (ccache's direct mode, for a
// compiler that reports no dependencies). Recorded after a full scan: every
// header found (its stat identity), every directory fingerprinted whole and
// every file below it, and for each place looked at and found empty, the
// nearest directory that exists (an entry created there changes the
// directory's mtime and ctime). A lookup whose every check holds returns the
// recorded digest; any difference, or a damaged manifest, means a full scan.
// Nothing changed in the last two seconds is recorded (a change within one
// timestamp tick would keep its stat): such a scan writes no manifest.

using detail::SourceDeps;

// One stat-level fact about a path.
struct Check {
  std::string path;  // as the scan used it (relative to the working directory, or absolute)
  bool exists = true;
  FileStamp stamp;
  std::uint32_t type = 0;  // st_mode & S_IFMT
};

class CheckLog {
 public:
  void exists(const std::string& path, const struct stat& st) {
    m_checks.push_back({path, true, stamp_of(st), static_cast<std::uint32_t>(st.st_mode & S_IFMT)});
  }
  void absent(const std::string& path) { m_checks.push_back({path, false, {}, 0}); }
  // A place found empty: the nearest directory above it that exists stands
  // for it (its mtime and ctime change when an entry is made in it).
  void empty_place(const std::string& path) {
    std::string child = path;
    for (int depth = 0; depth < 256; ++depth) {
      std::string dir = parent_of(child);
      if (dir.empty()) dir = ".";
      struct stat st {};
      if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        // The entry under it that the path goes through must not exist: a
        // dangling link, or a link to a file, can come to lead somewhere
        // without the directory changing. Then no manifest: every lookup
        // scans.
        struct stat link {};
        if (::lstat(child.c_str(), &link) == 0) {
          m_broken = true;
          return;
        }
        exists(dir, st);
        return;
      }
      if (dir == "." || dir == "/") break;
      child = dir;
    }
    m_broken = true;  // nothing above it exists: record nothing
  }
  bool broken() const { return m_broken; }
  const std::vector<Check>& checks() const { return m_checks; }

 private:
  std::vector<Check> m_checks;
  bool m_broken = false;
};

class Manifest {
 public:
  static constexpr std::uint32_t k_magic = 0x4d44'4350;  // "PCDM"
  static constexpr std::uint32_t k_version = 1;

  // The manifest of one program: everything the scan's answer depends on
  // besides the files themselves.
  static std::string key_of(const Program& p, const std::vector<std::string>& canonical_options) {
    Sha256 sha;
    add_field(sha, "deps-manifest", std::to_string(k_version));
    // The rules that found the includes: a manifest of an older scanner
    // must not vouch for what a newer one would find.
    add_field(sha, "scanner", std::to_string(k_memo_version));
    std::string cwd(4096, '\0');
    if (::getcwd(cwd.data(), cwd.size()) != nullptr)
      cwd.resize(std::strlen(cwd.c_str()));
    else
      cwd = "?";
    add_field(sha, "cwd", cwd);
    add_field(sha, "name", p.name);
    add_field(sha, "code", p.code);
    for (const auto& o : canonical_options) add_field(sha, "option", o);
    for (const auto& h : p.headers) {
      add_field(sha, "header", h.name);
      add_field(sha, "content", h.content);
    }
    return digest_hex(sha.finish());
  }

  // The recorded answer when every check still holds.
  static std::optional<SourceDeps> check(const std::string& state_dir, const std::string& key) {
    if (state_dir.empty()) return std::nullopt;
    auto text = read_regular_file(Env::posix(), path_of(state_dir, key), k_max_bytes);
    if (!text.ok()) return std::nullopt;
    return verify(*text);
  }

  // Best effort: a manifest that cannot be written costs the next lookup a scan.
  static void write(const std::string& state_dir, const std::string& key, const SourceDeps& deps, const CheckLog& log) {
    if (state_dir.empty() || log.broken()) return;
    const std::int64_t now = now_ns();
    // Grouped by directory, so a check opens each directory once.
    std::map<std::string, std::map<std::string, const Check*>> groups;
    for (const Check& c : log.checks()) {
      if (c.exists && (now - c.stamp.mtime < k_recent_ns || now - c.stamp.ctime < k_recent_ns)) return;
      std::string dir, name;
      if (c.exists && c.type == S_IFDIR) {
        dir = c.path;  // a directory stands for itself: its own identity
      } else {
        dir = parent_of(c.path);
        if (dir.empty()) dir = ".";
        const auto slash = c.path.rfind('/');
        name = slash == std::string::npos ? c.path : c.path.substr(slash + 1);
        if (name.empty() || name == "." || name == "..") return;  // cannot be checked by name: no manifest
      }
      auto [it, inserted] = groups[dir].emplace(name, &c);
      if (!inserted && !same(*it->second, c)) return;  // changed during the scan: no manifest
    }
    std::string out;
    put32(out, k_magic);
    put32(out, k_version);
    put_str(out, deps.digest);
    put32(out, static_cast<std::uint32_t>(deps.files.size()));
    for (const auto& f : deps.files) put_str(out, f);
    put32(out, static_cast<std::uint32_t>(groups.size()));
    for (const auto& [dir, entries] : groups) {
      put_str(out, dir);
      put32(out, static_cast<std::uint32_t>(entries.size()));
      for (const auto& [name, c] : entries) {
        put_str(out, name);
        out.push_back(c->exists ? 1 : 0);
        put64(out, c->stamp.dev);
        put64(out, c->stamp.ino);
        put64(out, static_cast<std::uint64_t>(c->stamp.size));
        put64(out, static_cast<std::uint64_t>(c->stamp.mtime));
        put64(out, static_cast<std::uint64_t>(c->stamp.ctime));
        put32(out, c->type);
      }
    }
    put64(out, xxh3_64(out));
    Env* env = Env::posix();
    const std::string dir = join_path(state_dir, "deps");
    for (const std::string& d : {state_dir, dir}) {
      if (Status st = env->mkdir(d, 0700); !st.ok() && st.code() != Code::failed_precondition) return;
    }
    const std::string path = path_of(state_dir, key);
    write_file_atomic(env, path, temp_path_beside(path), out, 0600, Durability::none).ignore();
    bound(dir);
  }

 private:
  static constexpr std::uint64_t k_max_bytes = std::uint64_t{64} << 20;
  static constexpr std::size_t k_max_manifests = 4096;

  static std::string path_of(const std::string& state_dir, const std::string& key) {
    return join_path(join_path(state_dir, "deps"), key);
  }

  static bool same(const Check& a, const Check& b) {
    return a.exists == b.exists && (!a.exists || (a.stamp == b.stamp && a.type == b.type));
  }

  static void put32(std::string& o, std::uint32_t v) { put_fixed(o, v); }
  static void put64(std::string& o, std::uint64_t v) { put_fixed(o, v); }
  static void put_str(std::string& o, std::string_view s) {
    put32(o, static_cast<std::uint32_t>(s.size()));
    o.append(s);
  }

  // Reads what write() wrote, every length checked against what is left.
  class Reader {
   public:
    explicit Reader(std::string_view s) : m_s(s) {}
    bool u8(std::uint8_t& v) { return fixed(v); }
    bool u32(std::uint32_t& v) { return fixed(v); }
    bool u64(std::uint64_t& v) { return fixed(v); }
    bool str(std::string& v) {
      std::uint32_t n = 0;
      if (!u32(n) || n > m_s.size() - m_at) return false;
      v.assign(m_s.substr(m_at, n));
      m_at += n;
      return true;
    }
    bool done() const { return m_at == m_s.size(); }

   private:
    template <typename T>
    bool fixed(T& v) {
      if (sizeof(T) > m_s.size() - m_at) return false;
      v = decode_fixed<T>(m_s.data() + m_at);
      m_at += sizeof(T);
      return true;
    }
    std::string_view m_s;
    std::size_t m_at = 0;
  };

  static std::optional<SourceDeps> verify(std::string_view text) {
    if (text.size() < 8 + 8) return std::nullopt;
    const auto sum = decode_fixed<std::uint64_t>(text.data() + text.size() - 8);
    const std::string_view body = text.substr(0, text.size() - 8);
    if (xxh3_64(body) != sum) return std::nullopt;  // damaged
    Reader r(body);
    std::uint32_t magic = 0, version = 0, n_files = 0, n_dirs = 0;
    SourceDeps deps;
    if (!r.u32(magic) || !r.u32(version) || magic != k_magic || version != k_version || !r.str(deps.digest) ||
        !r.u32(n_files)) {
      return std::nullopt;
    }
    for (std::uint32_t i = 0; i < n_files; ++i) {
      std::string f;
      if (!r.str(f)) return std::nullopt;
      deps.files.push_back(std::move(f));
    }
    if (!r.u32(n_dirs)) return std::nullopt;
    for (std::uint32_t d = 0; d < n_dirs; ++d) {
      std::string dir;
      std::uint32_t n = 0;
      if (!r.str(dir) || !r.u32(n)) return std::nullopt;
      const int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0) return std::nullopt;
      struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
      } closer{dfd};
      for (std::uint32_t i = 0; i < n; ++i) {
        std::string name;
        std::uint8_t exists = 0;
        std::uint64_t dev = 0, ino = 0, size = 0, mtime = 0, ctime = 0;
        std::uint32_t type = 0;
        if (!r.str(name) || !r.u8(exists) || !r.u64(dev) || !r.u64(ino) || !r.u64(size) || !r.u64(mtime) ||
            !r.u64(ctime) || !r.u32(type)) {
          return std::nullopt;
        }
        struct stat st {};
        const int rc = name.empty() ? ::fstat(dfd, &st) : ::fstatat(dfd, name.c_str(), &st, 0);
        if (exists == 0) {
          if (rc == 0 || (errno != ENOENT && errno != ENOTDIR)) return std::nullopt;
          continue;
        }
        const FileStamp want{dev, ino, static_cast<std::int64_t>(size), static_cast<std::int64_t>(mtime),
                             static_cast<std::int64_t>(ctime)};
        if (rc != 0 || !(stamp_of(st) == want) || (st.st_mode & S_IFMT) != type) return std::nullopt;
      }
    }
    if (!r.done()) return std::nullopt;
    return deps;
  }

  // Keeps the directory to k_max_manifests files, now and then: past it, the
  // oldest written go first.
  static void bound(const std::string& dir) {
    static std::atomic<unsigned> writes{0};
    if (writes.fetch_add(1) % 32 != 0) return;
    auto names = Env::posix()->list_dir(dir);
    if (!names.ok() || names->size() <= k_max_manifests) return;
    std::vector<std::pair<std::int64_t, std::string>> by_age;
    for (const auto& e : *names) {
      struct stat st {};
      const std::string path = join_path(dir, e.name);
      if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) by_age.emplace_back(ns_of(st.st_mtim), path);
    }
    std::sort(by_age.begin(), by_age.end());
    const std::size_t keep = k_max_manifests * 3 / 4;
    for (std::size_t i = 0; i + keep < by_age.size(); ++i) ::unlink(by_age[i].second.c_str());
  }
};

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
      for (const auto& c : candidates) PROGCACHE_TRY(consult(c));
    }
    return {};
  }

  // Records what is at `path` (absent, a file and its content, or something
  // else) and follows a file's own includes.
  Status consult(const std::string& path) {
    const std::string key = normal(path, /*keep_dotdot=*/true);
    if (!m_seen.insert(key).second) return {};
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        add_field(m_sha, "absent", key);
        m_log.empty_place(key);
        return {};
      }
      return errno_status(errno, "cannot look for header", path);
    }
    m_log.exists(key, st);
    if (!S_ISREG(st.st_mode)) {
      // A directory or a FIFO where a header could be: the compiler cannot
      // use it; record its kind, never open it.
      add_field(m_sha, "other", key + "|" + std::to_string(st.st_mode & S_IFMT));
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
      if (::stat(path.c_str(), &after) == 0 && stamp_of(after) == stamp && now - stamp.mtime >= k_recent_ns &&
          now - stamp.ctime >= k_recent_ns) {
        m_memo.add(key, *known);
      }
    }
    add_field(m_sha, "file", key);
    add_field(m_sha, "sha256", known->sha256);
    m_files.push_back(key);
    return scan_directives(known->directives, path, false);
  }

  Sha256& sha() { return m_sha; }
  bool needs_trees() const { return m_needs_trees; }
  std::vector<std::string> take_files() { return std::move(m_files); }

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
  std::vector<std::string> m_files;
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
  if (::stat(dir.c_str(), &root) != 0) {
    if ((errno != ENOENT && errno != ENOTDIR) || log == nullptr) {
      return errno_status(errno, "cannot read include directory", dir);
    }
    // NVRTC skips an include directory that is not there: so does the
    // fingerprint, and one created later changes it.
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
    if (d == nullptr) return errno_status(errno, "cannot read include directory", abs);
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
      if (::fstatat(dfd, ent->d_name, &st, 0) != 0) {
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
                      std::to_string(st.st_dev) + "|" + std::to_string(st.st_ino);
      if (S_ISREG(st.st_mode) && (now - ns_of(st.st_mtim) < k_recent_ns || now - ns_of(st.st_ctim) < k_recent_ns)) {
        PROGCACHE_ASSIGN_OR_RETURN(std::string content, read_regular(join(dir, child_rel)));
        l += "|" + digest_hex(sha256(content));
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

Result<std::string> fingerprint_directories(const std::vector<std::string>& dirs) {
  Sha256 sha;
  for (const auto& d : dirs) PROGCACHE_TRY(fingerprint_tree(d, sha));
  return digest_hex(sha.finish());
}

namespace detail {

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
  const std::string manifest_key = includes ? Manifest::key_of(p, opts) : std::string();
  if (includes) {
    if (auto known = Manifest::check(state_dir, manifest_key)) return std::move(*known);
  }
  ScanMemo& memo = ScanMemo::for_dir(state_dir);
  CheckLog log;
  Scanner scanner(p, include_dirs, no_source_include, memo, log);
  add_field(scanner.sha(), "deps-v1", "");
  // A pre-include is looked for as written (relative to the working
  // directory) and in each -I directory.
  for (const auto& f : pre_includes) {
    PROGCACHE_TRY(scanner.consult(f));
    if (!f.starts_with('/')) {
      for (const auto& d : include_dirs) PROGCACHE_TRY(scanner.consult(join(d, f)));
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
  if (includes) Manifest::write(state_dir, manifest_key, out, log);
  return out;
}

}  // namespace detail
}  // namespace progcache
