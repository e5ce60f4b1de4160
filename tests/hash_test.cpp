// XXH3-128 as progcache runs it (the widest vector code this CPU supports)
// and every other variant the build has, against xxHash's scalar code
// compiled here: same digest for every length, start alignment and split.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_SCALAR
#include "progcache/hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "util/xxh3_vector.h"

namespace progcache {
namespace {

XXH128_hash_t reference(const char* p, std::size_t n) {
  return XXH3_128bits(p, n);
}

// Lengths around every branch of XXH3 (0, 1-3, 4-8, 9-16, 17-128, 129-240,
// then stripes, blocks and the streaming buffer) and a few large ones.
std::vector<std::size_t> lengths() {
  std::vector<std::size_t> out;
  for (std::size_t n = 0; n <= 1100; ++n) out.push_back(n);
  for (const std::size_t n : {4095, 4096, 4097, 65'536 + 17, 300'001, (1 << 20) + 5}) out.push_back(n);
  return out;
}

std::string random_bytes(std::size_t n) {
  std::mt19937_64 rng(42);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Checksums taken while statics are destroyed (a tiered store's queued
// remote puts, flushed by its destructor at exit) run the right code: the
// variant table is never destroyed. This object is built before the first
// checksum, so it is destroyed after everything built by one; a table
// destroyed at exit made this process fail after its tests had passed.
struct ChecksumsAtExit {
  ChecksumsAtExit() = default;
  ChecksumsAtExit(const ChecksumsAtExit&) = delete;
  ChecksumsAtExit& operator=(const ChecksumsAtExit&) = delete;
  ~ChecksumsAtExit() {
    const std::string data(70'000, 'x');
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, reference(data.data(), data.size()));
    const Digest128 d = xxh3_128(data);
    const std::string_view name = detail::xxh3_active().name;
    if (std::memcmp(d.data(), canon.digest, 16) != 0 || (name != "avx2" && name != "baseline")) {
      std::fputs("hash_test: a checksum taken at exit ran the wrong code\n", stderr);
      std::_Exit(1);
    }
  }
} checksums_at_exit;

class Xxh3VectorTest : public ::testing::TestWithParam<std::string> {
 protected:
  const detail::Xxh3Vector* variant() {
    for (const auto& v : detail::xxh3_vectors()) {
      if (v.name == GetParam()) return &v;
    }
    return nullptr;
  }
};

TEST_P(Xxh3VectorTest, EqualsTheScalarCodeAtEveryLengthAlignmentAndSplit) {
  const detail::Xxh3Vector* v = variant();
  if (v == nullptr) GTEST_SKIP() << "this build has no " << GetParam() << " variant (not x86-64)";
  if (!v->supported) GTEST_SKIP() << "this CPU or OS does not run " << GetParam();
  const std::string data = random_bytes((1 << 20) + 5 + 64);
  int checked = 0;
  for (const std::size_t n : lengths()) {
    for (const std::size_t start : {0, 1, 16, 27, 32, 63}) {
      if (n > 1100 && start % 16 != 0 && start != 27) continue;
      const char* p = data.data() + start;
      const XXH128_hash_t want = reference(p, n);
      std::uint64_t got[2];
      v->hash(p, n, got);
      ASSERT_EQ(got[0], want.low64) << GetParam() << ", " << n << " bytes at +" << start;
      ASSERT_EQ(got[1], want.high64) << GetParam() << ", " << n << " bytes at +" << start;
      // Streamed in two pieces split anywhere: the entry reader streams its
      // prefix, then each artifact.
      for (const std::size_t split : {std::size_t{0}, n / 3, n > 101 ? std::size_t{101} : n, n}) {
        XXH3_state_t state;
        XXH3_128bits_reset(&state);
        v->update(&state, p, split);
        v->update(&state, p + split, n - split);
        const XXH128_hash_t streamed = XXH3_128bits_digest(&state);
        ASSERT_TRUE(streamed.low64 == want.low64 && streamed.high64 == want.high64)
            << GetParam() << ", " << n << " bytes at +" << start << " split at " << split;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 6000);
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, Xxh3VectorTest, ::testing::Values("avx2", "baseline"),
                         [](const auto& param_info) { return param_info.param; });

TEST(Xxh3, TheActiveVariantIsTheWidestThisCpuRuns) {
  const auto& all = detail::xxh3_vectors();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().name, "baseline");
  EXPECT_TRUE(all.back().supported);
  const detail::Xxh3Vector* widest = nullptr;
  for (const auto& v : all) {
    if (v.supported && widest == nullptr) widest = &v;
  }
  EXPECT_EQ(detail::xxh3_active().name, widest->name);
#if defined(__x86_64__)
  // The library's own check against the compiler's, which asks the same
  // of CPUID and XGETBV through libgcc.
  EXPECT_EQ(all.front().name, "avx2");
  EXPECT_EQ(all.front().supported, __builtin_cpu_supports("avx2") != 0);
#endif
  std::cout << "checksum runs " << detail::xxh3_active().name << " code\n";
}

TEST(Xxh3, ThePublicFunctionsGiveTheCanonicalScalarDigest) {
  const std::string data = random_bytes(70'001);
  for (const std::size_t n : {0, 3, 129, 241, 70'001}) {
    const std::string_view in(data.data(), n);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, reference(in.data(), n));
    const Digest128 one_shot = xxh3_128(in);
    Xxh3Stream s;
    s.update(in.substr(0, n / 2));
    s.update(in.substr(n / 2));
    const Digest128 streamed = s.finish();
    EXPECT_EQ(0, std::memcmp(one_shot.data(), canon.digest, 16)) << n;
    EXPECT_EQ(0, std::memcmp(streamed.data(), canon.digest, 16)) << n;
  }
}

}  // namespace
}  // namespace progcache
