// A bundle: entries of a cache root's stores in one file, written and read
// as a stream, so a container image, a CI cache step or a new machine can
// start warm (`progcache export` / `progcache import`).
//
// The entries travel as stored: each is self-checking (checksum, key echo,
// any signature), and a store takes one only through
// FileStore::put_encoded, which checks it again under the importing store's
// codec. The bundle adds framing and, at its end, the entry count and the
// SHA-256 of every byte before it, so a bundle cut short or damaged between
// entries is reported as such. Layout (little-endian):
//
//   header   "PCBUNDLE", u32 format version (1), u32 flags (0)
//   entry    u8 1, u8 store name length, store name, 32-byte key,
//            u64 entry size, entry bytes
//   end      u8 2, u64 entry count, 32-byte SHA-256 of all bytes before
//            this record
//
// Thread safety: a writer or reader is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "progcache/hash.h"
#include "progcache/key.h"
#include "progcache/status.h"

namespace progcache {

inline constexpr std::string_view k_bundle_magic = "PCBUNDLE";
inline constexpr std::uint32_t k_bundle_version = 1;
// The largest entry a bundle may carry (the disk store's own bound).
inline constexpr std::uint64_t k_bundle_max_entry = std::uint64_t{8} << 30;

class BundleWriter {
 public:
  // Writes everything through `sink` (which returns an error to stop).
  using Sink = std::function<Status(std::string_view)>;
  explicit BundleWriter(Sink sink);

  // The header; once, before any entry.
  Status begin();
  // One entry of the store called `store` ("programs", "triton", ...).
  Status add(std::string_view store, const Key& key, std::string_view encoded);
  // The end record; nothing may be added afterwards.
  Status finish();

  [[nodiscard]] std::uint64_t entries() const { return m_count; }
  [[nodiscard]] std::uint64_t bytes() const { return m_bytes; }

 private:
  Status write(std::string_view data);
  Sink m_sink;
  Sha256 m_digest;
  std::uint64_t m_count = 0;
  std::uint64_t m_bytes = 0;
};

struct BundleRecord {
  std::string store;
  Key key;
  std::string encoded;
};

class BundleReader {
 public:
  // Reads up to `n` bytes into `dst`; 0 at the end of the input.
  using Source = std::function<Result<std::size_t>(char* dst, std::size_t n)>;
  explicit BundleReader(Source source);

  // The next entry, or nullopt after the end record has been read and the
  // count and digest found right (and nothing follows it). Errors, after
  // which the reader is done: data_loss "not a progcache bundle" (bad
  // magic), failed_precondition for a format version newer than this
  // library reads (nothing of such a bundle is returned), data_loss naming
  // what is wrong for a bundle cut short, a bad record, a wrong count or
  // digest, or bytes after the end; the source's own error.
  Result<std::optional<BundleRecord>> next();

  [[nodiscard]] std::uint64_t bytes() const { return m_bytes; }

 private:
  Status read_exact(char* dst, std::size_t n, std::string_view what);
  Status header();
  Source m_source;
  Sha256 m_digest;
  std::uint64_t m_count = 0;
  std::uint64_t m_bytes = 0;
  bool m_started = false;
  bool m_done = false;
};

}  // namespace progcache
