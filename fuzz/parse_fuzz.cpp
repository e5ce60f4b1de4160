// libFuzzer target: size and duration parsing, and user keys.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "progcache/key.h"
#include "progcache/store.h"

using namespace progcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto s = parse_size(in);
  if (s.ok()) {
    // Every accepted size formats and stays within range.
    if (format_size(*s).empty()) __builtin_trap();
  } else if (s.status().message().find(in.substr(0, 16)) == std::string_view::npos && in.find('\0') == std::string_view::npos) {
    __builtin_trap();  // the error must name the text
  }
  auto d = parse_duration(in);
  if (d.ok() && *d < 0) __builtin_trap();
  const Key k = key_from_user(in);
  if (key_from_user(in) != k) __builtin_trap();
  return 0;
}
