#include "progcache/entry.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "testing/test_util.h"

namespace progcache {
namespace {

constexpr std::int64_t k_t0 = 1'700'000'000'000'000'000;

Key golden_key() {
  return KeyBuilder("golden").add_string("name", "saxpy").finish();
}

Entry golden_entry() {
  std::string cubin;
  for (int i = 0; i < 256; ++i) cubin.push_back(static_cast<char>(i));
  std::vector<Artifact> arts;
  arts.push_back({"cubin", Bytes::copy_of(cubin)});
  arts.push_back({"log", Bytes::copy_of("ok\n")});
  return Entry(R"({"kind":"cubin","symbols":{"saxpy":"_Z5saxpyfPfS_"}})", std::move(arts), k_t0);
}

std::string encoded(const Entry& e, const Key& k = golden_key(), const EntryCodecOptions& o = {}) {
  auto r = encode_entry(k, e, k_t0, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

TEST(Entry, RoundTripKeepsMetadataArtifactsAndTime) {
  const std::string bytes = encoded(golden_entry());
  auto d = decode_entry(Bytes::copy_of(bytes), golden_key());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->metadata(), golden_entry().metadata());
  ASSERT_EQ(d->artifacts().size(), 2u);
  EXPECT_EQ(d->artifacts()[0].name, "cubin");
  EXPECT_EQ(d->artifacts()[0].data, golden_entry().artifacts()[0].data);
  EXPECT_EQ(d->find("log")->data.view(), "ok\n");
  EXPECT_EQ(d->find("missing"), nullptr);
  EXPECT_EQ(d->created_unix_ns(), k_t0);
  EXPECT_EQ(d->primary().size(), 256u);
}

TEST(Entry, DecodedArtifactsAreSlicesOfTheInputBuffer) {
  Bytes buf = Bytes::copy_of(encoded(golden_entry()));
  auto d = decode_entry(buf, golden_key());
  ASSERT_TRUE(d.ok());
  const char* p = d->primary().data();
  EXPECT_GE(p, buf.data());
  EXPECT_LT(p, buf.data() + buf.size());
}

TEST(Entry, EmptyEntryAndZeroCreationTime) {
  Entry e("", {});
  auto r = encode_entry(golden_key(), e, 42);
  ASSERT_TRUE(r.ok());
  auto d = decode_entry(Bytes::copy_of(*r), golden_key());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->metadata(), "{}");
  EXPECT_TRUE(d->artifacts().empty());
  EXPECT_EQ(d->created_unix_ns(), 42);
}

TEST(Entry, InvalidEntriesAreRefusedAtEncode) {
  std::vector<Artifact> dup{{"a", Bytes::copy_of("1")}, {"a", Bytes::copy_of("2")}};
  EXPECT_EQ(encode_entry(golden_key(), Entry("{}", dup), 1).status().code(), Code::invalid_argument);
  std::vector<Artifact> unnamed{{"", Bytes::copy_of("1")}};
  EXPECT_EQ(encode_entry(golden_key(), Entry("{}", unnamed), 1).status().code(), Code::invalid_argument);
  EXPECT_EQ(encode_entry(golden_key(), Entry("[1,2]", {}), 1).status().code(), Code::invalid_argument);
  EXPECT_EQ(encode_entry(golden_key(), Entry("{not json", {}), 1).status().code(), Code::invalid_argument);
}

TEST(Entry, KeyEchoMismatchIsDataLoss) {
  const std::string bytes = encoded(golden_entry());
  auto d = decode_entry(Bytes::copy_of(bytes), key_from_user("another"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::data_loss);
  EXPECT_NE(d.status().message().find("key echo"), std::string::npos);
}

TEST(Entry, EveryTruncationIsDetected) {
  const std::string bytes = encoded(golden_entry());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto d = decode_entry(Bytes::copy_of(bytes.substr(0, n)), golden_key());
    ASSERT_FALSE(d.ok()) << "prefix of " << n << " bytes decoded";
    EXPECT_EQ(d.status().code(), Code::data_loss);
  }
}

TEST(Entry, EveryBitFlipIsDetected) {
  const std::string bytes = encoded(golden_entry());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      auto d = decode_entry(Bytes::copy_of(bad), golden_key());
      ASSERT_FALSE(d.ok()) << "flip at byte " << i << " bit " << bit << " went undetected";
    }
  }
}

TEST(Entry, ExtensionIsDetected) {
  const std::string bytes = encoded(golden_entry());
  EXPECT_EQ(decode_entry(Bytes::copy_of(bytes + "x"), golden_key()).status().code(), Code::data_loss);
}

TEST(Entry, HugeDeclaredLengthsAllocateNothing) {
  // A 80-byte buffer whose one artifact claims 1 TiB: the length check fails
  // before any allocation or slicing happens.
  std::string bad = encoded(Entry("{}", {}));
  std::string forged(bad.substr(0, k_entry_fixed_header));
  forged[12] = 1;  // one artifact
  std::string row(16, '\0');
  const std::uint64_t tib = std::uint64_t{1} << 40;
  std::memcpy(row.data() + 8, &tib, 8);
  forged += row;
  forged += std::string(16, '\0');
  auto d = decode_entry(Bytes::copy_of(forged), golden_key());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::data_loss);
  EXPECT_NE(d.status().message().find("length mismatch"), std::string::npos) << d.status().message();
  // 20 bytes claiming anything: rejected as truncated.
  EXPECT_EQ(decode_entry(Bytes::copy_of(forged.substr(0, 20)), golden_key()).status().code(), Code::data_loss);
  // Lengths that overflow 64 bits when added are caught too.
  std::string overflow = forged;
  const std::uint64_t max = ~std::uint64_t{0};
  std::memcpy(overflow.data() + k_entry_fixed_header + 8, &max, 8);
  EXPECT_EQ(decode_entry(Bytes::copy_of(overflow), golden_key()).status().code(), Code::data_loss);
}

TEST(Entry, SignedEntriesVerifyAndUnsignedOrWrongKeyAreRejected) {
  const EntryCodecOptions signer{"0123456789abcdef-secret"};
  const std::string signed_bytes = encoded(golden_entry(), golden_key(), signer);
  EXPECT_TRUE(decode_entry(Bytes::copy_of(signed_bytes), golden_key(), signer).ok());
  // A reader without a key still accepts it (the checksum covers it).
  EXPECT_TRUE(decode_entry(Bytes::copy_of(signed_bytes), golden_key()).ok());
  const std::string unsigned_bytes = encoded(golden_entry());
  EXPECT_EQ(decode_entry(Bytes::copy_of(unsigned_bytes), golden_key(), signer).status().code(),
            Code::permission_denied);
  EXPECT_EQ(decode_entry(Bytes::copy_of(signed_bytes), golden_key(), EntryCodecOptions{"another-key-0123456"})
                .status()
                .code(),
            Code::permission_denied);
}

// Two golden files pin format version 1: entry_v1.bin as written before
// payloads were aligned (producer unpadded, first payload at an odd offset),
// entry_v1_aligned.bin as written now. Both must read; the writer must
// reproduce the second byte for byte. If this fails, the encoding changed:
// bump k_entry_format_version (old entries then read as misses) and
// regenerate the second with PROGCACHE_UPDATE_GOLDEN=1.
void expect_golden_entry(const std::string& golden) {
  auto d = decode_entry(Bytes::copy_of(golden), golden_key());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->metadata(), golden_entry().metadata());
  EXPECT_EQ(d->producer(), "progcache 0.1.0");
  ASSERT_EQ(d->artifacts().size(), 2u);
  EXPECT_EQ(d->artifacts()[0].data, golden_entry().artifacts()[0].data);
  EXPECT_EQ(d->find("log")->data.view(), "ok\n");
  EXPECT_EQ(d->created_unix_ns(), k_t0);
  auto header = peek_entry_header(golden);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->key, golden_key());
  EXPECT_EQ(golden.substr(0, 8), std::string("PCENTRY\x01", 8));
}

std::uint64_t first_payload_offset(const std::string& bytes) {
  auto l = parse_entry_layout(bytes, bytes.size());
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() && !l->artifacts.empty() ? l->artifacts.front().data_offset : 0;
}

TEST(Entry, GoldenFilesDecodeAndTheWriterReproducesTheAlignedOne) {
  const std::string dir = std::string(PROGCACHE_TEST_SOURCE_DIR) + "/golden/";
  if (std::getenv("PROGCACHE_UPDATE_GOLDEN") != nullptr) {
    testing::write_all(dir + "entry_v1_aligned.bin", encoded(golden_entry()));
  }
  const std::string before = testing::read_all(dir + "entry_v1.bin");
  const std::string aligned = testing::read_all(dir + "entry_v1_aligned.bin");
  ASSERT_FALSE(before.empty() || aligned.empty()) << "missing golden files in " << dir;
  ASSERT_NE(first_payload_offset(before) % k_entry_payload_alignment, 0u) << "the older file is unpadded";
  EXPECT_EQ(first_payload_offset(aligned) % k_entry_payload_alignment, 0u);
  expect_golden_entry(before);
  expect_golden_entry(aligned);
  // Re-encoding either (a promotion between tiers does) writes the aligned
  // layout; the padding never accumulates.
  for (const std::string* golden : {&before, &aligned}) {
    auto again = encode_entry(golden_key(), *decode_entry(Bytes::copy_of(*golden), golden_key()), 0);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, aligned);
  }
}

TEST(Entry, TheFirstPayloadStartsOnACacheLineWhateverPrecedesIt) {
  // Metadata and names of every length modulo 64, one to three artifacts,
  // raw, compressed and signed: the first payload starts on a multiple of
  // 64, the entry reads back as it was given, and its producer carries no
  // padding.
  int checked = 0;
  for (std::size_t meta = 0; meta < 70; ++meta) {
    for (const std::size_t count : {1, 2, 3}) {
      for (const int variant : {0, 1, 2}) {
        std::vector<Artifact> arts;
        for (std::size_t i = 0; i < count; ++i) {
          arts.push_back({std::string(1 + (meta * 7 + i) % 61, static_cast<char>('a' + i)),
                          Bytes::copy_of(std::string(1000 + 333 * i, static_cast<char>('0' + meta % 10)))});
        }
        const std::string metadata = R"({"m":")" + std::string(meta, 'x') + R"("})";
        const Entry e(metadata, std::move(arts), k_t0);
        EntryCodecOptions o;
        if (variant == 1) o.compression_level = 3;
        if (variant == 2) o.hmac_key = "signing key";
        const std::string bytes = encoded(e, golden_key(), o);
        EXPECT_EQ(first_payload_offset(bytes) % k_entry_payload_alignment, 0u)
            << "metadata " << meta << ", " << count << " artifacts, variant " << variant;
        auto d = decode_entry(Bytes::copy_of(bytes), golden_key(), o);
        ASSERT_TRUE(d.ok()) << d.status().to_string();
        EXPECT_EQ(d->producer(), producer_string());
        EXPECT_EQ(d->metadata(), metadata);
        ASSERT_EQ(d->artifacts().size(), count);
        for (std::size_t i = 0; i < count; ++i) {
          EXPECT_EQ(d->artifacts()[i].name, e.artifacts()[i].name);
          EXPECT_EQ(d->artifacts()[i].data, e.artifacts()[i].data);
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 70 * 3 * 3);
}

TEST(Entry, AnEntryWithoutArtifactsIsNotPadded) {
  const std::string bytes = encoded(Entry("{}", {}, k_t0));
  EXPECT_EQ(bytes.size(), k_entry_fixed_header + producer_string().size() + 2 + k_entry_checksum_size);
}

}  // namespace
}  // namespace progcache
