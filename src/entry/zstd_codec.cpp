#include "entry/zstd_codec.h"

#include <zstd.h>

#include <memory>

#include "util/coding.h"

namespace progcache::zstd {

namespace {

struct FreeCctx {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct FreeDctx {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One context per thread, made on first use and reused: making one costs
// more than compressing a small cubin.
ZSTD_CCtx* cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, FreeCctx> c(ZSTD_createCCtx());
  return c.get();
}
ZSTD_DCtx* dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, FreeDctx> d(ZSTD_createDCtx());
  return d.get();
}

}  // namespace

bool within_bound(std::uint64_t decoded, std::uint64_t stored) {
  return decoded <= k_max_expanded && decoded / k_max_expansion <= stored && stored != 0;
}

bool entry_within_bound(std::uint64_t decoded, std::uint64_t entry_size) {
  return decoded <= k_max_entry_expanded && decoded / k_max_expansion <= entry_size;
}

std::optional<std::string> shrink(std::string_view raw, int level) {
  if (raw.size() < k_min_compressed_input || level < 1 || level > k_max_compression_level) return std::nullopt;
  ZSTD_CCtx* c = cctx();
  if (c == nullptr) return std::nullopt;
  // Sized to what storing compressed may take at most: an output that
  // does not fit is not worth keeping.
  const std::size_t worth = raw.size() - raw.size() / 8;
  std::string out(worth, '\0');
  if (ZSTD_isError(ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1))) {
    return std::nullopt;
  }
  const std::size_t n = ZSTD_compress2(c, out.data(), out.size(), raw.data(), raw.size());
  if (ZSTD_isError(n) || !within_bound(raw.size(), n)) return std::nullopt;
  out.resize(n);
  return out;
}

Result<std::uint64_t> expanded_size(std::string_view stored) {
  if (stored.size() < 4 || decode_fixed<std::uint32_t>(stored.data()) != ZSTD_MAGICNUMBER)
    return data_loss("compressed artifact: not a standard zstd frame");
  const unsigned long long n = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN) {
    return data_loss("compressed artifact: not a zstd frame that declares its size");
  }
  if (ZSTD_findFrameCompressedSize(stored.data(), stored.size()) != stored.size()) {
    return data_loss("compressed artifact: not exactly one zstd frame");
  }
  if (!within_bound(n, stored.size())) {
    return data_loss("compressed artifact: declares " + std::to_string(n) + " bytes from " +
                     std::to_string(stored.size()) + ", more than " + std::to_string(k_max_expansion) +
                     " times that or more than " + std::to_string(k_max_expanded) + " bytes");
  }
  return static_cast<std::uint64_t>(n);
}

Status expand(std::string_view stored, char* dst, std::uint64_t size) {
  ZSTD_DCtx* d = dctx();
  if (d == nullptr) return resource_exhausted("no memory for a zstd decompression context");
  const std::size_t got = ZSTD_decompressDCtx(d, dst, size, stored.data(), stored.size());
  if (ZSTD_isError(got)) {
    return data_loss(std::string("compressed artifact does not decode: ") + ZSTD_getErrorName(got));
  }
  if (got != size) return data_loss("compressed artifact decodes to a size other than it declares");
  return {};
}

}  // namespace progcache::zstd
