// libFuzzer target: size and duration parsing, and user keys.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "progcache/key.h"
#include "progcache/store.h"

using namespace progcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto s = parse_size(in);
  if (s.ok()) {
    // Every accepted size formats, stays below 2^63, and reads back as
    // itself when written as plain bytes.
    if (format_size(*s).empty() || *s > static_cast<std::uint64_t>(INT64_MAX)) __builtin_trap();
    auto again = parse_size(std::to_string(*s));
    if (!again.ok() || *again != *s) __builtin_trap();
    // Exactness against a reference for plain integers with a unit: the
    // digits times the unit's power of two, computed independently.
    std::size_t digits = 0;
    while (digits < in.size() && in[digits] >= '0' && in[digits] <= '9') ++digits;
    if (digits > 0 && digits <= 12 && (digits == in.size() || in[digits] != '.')) {
      const unsigned long long base = std::stoull(std::string(in.substr(0, digits)));
      std::size_t at = digits;
      while (at < in.size() && in[at] == ' ') ++at;  // "1 G" is 1 GiB
      const char u = at < in.size() ? static_cast<char>(in[at] | 0x20) : 'b';
      const int shift = u == 'k' ? 10 : u == 'm' ? 20 : u == 'g' ? 30 : u == 't' ? 40 : 0;
      const unsigned __int128 want = static_cast<unsigned __int128>(base) << shift;
      if (want != *s) __builtin_trap();
    }
  } else if (s.status().message().find(in.substr(0, 16)) == std::string_view::npos &&
             in.find('\0') == std::string_view::npos) {
    __builtin_trap();  // the error must name the text
  }
  auto d = parse_duration(in);
  if (d.ok() && *d < 0) __builtin_trap();
  const Key k = key_from_user(in);
  if (key_from_user(in) != k) __builtin_trap();
  return 0;
}
