// XXH3-128 compiled with -mavx2 (see xxh3_vector.h).
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include "util/xxh3_vector.h"

namespace progcache::detail {

void xxh3_128_avx2(const void* data, std::size_t size, std::uint64_t out[2]) {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  out[0] = h.low64;
  out[1] = h.high64;
}

void xxh3_update_avx2(void* state, const void* data, std::size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

}  // namespace progcache::detail
