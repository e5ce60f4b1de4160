// What the remote backends' URL parsers share: a whole decimal integer, and
// the query's "key=value" pairs taken one at a time.
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>

namespace progcache::remote_url {

// The whole of `s` as a decimal integer; false for anything else.
inline bool parse_int(std::string_view s, std::int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

struct QueryParam {
  std::string_view text;  // "key=value" as written
  std::string_view key, value;
  bool has_value = false;  // false: no '=' in it
};

// Takes the first '&'-separated parameter off the front of `query`.
inline QueryParam take_query_param(std::string_view& query) {
  QueryParam p;
  const auto amp = query.find('&');
  p.text = query.substr(0, amp);
  query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  const auto eq = p.text.find('=');
  p.has_value = eq != std::string_view::npos;
  p.key = p.text.substr(0, eq);
  if (p.has_value) p.value = p.text.substr(eq + 1);
  return p;
}

}  // namespace progcache::remote_url
