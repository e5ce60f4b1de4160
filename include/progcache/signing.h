// progcache/signing.h — public-key signatures of entries (Ed25519, OpenSSL).
//
// HMAC needs every reader to hold the writer's secret, so anyone who can read
// a shared tier can also forge entries for it. With Ed25519 a writer (CI)
// signs with a private key, and readers hold only public keys: they can check
// entries, never make them. Readers trust several public keys at once, so a
// writer's key can be rotated (trust the new key, then drop the old).
//
// What is signed: SHA-256 over the entry's bytes up to and including its
// checksum and the signer's public key, prefixed with a domain string
// (entry.h, "Ed25519 trailer"). The digest is computed as the entry streams
// through its reader, so verifying needs the entry in no single buffer.
//
// Keys are PEM files as OpenSSL writes them:
//   openssl genpkey -algorithm ed25519 -out signing.pem        (the writer's)
//   openssl pkey -in signing.pem -pubout -out signing.pub.pem   (for readers)
// A file of public keys may hold several PEM blocks, one per trusted key.
//
// Thread safety: an immutable SigningKeys is shared freely across threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/hash.h"
#include "progcache/status.h"

namespace progcache {

inline constexpr std::size_t k_ed25519_public_key_size = 32;
inline constexpr std::size_t k_ed25519_signature_size = 64;
using Ed25519PublicKey = std::array<std::uint8_t, k_ed25519_public_key_size>;
using Ed25519Signature = std::array<std::uint8_t, k_ed25519_signature_size>;

class SigningKeys {
 public:
  // From PEM text: `private_pem` (may be empty: a reader only) and
  // `public_pems` (zero or more PUBLIC KEY blocks). The private key's own
  // public key is trusted too. invalid_argument, naming what is wrong, for a
  // block that is not an Ed25519 key, or for no key at all.
  static Result<std::shared_ptr<const SigningKeys>> from_pem(std::string_view private_pem,
                                                             std::string_view public_pems);
  // These keys, trusting the keys of `public_pems` too.
  [[nodiscard]] Result<std::shared_ptr<const SigningKeys>> trusting(std::string_view public_pems) const;
  ~SigningKeys();
  SigningKeys(const SigningKeys&) = delete;
  SigningKeys& operator=(const SigningKeys&) = delete;

  [[nodiscard]] bool can_sign() const { return m_private != nullptr; }
  // The signer's public key (zero bytes when !can_sign()).
  [[nodiscard]] const Ed25519PublicKey& public_key() const { return m_public; }
  [[nodiscard]] bool trusts(const Ed25519PublicKey& key) const;
  [[nodiscard]] const std::vector<Ed25519PublicKey>& trusted() const { return m_trusted; }

  // Signs an entry digest (SigningKeys::message_of); failed_precondition
  // without a private key.
  [[nodiscard]] Result<Ed25519Signature> sign(const Digest256& digest) const;
  // Whether `key` is trusted and `signature` is its signature over `digest`.
  [[nodiscard]] bool verify(const Ed25519PublicKey& key, const Digest256& digest,
                            const Ed25519Signature& signature) const;

  // Lower-case hex of a public key's first 8 bytes: how messages name it.
  static std::string fingerprint(const Ed25519PublicKey& key);

 private:
  SigningKeys() = default;
  Status add_trusted(std::string_view public_pems);
  Status trust(const Ed25519PublicKey& key);
  void* m_private = nullptr;  // EVP_PKEY*
  Ed25519PublicKey m_public{};
  std::vector<Ed25519PublicKey> m_trusted;
  // One EVP_PKEY per trusted key, made once: making one per verification
  // costs more than the verification itself.
  std::vector<std::shared_ptr<void>> m_trusted_pkeys;
};

}  // namespace progcache
