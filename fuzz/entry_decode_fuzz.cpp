// libFuzzer target: decode_entry on arbitrary bytes, with and without a
// signing key (HMAC, and Ed25519 public keys: corpus/entry_decode/
// ed25519_signed is signed by the private half of k_public_pem, which is not
// kept). It must never crash, read out of bounds, or allocate in
// proportion to a declared (rather than actual) length; a success must
// re-encode to the same content, and re-encoding that must change nothing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "progcache/entry.h"

using namespace progcache;

namespace {

constexpr std::string_view k_public_pem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEALsD2tjcqsp6JBt7sINWPr3rqNbW58T3a6fsRtennMw0=\n"
    "-----END PUBLIC KEY-----\n";

const EntryCodecOptions& ed25519_reader() {
  static const EntryCodecOptions o{.keys = *SigningKeys::from_pem("", k_public_pem)};
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const Bytes bytes = Bytes::copy_of(in);
  Key key;
  if (size >= 56) key = *Key::from_raw(in.substr(24, 32));  // the echo, so decoding can get far
  auto plain = decode_entry(bytes, key);
  if (plain.ok()) {
    auto again = encode_entry(key, *plain, plain->created_unix_ns());
    // Content round-trips through the encoding (an unsigned entry; a signed
    // one decodes without a key configured), and the writer's own output is
    // a fixed point: an input laid out otherwise (its first payload off a
    // multiple of 64) is re-encoded aligned, once. Compressed artifacts are
    // decoded, so only an entry stored as is re-encodes to itself with the
    // default options.
    bool stored_raw = true;
    auto layout = parse_entry_layout(in, in.size());
    for (const auto& part : layout->artifacts) stored_raw &= part.encoding == k_encoding_raw;
    if (again.ok() && stored_raw && !peek_entry_header(in)->signed_entry()) {
      auto back = decode_entry(Bytes::copy_of(*again), key);
      if (!back.ok() || back->metadata() != plain->metadata() || back->producer() != plain->producer() ||
          back->artifacts().size() != plain->artifacts().size()) {
        __builtin_trap();
      }
      for (std::size_t i = 0; i < back->artifacts().size(); ++i) {
        if (back->artifacts()[i].name != plain->artifacts()[i].name ||
            back->artifacts()[i].data != plain->artifacts()[i].data) {
          __builtin_trap();
        }
      }
      auto twice = encode_entry(key, *back, back->created_unix_ns());
      if (!twice.ok() || *twice != *again) __builtin_trap();
      auto aligned = parse_entry_layout(*again, again->size());
      if (!aligned.ok() ||
          (!aligned->artifacts.empty() && aligned->artifacts.front().data_offset % k_entry_payload_alignment != 0)) {
        __builtin_trap();
      }
    }
  }
  decode_entry(bytes, key, EntryCodecOptions{"fuzzing-signing-key"}).status().ignore();
  // Only what the trusted key signed verifies: whatever else the fuzzer
  // makes of a signed seed (any byte changed) must be refused.
  auto verified = decode_entry(bytes, key, ed25519_reader());
  if (verified.ok() && (peek_entry_header(in)->signature != EntrySignature::ed25519 || !plain.ok())) __builtin_trap();
  peek_entry_header(in).status().ignore();
  return 0;
}
