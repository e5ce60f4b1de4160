// util/coding.h — little-endian fixed-width integers, the one encoding the
// library writes (entry headers, key material), as leveldb's util/coding.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace progcache {

// Appends the low sizeof(T) bytes of `v`, least significant first.
template <typename T>
void put_fixed(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads sizeof(T) bytes at `p` written by put_fixed.
template <typename T>
T decode_fixed(const char* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace progcache
