// util/coding.h — little-endian fixed-width integers, the one encoding the
// library writes (entry headers, key material), as leveldb's util/coding.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace progcache {

// Writes the low sizeof(T) bytes of `v` at `p`, least significant first.
template <typename T>
void encode_fixed(char* p, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Appends `v` as encode_fixed writes it.
template <typename T>
void put_fixed(std::string& out, T v) {
  char buf[sizeof(T)];
  encode_fixed(buf, v);
  out.append(buf, sizeof(T));
}

// Reads sizeof(T) bytes at `p` written by put_fixed.
template <typename T>
T decode_fixed(const char* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace progcache
