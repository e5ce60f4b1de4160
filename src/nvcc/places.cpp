// nvcc/places.cpp — the search nvcc's preprocessor makes, and where a
// header created later would be found first.
#include "nvcc/places.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/include_lexer.h"
#include "compile/scan_files.h"
#include "nvcc/environment.h"
#include "nvcc/nvcc_command.h"
#include "progcache/hash.h"

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
namespace dt = progcache::detail;

}  // namespace

std::vector<std::string> toolkit_dirs(const std::string& bin, std::string_view sub) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string targets = dt::join(dt::parent_of(bin), "targets");
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(targets, ec)) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  out.reserve(found.size());
  for (const auto& t : found) out.push_back(dt::join(t, std::string(sub)));
  return out;
}

std::vector<std::string> search_chain(const Command& cmd, const std::string& bin,
                                      const std::vector<std::string>& system, const std::vector<std::string>& added) {
  // What a host compiler that is a script adds may come before any of it.
  std::vector<std::string> out = added;
  auto append = [&out](const std::vector<std::string>& ds) { out.insert(out.end(), ds.begin(), ds.end()); };
  append(cmd.include_dirs);
  append(toolkit_dirs(bin, "include"));
  append(env_dirs("CPATH"));
  append(cmd.system_dirs);
  append(toolkit_dirs(bin, "include/cccl"));
  append(env_dirs("C_INCLUDE_PATH"));
  append(env_dirs("CPLUS_INCLUDE_PATH"));
  append(system);
  return out;
}

bool link_made_since(const std::string& path, std::int64_t start) {
  std::size_t pos = path.starts_with("/") ? 1 : 0;
  while (pos <= path.size()) {
    const auto slash = path.find('/', pos);
    const std::string prefix = path.substr(0, slash);
    struct stat st {};
    if (!prefix.empty() && ::lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && dt::stamp_of(st).ctime > start) {
      return true;
    }
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return false;
}

bool moved_below(const std::string& path, const std::vector<std::string>& tops, std::int64_t start) {
  const std::string parent = dt::parent_of(path);
  const std::string dir = dt::real_or_normal(parent.empty() ? "." : parent);
  std::string top;
  for (const auto& t : tops) {
    if ((dir == t || dt::under(dir, t)) && t.size() > top.size()) top = t;
  }
  for (std::string d = dir; !top.empty() && d.size() > top.size(); d = dt::parent_of(d)) {
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0 || dt::ns_of(st.st_ctim) > start) return true;
  }
  return false;
}

void marker_names(std::string_view text, std::set<std::string>& named) {
  for (std::size_t b = 0; b < text.size();) {
    std::size_t e = text.find('\n', b);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view line = text.substr(b, e - b);
    b = e + 1;
    if (!line.starts_with("# ") || line.size() < 3 || std::isdigit(static_cast<unsigned char>(line[2])) == 0) continue;
    std::size_t q = line.find('"');
    if (q == std::string_view::npos) continue;
    std::string name;
    for (++q; q < line.size() && line[q] != '"'; ++q) {
      if (line[q] == '\\' && q + 1 < line.size()) ++q;
      name.push_back(line[q]);
    }
    named.insert(std::move(name));
  }
}

std::vector<std::string> search_places(const std::string& name, const std::optional<std::string>& first,
                                       const std::vector<std::string>& chain) {
  if (name.starts_with("/")) return {name};
  std::vector<std::string> out;
  out.reserve(chain.size() + 1);
  auto add = [&](const std::string& d) { out.push_back(dt::join(d == "." ? "" : d, name)); };
  if (first) add(*first);
  for (const auto& d : chain) add(d);
  return out;
}

std::optional<std::vector<std::pair<std::string, std::string>>> generated_headers(
    const std::vector<std::string>& chain, const std::string& tmpdir, const std::vector<std::string>& trusted) {
  auto is_trusted = [&](const std::string& place) {
    const std::string r = dt::real_or_normal(place);
    return std::any_of(trusted.begin(), trusted.end(), [&r](const std::string& t) { return dt::under(r, t); });
  };
  // Where `name` is found: an absolute name as it is, else in `first` (a
  // quoted include's directory), then along the chain; a place that is
  // `includer` itself (#include_next of its own name) is passed over.
  // For #include_next (`next`), every place past the includer's own is
  // found (which directory found the includer is not known here).
  auto find = [&](const std::string& name, const std::optional<std::string>& first, const std::string& includer,
                  bool next) -> std::vector<std::string> {
    std::vector<std::string> found;
    for (const auto& place : search_places(name, first, chain)) {
      struct stat st {};
      if (::stat(place.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!includer.empty() && dt::real_or_normal(place) == includer) continue;
      found.push_back(place);
      if (!next) break;
    }
    return found;
  };
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<Generated> todo;
  for (const char* name : {"crt/host_runtime.h", "fatbinary_section.h"}) {
    const auto found = find(name, tmpdir, "", false);
    if (found.empty()) return std::nullopt;
    todo.push_back({found.front(), true});
  }
  std::reverse(todo.begin(), todo.end());
  std::set<std::string> seen;
  while (!todo.empty()) {
    const Generated g = std::move(todo.back());
    todo.pop_back();
    const std::string real = dt::real_or_normal(g.place);
    if (!seen.insert(real).second) continue;
    auto text = dt::read_regular(g.place);
    if (!text.ok()) return std::nullopt;
    const auto sum = pc::sha256(*text);
    out.emplace_back(g.place, std::string(pc::as_view(sum)));
    if (!g.expand) continue;
    for (const auto& d : dt::directives(*text)) {
      if (d.kind == dt::Operand::computed) continue;
      const auto inner = find(
          d.name, d.kind == dt::Operand::quoted ? std::optional(dt::parent_of(g.place)) : std::nullopt, real, d.next);
      for (auto it = inner.rbegin(); it != inner.rend(); ++it) todo.push_back({*it, !is_trusted(*it)});
    }
  }
  return out;
}

}  // namespace progcache::nvcc
