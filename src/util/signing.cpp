#include "progcache/signing.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cstdio>

namespace progcache {

namespace {

// The domain string the signed message starts with: a signature over an
// entry can never be replayed as a signature over anything else.
constexpr std::string_view k_domain = "progcache entry ed25519 v1";

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

Result<Ed25519PublicKey> raw_public(EVP_PKEY* key) {
  Ed25519PublicKey out{};
  std::size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(key, out.data(), &len) != 1 || len != out.size()) {
    return invalid_argument("cannot read the Ed25519 public key");
  }
  return out;
}

std::string message_of(const Digest256& digest) {
  std::string m(k_domain);
  m.push_back('\0');
  m.append(as_view(digest));
  return m;
}

}  // namespace

SigningKeys::~SigningKeys() {
  EVP_PKEY_free(static_cast<EVP_PKEY*>(m_private));
}

Result<std::shared_ptr<const SigningKeys>> SigningKeys::from_pem(std::string_view private_pem,
                                                                 std::string_view public_pems) {
  std::shared_ptr<SigningKeys> keys(new SigningKeys());
  if (!private_pem.empty()) {
    BIO* bio = BIO_new_mem_buf(private_pem.data(), static_cast<int>(private_pem.size()));
    Pkey key(bio != nullptr ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr);
    BIO_free(bio);
    ERR_clear_error();
    if (key == nullptr) return invalid_argument("the signing key is not a PEM private key");
    if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) {
      return invalid_argument("the signing key is not an Ed25519 key (openssl genpkey -algorithm ed25519)");
    }
    PROGCACHE_ASSIGN_OR_RETURN(keys->m_public, raw_public(key.get()));
    keys->m_private = key.release();
    PROGCACHE_TRY(keys->trust(keys->m_public));
  }
  if (!public_pems.empty()) PROGCACHE_TRY(keys->add_trusted(public_pems));
  if (keys->m_trusted.empty()) return invalid_argument("no Ed25519 key given");
  return std::shared_ptr<const SigningKeys>(std::move(keys));
}

Status SigningKeys::add_trusted(std::string_view public_pems) {
  BIO* bio = BIO_new_mem_buf(public_pems.data(), static_cast<int>(public_pems.size()));
  if (bio == nullptr) return invalid_argument("cannot read the public keys");
  int blocks = 0;
  Status bad;
  while (true) {
    Pkey key(PEM_read_bio_PUBKEY(bio, nullptr, nullptr, nullptr));
    if (key == nullptr) break;
    ++blocks;
    if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) {
      bad = invalid_argument("public key " + std::to_string(blocks) + " is not an Ed25519 key");
      break;
    }
    auto raw = raw_public(key.get());
    if (!raw.ok()) {
      bad = raw.status();
      break;
    }
    if (!trusts(*raw)) {
      bad = trust(*raw);
      if (!bad.ok()) break;
    }
  }
  BIO_free(bio);
  ERR_clear_error();  // the read that ended the loop queued "no start line"
  if (!bad.ok()) return bad;
  if (blocks == 0) return invalid_argument("no PEM public key found");
  // Every PEM block must have been read: a damaged one is an error, never a
  // key silently left out.
  std::size_t begun = 0;
  for (auto at = public_pems.find("-----BEGIN "); at != std::string_view::npos;
       at = public_pems.find("-----BEGIN ", at + 1)) {
    ++begun;
  }
  if (begun != static_cast<std::size_t>(blocks)) {
    return invalid_argument("PEM block " + std::to_string(blocks + 1) + " is not a readable public key");
  }
  return {};
}

Result<std::shared_ptr<const SigningKeys>> SigningKeys::trusting(std::string_view public_pems) const {
  std::shared_ptr<SigningKeys> keys(new SigningKeys());
  if (m_private != nullptr) {
    EVP_PKEY_up_ref(static_cast<EVP_PKEY*>(m_private));
    keys->m_private = m_private;
  }
  keys->m_public = m_public;
  keys->m_trusted = m_trusted;
  keys->m_trusted_pkeys = m_trusted_pkeys;
  PROGCACHE_TRY(keys->add_trusted(public_pems));
  return std::shared_ptr<const SigningKeys>(std::move(keys));
}

Status SigningKeys::trust(const Ed25519PublicKey& key) {
  EVP_PKEY* pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.data(), key.size());
  if (pkey == nullptr) return invalid_argument("not a usable Ed25519 public key");
  m_trusted.push_back(key);
  m_trusted_pkeys.emplace_back(pkey, [](void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); });
  return {};
}

bool SigningKeys::trusts(const Ed25519PublicKey& key) const {
  return std::find(m_trusted.begin(), m_trusted.end(), key) != m_trusted.end();
}

Result<Ed25519Signature> SigningKeys::sign(const Digest256& digest) const {
  if (m_private == nullptr) return failed_precondition("no Ed25519 private key to sign with");
  const std::string m = message_of(digest);
  Ed25519Signature sig{};
  std::size_t len = sig.size();
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx != nullptr && EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, static_cast<EVP_PKEY*>(m_private)) == 1 &&
      EVP_DigestSign(ctx, sig.data(), &len, reinterpret_cast<const unsigned char*>(m.data()), m.size()) == 1 &&
      len == sig.size();
  EVP_MD_CTX_free(ctx);
  if (!ok) return internal_error("Ed25519 signing failed");
  return sig;
}

bool SigningKeys::verify(const Ed25519PublicKey& key, const Digest256& digest,
                         const Ed25519Signature& signature) const {
  const auto it = std::find(m_trusted.begin(), m_trusted.end(), key);
  if (it == m_trusted.end()) return false;
  auto* pub = static_cast<EVP_PKEY*>(m_trusted_pkeys[static_cast<std::size_t>(it - m_trusted.begin())].get());
  const std::string m = message_of(digest);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok = ctx != nullptr && EVP_DigestVerifyInit(ctx, nullptr, nullptr, nullptr, pub) == 1 &&
                  EVP_DigestVerify(ctx, signature.data(), signature.size(),
                                   reinterpret_cast<const unsigned char*>(m.data()), m.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

std::string SigningKeys::fingerprint(const Ed25519PublicKey& key) {
  std::string out;
  char buf[3];
  for (std::size_t i = 0; i < 8; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", key[i]);
    out += buf;
  }
  return out;
}

}  // namespace progcache
