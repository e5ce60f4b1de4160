// The XXH3-128 code each kind of CPU runs. xxHash picks its vector code at
// compile time and progcache is built for the baseline of its architecture,
// so on x86-64 the AVX2 variant is compiled apart (xxh3_avx2.cpp) and
// hash.cpp runs it where the CPU and its OS support it. Every variant
// computes the same digest (hash_test checks each against xxHash's scalar
// code). No AVX-512 variant: one was tried and made no hit faster, since a
// hit hashes what the kernel's copy has just written (docs/benchmarks.md,
// "Payloads on a cache line").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace progcache::detail {

struct Xxh3Vector {
  std::string_view name;  // "avx2", or "baseline" (SSE2 on x86-64)
  bool supported;         // this CPU and OS run it
  // The digest as {low64, high64}.
  void (*hash)(const void* data, std::size_t size, std::uint64_t out[2]);
  // XXH3_128bits_update on an XXH3_state_t.
  void (*update)(void* state, const void* data, std::size_t size);
};

// Every variant this build has, widest first; the last is the baseline.
std::span<const Xxh3Vector> xxh3_vectors();
// The first supported one: what xxh3_128 and Xxh3Stream run.
const Xxh3Vector& xxh3_active();

#if defined(__x86_64__)
void xxh3_128_avx2(const void* data, std::size_t size, std::uint64_t out[2]);
void xxh3_update_avx2(void* state, const void* data, std::size_t size);
#endif

}  // namespace progcache::detail
