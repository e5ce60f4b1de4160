#include "compile/depfile.h"

#include <cctype>
#include <set>

namespace progcache::detail {

Result<std::vector<std::string>> parse_depfile(const std::string& text) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  bool after_colon = false;
  bool any_rule = false;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty() && after_colon && seen.insert(cur).second) out.push_back(cur);
    cur.clear();
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      const char next = text[i + 1];
      if (next == '\n' || (next == '\r' && i + 2 < text.size() && text[i + 2] == '\n')) {  // continuation
        flush();
        i += next == '\n' ? 1 : 2;
      } else if (next == ' ' || next == '#' || next == '\\') {
        cur += next;
        ++i;
      } else {
        cur += c;
      }
    } else if (c == '$' && i + 1 < text.size() && text[i + 1] == '$') {
      cur += '$';
      ++i;
    } else if (c == '\n') {
      flush();
      after_colon = false;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      flush();
    } else if (c == ':' && !after_colon &&
               (i + 1 == text.size() || std::isspace(static_cast<unsigned char>(text[i + 1])) != 0)) {
      cur.clear();  // the target
      after_colon = true;
      any_rule = true;
    } else {
      cur += c;
    }
  }
  flush();
  if (!any_rule) return invalid_argument("not a dependency file: no rule");
  return out;
}

}  // namespace progcache::detail
