// Ed25519 signatures of entries: a writer signs with its private key, readers
// holding only public keys verify, and nothing unsigned or signed by a key
// they do not trust is read; through the codec, the file store's streaming
// reader, the remote tier and the configuration.
#include "progcache/signing.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>

#include "progcache/config.h"
#include "progcache/entry.h"
#include "progcache/file_store.h"
#include "testing/fake_backend.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::make_ed25519_key;
using testing::make_entry;
using testing::make_key;

std::shared_ptr<const SigningKeys> keys(std::string_view priv, std::string_view pub = "") {
  auto k = SigningKeys::from_pem(priv, pub);
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  return k.ok() ? *k : nullptr;
}

std::string encoded(const Entry& e, const EntryCodecOptions& o) {
  auto r = encode_entry(make_key(1), e, 1, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

Code decode_code(const std::string& bytes, const EntryCodecOptions& o) {
  return decode_entry(Bytes::copy_of(bytes), make_key(1), o).status().code();
}

TEST(Ed25519, AReaderHoldingOnlyThePublicKeyVerifiesWhatTheWriterSigned) {
  const auto pair = make_ed25519_key();
  const EntryCodecOptions writer{.keys = keys(pair.private_pem)};
  const EntryCodecOptions reader{.keys = keys("", pair.public_pem)};
  ASSERT_FALSE(reader.keys->can_sign());
  const std::string payload = testing::make_payload(100000, 3);
  const std::string bytes = encoded(make_entry(payload), writer);
  auto header = peek_entry_header(bytes);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->signature, EntrySignature::ed25519);
  auto d = decode_entry(Bytes::copy_of(bytes), make_key(1), reader);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->artifacts().at(0).data.view(), payload);
  // The signer's public key travels in the entry; the private key never.
  EXPECT_NE(bytes.find(as_view(reader.keys->trusted().at(0))), std::string::npos);
  // A reader that trusts no key reads it too (the checksum covers it).
  EXPECT_TRUE(decode_entry(Bytes::copy_of(bytes), make_key(1)).ok());
}

TEST(Ed25519, UnsignedOtherKeyAndHmacEntriesAreRefused) {
  const auto ours = make_ed25519_key();
  const auto theirs = make_ed25519_key();
  const EntryCodecOptions reader{.keys = keys("", ours.public_pem)};
  EXPECT_EQ(decode_code(encoded(make_entry("unsigned"), {}), reader), Code::permission_denied);
  auto other =
      decode_entry(Bytes::copy_of(encoded(make_entry("x"), {.keys = keys(theirs.private_pem)})), make_key(1), reader);
  ASSERT_EQ(other.status().code(), Code::permission_denied);
  EXPECT_NE(other.status().message().find("not trusted"), std::string::npos) << other.status().to_string();
  EXPECT_EQ(decode_code(encoded(make_entry("x"), {.hmac_key = "0123456789abcdef-secret"}), reader),
            Code::permission_denied);
  // And the other way: an HMAC reader refuses an Ed25519 entry.
  EXPECT_EQ(decode_code(encoded(make_entry("x"), {.keys = keys(ours.private_pem)}), {.hmac_key = "0123456789abcdef-x"}),
            Code::permission_denied);
  // One entry is signed one way.
  EXPECT_EQ(
      encode_entry(make_key(1), make_entry("x"), 1, {.hmac_key = "0123456789abcdef", .keys = keys(ours.private_pem)})
          .status()
          .code(),
      Code::invalid_argument);
}

TEST(Ed25519, AForgedEntryDoesNotVerifyEvenWithAValidChecksum) {
  const auto writer_pair = make_ed25519_key();
  const auto writer = keys(writer_pair.private_pem);
  const EntryCodecOptions reader{.keys = keys("", writer_pair.public_pem)};
  std::string bytes = encoded(make_entry("the real kernel"), {.keys = writer});
  auto l = parse_entry_layout(bytes, bytes.size());
  ASSERT_TRUE(l.ok());
  // Replace the payload and fix the checksum, as anyone who can write the
  // tier could: only the signature tells.
  const auto& part = l->artifacts.at(0);
  std::memcpy(bytes.data() + part.data_offset, "the fake kernel", part.data_size);
  const Digest128 sum = xxh3_128(std::string_view(bytes).substr(0, l->body_size));
  std::memcpy(bytes.data() + l->body_size, sum.data(), sum.size());
  EXPECT_EQ(decode_code(bytes, {}), Code::ok);  // the checksum alone is satisfied
  EXPECT_EQ(decode_code(bytes, reader), Code::permission_denied);
  // Re-signed with the forger's own key and naming it: not trusted.
  const auto forger = make_ed25519_key();
  std::string resigned = encoded(make_entry("the fake kernel"), {.keys = keys(forger.private_pem)});
  EXPECT_EQ(decode_code(resigned, reader), Code::permission_denied);
  // The forger's signature under the trusted writer's name: does not verify.
  std::memcpy(resigned.data() + resigned.size() - k_entry_ed25519_size, writer->public_key().data(), 32);
  EXPECT_EQ(decode_code(resigned, reader), Code::permission_denied);
}

TEST(Ed25519, ReadersTrustSeveralKeysSoAWriterKeyRotates) {
  const auto old_key = make_ed25519_key();
  const auto new_key = make_ed25519_key();
  const std::string by_old = encoded(make_entry("old"), {.keys = keys(old_key.private_pem)});
  const std::string by_new = encoded(make_entry("new"), {.keys = keys(new_key.private_pem)});
  const EntryCodecOptions both{.keys = keys("", old_key.public_pem + "\n" + new_key.public_pem)};
  EXPECT_EQ(both.keys->trusted().size(), 2u);
  EXPECT_EQ(decode_code(by_old, both), Code::ok);
  EXPECT_EQ(decode_code(by_new, both), Code::ok);
  const EntryCodecOptions after{.keys = keys("", new_key.public_pem)};
  EXPECT_EQ(decode_code(by_old, after), Code::permission_denied);
  EXPECT_EQ(decode_code(by_new, after), Code::ok);
  // A writer trusts its own key and, through `trusting`, others.
  auto writer = keys(new_key.private_pem)->trusting(old_key.public_pem);
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE((*writer)->can_sign());
  EXPECT_EQ(decode_code(by_old, {.keys = *writer}), Code::ok);
}

TEST(Ed25519, KeyFilesThatAreNotEd25519KeysAreClearErrors) {
  const auto pair = make_ed25519_key();
  struct Case {
    std::string priv, pub, says;
  };
  const Case cases[] = {
      {"not a key", "", "not a PEM private key"},
      {pair.public_pem, "", "not a PEM private key"},
      {"", "garbage", "no PEM public key"},
      {"", testing::make_ec_public_pem(), "not an Ed25519 key"},
      {"", pair.public_pem + "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "PEM block 2"},
      {"", "", "no Ed25519 key"},
  };
  for (const auto& c : cases) {
    auto k = SigningKeys::from_pem(c.priv, c.pub);
    ASSERT_FALSE(k.ok()) << c.says;
    EXPECT_EQ(k.status().code(), Code::invalid_argument);
    EXPECT_NE(k.status().message().find(c.says), std::string::npos) << k.status().to_string();
  }
}

TEST(Ed25519, TheFileStoreStreamsAndVerifiesSignedEntries) {
  testing::TempDir tmp;
  const auto pair = make_ed25519_key();
  const std::string payload = testing::make_payload(3 << 20, 5);  // read in chunks, into the caller's buffer
  {
    auto w = std::move(*FileStore::open({.root = tmp.sub("c"), .codec = {.keys = keys(pair.private_pem)}}));
    ASSERT_TRUE(w->put(make_key(1), make_entry(payload)).ok());
  }
  auto r = std::move(*FileStore::open({.root = tmp.sub("c"), .codec = {.keys = keys("", pair.public_pem)}}));
  auto got = r->get(make_key(1));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().to_string();
  EXPECT_EQ((*got)->artifacts().at(0).data.view(), payload);
  auto other =
      std::move(*FileStore::open({.root = tmp.sub("c"), .codec = {.keys = keys("", make_ed25519_key().public_pem)}}));
  auto refused = other->get(make_key(1));
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->has_value());
  EXPECT_EQ(other->stats().rejected, 1u);
}

TEST(Ed25519, AMachineWithoutThePrivateKeyNeverWritesTheRemoteTier) {
  const auto pair = make_ed25519_key();
  auto state = std::make_shared<testing::FakeBackend::State>();
  auto over = [&](std::shared_ptr<const SigningKeys> k) {
    std::vector<std::unique_ptr<RemoteBackend>> bs;
    bs.push_back(std::make_unique<testing::FakeBackend>("fake://shared", state));
    return std::move(*make_remote_store(std::move(bs), {.codec = {.keys = std::move(k)}}));
  };
  auto writer = over(keys(pair.private_pem));
  auto reader = over(keys("", pair.public_pem));
  ASSERT_TRUE(writer->put(make_key(1), make_entry("from CI")).ok());
  auto hit = reader->get(make_key(1));
  ASSERT_TRUE(hit.ok() && hit->has_value());
  ASSERT_TRUE(reader->put(make_key(2), make_entry("from a laptop")).ok());
  EXPECT_EQ(reader->remote_stats().read_only_skips, 1u);
  EXPECT_FALSE(writer->get(make_key(2))->has_value());
}

// The configuration: files, what is shown, and what may not be combined.
class EnvVar {
 public:
  EnvVar(const char* name, const std::string& value) : m_name(name) { ::setenv(name, value.c_str(), 1); }
  ~EnvVar() { ::unsetenv(m_name); }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* m_name;
};

TEST(Ed25519, ConfigurationLoadsKeysShowsFingerprintsAndRefusesMixingWithHmac) {
  testing::TempDir tmp;
  const auto ci = make_ed25519_key();
  const auto old_ci = make_ed25519_key();
  testing::write_all(tmp.sub("ci.pem"), ci.private_pem);
  testing::write_all(tmp.sub("trusted.pem"), ci.public_pem + old_ci.public_pem);
  {
    EnvVar a("PROGCACHE_TRUSTED_KEYS_FILE", tmp.sub("trusted.pem"));
    auto c = resolve_config();
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_NE(c->signing_keys, nullptr);
    EXPECT_FALSE(c->signing_keys->can_sign());
    EXPECT_EQ(c->signing_keys->trusted().size(), 2u);
    // A reader's private root keeps its own compiles unsigned; the remote
    // tier verifies.
    EXPECT_EQ(c->file_store_options().codec.keys, nullptr);
    EXPECT_NE(c->remote_store_options().codec.keys, nullptr);
    {
      EnvVar g("PROGCACHE_SHARING", "group");
      auto shared = resolve_config();
      ASSERT_TRUE(shared.ok());
      EXPECT_NE(shared->file_store_options().codec.keys, nullptr);
    }
    EnvVar b("PROGCACHE_SIGNING_KEY_FILE", tmp.sub("ci.pem"));
    auto w = resolve_config();
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_TRUE(w->signing_keys->can_sign());
    EXPECT_NE(w->file_store_options().codec.keys, nullptr);
    std::string shown;
    for (const auto& s : w->settings) shown += s.name + "=" + s.value + "\n";
    EXPECT_NE(shown.find(SigningKeys::fingerprint(w->signing_keys->public_key())), std::string::npos) << shown;
    EXPECT_EQ(shown.find("PRIVATE KEY"), std::string::npos) << shown;
    testing::write_all(tmp.sub("hmac.key"), "0123456789abcdef0123");
    EnvVar h("PROGCACHE_HMAC_KEY_FILE", tmp.sub("hmac.key"));
    auto both = resolve_config();
    ASSERT_FALSE(both.ok());
    EXPECT_EQ(both.status().code(), Code::invalid_argument);
  }
  testing::write_all(tmp.sub("bad.pem"), "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n");
  EnvVar bad("PROGCACHE_TRUSTED_KEYS_FILE", tmp.sub("bad.pem"));
  auto r = resolve_config();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("PROGCACHE_TRUSTED_KEYS_FILE"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace progcache
