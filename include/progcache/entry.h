// progcache/entry.h — one cached result: JSON metadata plus named artifacts,
// and its self-checking binary encoding.
//
// Encoding, format version 1 (all integers little-endian):
//
//   off  size  field
//     0     8  magic "PCENTRY\x01"
//     8     2  format version (1)
//    10     2  flags (bit 0: an HMAC-SHA256 trailer follows the checksum;
//                bit 1: an Ed25519 trailer does; never both)
//    12     4  artifact count N (at most k_max_artifacts)
//    16     8  creation time, Unix nanoseconds (signed)
//    24    32  the key, echoed: an entry found under another key is a miss
//    56     4  producer length P (bytes of "progcache x.y.z")
//    60     4  metadata length M (bytes of UTF-8 JSON)
//    64  16*N  artifact table: u32 name length, u32 encoding, u64 stored length
//     …     P  producer, M metadata, then every name, then every payload
//              (P counts the spaces that pad the producer string so the
//              first payload starts at a multiple of 64; see below)
//     …    16  XXH3-128 (canonical, big-endian) of all bytes before it
//     …    32  HMAC-SHA256 of all bytes before it (only with flag bit 0)
//     …    32  Ed25519 public key of the signer (only with flag bit 1), then
//     …    64  its Ed25519 signature of "progcache entry ed25519 v1\0" and
//              SHA-256 of all bytes before the signature (signing.h)
//
// An artifact's encoding is 0 (stored as it is) or 1 (one zstd frame that
// declares its decoded size; written only with EntryCodecOptions::
// compression_level set, and only where it saves an eighth or more). The
// checksum and signature cover the stored bytes, so damage is found before
// anything is decompressed; decoding then bounds the declared size (at most
// 256 times the stored one, and 1 GiB) before allocating it; the frame
// carries zstd's checksum of the decoded bytes, which decoding checks.
// Readers older than the encoding field see a compressed artifact as a
// damaged entry: a miss (and the file store removes it).
//
// The first payload starts a multiple of k_entry_payload_alignment (64)
// bytes into the entry, so a reader whose buffer is aligned like the file
// copies and checksums it on whole cache lines; the kernel's copy and the
// checksum's 32-byte loads run slower on split lines (docs/benchmarks.md,
// "Payloads on a cache line"). The writer gets there by padding the producer
// string with spaces, which readers strip: the lengths still add up, so
// readers that predate the padding read these entries, showing the spaces,
// and entries written before it read as they always did. Only the first
// payload is aligned: the others follow it without gaps.
//
// Decoding trusts no length: the declared sizes must add up exactly to the
// buffer size (checked with overflow-safe arithmetic) before anything is
// allocated or sliced, so a 20-byte file claiming a 1 TiB payload allocates
// nothing. A decoded Entry's artifacts are slices of the input buffer
// (compressed ones: decoded into memory of their own).
//
// EntryReader is the one decoder: it reads an entry in order, from a buffer
// or through a read_at callable (a file), verifying as it goes, so a file
// store can stream a hit straight into memory its caller owns. decode_entry
// is an EntryReader over a buffer.
//
// Thread safety: Entry is an immutable value; copies share payloads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/bytes.h"
#include "progcache/key.h"
#include "progcache/signing.h"
#include "progcache/status.h"

namespace progcache {

inline constexpr std::uint16_t k_entry_format_version = 1;
inline constexpr std::uint32_t k_max_artifacts = 1024;
inline constexpr std::size_t k_entry_fixed_header = 64;
inline constexpr std::size_t k_entry_checksum_size = 16;
inline constexpr std::size_t k_entry_hmac_size = 32;
inline constexpr std::size_t k_entry_ed25519_size = 96;  // public key and signature
// Where an entry's first payload starts: a multiple of this many bytes.
inline constexpr std::size_t k_entry_payload_alignment = 64;
// The name `Entry::from_bytes` gives its single artifact.
inline constexpr std::string_view k_default_artifact = "code";

struct Artifact {
  std::string name;
  Bytes data;
};

struct EntryCodecOptions {
  // When non-empty, encode appends an HMAC-SHA256 under this key and decode
  // rejects entries without a valid one (permission_denied, "signature").
  std::string hmac_key;
  // When set, encode signs with its private key (if it has one) and decode
  // rejects entries not signed by one of its trusted public keys
  // (permission_denied). Not together with hmac_key.
  std::shared_ptr<const SigningKeys> keys;
  // zstd level (1 to 19) at which encode stores artifacts compressed; 0
  // stores them as they are. Decoding needs no setting: the encoding is in
  // the entry.
  int compression_level = 0;
};

// The highest level compression_level takes (zstd's ultra levels need more
// memory to decode than a cache should ask of its readers).
inline constexpr int k_max_compression_level = 19;
// The level of the stores whose entries compress well, where no level is
// configured: the nvcc launcher's (host objects, and manifests naming every
// header a compile read: about 6 x at level 1, as ccache stores its own by
// default; docs/nvcc.md), Triton's (cubins and the compiler's texts) and
// torch's (Inductor's shared libraries and graphs). docs/benchmarks.md,
// "Compressed by default".
inline constexpr int k_compressed_store_level = 1;
inline constexpr std::uint32_t k_encoding_raw = 0;
inline constexpr std::uint32_t k_encoding_zstd = 1;

class Entry {
 public:
  Entry();
  // `metadata_json` must be a JSON object ("" is taken as "{}"). Artifact
  // names must be unique, non-empty and at most 255 bytes: checked by
  // validate() and by encode_entry().
  Entry(std::string metadata_json, std::vector<Artifact> artifacts, std::int64_t created_unix_ns = 0);

  // One artifact named "code" holding `payload`; metadata "{}".
  static Entry from_bytes(Bytes payload);

  [[nodiscard]] const std::string& metadata() const { return m_data->metadata; }
  [[nodiscard]] const std::vector<Artifact>& artifacts() const { return m_data->artifacts; }
  // The artifact called `name`, or nullptr.
  [[nodiscard]] const Artifact* find(std::string_view name) const;
  // The first artifact's bytes (empty when there is none): the raw program a
  // bytes-in / bytes-out cache hands back.
  [[nodiscard]] Bytes primary() const;
  // Sum of artifact and name sizes plus metadata size: what caps are charged.
  [[nodiscard]] std::uint64_t payload_size() const;
  [[nodiscard]] std::int64_t created_unix_ns() const { return m_data->created_ns; }
  [[nodiscard]] const std::string& producer() const { return m_data->producer; }

  // invalid_argument naming the first problem (duplicate name, bad JSON, ...).
  [[nodiscard]] Status validate() const;

 private:
  friend class EntryReader;
  // An Entry is a handle on immutable data: copying one (as every memory
  // hit does) costs one reference-count increment.
  struct Data {
    std::string metadata = "{}";
    std::vector<Artifact> artifacts;
    std::int64_t created_ns = 0;
    std::string producer;
  };
  std::shared_ptr<const Data> m_data;
};

// Encodes `entry` under `key`. created_unix_ns of 0 is replaced by `now_ns`.
// Fails with invalid_argument when entry.validate() fails.
Result<std::string> encode_entry(const Key& key, const Entry& entry, std::int64_t now_ns,
                                 const EntryCodecOptions& options = {});

// Decodes and verifies. data_loss (with the reason) for anything damaged or
// inconsistent, including a key echo that differs from `expected_key`;
// permission_denied for a missing or wrong signature when a key is set.
Result<Entry> decode_entry(const Bytes& data, const Key& expected_key, const EntryCodecOptions& options = {});

// OK when `encoded` is an entry that decode_entry would accept as
// `expected_key`'s under `options` (checksum, key echo, signature when
// `options` requires one); its error, with the key named, otherwise. What
// a store checks before it takes entry bytes made elsewhere (a bundle).
Status verify_encoded_entry(const Key& expected_key, std::string_view encoded, const EntryCodecOptions& options);

// Reads only the fixed header (no checksum): the echoed key and creation time,
// for listing. data_loss when the buffer is not an entry header.
enum class EntrySignature : std::uint8_t { none, hmac, ed25519 };
struct EntryHeader {
  Key key;
  std::int64_t created_unix_ns = 0;
  std::uint32_t artifact_count = 0;
  EntrySignature signature = EntrySignature::none;
  [[nodiscard]] bool signed_entry() const { return signature != EntrySignature::none; }
  // Bytes after the checksummed body: the checksum and any signature.
  [[nodiscard]] std::size_t trailer_size() const;
};
Result<EntryHeader> peek_entry_header(std::string_view data);

// Where everything is in an entry, from its header and artifact table. All
// offsets are from the start of the entry.
struct EntryLayout {
  EntryHeader header;
  std::uint64_t metadata_offset = 0;
  std::uint32_t metadata_size = 0;
  std::uint64_t producer_offset = 0;
  std::uint32_t producer_size = 0;
  struct Part {
    // data_size is the stored size; see `encoding` for what the bytes are.
    std::uint64_t name_offset, name_size, data_offset, data_size;
    std::uint32_t encoding = k_encoding_raw;
  };
  std::vector<Part> artifacts;
  std::uint64_t body_size = 0;  // bytes covered by the checksum
};
// Parses the header and artifact table in `prefix` (the first bytes of an
// entry of `total_size` bytes) and checks, overflow-safe, that the declared
// lengths add up to exactly `total_size`; nothing is allocated in proportion
// to a declared length. data_loss for anything inconsistent. `prefix` must
// hold the whole table: entry_table_end(prefix) bytes (failed_precondition
// asks for more).
Result<EntryLayout> parse_entry_layout(std::string_view prefix, std::uint64_t total_size);
// Bytes of header plus artifact table, from the fixed header alone.
Result<std::uint64_t> entry_table_end(std::string_view prefix);

// Reads one entry in order and verifies it: the header and artifact table
// must account for the entry's size exactly before anything is allocated in
// proportion to a declared length; then the checksum, the signature (when a
// key is set), the key echo and the metadata JSON, as decode_entry.
//
// Errors: data_loss (with the reason) for damage, including an entry that
// ends early (a file that shrank while being read); permission_denied for a
// missing or wrong signature when a key is set; read_at's own Status for an
// I/O failure; resource_exhausted when `alloc` returns nullptr.
//
// Thread safety: one reader per read; not for concurrent use.
class EntryReader {
 public:
  // Reads up to `n` bytes at `offset` into `dst`; returns how many were
  // read, 0 when the data ends there.
  using ReadAt = std::function<Result<std::size_t>(std::uint64_t offset, char* dst, std::size_t n)>;
  // The same into several pieces, filling each before the next (a file's
  // preadv); a short count may end in any piece.
  using ReadAtV = std::function<Result<std::size_t>(std::uint64_t offset, std::span<const ReadPiece> pieces)>;
  // Memory for `n` bytes, or nullptr when there is none.
  using Alloc = std::function<char*(std::size_t n)>;

  // An entry of `size` bytes, read through `read_at` (a file's pread).
  EntryReader(ReadAt read_at, std::uint64_t size, EntryCodecOptions options = {});
  // With `read_at_v` as well, the last artifact, when it is read into memory
  // (the caller's, or read()'s one buffer), and the trailer after it take
  // one read instead of two.
  EntryReader(ReadAt read_at, ReadAtV read_at_v, std::uint64_t size, EntryCodecOptions options = {});
  // An entry held in `data`: nothing is copied, artifacts are slices of it
  // (compressed ones are decoded into memory of their own).
  explicit EntryReader(Bytes data, EntryCodecOptions options = {});

  // The whole entry. Through read_at, the artifacts share one allocation,
  // made once the header and table add up.
  Result<Entry> read(const Key& expected_key);
  // Only the first artifact (the raw program of a bytes-in / bytes-out
  // cache): alloc is called once with its size (0 when the entry has no
  // artifact) and the bytes are written there as they are read (a
  // compressed one: decompressed there once verified); everything else is
  // verified and dropped. Until this returns ok the memory holds unverified
  // bytes: on an error the caller discards it.
  Status read_primary(const Key& expected_key, const Alloc& alloc);
  // Both fail with resource_exhausted when memory runs out (a declared length
  // that adds up but is larger than what the process can still allocate, or
  // an `alloc` that throws std::bad_alloc): nothing is thrown.

 private:
  struct Checked;
  Result<Entry> read_unguarded(const Key& expected_key);
  Status read_primary_unguarded(const Key& expected_key, const Alloc& alloc);
  // Where artifact `index` of `layout` is written as it is read; nullptr:
  // verified and dropped.
  using Destination = std::function<Result<char*>(const EntryLayout& layout, std::size_t index)>;
  Result<Checked> verify(const Key& expected_key, const Destination& dest);
  // Bytes [0, n), kept for the life of the reader.
  Result<std::string_view> prefix(std::uint64_t n);
  // Bytes [offset, offset + n): a view of the buffer, or read into `into`.
  Result<std::string_view> fetch(std::uint64_t offset, std::size_t n, char* into);
  // Through read_at: bytes from `offset` on into `pieces` (at most
  // k_max_pieces), filled in order; what the prefix holds is copied, the
  // rest read, all pieces in one read through m_read_at_v where there is one.
  static constexpr std::size_t k_max_pieces = 2;
  Status read_into(std::uint64_t offset, std::span<const ReadPiece> pieces);

  ReadAt m_read_at;
  ReadAtV m_read_at_v;  // may be empty
  Bytes m_data;
  bool m_in_memory = false;
  std::uint64_t m_size = 0;
  EntryCodecOptions m_options;
  std::string m_head;  // bytes [0, m_head.size()) read so far through read_at
};

// The version string written into entries ("progcache 0.1.0").
std::string_view producer_string();

}  // namespace progcache
