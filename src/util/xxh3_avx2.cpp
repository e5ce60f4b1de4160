// XXH3-128 compiled for AVX2. xxHash picks its vector code at compile time,
// and progcache is built for the baseline x86-64 (SSE2); this translation
// unit alone is compiled with -mavx2 and called only after a CPU check
// (hash.cpp), roughly doubling checksum speed on entry reads.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include <cstddef>

namespace progcache::detail {

XXH128_hash_t xxh3_128_avx2(const void* data, std::size_t size) {
  return XXH3_128bits(data, size);
}
void xxh3_update_avx2(void* state, const void* data, std::size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

}  // namespace progcache::detail
