#include "nvcc/manifest.h"

#include <sys/stat.h>

#include <charconv>
#include <map>

#include "progcache/hash.h"

namespace progcache::nvcc {

namespace {

// The text, one record a line (paths last, so they may hold spaces; the
// dependency file format cannot name a path with a newline):
//   progcache-nvcc-manifest 4
//   F <dev> <ino> <size> <mtime ns> <ctime ns> <recent 0|1> <sha256 hex> <path>
//   A <path that must stay absent>
//   P <dev> <ino> <size> <mtime ns> <ctime ns> <path that must stay present, as it is>
//   R <result key hex> <file indexes> <absent indexes> <present indexes>
// (indexes comma-separated, '-' for none).
// Text a warm lookup reads with from_chars: a fifth of a JSON parse.
constexpr std::string_view k_magic = "progcache-nvcc-manifest 4\n";

void append_indexes(std::string& out, const std::vector<std::uint32_t>& v) {
  if (v.empty()) {
    out += '-';
    return;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(v[i]);
  }
}

// Reads "1,2,3" or "-" up to the next space (or the end), each below `bound`.
bool read_indexes(std::string_view& line, std::uint32_t bound, std::vector<std::uint32_t>& out) {
  const auto end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end + 1);
  if (field == "-") return true;
  while (!field.empty()) {
    std::uint32_t v = 0;
    const auto r = std::from_chars(field.data(), field.data() + field.size(), v);
    if (r.ec != std::errc() || v >= bound) return false;
    out.push_back(v);
    field.remove_prefix(static_cast<std::size_t>(r.ptr - field.data()));
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

}  // namespace

std::optional<ManifestRecord> Manifest::find(const Key& result) const {
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].result == result) return record(i);
  }
  return std::nullopt;
}

ManifestRecord Manifest::record(std::size_t i) const {
  ManifestRecord r;
  for (auto f : results[i].files) r.files.push_back(files[f]);
  for (auto a : results[i].absent) r.absent.push_back(absent[a]);
  for (auto p : results[i].present) r.present.push_back(present[p]);
  r.result = results[i].result;
  return r;
}

std::string encode_manifest(const Manifest& m) {
  std::string out(k_magic);
  for (const auto& f : m.files) {
    out += "F " + stamp_text(f.stamp) + " " + (f.recent ? "1 " : "0 ") + Key::from_raw(f.sha256)->hex() + " " + f.path +
           "\n";
  }
  for (const auto& a : m.absent) out += "A " + a + "\n";
  for (const auto& p : m.present) out += "P " + stamp_text(p.stamp) + " " + p.path + "\n";
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
      if (!m.absent.empty() || !m.present.empty()) return std::nullopt;
      ManifestFile f;
      if (!read_file_line(line, f)) return std::nullopt;
      m.files.push_back(std::move(f));
    } else if (tag == 'A') {
      if (!m.present.empty() || line.empty()) return std::nullopt;
      m.absent.emplace_back(line);
    } else if (tag == 'P') {
      ManifestPlace place;
      if (!read_stamp(line, place.stamp) || line.empty()) return std::nullopt;
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
    if (a.result != b.result || a.files.size() != b.files.size() || a.absent != b.absent || a.present != b.present) {
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
  std::map<std::pair<std::string, std::string>, std::uint32_t> file_index;
  std::map<std::string, std::uint32_t> absent_index, present_index;
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
    for (const auto& a : rec.absent) res.absent.push_back(index_of(absent_index, m.absent, a, a));
    for (const auto& p : rec.present) {
      res.present.push_back(index_of(present_index, m.present, stamp_text(p.stamp) + " " + p.path, p));
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
    : m_manifest(m), m_absent_holds(m.absent.size()), m_present_holds(m.present.size()) {}

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
    if (!h) {
      struct stat st {};
      h = ::stat(m_manifest.absent[k].c_str(), &st) != 0;
    }
    if (!*h) return Mismatch{Mismatch::Kind::created, m_manifest.absent[k]};
  }
  for (const std::uint32_t k : r.present) {
    auto& h = m_present_holds[k];
    const ManifestPlace& p = m_manifest.present[k];
    if (!h) {
      struct stat st {};
      h = ::stat(p.path.c_str(), &st) == 0 &&
          (p.stamp == detail::FileStamp{} ? S_ISDIR(st.st_mode) : detail::stamp_of(st) == p.stamp);
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
