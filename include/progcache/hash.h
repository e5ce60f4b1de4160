// progcache/hash.h — the hash functions progcache relies on, all from
// well-kept libraries: SHA-256 and HMAC-SHA256 from OpenSSL, XXH3-128 from
// xxHash.
//
// Thread safety: free functions are thread-safe; a Sha256, HmacSha256 or
// Xxh3Stream object is not (use one per thread).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace progcache {

using Digest256 = std::array<std::uint8_t, 32>;
using Digest128 = std::array<std::uint8_t, 16>;

// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(std::string_view data);
  // Finishes the digest; the object must not be updated afterwards.
  Digest256 finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// Incremental XXH3-128 (equal to xxh3_128 of the concatenated input).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(std::string_view data);
  Digest128 finish();

 private:
  void* m_state;
};

// Incremental HMAC-SHA256 (OpenSSL's EVP_MAC): equal to hmac_sha256(key, the
// concatenated input).
class HmacSha256 {
 public:
  explicit HmacSha256(std::string_view key);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;

  void update(std::string_view data);
  // Finishes the MAC; the object must not be updated afterwards.
  Digest256 finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

Digest256 sha256(std::string_view data);
// XXH3-128 as 16 bytes, big-endian high half first (XXH128_canonical_t).
Digest128 xxh3_128(std::string_view data);
// 64-bit XXH3 of `data` with `seed` (used for rendezvous hashing and sharding).
std::uint64_t xxh3_64(std::string_view data, std::uint64_t seed = 0);
Digest256 hmac_sha256(std::string_view key, std::string_view data);
// A digest's bytes as a string_view (valid while the digest lives).
template <std::size_t N>
std::string_view as_view(const std::array<std::uint8_t, N>& d) {
  return {reinterpret_cast<const char*>(d.data()), N};
}

// Lower-case hex of a digest.
std::string digest_hex(const Digest256& d);

// Constant-time comparison for MACs.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace progcache
