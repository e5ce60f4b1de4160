#include "compile/include_places.h"

#include <string_view>
#include <unordered_set>

#include "compile/include_lexer.h"
#include "compile/scan_files.h"

namespace progcache::detail {

Result<IncludePlaces> include_places(const std::vector<std::string>& files, const IncludeSearch& search) {
  IncludePlaces out;
  std::unordered_set<std::string> seen;
  auto add = [&](std::string place) {
    if (!seen.insert(place).second) return;
    if (search.precompiled) out.precompiled.push_back(place + ".gch");
    out.headers.push_back(std::move(place));
  };
  for (const auto& name : search.implicit) {
    for (const auto& dir : search.dirs) add(join(dir, name));
  }
  for (const auto& file : files) {
    auto text = read_regular(file);
    if (!text.ok()) return text.status();
    if (!may_hold_directives(*text)) continue;
    const std::string here = parent_of(file);
    for (const Directive& d : directives(*text)) {
      if (d.kind == Operand::computed) {
        out.computed.push_back(file + ":" + std::to_string(d.line));
        continue;
      }
      if (d.name.empty()) continue;
      if (d.name.starts_with('/')) {
        add(d.name);
        continue;
      }
      // An #include_next's search goes on past the directory that held the
      // includer; every directory is a superset of that.
      if (d.kind == Operand::quoted) add(join(here, d.name));
      for (const auto& dir : search.dirs) add(join(dir, d.name));
    }
  }
  return out;
}

}  // namespace progcache::detail
