#include "progcache/entry.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "entry/zstd_codec.h"
#include "progcache/hash.h"
#include "progcache/version.h"
#include "util/coding.h"

namespace progcache {

namespace {

constexpr char k_magic[8] = {'P', 'C', 'E', 'N', 'T', 'R', 'Y', '\x01'};
constexpr std::uint16_t k_flag_hmac = 1;
constexpr std::uint16_t k_flag_ed25519 = 2;
constexpr std::size_t k_table_row = 16;

// Adds b to a, reporting overflow instead of wrapping.
bool add_checked(std::uint64_t& a, std::uint64_t b) {
  if (a > std::numeric_limits<std::uint64_t>::max() - b) return false;
  a += b;
  return true;
}

}  // namespace

std::string_view producer_string() {
  return "progcache " PROGCACHE_VERSION_STRING;
}

Entry::Entry() {
  static const auto empty = std::make_shared<const Data>();
  m_data = empty;
}

Entry::Entry(std::string metadata_json, std::vector<Artifact> artifacts, std::int64_t created_unix_ns) {
  auto d = std::make_shared<Data>();
  d->metadata = metadata_json.empty() ? std::string("{}") : std::move(metadata_json);
  d->artifacts = std::move(artifacts);
  d->created_ns = created_unix_ns;
  d->producer = std::string(producer_string());
  m_data = std::move(d);
}

Entry Entry::from_bytes(Bytes payload) {
  std::vector<Artifact> a;
  a.push_back({std::string(k_default_artifact), std::move(payload)});
  return Entry("{}", std::move(a));
}

const Artifact* Entry::find(std::string_view name) const {
  for (const auto& a : m_data->artifacts) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

Bytes Entry::primary() const {
  return m_data->artifacts.empty() ? Bytes() : m_data->artifacts.front().data;
}

std::uint64_t Entry::payload_size() const {
  std::uint64_t n = m_data->metadata.size();
  for (const auto& a : m_data->artifacts) n += a.data.size() + a.name.size();
  return n;
}

Status Entry::validate() const {
  if (m_data->artifacts.size() > k_max_artifacts) {
    return invalid_argument("an entry holds at most " + std::to_string(k_max_artifacts) + " artifacts, got " +
                            std::to_string(m_data->artifacts.size()));
  }
  std::set<std::string_view> seen;
  for (const auto& a : m_data->artifacts) {
    if (a.name.empty() || a.name.size() > 255) {
      return invalid_argument("artifact name must be 1 to 255 bytes, got " + std::to_string(a.name.size()));
    }
    if (!seen.insert(a.name).second) return invalid_argument("duplicate artifact name '" + a.name + "'");
  }
  const auto parsed = nlohmann::json::parse(m_data->metadata, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return invalid_argument("entry metadata must be a JSON object");
  }
  if (m_data->metadata.size() > std::numeric_limits<std::uint32_t>::max() ||
      m_data->producer.size() > std::numeric_limits<std::uint32_t>::max()) {
    return invalid_argument("entry metadata is larger than 4 GiB");
  }
  return {};
}

Result<std::string> encode_entry(const Key& key, const Entry& entry, std::int64_t now_ns,
                                 const EntryCodecOptions& options) {
  PROGCACHE_TRY(entry.validate());
  // What each artifact is stored as: compressed where that is asked for and
  // worth it, else its own bytes.
  std::vector<std::optional<std::string>> packed(entry.artifacts().size());
  if (options.compression_level != 0) {
    // Past what a reader lets one entry decode to (entry_within_bound), the
    // rest is stored raw: each frame is within its own bound, so the ratio
    // half of that test holds for the entry as a whole.
    std::uint64_t decoded = 0;
    for (std::size_t i = 0; i < packed.size(); ++i) {
      const std::string_view raw = entry.artifacts()[i].data.view();
      if (raw.size() > zstd::k_max_entry_expanded - decoded) continue;
      packed[i] = zstd::shrink(raw, options.compression_level);
      if (packed[i]) decoded += raw.size();
    }
  }
  const auto stored = [&](std::size_t i) -> std::string_view {
    return packed[i] ? std::string_view(*packed[i]) : entry.artifacts()[i].data.view();
  };
  std::uint64_t body =
      k_entry_fixed_header + k_table_row * entry.artifacts().size() + entry.producer().size() + entry.metadata().size();
  for (const auto& a : entry.artifacts()) body += a.name.size();
  // Spaces after the producer string put the first payload on a multiple of
  // k_entry_payload_alignment (entry.h); nothing before it is the caller's.
  std::size_t pad = 0;
  if (!packed.empty()) {
    pad = (k_entry_payload_alignment - body % k_entry_payload_alignment) % k_entry_payload_alignment;
    if (entry.producer().size() + pad > std::numeric_limits<std::uint32_t>::max()) pad = 0;
    body += pad;
  }
  for (std::size_t i = 0; i < packed.size(); ++i) body += stored(i).size();
  const bool sign = !options.hmac_key.empty();
  const bool sign_ed25519 = options.keys != nullptr && options.keys->can_sign();
  if (sign && sign_ed25519) return invalid_argument("an entry is signed with HMAC or Ed25519, not both");
  std::string out;
  out.reserve(body + k_entry_checksum_size + (sign ? k_entry_hmac_size : 0) +
              (sign_ed25519 ? k_entry_ed25519_size : 0));
  out.append(k_magic, sizeof k_magic);
  put_fixed<std::uint16_t>(out, k_entry_format_version);
  put_fixed<std::uint16_t>(out, sign ? k_flag_hmac : (sign_ed25519 ? k_flag_ed25519 : 0));
  put_fixed<std::uint32_t>(out, static_cast<std::uint32_t>(entry.artifacts().size()));
  const std::int64_t created = entry.created_unix_ns() != 0 ? entry.created_unix_ns() : now_ns;
  put_fixed<std::uint64_t>(out, static_cast<std::uint64_t>(created));
  out.append(key.view());
  put_fixed<std::uint32_t>(out, static_cast<std::uint32_t>(entry.producer().size() + pad));
  put_fixed<std::uint32_t>(out, static_cast<std::uint32_t>(entry.metadata().size()));
  for (std::size_t i = 0; i < packed.size(); ++i) {
    put_fixed<std::uint32_t>(out, static_cast<std::uint32_t>(entry.artifacts()[i].name.size()));
    put_fixed<std::uint32_t>(out, packed[i] ? k_encoding_zstd : k_encoding_raw);
    put_fixed<std::uint64_t>(out, stored(i).size());
  }
  out += entry.producer();
  out.append(pad, ' ');
  out += entry.metadata();
  for (const auto& a : entry.artifacts()) out += a.name;
  for (std::size_t i = 0; i < packed.size(); ++i) out.append(stored(i));
  const Digest128 sum = xxh3_128(out);
  out.append(as_view(sum));
  if (sign) {
    const Digest256 mac = hmac_sha256(options.hmac_key, out);
    out.append(as_view(mac));
  }
  if (sign_ed25519) {
    out.append(as_view(options.keys->public_key()));
    PROGCACHE_ASSIGN_OR_RETURN(const Ed25519Signature sig, options.keys->sign(sha256(out)));
    out.append(as_view(sig));
  }
  return out;
}

std::size_t EntryHeader::trailer_size() const {
  switch (signature) {
    case EntrySignature::hmac:
      return k_entry_checksum_size + k_entry_hmac_size;
    case EntrySignature::ed25519:
      return k_entry_checksum_size + k_entry_ed25519_size;
    case EntrySignature::none:
      break;
  }
  return k_entry_checksum_size;
}

Result<EntryHeader> peek_entry_header(std::string_view data) {
  if (data.size() < k_entry_fixed_header + k_entry_checksum_size) {
    return data_loss("truncated: " + std::to_string(data.size()) + " bytes is shorter than an entry header");
  }
  if (std::memcmp(data.data(), k_magic, sizeof k_magic) != 0) return data_loss("bad magic: not a progcache entry");
  const auto version = decode_fixed<std::uint16_t>(data.data() + 8);
  if (version != k_entry_format_version) {
    return data_loss("unsupported entry format version " + std::to_string(version));
  }
  const auto flags = decode_fixed<std::uint16_t>(data.data() + 10);
  if ((flags & ~(k_flag_hmac | k_flag_ed25519)) != 0 || flags == (k_flag_hmac | k_flag_ed25519)) {
    return data_loss("unknown entry flags " + std::to_string(flags));
  }
  EntryHeader h;
  h.artifact_count = decode_fixed<std::uint32_t>(data.data() + 12);
  h.created_unix_ns = static_cast<std::int64_t>(decode_fixed<std::uint64_t>(data.data() + 16));
  std::memcpy(h.key.bytes.data(), data.data() + 24, 32);
  h.signature = (flags & k_flag_hmac) != 0      ? EntrySignature::hmac
                : (flags & k_flag_ed25519) != 0 ? EntrySignature::ed25519
                                                : EntrySignature::none;
  return h;
}

Result<std::uint64_t> entry_table_end(std::string_view prefix) {
  PROGCACHE_ASSIGN_OR_RETURN(EntryHeader h, peek_entry_header(prefix));
  if (h.artifact_count > k_max_artifacts) {
    return data_loss("artifact count " + std::to_string(h.artifact_count) + " exceeds " +
                     std::to_string(k_max_artifacts));
  }
  return k_entry_fixed_header + std::uint64_t{k_table_row} * h.artifact_count;
}

Result<EntryLayout> parse_entry_layout(std::string_view prefix, std::uint64_t total_size) {
  PROGCACHE_ASSIGN_OR_RETURN(const std::uint64_t table_end, entry_table_end(prefix));
  EntryLayout l;
  l.header = *peek_entry_header(prefix);
  const std::size_t trailer = l.header.trailer_size();
  if (table_end + trailer > total_size) return data_loss("truncated: artifact table runs past the end");
  if (prefix.size() < table_end) return failed_precondition("entry prefix shorter than its artifact table");

  // Every declared length is summed (overflow-checked) and must account for
  // the entry exactly; only then may anything be sliced or allocated.
  l.producer_offset = table_end;
  l.producer_size = decode_fixed<std::uint32_t>(prefix.data() + 56);
  l.metadata_offset = l.producer_offset + l.producer_size;
  l.metadata_size = decode_fixed<std::uint32_t>(prefix.data() + 60);
  std::uint64_t total = l.metadata_offset + l.metadata_size;
  l.artifacts.resize(l.header.artifact_count);
  for (std::uint32_t i = 0; i < l.header.artifact_count; ++i) {
    const char* row = prefix.data() + k_entry_fixed_header + k_table_row * i;
    l.artifacts[i].encoding = decode_fixed<std::uint32_t>(row + 4);
    if (l.artifacts[i].encoding != k_encoding_raw && l.artifacts[i].encoding != k_encoding_zstd) {
      return data_loss("artifact table names an unknown encoding " + std::to_string(l.artifacts[i].encoding));
    }
    l.artifacts[i].name_size = decode_fixed<std::uint32_t>(row);
    l.artifacts[i].data_size = decode_fixed<std::uint64_t>(row + 8);
    l.artifacts[i].name_offset = total;
    if (!add_checked(total, l.artifacts[i].name_size)) return data_loss("artifact lengths overflow");
  }
  for (auto& a : l.artifacts) {
    a.data_offset = total;
    if (!add_checked(total, a.data_size)) return data_loss("artifact lengths overflow");
  }
  if (!add_checked(total, trailer) || total != total_size) {
    return data_loss("length mismatch: header declares " + std::to_string(total) + " bytes, entry has " +
                     std::to_string(total_size));
  }
  l.body_size = total_size - trailer;
  return l;
}

Result<Entry> decode_entry(const Bytes& data, const Key& expected_key, const EntryCodecOptions& options) {
  return EntryReader(data, options).read(expected_key);
}

Status verify_encoded_entry(const Key& expected_key, std::string_view encoded, const EntryCodecOptions& options) {
  auto decoded = EntryReader(Bytes::wrap(nullptr, encoded.data(), encoded.size()), options).read(expected_key);
  return decoded.ok() ? Status() : decoded.status().with_context("entry " + expected_key.hex());
}

}  // namespace progcache
