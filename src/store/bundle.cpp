#include "progcache/bundle.h"

#include <algorithm>
#include <array>

#include "util/coding.h"

namespace progcache {

namespace {
constexpr std::uint8_t k_record_entry = 1;
constexpr std::uint8_t k_record_end = 2;
constexpr std::size_t k_header_size = 16;
// Entries are read in pieces of this size, so a declared size never
// allocates more than the bytes that actually arrive.
constexpr std::size_t k_read_piece = std::size_t{1} << 20;
}  // namespace

BundleWriter::BundleWriter(Sink sink) : m_sink(std::move(sink)) {}

Status BundleWriter::write(std::string_view data) {
  m_digest.update(data);
  m_bytes += data.size();
  return m_sink(data);
}

Status BundleWriter::begin() {
  std::string h(k_bundle_magic);
  put_fixed<std::uint32_t>(h, k_bundle_version);
  put_fixed<std::uint32_t>(h, 0);
  return write(h);
}

Status BundleWriter::add(std::string_view store, const Key& key, std::string_view encoded) {
  if (store.empty() || store.size() > 255) return invalid_argument("store name must be 1 to 255 bytes");
  if (encoded.size() > k_bundle_max_entry) return invalid_argument("entry larger than a bundle carries");
  std::string r;
  r.push_back(static_cast<char>(k_record_entry));
  r.push_back(static_cast<char>(store.size()));
  r.append(store);
  r.append(key.view());
  put_fixed<std::uint64_t>(r, encoded.size());
  PROGCACHE_TRY(write(r));
  PROGCACHE_TRY(write(encoded));
  ++m_count;
  return {};
}

Status BundleWriter::finish() {
  std::string r;
  r.push_back(static_cast<char>(k_record_end));
  put_fixed<std::uint64_t>(r, m_count);
  const Digest256 d = m_digest.finish();
  r.append(reinterpret_cast<const char*>(d.data()), d.size());
  m_bytes += r.size();
  return m_sink(r);
}

BundleReader::BundleReader(Source source) : m_source(std::move(source)) {}

Status BundleReader::read_exact(char* dst, std::size_t n, std::string_view what) {
  std::size_t done = 0;
  while (done < n) {
    PROGCACHE_ASSIGN_OR_RETURN(std::size_t got, m_source(dst + done, n - done));
    if (got == 0) {
      return data_loss("bundle cut short: it ends inside " + std::string(what) + " after " +
                       std::to_string(m_bytes + done) + " bytes");
    }
    done += got;
  }
  m_bytes += n;
  return {};
}

Status BundleReader::header() {
  std::array<char, k_header_size> h{};
  PROGCACHE_TRY(read_exact(h.data(), h.size(), "its header"));
  if (std::string_view(h.data(), k_bundle_magic.size()) != k_bundle_magic) {
    return data_loss("not a progcache bundle (no PCBUNDLE header)");
  }
  const auto version = decode_fixed<std::uint32_t>(h.data() + 8);
  if (version != k_bundle_version) {
    return failed_precondition("bundle format version " + std::to_string(version) +
                               (version > k_bundle_version ? " is newer than" : " is not one") +
                               " this progcache reads (version " + std::to_string(k_bundle_version) + ")");
  }
  if (decode_fixed<std::uint32_t>(h.data() + 12) != 0) return failed_precondition("bundle has unknown flags");
  m_digest.update(std::string_view(h.data(), h.size()));
  return {};
}

Result<std::optional<BundleRecord>> BundleReader::next() {
  if (m_done) return failed_precondition("bundle already read to its end or to an error");
  auto fail = [this](Status st) -> Result<std::optional<BundleRecord>> {
    m_done = true;
    return st;
  };
  if (!m_started) {
    m_started = true;
    if (Status st = header(); !st.ok()) return fail(st);
  }
  char kind = 0;
  if (Status st = read_exact(&kind, 1, "a record"); !st.ok()) return fail(st);
  if (static_cast<std::uint8_t>(kind) == k_record_end) {
    std::array<char, 8 + 32> end{};
    if (Status st = read_exact(end.data(), end.size(), "its end record"); !st.ok()) return fail(st);
    const auto count = decode_fixed<std::uint64_t>(end.data());
    const Digest256 d = m_digest.finish();
    m_done = true;
    if (count != m_count) {
      return data_loss("bundle end record counts " + std::to_string(count) + " entries where " +
                       std::to_string(m_count) + " were read");
    }
    if (std::string_view(end.data() + 8, 32) != std::string_view(reinterpret_cast<const char*>(d.data()), 32)) {
      return data_loss("bundle digest does not match its contents (damaged between entries)");
    }
    char extra = 0;
    auto more = m_source(&extra, 1);
    if (!more.ok()) return more.status();
    if (*more != 0) return data_loss("bytes after the bundle's end record");
    return std::optional<BundleRecord>();
  }
  if (static_cast<std::uint8_t>(kind) != k_record_entry) {
    return fail(data_loss("bundle record of unknown kind " + std::to_string(static_cast<unsigned char>(kind)) +
                          " after " + std::to_string(m_bytes - 1) + " bytes"));
  }
  m_digest.update(std::string_view(&kind, 1));
  unsigned char name_size = 0;
  if (Status st = read_exact(reinterpret_cast<char*>(&name_size), 1, "a record"); !st.ok()) return fail(st);
  m_digest.update(std::string_view(reinterpret_cast<const char*>(&name_size), 1));
  BundleRecord r;
  r.store.resize(name_size);
  std::array<char, 32 + 8> key_size{};
  if (Status st = read_exact(r.store.data(), r.store.size(), "a record"); !st.ok()) return fail(st);
  if (Status st = read_exact(key_size.data(), key_size.size(), "a record"); !st.ok()) return fail(st);
  m_digest.update(r.store);
  m_digest.update(std::string_view(key_size.data(), key_size.size()));
  if (name_size == 0) return fail(data_loss("bundle record with an empty store name"));
  r.key = *Key::from_raw(std::string_view(key_size.data(), 32));
  const auto size = decode_fixed<std::uint64_t>(key_size.data() + 32);
  if (size > k_bundle_max_entry) return fail(data_loss("bundle record declares an entry larger than any entry"));
  while (r.encoded.size() < size) {
    const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(k_read_piece, size - r.encoded.size()));
    const std::size_t at = r.encoded.size();
    r.encoded.resize(at + piece);
    if (Status st = read_exact(r.encoded.data() + at, piece, "an entry"); !st.ok()) return fail(st);
  }
  m_digest.update(r.encoded);
  ++m_count;
  return std::optional<BundleRecord>(std::move(r));
}

}  // namespace progcache
