#include "key_record.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "progcache/hash.h"

namespace progcache::detail {

namespace {

using nlohmann::json;

constexpr int k_record_version = 1;

std::string digest_of(std::string_view data) {
  return digest_hex(sha256(data));
}

// Digests are shown by their first 16 hex digits: enough to tell two apart.
std::string shown(const std::string& digest) {
  return digest.size() > 16 ? digest.substr(0, 16) : digest;
}

json named_digests(const std::vector<InMemoryHeader>& v) {
  json out = json::array();
  for (const auto& h : v) out.push_back({h.name, digest_of(h.content)});
  return out;
}

// A record read from an entry: every field type-checked, since the bytes
// are not ours to trust (json::value throws on a type mismatch; these
// helpers never do).
std::string str_of(const json& r, const char* field) {
  auto it = r.find(field);
  return it != r.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<std::string> strings_of(const json& r, const char* field) {
  std::vector<std::string> out;
  auto it = r.find(field);
  if (it == r.end() || !it->is_array()) return out;
  for (const auto& v : *it) out.push_back(v.is_string() ? v.get<std::string>() : std::string());
  return out;
}

// Rows of strings ([[name, digest], [path, digest, operand], ...]).
std::vector<std::vector<std::string>> rows_of(const json& r, const char* field) {
  std::vector<std::vector<std::string>> out;
  auto it = r.find(field);
  if (it == r.end() || !it->is_array()) return out;
  for (const auto& row : *it) {
    std::vector<std::string> cells;
    if (row.is_array()) {
      for (const auto& c : row) cells.push_back(c.is_string() ? c.get<std::string>() : std::string());
    }
    cells.resize(3);
    out.push_back(std::move(cells));
  }
  return out;
}

// An option's name, which stays when its value changes: "--gpu-architecture"
// of "--gpu-architecture=sm_90"; for macros the macro's name too
// ("--define-macro=N" of "--define-macro=N=4").
std::string option_name(const std::string& o) {
  const auto eq = o.find('=');
  if (eq == std::string::npos) return o;
  if (o.starts_with("--define-macro=") || o.starts_with("--undefine-macro=")) {
    const auto eq2 = o.find('=', eq + 1);
    return eq2 == std::string::npos ? o : o.substr(0, eq2);
  }
  return o.substr(0, eq);
}

class Differ {
 public:
  void add(std::string component, std::string change, std::string subject, std::string before, std::string after) {
    m_out.push_back({std::move(component), std::move(change), std::move(subject), std::move(before), std::move(after)});
  }

  void scalar(const json& a, const json& b, const char* field, const char* component, bool digest = false) {
    const std::string x = str_of(a, field), y = str_of(b, field);
    if (x != y) add(component, "changed", "", digest ? shown(x) : x, digest ? shown(y) : y);
  }

  // Options: one whose name appears once on each side with another value
  // is "changed"; the rest "added" or "removed"; the same options in
  // another order (order is keyed: later options override earlier ones)
  // "reordered".
  void options(const std::vector<std::string>& a, const std::vector<std::string>& b) {
    if (a == b) return;
    std::multiset<std::string> sa(a.begin(), a.end()), sb(b.begin(), b.end());
    if (sa == sb) {
      add("option", "reordered", "", join(a), join(b));
      return;
    }
    std::map<std::string, std::vector<std::string>> by_name_a, by_name_b;
    for (const auto& o : a) {
      if (!sb.contains(o)) by_name_a[option_name(o)].push_back(o);
    }
    for (const auto& o : b) {
      if (!sa.contains(o)) by_name_b[option_name(o)].push_back(o);
    }
    for (const auto& o : a) {
      if (sb.contains(o)) continue;
      const std::string n = option_name(o);
      auto other = by_name_b.find(n);
      if (by_name_a[n].size() == 1 && other != by_name_b.end() && other->second.size() == 1) {
        add("option", "changed", n, o, other->second.front());
        by_name_b.erase(other);
        continue;
      }
      add("option", "removed", o, o, "");
    }
    for (const auto& o : b) {
      if (sa.contains(o)) continue;
      if (by_name_b.contains(option_name(o))) add("option", "added", o, "", o);
    }
  }

  void name_expressions(const std::vector<std::string>& a, const std::vector<std::string>& b) {
    const std::set<std::string> sa(a.begin(), a.end()), sb(b.begin(), b.end());
    for (const auto& n : a) {
      if (!sb.contains(n)) add("name expression", "removed", n, n, "");
    }
    for (const auto& n : b) {
      if (!sa.contains(n)) add("name expression", "added", n, "", n);
    }
    if (sa == sb && a != b) add("name expression", "reordered", "", join(a), join(b));
  }

  // Named digests ([[name, digest], ...]): in-memory headers, NVVM modules.
  void named(const std::vector<std::vector<std::string>>& a, const std::vector<std::vector<std::string>>& b,
             const char* component) {
    std::map<std::string, std::string> ma, mb;
    for (const auto& r : a) ma.emplace(r[0], r[1]);
    for (const auto& r : b) mb.emplace(r[0], r[1]);
    for (const auto& [name, d] : ma) {
      auto it = mb.find(name);
      if (it == mb.end())
        add(component, "removed", name, shown(d), "");
      else if (it->second != d)
        add(component, "edited", name, shown(d), shown(it->second));
    }
    for (const auto& [name, d] : mb) {
      if (!ma.contains(name)) add(component, "added", name, "", shown(d));
    }
  }

  // Files read from disk ([[path, digest, operand], ...], in the order
  // found). A file added for an operand that also found a file read before
  // is "shadowed": the compiler now finds it first.
  void files(const std::vector<std::vector<std::string>>& a, const std::vector<std::vector<std::string>>& b) {
    std::map<std::string, const std::vector<std::string>*> ma, mb;
    for (const auto& r : a) ma.emplace(r[0], &r);
    for (const auto& r : b) mb.emplace(r[0], &r);
    for (const auto& r : b) {
      auto it = ma.find(r[0]);
      if (it != ma.end()) {
        if ((*it->second)[1] != r[1]) add("file", "edited", r[0], shown((*it->second)[1]), shown(r[1]));
        continue;
      }
      // Which file read before did the same operand find?
      std::string hidden;
      if (!r[2].empty()) {
        for (const auto& old : a) {
          if (old[2] == r[2] && old[0] != r[0]) {
            hidden = old[0];
            break;
          }
        }
      }
      if (!hidden.empty())
        add("file", "shadowed", r[0], hidden, r[0]);
      else
        add("file", "added", r[0], "", shown(r[1]));
    }
    for (const auto& r : a) {
      if (!mb.contains(r[0])) add("file", "removed", r[0], shown(r[1]), "");
    }
  }

  void list_of_digests(const std::vector<std::string>& a, const std::vector<std::string>& b, const char* component) {
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string subject = "#" + std::to_string(i + 1);
      if (i >= b.size())
        add(component, "removed", subject, shown(a[i]), "");
      else if (i >= a.size())
        add(component, "added", subject, "", shown(b[i]));
      else if (a[i] != b[i])
        add(component, "changed", subject, shown(a[i]), shown(b[i]));
    }
  }

  std::size_t size() const { return m_out.size(); }
  std::vector<InputDifference> take() { return std::move(m_out); }

 private:
  static std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
    return out;
  }

  std::vector<InputDifference> m_out;
};

Result<json> parse_record(std::string_view text, const char* which) {
  json r = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!r.is_object()) return invalid_argument(std::string(which) + " key record is not a JSON object");
  auto v = r.find("version");
  if (v == r.end() || !v->is_number_integer() || v->get<std::int64_t>() != k_record_version) {
    return invalid_argument(std::string(which) + " key record is of another version");
  }
  return r;
}

}  // namespace

std::string key_record(const Program& p, TargetType target, const CompilerIdentity& id,
                       const std::optional<SourceDeps>& deps, const std::string& working_directory) {
  // The options as the key hashes them: each spelling of one option alike.
  auto canonical = canonicalize_options(p.options, /*have_extra_digest=*/true);
  json files = json::array();
  if (deps) {
    // 128 bits of each file's digest tell its versions apart, and keep the
    // record of a program that reads hundreds of headers small.
    for (const auto& f : deps->files) files.push_back({f.path, f.sha256.substr(0, 32), f.operand});
  }
  json links = json::array();
  for (const auto& m : p.link_inputs) links.push_back(digest_of(m));
  const json r{
      {"version", k_record_version},
      {"name", p.name},
      {"code_type", code_type_name(p.code_type)},
      {"target", target_type_name(target)},
      {"code", digest_of(p.code)},
      {"options", canonical.ok() ? *canonical : p.options},
      {"name_expressions", p.name_expressions},
      {"headers", named_digests(p.headers)},
      {"files", std::move(files)},
      {"include_digest", deps ? deps->digest : std::string()},
      {"link_inputs", std::move(links)},
      {"extra_digest", p.extra_digest ? digest_of(*p.extra_digest) : std::string()},
      {"nvvm_modules", named_digests(p.nvvm_extra_sources)},
      {"use_libdevice", p.use_libdevice ? "yes" : "no"},
      {"working_directory", working_directory},
      {"compiler",
       {{"nvrtc_version", id.nvrtc_version},
        {"nvrtc_fingerprint", id.nvrtc_fingerprint},
        {"nvjitlink_version", id.nvjitlink_version},
        {"driver_version", id.driver_version},
        {"nvvm_fingerprint", id.nvvm_fingerprint}}},
  };
  return r.dump();
}

Result<std::vector<InputDifference>> compare_key_records(std::string_view before, std::string_view after) {
  PROGCACHE_ASSIGN_OR_RETURN(const json a, parse_record(before, "the stored"));
  PROGCACHE_ASSIGN_OR_RETURN(const json b, parse_record(after, "the current"));
  Differ d;
  d.scalar(a, b, "code_type", "code type");
  d.scalar(a, b, "target", "target");
  d.scalar(a, b, "code", "code", /*digest=*/true);
  d.options(strings_of(a, "options"), strings_of(b, "options"));
  d.name_expressions(strings_of(a, "name_expressions"), strings_of(b, "name_expressions"));
  d.named(rows_of(a, "headers"), rows_of(b, "headers"), "header");
  const std::size_t before_files = d.size();
  d.files(rows_of(a, "files"), rows_of(b, "files"));
  // The include digest covers more than the files read: places found empty
  // and -I directories fingerprinted whole (a computed #include). When it
  // differs and no file does, one of those changed.
  if (d.size() == before_files && str_of(a, "include_digest") != str_of(b, "include_digest")) {
    d.add("include directories", "changed", "a place searched for headers, or a directory fingerprinted whole",
          shown(str_of(a, "include_digest")), shown(str_of(b, "include_digest")));
  }
  std::vector<std::string> la, lb;
  for (const auto& r : strings_of(a, "link_inputs")) la.push_back(r);
  for (const auto& r : strings_of(b, "link_inputs")) lb.push_back(r);
  d.list_of_digests(la, lb, "link input");
  d.scalar(a, b, "extra_digest", "extra digest", /*digest=*/true);
  d.named(rows_of(a, "nvvm_modules"), rows_of(b, "nvvm_modules"), "nvvm module");
  d.scalar(a, b, "use_libdevice", "libdevice");
  d.scalar(a, b, "working_directory", "working directory");
  const json no_compiler = json::object();
  const json& ca = a.contains("compiler") && a["compiler"].is_object() ? a["compiler"] : no_compiler;
  const json& cb = b.contains("compiler") && b["compiler"].is_object() ? b["compiler"] : no_compiler;
  for (const char* field :
       {"nvrtc_version", "nvrtc_fingerprint", "nvjitlink_version", "driver_version", "nvvm_fingerprint"}) {
    const std::string x = str_of(ca, field), y = str_of(cb, field);
    if (x != y) d.add("compiler", "changed", field, shown(x), shown(y));
  }
  return d.take();
}

}  // namespace progcache::detail
