// The one entry decoder: reads an entry in order and verifies it on the way
// (see entry.h). decode_entry (entry.cpp) is this over a buffer; the file
// store runs it over pread.
#include <algorithm>
#include <cstring>
#include <functional>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>

#include "entry/zstd_codec.h"
#include "progcache/entry.h"
#include "progcache/hash.h"

namespace progcache {

namespace {

// The first read of a file: the fixed header, the artifact table of any
// ordinary entry, and often the whole of a small one.
constexpr std::size_t k_first_read = 4096;
// A file up to this size is read whole by the first read: copying its
// artifact out of that costs less than the one or two more reads (the rest
// of the artifact, the trailer) it would take otherwise.
constexpr std::size_t k_first_read_whole_up_to = std::size_t{16} * 1024;
// Payloads are read and hashed in chunks that fit in L2, so the checksum
// reads bytes the copy just brought into cache instead of making a second
// trip to memory.
constexpr std::size_t k_chunk = std::size_t{128} * 1024;

// On the AMD EPYC machines measured, the kernel's copy from the page cache
// runs about seven to ten times slower when its destination sits a few
// bytes past its source modulo a page: 1 to 15 bytes on one (330 us for
// 1 MiB against 45), 1 to 31 on another (docs/benchmarks.md, "Where a read
// lands"). The store's own buffers keep the file's alignment
// (Bytes::allocate's phase); a caller's buffer lands where its allocator
// put it, and one that lands in that window is filled through a staging
// buffer that does not: a user-space copy has no such penalty (1 MiB: 25 us).
constexpr std::uintptr_t k_page = 4096;
constexpr std::uintptr_t k_slow_landing = 32;

bool lands_slowly(const char* dst, std::uint64_t file_offset) {
  const std::uintptr_t d = (reinterpret_cast<std::uintptr_t>(dst) - static_cast<std::uintptr_t>(file_offset)) % k_page;
  return d != 0 && d < k_slow_landing;
}

// The decoded bytes of a verified, compressed artifact, in memory of their own.
Result<Bytes> expanded(std::string_view stored) {
  PROGCACHE_ASSIGN_OR_RETURN(const std::uint64_t n, zstd::expanded_size(stored));
  char* base = nullptr;
  Bytes out;
  try {
    out = Bytes::allocate(n, &base);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("no memory to decompress an artifact of " + std::to_string(n) + " bytes");
  }
  PROGCACHE_TRY(zstd::expand(stored, base, n));
  return out;
}

// Judges what the entry's compressed artifacts declare, all together, before
// any is expanded: each frame alone is bounded, but an entry holds many, and
// they are expanded into memory that lives as long as the entry. data_loss:
// a damaged or hostile entry is a miss, never gigabytes of memory.
Status check_expansion(const std::vector<EntryLayout::Part>& parts,
                       const std::function<std::string_view(std::size_t)>& stored_of, std::uint64_t entry_size) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].encoding != k_encoding_zstd) continue;
    PROGCACHE_ASSIGN_OR_RETURN(const std::uint64_t n, zstd::expanded_size(stored_of(i)));
    total += n;  // each at most k_max_expanded, at most k_max_artifacts of them: no overflow
    if (!zstd::entry_within_bound(total, entry_size)) {
      return data_loss("compressed artifacts declare more than " + std::to_string(zstd::k_max_entry_expanded) +
                       " bytes in all, or more than " + std::to_string(zstd::k_max_expansion) + " times the entry's " +
                       std::to_string(entry_size) + " bytes (refused before decoding)");
    }
  }
  return {};
}

Status shrank() {
  return data_loss("truncated: the entry ended early (the file shrank while being read)");
}

}  // namespace

struct EntryReader::Checked {
  EntryLayout layout;
  std::string_view prefix;  // header, table, producer, metadata and names
};

EntryReader::EntryReader(ReadAt read_at, std::uint64_t size, EntryCodecOptions options)
    : m_read_at(std::move(read_at)), m_size(size), m_options(std::move(options)) {}

EntryReader::EntryReader(ReadAt read_at, ReadAtV read_at_v, std::uint64_t size, EntryCodecOptions options)
    : m_read_at(std::move(read_at)), m_read_at_v(std::move(read_at_v)), m_size(size), m_options(std::move(options)) {}

EntryReader::EntryReader(Bytes data, EntryCodecOptions options)
    : m_data(std::move(data)), m_in_memory(true), m_size(m_data.size()), m_options(std::move(options)) {}

Result<std::string_view> EntryReader::prefix(std::uint64_t n) {
  if (m_in_memory) return m_data.view().substr(0, n);
  if (n > m_head.size()) {
    std::size_t done = m_head.size();
    m_head.resize(n);
    while (done < n) {
      PROGCACHE_ASSIGN_OR_RETURN(std::size_t got, m_read_at(done, m_head.data() + done, n - done));
      if (got == 0) return shrank();
      done += got;
    }
  }
  return std::string_view(m_head).substr(0, n);
}

Status EntryReader::read_into(std::uint64_t offset, std::span<const ReadPiece> pieces) {
  if (pieces.size() > k_max_pieces) return invalid_argument("read_into takes at most two pieces");
  std::size_t total = 0;
  for (const ReadPiece& p : pieces) total += p.size;
  // The pieces from byte `done` of the run on: at most as many as given.
  ReadPiece rest[k_max_pieces];
  const auto pieces_from = [&](std::size_t done) {
    std::size_t count = 0;
    for (const ReadPiece& p : pieces) {
      if (done >= p.size) {
        done -= p.size;
        continue;
      }
      rest[count++] = {p.data + done, p.size - done};
      done = 0;
    }
    return std::span<const ReadPiece>(rest, count);
  };
  std::size_t done = 0;
  if (offset < m_head.size()) {  // already read with the prefix
    done = std::min<std::size_t>(total, m_head.size() - offset);
    std::size_t copied = 0;
    for (const ReadPiece& p : pieces) {
      const std::size_t n = std::min(p.size, done - copied);
      if (n != 0) std::memcpy(p.data, m_head.data() + offset + copied, n);
      copied += n;
    }
  }
  while (done < total) {
    const std::span<const ReadPiece> todo = pieces_from(done);
    const std::size_t asked = m_read_at_v ? total - done : todo.front().size;
    Result<std::size_t> got =
        m_read_at_v ? m_read_at_v(offset + done, todo) : m_read_at(offset + done, todo.front().data, asked);
    if (!got.ok()) return got.status();
    if (*got == 0) return shrank();
    done += std::min(*got, asked);  // never past what was asked for, whatever the callable claims
  }
  return {};
}

Result<std::string_view> EntryReader::fetch(std::uint64_t offset, std::size_t n, char* into) {
  if (m_in_memory) return m_data.view().substr(offset, n);
  const ReadPiece piece{into, n};
  PROGCACHE_TRY(read_into(offset, std::span<const ReadPiece>(&piece, 1)));
  return std::string_view(into, n);
}

Result<EntryReader::Checked> EntryReader::verify(const Key& expected_key, const Destination& dest) {
  if (m_size < k_entry_fixed_header + k_entry_checksum_size) {
    return data_loss("truncated: " + std::to_string(m_size) + " bytes is shorter than an entry header");
  }
  // The header and table are judged before anything sized by them is read:
  // a file claiming a huge payload costs its first 4 KiB.
  const std::uint64_t first =
      m_size <= k_first_read_whole_up_to ? m_size : std::min<std::uint64_t>(m_size, k_first_read);
  PROGCACHE_ASSIGN_OR_RETURN(std::string_view head, prefix(first));
  PROGCACHE_ASSIGN_OR_RETURN(const std::uint64_t table_end, entry_table_end(head));
  if (table_end > head.size() && table_end <= m_size) {
    PROGCACHE_ASSIGN_OR_RETURN(head, prefix(table_end));
  }
  Checked c;
  PROGCACHE_ASSIGN_OR_RETURN(c.layout, parse_entry_layout(head, m_size));
  const EntryLayout& l = c.layout;
  const std::uint64_t prefix_end = l.artifacts.empty() ? l.body_size : l.artifacts.front().data_offset;
  PROGCACHE_ASSIGN_OR_RETURN(c.prefix, prefix(prefix_end));

  const bool want_mac = !m_options.hmac_key.empty();
  const bool want_ed25519 = m_options.keys != nullptr;
  Xxh3Stream sum;
  std::optional<HmacSha256> mac;
  std::optional<Sha256> signed_digest;
  if (want_mac && l.header.signature == EntrySignature::hmac) mac.emplace(m_options.hmac_key);
  if (want_ed25519 && l.header.signature == EntrySignature::ed25519) signed_digest.emplace();
  const auto feed = [&](std::string_view v) {
    sum.update(v);
    if (mac) mac->update(v);
    if (signed_digest) signed_digest->update(v);
  };
  feed(c.prefix);
  std::string scratch;
  char trailer_buf[k_entry_checksum_size + k_entry_ed25519_size] = {};  // never a stale trailer
  const std::size_t trailer_size = m_size - l.body_size;  // header.trailer_size(): parse_entry_layout checked
  bool trailer_read = false;
  for (std::size_t i = 0; i < l.artifacts.size(); ++i) {
    const auto& part = l.artifacts[i];
    PROGCACHE_ASSIGN_OR_RETURN(char* dst, dest(l, i));
    // Artifacts up to the first read's size are copied out of it, never
    // read by the kernel into `dst`.
    const bool stage = dst != nullptr && !m_in_memory && part.data_size > k_first_read_whole_up_to &&
                       lands_slowly(dst, part.data_offset);
    if (dst != nullptr && !m_in_memory && !stage) {
      // Into the caller's memory: one read of the whole artifact (a system
      // call per chunk costs more than the chunks' cache locality saves),
      // and the last one takes the trailer with it.
      if (i + 1 == l.artifacts.size()) {
        const ReadPiece pieces[] = {{dst, part.data_size}, {trailer_buf, trailer_size}};
        PROGCACHE_TRY(read_into(part.data_offset, pieces));
        trailer_read = true;
        feed(std::string_view(dst, part.data_size));
      } else {
        PROGCACHE_ASSIGN_OR_RETURN(std::string_view got, fetch(part.data_offset, part.data_size, dst));
        feed(got);
      }
      continue;
    }
    // In chunks: from memory (slices of it), dropped (through scratch), or
    // staged (read into memory with the file's alignment, then copied).
    char* staging = nullptr;
    Bytes staging_memory;
    if (stage) {
      staging_memory = Bytes::allocate(std::min<std::uint64_t>(k_chunk, part.data_size), &staging, part.data_offset);
    } else if (dst == nullptr && !m_in_memory) {
      scratch.resize(std::min<std::uint64_t>(k_chunk, part.data_size));
      staging = scratch.data();
    }
    for (std::uint64_t off = 0; off < part.data_size; off += k_chunk) {
      const std::size_t n = std::min<std::uint64_t>(k_chunk, part.data_size - off);
      char* into = staging != nullptr ? staging : (dst != nullptr ? dst + off : scratch.data());
      PROGCACHE_ASSIGN_OR_RETURN(std::string_view got, fetch(part.data_offset + off, n, into));
      if (dst != nullptr && got.data() != dst + off) std::memcpy(dst + off, got.data(), n);
      feed(got);
    }
  }
  std::string_view trailer(trailer_buf, trailer_size);
  if (!trailer_read) {
    PROGCACHE_ASSIGN_OR_RETURN(trailer, fetch(l.body_size, trailer_size, trailer_buf));
  }
  const Digest128 d = sum.finish();
  if (std::memcmp(d.data(), trailer.data(), d.size()) != 0) return data_loss("checksum mismatch");
  if (want_mac) {
    if (l.header.signature != EntrySignature::hmac) {
      return permission_denied("entry is not signed and a signing key is configured");
    }
    mac->update(trailer.substr(0, k_entry_checksum_size));
    const Digest256 m = mac->finish();
    if (!constant_time_equal(as_view(m), trailer.substr(k_entry_checksum_size))) {
      return permission_denied("entry signature does not verify");
    }
  }
  if (want_ed25519) {
    if (l.header.signature != EntrySignature::ed25519) {
      return permission_denied("entry is not signed with Ed25519 and trusted public keys are configured");
    }
    Ed25519PublicKey signer{};
    Ed25519Signature sig{};
    std::memcpy(signer.data(), trailer.data() + k_entry_checksum_size, signer.size());
    std::memcpy(sig.data(), trailer.data() + k_entry_checksum_size + signer.size(), sig.size());
    if (!m_options.keys->trusts(signer)) {
      return permission_denied("entry is signed by key " + SigningKeys::fingerprint(signer) + ", which is not trusted");
    }
    signed_digest->update(trailer.substr(0, k_entry_checksum_size + signer.size()));
    if (!m_options.keys->verify(signer, signed_digest->finish(), sig)) {
      return permission_denied("entry signature does not verify");
    }
  }
  if (l.header.key != expected_key) return data_loss("key echo mismatch: entry belongs to key " + l.header.key.hex());
  if (!nlohmann::json::accept(c.prefix.substr(l.metadata_offset, l.metadata_size))) {
    return data_loss("metadata is not valid JSON");
  }
  return c;
}

Result<Entry> EntryReader::read_unguarded(const Key& expected_key) {
  // Through read_at, every payload lands in one buffer, allocated once the
  // layout is known to add up; from memory, payloads are slices of it.
  Bytes payloads;
  char* base = nullptr;
  std::uint64_t first = 0;
  const auto dest = [&](const EntryLayout& l, std::size_t i) -> Result<char*> {
    if (m_in_memory) return nullptr;
    if (i == 0) {
      first = l.artifacts.front().data_offset;
      payloads = Bytes::allocate(l.body_size - first, &base, /*phase=*/first);  // keeps the file's alignment
    }
    return base + (l.artifacts[i].data_offset - first);
  };
  PROGCACHE_ASSIGN_OR_RETURN(Checked c, verify(expected_key, dest));
  const EntryLayout& l = c.layout;
  auto e = std::make_shared<Entry::Data>();
  e->created_ns = l.header.created_unix_ns;
  std::string_view producer = c.prefix.substr(l.producer_offset, l.producer_size);
  while (!producer.empty() && producer.back() == ' ') producer.remove_suffix(1);  // the alignment padding
  e->producer.assign(producer);
  e->metadata.assign(c.prefix.substr(l.metadata_offset, l.metadata_size));
  e->artifacts.resize(l.artifacts.size());
  for (std::size_t i = 0; i < l.artifacts.size(); ++i) {
    const auto& part = l.artifacts[i];
    e->artifacts[i].name.assign(c.prefix.substr(part.name_offset, part.name_size));
    e->artifacts[i].data = m_in_memory ? m_data.slice(part.data_offset, part.data_size)
                                       : payloads.slice(part.data_offset - first, part.data_size);
  }
  PROGCACHE_TRY(check_expansion(
      l.artifacts, [&](std::size_t i) { return e->artifacts[i].data.view(); }, m_size));
  for (std::size_t i = 0; i < l.artifacts.size(); ++i) {
    if (l.artifacts[i].encoding == k_encoding_zstd) {
      PROGCACHE_ASSIGN_OR_RETURN(e->artifacts[i].data, expanded(e->artifacts[i].data.view()));
    }
  }
  Entry out;
  out.m_data = std::move(e);
  return out;
}

Status EntryReader::read_primary_unguarded(const Key& expected_key, const Alloc& alloc) {
  const auto give = [&](std::uint64_t n) -> Result<char*> {
    char* p = alloc(n);
    if (p == nullptr) return resource_exhausted("no memory for a cache hit of " + std::to_string(n) + " bytes");
    return p;
  };
  // A compressed primary is read into scratch memory with the file's
  // alignment (never staged), and expanded into the caller's only once
  // verified.
  Bytes packed;
  const auto dest = [&](const EntryLayout& l, std::size_t i) -> Result<char*> {
    if (i != 0) return nullptr;
    const auto& part = l.artifacts.front();
    if (part.encoding == k_encoding_raw) return give(part.data_size);
    char* p = nullptr;  // no more than the entry's own size: the layout added up
    packed = Bytes::allocate(part.data_size, &p, /*phase=*/part.data_offset);
    return p;
  };
  PROGCACHE_ASSIGN_OR_RETURN(Checked c, verify(expected_key, dest));
  if (c.layout.artifacts.empty()) return give(0).status();
  if (c.layout.artifacts.front().encoding == k_encoding_zstd) {
    PROGCACHE_ASSIGN_OR_RETURN(const std::uint64_t n, zstd::expanded_size(packed.view()));
    PROGCACHE_ASSIGN_OR_RETURN(char* p, give(n));
    return zstd::expand(packed.view(), p, n);
  }
  return {};
}

// Every length an entry declares is checked to add up before anything is
// sized by it, but one that adds up can still be more than this process may
// allocate (a prefix or payload of gigabytes in a file of up to 8 GiB):
// that is a failed read, never an exception out of a cache lookup.
Result<Entry> EntryReader::read(const Key& expected_key) {
  try {
    return read_unguarded(expected_key);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("no memory to read an entry of " + std::to_string(m_size) + " bytes");
  }
}

Status EntryReader::read_primary(const Key& expected_key, const Alloc& alloc) {
  try {
    return read_primary_unguarded(expected_key, alloc);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("no memory to read an entry of " + std::to_string(m_size) + " bytes");
  }
}

}  // namespace progcache
