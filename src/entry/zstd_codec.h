// entry/zstd_codec.h — the zstd side of the entry codec: artifacts stored
// compressed (entry.h, "artifact encodings"). Internal to the library.
//
// A stored artifact is one complete zstd frame that declares its decoded
// size and carries zstd's checksum of the decoded bytes. Decoding judges the
// frame before allocating: it must be exactly one standard frame, declare
// its size, and be within_bound (at most k_max_expansion times its own size
// and k_max_expanded bytes; the encoder stores raw whatever is not, by the
// same test), so a small stored artifact cannot make a reader allocate
// without bound. The decoded bytes are checked against the frame's
// checksum, so a decompressor fault is a miss, not a hit.
//
// Thread safety: all functions are thread-safe (contexts are per thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "progcache/entry.h"
#include "progcache/status.h"

namespace progcache::zstd {

inline constexpr std::uint64_t k_max_expansion = 256;
inline constexpr std::uint64_t k_max_expanded = std::uint64_t{1} << 30;
// Below this, an artifact is always stored as it is.
inline constexpr std::size_t k_min_compressed_input = 512;

// What all the compressed artifacts of one entry may decode to together.
// An entry holds many frames (one per artifact), each within_bound alone;
// without a bound on their sum, a 13 MB entry of such frames decoded to
// gigabytes. Decoding sums every frame's declared size before expanding
// any (EntryReader), and the encoder stores raw whatever would pass it.
inline constexpr std::uint64_t k_max_entry_expanded = k_max_expanded;

// Whether a frame of `stored` bytes may decode to `decoded` bytes: the one
// test encoder and decoder share, so no entry is written that its reader
// would refuse.
bool within_bound(std::uint64_t decoded, std::uint64_t stored);
// Whether an entry of `entry_size` bytes whose compressed artifacts declare
// `decoded` bytes in all may be decoded: at most k_max_entry_expanded, and
// at most k_max_expansion times the entry's own size. The encoder and the
// decoder share this test too.
bool entry_within_bound(std::uint64_t decoded, std::uint64_t entry_size);
// `raw` compressed at `level`, or nullopt when storing it compressed would
// not save at least an eighth of it (or the level is not 1 to
// k_max_compression_level).
std::optional<std::string> shrink(std::string_view raw, int level);
// The decoded size `stored` declares; data_loss unless it is one complete
// standard frame declaring a size within_bound of its own.
Result<std::uint64_t> expanded_size(std::string_view stored);
// Expands `stored` into `dst`, which holds exactly expanded_size(stored)
// bytes; data_loss when the frame does not decode to exactly that.
Status expand(std::string_view stored, char* dst, std::uint64_t size);

}  // namespace progcache::zstd
