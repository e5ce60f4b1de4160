#include "progcache/hash.h"

// SHA-256 through OpenSSL's one-algorithm API (SHA256_Init and friends),
// deprecated in 3.0 but kept by every 3.x release: the same assembly as
// EVP, without the provider machinery. A process's first EVP digest loads
// OpenSSL's configuration and initialises its default provider: 1.8 ms,
// measured on a 2-core machine, against 0.03 ms for the first SHA256_Init;
// for a whole-process warm hit (`progcache nvcc`, `progcache compile`) that
// was a sixth of the run. A build against an OpenSSL without the deprecated
// API (OPENSSL_NO_DEPRECATED_3_0) uses EVP as before. HMAC and Ed25519
// (only when signing is on) stay on EVP.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/opensslconf.h>
#include <openssl/sha.h>
#if !defined(OPENSSL_NO_DEPRECATED_3_0)
#define PROGCACHE_SHA256_DIRECT 1
#endif

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <array>
#include <cstring>
#include <stdexcept>

#include "progcache/bytes.h"
#include "util/xxh3_vector.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace progcache {

namespace detail {

namespace {
#if defined(__x86_64__)
// Whether this processor runs AVX2 and the OS saves its registers
// (CPUID.1:ECX OSXSAVE and AVX, XCR0's SSE and AVX state, CPUID.7.0:EBX
// AVX2), asked in three CPUID instructions. __builtin_cpu_supports would
// link libgcc's start-up probe of every feature, some fifteen CPUIDs, and
// CPUID traps to the hypervisor on a virtual machine (6.6 us each,
// measured on one): 0.15 ms of every launcher process.
bool avx2_runs() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7 || __get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  if ((c & bit_OSXSAVE) == 0 || (c & bit_AVX) == 0) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6U) != 0x6U) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & bit_AVX2) != 0;
}
#endif

void xxh3_128_baseline(const void* data, std::size_t size, std::uint64_t out[2]) {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  out[0] = h.low64;
  out[1] = h.high64;
}
void xxh3_update_baseline(void* state, const void* data, std::size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}
}  // namespace

std::span<const Xxh3Vector> xxh3_vectors() {
  // An array of trivially destructible rows: nothing is destroyed at exit,
  // so a checksum taken by a static's destructor still finds its code.
  static const Xxh3Vector all[] = {
#if defined(__x86_64__)
    {"avx2", avx2_runs(), xxh3_128_avx2, xxh3_update_avx2},
#endif
    {"baseline", true, xxh3_128_baseline, xxh3_update_baseline},
  };
  return all;
}

const Xxh3Vector& xxh3_active() {
  static const Xxh3Vector& active = []() -> const Xxh3Vector& {
    for (const auto& v : xxh3_vectors()) {
      if (v.supported) return v;
    }
    return xxh3_vectors().back();
  }();
  return active;
}

}  // namespace detail

namespace {
Digest128 canonical(XXH128_hash_t h) {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  Digest128 out{};
  static_assert(sizeof(canon.digest) == 16);
  for (int i = 0; i < 16; ++i) out[i] = canon.digest[i];
  return out;
}
}  // namespace

std::string digest_hex(const Digest256& d) {
  return to_hex(as_view(d));
}

namespace {
#ifndef PROGCACHE_SHA256_DIRECT
// Fetched once: an implicit fetch (EVP_sha256()) on every init costs a
// lookup in OpenSSL's provider store, more than hashing a key's inputs.
const EVP_MD* sha256_md() {
  static const EVP_MD* md = [] {
    EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return m != nullptr ? static_cast<const EVP_MD*>(m) : EVP_sha256();
  }();
  return md;
}
#endif
}  // namespace

// Small updates (a key's labels and lengths, 8 bytes at a time) are staged
// and handed to OpenSSL in blocks: its per-call dispatch costs more than
// hashing them.
struct Sha256::Impl {
#ifdef PROGCACHE_SHA256_DIRECT
  SHA256_CTX ctx{};
  void raw_update(const void* data, std::size_t n) {
    SHA256_Update(&ctx, data, n);
  }
#else
  EVP_MD_CTX* ctx = nullptr;
  ~Impl() {
    EVP_MD_CTX_free(ctx);
  }
  void raw_update(const void* data, std::size_t n) {
    EVP_DigestUpdate(ctx, data, n);
  }
#endif
  std::size_t staged = 0;
  std::array<char, 512> stage{};
  void flush() {
    if (staged != 0) raw_update(stage.data(), staged);
    staged = 0;
  }
};

Sha256::Sha256() : m_impl(std::make_unique<Impl>()) {
#ifdef PROGCACHE_SHA256_DIRECT
  SHA256_Init(&m_impl->ctx);
#else
  m_impl->ctx = EVP_MD_CTX_new();
  // Allocation failure inside OpenSSL is the one case progcache treats as
  // fatal: there is no meaningful way to derive a key without a digest.
  if (m_impl->ctx == nullptr || EVP_DigestInit_ex(m_impl->ctx, sha256_md(), nullptr) != 1) {
    throw std::bad_alloc();
  }
#endif
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::string_view data) {
  if (data.empty()) return;  // data() may be null
  Impl& m = *m_impl;
  if (data.size() <= m.stage.size() - m.staged) {
    std::memcpy(m.stage.data() + m.staged, data.data(), data.size());
    m.staged += data.size();
    return;
  }
  m.flush();
  if (data.size() < m.stage.size()) {
    std::memcpy(m.stage.data(), data.data(), data.size());
    m.staged = data.size();
  } else {
    m.raw_update(data.data(), data.size());
  }
}

Digest256 Sha256::finish() {
  Digest256 out{};
  m_impl->flush();
#ifdef PROGCACHE_SHA256_DIRECT
  SHA256_Final(out.data(), &m_impl->ctx);
#else
  unsigned int len = 0;
  EVP_DigestFinal_ex(m_impl->ctx, out.data(), &len);
#endif
  return out;
}

struct HmacSha256::Impl {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* ctx = nullptr;
  ~Impl() {
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
  }
};

HmacSha256::HmacSha256(std::string_view key) : m_impl(std::make_unique<Impl>()) {
  m_impl->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (m_impl->mac != nullptr) m_impl->ctx = EVP_MAC_CTX_new(m_impl->mac);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  // An empty key is a valid HMAC key; OpenSSL wants a non-null pointer for it.
  static const unsigned char k_empty = 0;
  const auto* k = key.empty() ? &k_empty : reinterpret_cast<const unsigned char*>(key.data());
  if (m_impl->ctx == nullptr || EVP_MAC_init(m_impl->ctx, k, key.size(), params) != 1) throw std::bad_alloc();
}
HmacSha256::~HmacSha256() = default;

void HmacSha256::update(std::string_view data) {
  if (!data.empty()) EVP_MAC_update(m_impl->ctx, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

Digest256 HmacSha256::finish() {
  Digest256 out{};
  std::size_t len = 0;
  EVP_MAC_final(m_impl->ctx, out.data(), &len, out.size());
  return out;
}

Digest256 sha256(std::string_view data) {
  Digest256 out{};
#ifdef PROGCACHE_SHA256_DIRECT
  SHA256_CTX ctx;  // not SHA256(), which OpenSSL 3 routes through EVP
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, data.data(), data.size());
  SHA256_Final(out.data(), &ctx);
#else
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, sha256_md(), nullptr);
#endif
  return out;
}

Digest128 xxh3_128(std::string_view data) {
  std::uint64_t h[2];
  detail::xxh3_active().hash(data.data(), data.size(), h);
  return canonical(XXH128_hash_t{h[0], h[1]});
}

Xxh3Stream::Xxh3Stream() : m_state(XXH3_createState()) {
  if (m_state == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(m_state));
}
Xxh3Stream::~Xxh3Stream() {
  XXH3_freeState(static_cast<XXH3_state_t*>(m_state));
}

void Xxh3Stream::update(std::string_view data) {
  detail::xxh3_active().update(m_state, data.data(), data.size());
}

Digest128 Xxh3Stream::finish() {
  return canonical(XXH3_128bits_digest(static_cast<XXH3_state_t*>(m_state)));
}

std::uint64_t xxh3_64(std::string_view data, std::uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

Digest256 hmac_sha256(std::string_view key, std::string_view data) {
  Digest256 out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out.data(), &len);
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace progcache
