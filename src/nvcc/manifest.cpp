#include "nvcc/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <map>

#include "progcache/hash.h"

namespace progcache::nvcc {

namespace {

// The text, one record a line (paths last, so they may hold spaces; the
// dependency file format cannot name a path with a newline):
//   progcache-nvcc-manifest 7
//   E <epoch the identities hold in>
//   F <dev> <ino> <size> <mtime ns> <ctime ns> <recent 0|1> <sha256 hex> <path>
//   W <dev> <ino> <size> <mtime ns> <ctime ns> <directory that watches absent places>
//   A <watch index> <path that must stay absent, below its watch's directory>
//   A - <path that must stay absent>
//   P <dev> <ino> <size> <mtime ns> <ctime ns> <path that must stay present, as it is>
//   P - <path where a regular file, whatever it holds, must stay>
//   R <result key hex> <file indexes> <absent indexes> <present indexes>
// (indexes comma-separated, a run of three or more as "first~last", '-' for
// none).
// Text a warm lookup reads with from_chars: a fifth of a JSON parse.
// A watched place is written below its watch (most are a header's name in
// an include directory), and runs of indexes as ranges: for the example
// saxpy.cu, 0.53 x the bytes of version 5, which wrote both whole (0.61 x
// compressed). Version 7 adds "P -", a file that only has to be there.
// Another version (4: no watches; 5; 6) is no manifest: a miss, which
// replaces it.
constexpr std::string_view k_magic = "progcache-nvcc-manifest 7\n";

void append_indexes(std::string& out, const std::vector<std::uint32_t>& v) {
  if (v.empty()) {
    out += '-';
    return;
  }
  for (std::size_t i = 0; i < v.size();) {
    if (i != 0) out += ',';
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += std::to_string(v[i]);
    if (j >= i + 2) {
      out += '~';
      out += std::to_string(v[j]);
      i = j + 1;
    } else {
      ++i;
    }
  }
}

// Reads "1,2,3", "0~9,12" or "-" up to the next space (or the end), each
// below `bound`, and no more of them than the table has rows (a list the
// encoder writes names each row once at most): a damaged or planted list of
// ranges cannot grow past its table.
bool read_indexes(std::string_view& line, std::uint32_t bound, std::vector<std::uint32_t>& out) {
  const auto end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end + 1);
  if (field == "-") return true;
  while (!field.empty()) {
    std::uint32_t v = 0;
    const auto r = std::from_chars(field.data(), field.data() + field.size(), v);
    if (r.ec != std::errc() || v >= bound || out.size() >= bound) return false;
    out.push_back(v);
    field.remove_prefix(static_cast<std::size_t>(r.ptr - field.data()));
    if (!field.empty() && field.front() == '~') {
      std::uint32_t last = 0;
      const auto e = std::from_chars(field.data() + 1, field.data() + field.size(), last);
      if (e.ec != std::errc() || last >= bound || last <= v + 1 || out.size() + (last - v) > bound) return false;
      for (std::uint32_t k = v + 1; k <= last; ++k) out.push_back(k);
      field.remove_prefix(static_cast<std::size_t>(e.ptr - field.data()));
    }
    if (field.empty()) break;
    if (field.front() != ',' || field.size() == 1) return false;
    field.remove_prefix(1);
  }
  return true;
}

// Reads "<number> " from the front of `line`.
template <typename T>
bool number(std::string_view& line, T& out) {
  const auto r = std::from_chars(line.data(), line.data() + line.size(), out);
  if (r.ec != std::errc() || r.ptr == line.data() + line.size() || *r.ptr != ' ') return false;
  line.remove_prefix(static_cast<std::size_t>(r.ptr - line.data()) + 1);
  return true;
}

bool read_stamp(std::string_view& line, detail::FileStamp& s) {
  return number(line, s.dev) && number(line, s.ino) && number(line, s.size) && number(line, s.mtime) &&
         number(line, s.ctime);
}

std::string stamp_text(const detail::FileStamp& s) {
  return std::to_string(s.dev) + " " + std::to_string(s.ino) + " " + std::to_string(s.size) + " " +
         std::to_string(s.mtime) + " " + std::to_string(s.ctime);
}

// A present place's row, less its tag.
std::string present_text(const ManifestPlace& p) {
  return (p.any_file ? std::string("-") : stamp_text(p.stamp)) + " " + p.path;
}

bool read_file_line(std::string_view line, ManifestFile& f) {
  int recent = 0;
  if (!read_stamp(line, f.stamp) || !number(line, recent) || line.size() < 66 || line[64] != ' ') {
    return false;
  }
  auto digest = Key::from_hex(line.substr(0, 64));
  if (!digest.ok()) return false;
  f.recent = recent != 0;
  f.sha256 = std::string(digest->view());
  f.path = std::string(line.substr(65));
  return !f.path.empty();
}

// Whether directory `dir` lies on the path of `place` (as watch_of_empty
// finds it: "." for a relative place, else a leading part of it).
bool watches_place(std::string_view dir, std::string_view place) {
  if (dir == ".") return !place.starts_with("/");
  if (dir == "/") return place.starts_with("/") && place.size() > 1;
  return place.size() > dir.size() + 1 && place.starts_with(dir) && place[dir.size()] == '/';
}

// The part of `place` below `dir` (which watches_place holds), and back.
std::string_view below(std::string_view dir, std::string_view place) {
  return dir == "." ? place : place.substr(dir == "/" ? 1 : dir.size() + 1);
}
std::string under(std::string_view dir, std::string_view rest) {
  if (dir == ".") return std::string(rest);
  return std::string(dir) + (dir == "/" ? "" : "/") + std::string(rest);
}

}  // namespace

bool of_another_manifest_version(std::string_view text) {
  constexpr std::string_view k_family = "progcache-nvcc-manifest ";
  return text.starts_with(k_family) && !text.starts_with(k_magic);
}

std::optional<ManifestRecord> Manifest::find(const Key& result) const {
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].result == result) return record(i);
  }
  return std::nullopt;
}

ManifestRecord Manifest::record(std::size_t i) const {
  ManifestRecord r;
  for (auto f : results[i].files) r.files.push_back(files[f]);
  const bool watched = epoch == detail::identity_epoch();
  for (auto a : results[i].absent) {
    ManifestAbsent row{absent[a].path, {}};
    if (watched && absent[a].watch != k_no_watch) row.watch = watches[absent[a].watch];
    r.absent.push_back(std::move(row));
  }
  for (auto p : results[i].present) r.present.push_back(present[p]);
  r.result = results[i].result;
  return r;
}

std::string encode_manifest(const Manifest& m) {
  std::string out(k_magic);
  out += "E " + m.epoch + "\n";
  for (const auto& f : m.files) {
    out += "F " + stamp_text(f.stamp) + " " + (f.recent ? "1 " : "0 ") + Key::from_raw(f.sha256)->hex() + " " + f.path +
           "\n";
  }
  for (const auto& w : m.watches) out += "W " + stamp_text(w.stamp) + " " + w.path + "\n";
  for (const auto& a : m.absent) {
    // (A watch off its place's path, which no record makes, watches nothing.)
    if (a.watch == Manifest::k_no_watch || !watches_place(m.watches[a.watch].path, a.path)) {
      out += "A - " + a.path + "\n";
    } else {
      out += "A " + std::to_string(a.watch) + " ";
      out += below(m.watches[a.watch].path, a.path);
      out += '\n';
    }
  }
  for (const auto& p : m.present) out += "P " + present_text(p) + "\n";
  for (const auto& r : m.results) {
    out += "R " + r.result.hex() + " ";
    append_indexes(out, r.files);
    out += ' ';
    append_indexes(out, r.absent);
    out += ' ';
    append_indexes(out, r.present);
    out += '\n';
  }
  return out;
}

std::optional<Manifest> decode_manifest(std::string_view text) {
  if (!text.starts_with(k_magic)) return std::nullopt;
  text.remove_prefix(k_magic.size());
  Manifest m;
  const auto eol = text.find('\n');
  if (!text.starts_with("E ") || eol == std::string_view::npos) return std::nullopt;
  m.epoch = std::string(text.substr(2, eol - 2));
  text.remove_prefix(eol + 1);
  while (!text.empty()) {
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;  // cut short
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (line.size() < 2 || line[1] != ' ') return std::nullopt;
    const char tag = line[0];
    line.remove_prefix(2);
    // Tables come before the results that index them.
    if (tag != 'R' && !m.results.empty()) return std::nullopt;
    if (tag == 'F') {
      if (!m.watches.empty() || !m.absent.empty() || !m.present.empty()) return std::nullopt;
      ManifestFile f;
      if (!read_file_line(line, f)) return std::nullopt;
      m.files.push_back(std::move(f));
    } else if (tag == 'W') {
      if (!m.absent.empty() || !m.present.empty()) return std::nullopt;
      ManifestPlace w;
      if (!read_stamp(line, w.stamp) || line.empty()) return std::nullopt;
      w.path = std::string(line);
      m.watches.push_back(std::move(w));
    } else if (tag == 'A') {
      if (!m.present.empty()) return std::nullopt;
      Manifest::Absent a;
      if (line.starts_with("- ")) {
        line.remove_prefix(2);
      } else if (!number(line, a.watch) || a.watch >= m.watches.size()) {
        return std::nullopt;
      }
      if (line.empty()) return std::nullopt;
      a.path = a.watch == Manifest::k_no_watch ? std::string(line) : under(m.watches[a.watch].path, line);
      // A watch stands only for places below it, as text (a row that names
      // none, or an absolute path below ".", is damaged or planted: refused;
      // one with ".." is the path a search spelled so, as in version 5).
      if (a.watch != Manifest::k_no_watch && !watches_place(m.watches[a.watch].path, a.path)) return std::nullopt;
      m.absent.push_back(std::move(a));
    } else if (tag == 'P') {
      ManifestPlace place;
      if (line.starts_with("- ")) {
        place.any_file = true;
        line.remove_prefix(2);
      } else if (!read_stamp(line, place.stamp)) {
        return std::nullopt;
      }
      if (line.empty()) return std::nullopt;
      place.path = std::string(line);
      m.present.push_back(std::move(place));
    } else if (tag == 'R') {
      Manifest::Result r;
      if (line.size() < 65 || line[64] != ' ') return std::nullopt;
      auto key = Key::from_hex(line.substr(0, 64));
      if (!key.ok()) return std::nullopt;
      r.result = *key;
      line.remove_prefix(65);
      if (!read_indexes(line, static_cast<std::uint32_t>(m.files.size()), r.files) ||
          !read_indexes(line, static_cast<std::uint32_t>(m.absent.size()), r.absent) ||
          !read_indexes(line, static_cast<std::uint32_t>(m.present.size()), r.present) || !line.empty() ||
          r.files.empty()) {
        return std::nullopt;
      }
      // No more results than add_result keeps.
      if (m.results.size() == k_manifest_results) return std::nullopt;
      m.results.push_back(std::move(r));
    } else {
      return std::nullopt;
    }
  }
  if (m.results.empty()) return std::nullopt;
  return m;
}

Manifest add_result(const std::optional<Manifest>& old, const ManifestRecord& r, std::size_t limit) {
  // Rebuilt from the records kept, newest first: rows no kept result uses
  // go, and a file's newest stamp is the one kept.
  std::vector<ManifestRecord> kept = {r};
  auto same_result = [](const ManifestRecord& a, const ManifestRecord& b) {
    // The watches only spare stats: two records of the same places are one.
    auto same_places = [](const std::vector<ManifestAbsent>& x, const std::vector<ManifestAbsent>& y) {
      return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                        [](const ManifestAbsent& p, const ManifestAbsent& q) { return p.path == q.path; });
    };
    if (a.result != b.result || a.files.size() != b.files.size() || !same_places(a.absent, b.absent) ||
        a.present != b.present) {
      return false;
    }
    for (std::size_t i = 0; i < a.files.size(); ++i) {
      if (a.files[i].path != b.files[i].path || a.files[i].sha256 != b.files[i].sha256) return false;
    }
    return true;
  };
  if (old) {
    for (std::size_t i = 0; i < old->results.size() && kept.size() < limit; ++i) {
      ManifestRecord o = old->record(i);
      if (!same_result(o, r)) kept.push_back(std::move(o));
    }
  }
  Manifest m;
  m.epoch = detail::identity_epoch();
  std::map<std::pair<std::string, std::string>, std::uint32_t> file_index;
  std::map<std::string, std::uint32_t> watch_index, absent_index, present_index;
  auto index_of = [](std::map<std::string, std::uint32_t>& index, auto& table, const std::string& key,
                     const auto& row) {
    const auto [it, added] = index.try_emplace(key, static_cast<std::uint32_t>(table.size()));
    if (added) table.push_back(row);
    return it->second;
  };
  for (const auto& rec : kept) {
    Manifest::Result res;
    res.result = rec.result;
    for (const auto& f : rec.files) {
      const auto [it, added] = file_index.try_emplace({f.path, f.sha256}, static_cast<std::uint32_t>(m.files.size()));
      if (added) m.files.push_back(f);
      res.files.push_back(it->second);
    }
    for (const auto& a : rec.absent) {
      Manifest::Absent row{a.path, Manifest::k_no_watch};
      if (!a.watch.path.empty()) {
        row.watch = index_of(watch_index, m.watches, stamp_text(a.watch.stamp) + " " + a.watch.path, a.watch);
      }
      const std::string key =
          (row.watch == Manifest::k_no_watch ? std::string("-") : std::to_string(row.watch)) + " " + a.path;
      res.absent.push_back(index_of(absent_index, m.absent, key, row));
    }
    for (const auto& p : rec.present) {
      res.present.push_back(index_of(present_index, m.present, present_text(p), p));
    }
    m.results.push_back(std::move(res));
  }
  return m;
}

Key result_key(const Key& mkey, const std::vector<std::pair<std::string, std::string>>& files) {
  KeyBuilder kb("nvcc-result");
  kb.add_bytes("manifest", mkey.view());
  for (const auto& [path, digest] : files) kb.add_string("file", path).add_bytes("sha256", digest);
  return kb.finish();
}

HoldingCheck::HoldingCheck(const Manifest& m)
    : m_manifest(m),
      m_watch_holds(m.watches.size()),
      m_absent_holds(m.absent.size()),
      m_present_holds(m.present.size()),
      m_watches_usable(m.epoch == detail::identity_epoch()) {}

const std::optional<std::string>& HoldingCheck::digest_now(const ManifestFile& f) {
  // Keyed by path: two rows of one path (two versions) share one stat, and
  // the file is hashed at most once.
  const auto found = m_digests.find(f.path);
  if (found != m_digests.end()) return found->second;
  std::optional<std::string> d;
  struct stat st {};
  if (::stat(f.path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    // An unchanged stat vouches for the recorded digest of one row only;
    // the same path under another row is compared by that digest.
    if (!f.recent && detail::stamp_of(st) == f.stamp) {
      d = f.sha256;
    } else if (auto text = detail::read_regular(f.path); text.ok()) {
      const auto sum = sha256(*text);
      d = std::string(as_view(sum));
    }
  }
  return m_digests.emplace(f.path, std::move(d)).first->second;
}

// Without a watch that holds (a directory that changed, as the working
// directory does when the output is written there), each place is asked on
// its own; but where a directory above it is not there, or is a file, no
// place below it can be (every lookup of one resolves that directory
// first, and fails there): the places a search made below a directory
// that is not there (a quoted include's "bits/...", "x86_64-linux-gnu/..."
// from the source's directory) cost one stat between them. What a stat
// finds is kept for the check, as a place's own answer is.
bool HoldingCheck::absent_now(const std::string& path) {
  const auto up = [](const std::string& p) {
    const std::string d = detail::parent_of(p);
    return d == p ? std::string() : d;  // "/" has none above it
  };
  for (std::string d = up(path); !d.empty(); d = up(d)) {
    const auto known = m_above.find(d);
    if (known == m_above.end()) continue;
    if (!known->second) return true;
    break;
  }
  // Absent as the preprocessor's search takes it: gone, or below a file.
  // Any other failure (a loop of links, a directory it may not search)
  // stops gcc with an error where it looks: not absent, so nvcc runs and
  // says so.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return false;
  if (errno != ENOENT && errno != ENOTDIR) return false;
  // Learnt for the places after it: each directory above, up to the first
  // that is one.
  for (std::string d = up(path); !d.empty() && d != "/" && m_above.count(d) == 0; d = up(d)) {
    struct stat dst {};
    const int rc = ::stat(d.c_str(), &dst);
    if (rc == 0 && S_ISDIR(dst.st_mode)) {
      m_above.emplace(d, true);
      break;
    }
    if (rc != 0 && errno != ENOENT && errno != ENOTDIR) break;  // unknown: nothing learnt
    m_above.emplace(d, false);
  }
  return true;
}

std::optional<Mismatch> HoldingCheck::first_mismatch(std::size_t i) {
  const Manifest::Result& r = m_manifest.results.at(i);
  for (const std::uint32_t k : r.files) {
    const ManifestFile& f = m_manifest.files[k];
    const auto& d = digest_now(f);
    if (!d) return Mismatch{Mismatch::Kind::gone, f.path};
    if (*d != f.sha256) return Mismatch{Mismatch::Kind::edited, f.path};
  }
  for (const std::uint32_t k : r.absent) {
    auto& h = m_absent_holds[k];
    const Manifest::Absent& a = m_manifest.absent[k];
    if (!h && m_watches_usable && a.watch != Manifest::k_no_watch) {
      // Its directory as recorded: no entry was made in it since.
      auto& w = m_watch_holds[a.watch];
      if (!w) {
        const ManifestPlace& dir = m_manifest.watches[a.watch];
        struct stat st {};
        w = detail::identity_stat(dir.path, st) == 0 && S_ISDIR(st.st_mode) && detail::stamp_of(st) == dir.stamp;
      }
      if (*w) h = true;
    }
    if (!h) h = absent_now(a.path);
    if (!*h) return Mismatch{Mismatch::Kind::created, a.path};
  }
  for (const std::uint32_t k : r.present) {
    auto& h = m_present_holds[k];
    const ManifestPlace& p = m_manifest.present[k];
    if (!h) {
      struct stat st {};
      h = ::stat(p.path.c_str(), &st) == 0 && (p.any_file ? S_ISREG(st.st_mode) && detail::may_read(p.path)
                                               : p.stamp == detail::FileStamp{} ? S_ISDIR(st.st_mode)
                                                                                : detail::stamp_of(st) == p.stamp);
    }
    if (!*h) return Mismatch{Mismatch::Kind::changed, p.path};
  }
  return std::nullopt;
}

bool serve_first_holding(const Manifest& m, const std::function<bool(const Key&)>& serve) {
  HoldingCheck check(m);
  for (std::size_t i = 0; i < m.results.size(); ++i) {
    if (!check.first_mismatch(i) && serve(m.results[i].result)) return true;
  }
  return false;
}

}  // namespace progcache::nvcc
