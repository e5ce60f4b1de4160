#include "source_deps.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <set>
#include <string_view>

#include "progcache/hash.h"
#include "progcache/key.h"

namespace progcache {

namespace {

namespace fs = std::filesystem;

// Headers larger than this are refused rather than read into memory.
constexpr std::int64_t k_max_header_bytes = std::int64_t{256} << 20;
// A file changed this recently may change again within one timestamp tick
// without its stat changing: such files are hashed by content.
constexpr std::int64_t k_recent_ns = std::int64_t{2} * 1000 * 1000 * 1000;

std::int64_t ns_of(const struct timespec& t) { return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

// Reads a regular file whole. Never blocks on a FIFO or device: the type is
// checked on the open descriptor, which is opened non-blocking.
Result<std::string> read_regular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno_status(errno, "cannot read header", path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status(errno, "cannot stat header", path);
  if (!S_ISREG(st.st_mode)) return invalid_argument("'" + path + "' is not a regular file");
  if (st.st_size > k_max_header_bytes) return invalid_argument("header '" + path + "' is larger than 256 MiB");
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "cannot read header", path);
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

void add_field(Sha256& sha, std::string_view tag, std::string_view value) {
  sha.update(tag);
  const std::uint64_t n = value.size();
  sha.update(std::string_view(reinterpret_cast<const char*>(&n), sizeof n));
  sha.update(value);
}

enum class Operand { quoted, angled, computed };
struct Directive {
  Operand kind;
  std::string name;
  int line;
};

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

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

// Every include-like operand in `text`, whatever preprocessor branch it sits
// in (a superset of what the compiler reads). Lines continued with a
// backslash are joined first.
std::vector<Directive> directives(std::string_view text) {
  std::vector<Directive> out;
  int line_no = 0;
  std::string line;
  std::size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    const int first_line = line_no;
    line.clear();
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view part = text.substr(pos, end - pos);
      if (!part.empty() && part.back() == '\r') part.remove_suffix(1);
      pos = end + 1;
      if (!part.empty() && part.back() == '\\') {
        line.append(part.substr(0, part.size() - 1));
        ++line_no;
        continue;
      }
      line.append(part);
      break;
    }
    const std::string_view l = line;
    // __has_include(...) may appear anywhere on a line (#if, #elif, macros).
    for (std::size_t at = l.find("__has_include"); at != std::string_view::npos;
         at = l.find("__has_include", at + 1)) {
      std::size_t i = at + std::string_view("__has_include").size();
      if (l.substr(i).starts_with("_next")) i += 5;
      while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
      if (i < l.size() && l[i] == '(') out.push_back(read_operand(l, i + 1, first_line));
    }
    std::size_t i = 0;
    while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
    if (i >= l.size() || l[i] != '#') continue;
    ++i;
    while (i < l.size() && (l[i] == ' ' || l[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < l.size() && is_ident(l[j])) ++j;
    const std::string_view word = l.substr(i, j - i);
    if (word == "include" || word == "include_next" || word == "import") {
      Directive d = read_operand(l, j, first_line);
      if (d.kind != Operand::computed || !d.name.empty()) out.push_back(std::move(d));
    }
  }
  return out;
}

bool under(const std::string& path, const std::string& dir) {
  if (dir.empty()) return false;
  if (path.size() < dir.size() || path.compare(0, dir.size(), dir) != 0) return false;
  return path.size() == dir.size() || dir.back() == '/' || path[dir.size()] == '/';
}

std::string normal(const std::string& p) {
  std::string s = fs::path(p).lexically_normal().string();
  if (s.size() > 1 && s.back() == '/') s.pop_back();
  return s.empty() ? "." : s;
}

std::string parent_of(const std::string& file) {
  const fs::path parent = fs::path(file).parent_path();
  return parent.empty() ? std::string() : parent.string();
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return (fs::path(dir) / name).string();
}

class Scanner {
 public:
  Scanner(const Program& p, std::vector<std::string> include_dirs, bool no_source_include)
      : m_program(p), m_include_dirs(std::move(include_dirs)), m_no_source_include(no_source_include) {
    for (const auto& d : m_include_dirs) m_covered.push_back(normal(d));
  }

  // Scans `text`, the content of `file` (the program itself when `is_source`).
  Status scan_text(std::string_view text, const std::string& file, bool is_source) {
    const std::string dir = parent_of(file);
    for (const Directive& d : directives(text)) {
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
      if (fs::path(d.name).is_absolute()) {
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
    const std::string key = normal(path);
    if (!m_seen.insert(key).second) return {};
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        add_field(m_sha, "absent", key);
        return {};
      }
      return errno_status(errno, "cannot look for header", path);
    }
    if (!S_ISREG(st.st_mode)) {
      // A directory or a FIFO where a header could be: the compiler cannot
      // use it; record its kind, never open it.
      add_field(m_sha, "other", key + "|" + std::to_string(st.st_mode & S_IFMT));
      return {};
    }
    PROGCACHE_ASSIGN_OR_RETURN(std::string content, read_regular(path));
    const Digest256 d = sha256(content);
    add_field(m_sha, "file", key);
    add_field(m_sha, "sha256", std::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
    m_files.push_back(key);
    return scan_text(content, path, false);
  }

  Sha256& sha() { return m_sha; }
  bool needs_trees() const { return m_needs_trees; }
  std::vector<std::string> take_files() { return std::move(m_files); }

 private:
  bool covered(const std::string& file) const {
    const std::string n = normal(file);
    return std::any_of(m_covered.begin(), m_covered.end(), [&](const std::string& d) { return under(n, d); });
  }

  const Program& m_program;
  std::vector<std::string> m_include_dirs;
  std::vector<std::string> m_covered;
  bool m_no_source_include;
  bool m_needs_trees = false;
  std::set<std::string> m_seen;
  std::set<std::string> m_memory_seen;
  std::vector<std::string> m_files;
  Sha256 m_sha;
};

// One line per file below `dir` (symbolic links followed, each directory
// visited once): relative path, type, size, mtime, ctime, device, inode; a
// file changed in the last two seconds adds its content digest.
Status fingerprint_tree(const std::string& dir, Sha256& sha) {
  std::vector<std::string> lines;
  std::set<std::pair<dev_t, ino_t>> visited;
  const std::int64_t now = now_ns();
  std::vector<std::string> stack{""};
  struct stat root {};
  if (::stat(dir.c_str(), &root) != 0) return errno_status(errno, "cannot read include directory", dir);
  if (!S_ISDIR(root.st_mode)) return invalid_argument("include directory '" + dir + "' is not a directory");
  visited.insert({root.st_dev, root.st_ino});
  while (!stack.empty()) {
    const std::string rel = stack.back();
    stack.pop_back();
    const std::string abs = rel.empty() ? dir : join(dir, rel);
    std::error_code ec;
    fs::directory_iterator it(abs, ec);
    if (ec) return errno_status(ec.value(), "cannot read include directory", abs);
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const std::string child_rel = rel.empty() ? name : rel + "/" + name;
      const std::string child = join(dir, child_rel);
      struct stat st {};
      if (::stat(child.c_str(), &st) != 0) {
        lines.push_back(child_rel + "|dangling");  // a broken link: the compiler finds nothing there
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (visited.insert({st.st_dev, st.st_ino}).second) stack.push_back(child_rel);
        lines.push_back(child_rel + "|dir");
        continue;
      }
      std::string l = child_rel + "|" + std::to_string(st.st_mode & S_IFMT) + "|" + std::to_string(st.st_size) + "|" +
                      std::to_string(ns_of(st.st_mtim)) + "|" + std::to_string(ns_of(st.st_ctim)) + "|" +
                      std::to_string(st.st_dev) + "|" + std::to_string(st.st_ino);
      if (S_ISREG(st.st_mode) && (now - ns_of(st.st_mtim) < k_recent_ns || now - ns_of(st.st_ctim) < k_recent_ns)) {
        PROGCACHE_ASSIGN_OR_RETURN(std::string content, read_regular(child));
        l += "|" + digest_hex(sha256(content));
      }
      lines.push_back(std::move(l));
    }
    if (ec) return errno_status(ec.value(), "cannot read include directory", abs);
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

Result<SourceDeps> scan_source_deps(const Program& p) {
  // The one option parser decides what -I and -include mean.
  PROGCACHE_ASSIGN_OR_RETURN(auto opts, canonicalize_options(p.options, /*have_extra_digest=*/true));
  std::vector<std::string> include_dirs, pre_includes;
  bool no_source_include = false;
  for (const auto& o : opts) {
    if (o.starts_with("--include-path=")) include_dirs.push_back(o.substr(15));
    else if (o.starts_with("--pre-include=")) pre_includes.push_back(o.substr(14));
    else if (o == "--no-source-include") no_source_include = true;
  }
  Scanner scanner(p, include_dirs, no_source_include);
  add_field(scanner.sha(), "deps-v1", "");
  // A pre-include is looked for as written (relative to the working
  // directory) and in each -I directory.
  for (const auto& f : pre_includes) {
    PROGCACHE_TRY(scanner.consult(f));
    if (!fs::path(f).is_absolute()) {
      for (const auto& d : include_dirs) PROGCACHE_TRY(scanner.consult(join(d, f)));
    }
  }
  PROGCACHE_TRY(scanner.scan_text(p.code, p.name, /*is_source=*/true));
  if (scanner.needs_trees()) {
    for (const auto& d : include_dirs) PROGCACHE_TRY(fingerprint_tree(d, scanner.sha()));
  }
  SourceDeps out;
  out.digest = digest_hex(scanner.sha().finish());
  out.files = scanner.take_files();
  return out;
}

}  // namespace detail
}  // namespace progcache
