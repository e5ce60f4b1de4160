// libFuzzer target: decode_entry on arbitrary bytes, with and without a
// signing key. It must never crash, read out of bounds, or allocate in
// proportion to a declared (rather than actual) length; a success must
// re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "progcache/entry.h"

using namespace progcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const Bytes bytes = Bytes::copy_of(in);
  Key key;
  if (size >= 56) key = *Key::from_raw(in.substr(24, 32));  // the echo, so decoding can get far
  auto plain = decode_entry(bytes, key);
  if (plain.ok()) {
    auto again = encode_entry(key, *plain, plain->created_unix_ns());
    // The producer string and metadata round-trip, so the encoding does too
    // (an unsigned entry; a signed one decodes without a key configured).
    // Compressed artifacts are decoded, so only an entry stored as is
    // re-encodes byte for byte with the default options.
    bool stored_raw = true;
    auto layout = parse_entry_layout(in, in.size());
    for (const auto& part : layout->artifacts) stored_raw &= part.encoding == k_encoding_raw;
    if (again.ok() && stored_raw && !peek_entry_header(in)->signed_entry && *again != in) __builtin_trap();
  }
  decode_entry(bytes, key, EntryCodecOptions{"fuzzing-signing-key"}).status().ignore();
  peek_entry_header(in).status().ignore();
  return 0;
}
