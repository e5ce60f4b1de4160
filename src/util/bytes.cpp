#include "progcache/bytes.h"

#include <cstring>
#include <memory>

namespace progcache {

Bytes Bytes::copy_of(std::string_view data) {
  char* out = nullptr;
  Bytes b = allocate(data.size(), &out);
  if (!data.empty()) std::memcpy(out, data.data(), data.size());
  return b;
}

Bytes Bytes::adopt(std::string&& data) {
  auto owner = std::make_shared<const std::string>(std::move(data));
  return wrap(owner, owner->data(), owner->size());
}

Bytes Bytes::allocate(std::size_t size, char** mutable_data) {
  // make_shared_for_overwrite is C++20 but missing from libstdc++ 12 for
  // arrays; a unique_ptr handed to a shared_ptr costs one extra allocation
  // and leaves the bytes uninitialised (no memset of large payloads).
  std::unique_ptr<char[]> buf(new char[size == 0 ? 1 : size]);
  *mutable_data = buf.get();
  std::shared_ptr<const char[]> owner(buf.release(), std::default_delete<const char[]>());
  const char* data = owner.get();
  return wrap(std::shared_ptr<const void>(owner, data), data, size);
}

std::string to_hex(std::string_view data) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out(data.size() * 2, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto c = static_cast<unsigned char>(data[i]);
    out[2 * i] = k_digits[c >> 4];
    out[2 * i + 1] = k_digits[c & 0xf];
  }
  return out;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Result<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return invalid_argument("hex string has odd length " + std::to_string(hex.size()));
  }
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      const std::size_t bad = hi < 0 ? 2 * i : 2 * i + 1;
      return invalid_argument("not a hex digit at position " + std::to_string(bad) + ": '" + std::string(1, hex[bad]) +
                              "'");
    }
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

}  // namespace progcache
