// The one entry decoder, read through a callable as the file store reads a
// file: equal to decode_entry however the reads are chunked, and as strict
// on every damaged byte, on both read paths (whole entry and primary
// artifact only).
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "progcache/entry.h"
#include "progcache/hash.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

Key test_key() {
  return KeyBuilder("entry-reader-test").add_string("name", "k").finish();
}

// Serves `data` as a file of `size` bytes (default: its length), at most
// `step` bytes per call (a vectored call too, its short count ending in any
// piece), counting what was read, how far, and the calls.
struct FakeFile {
  std::string data;
  std::size_t step = ~std::size_t{0};
  std::uint64_t served = 0;    // bytes handed out
  std::uint64_t furthest = 0;  // the end of the furthest range asked for
  int calls = 0;               // reads, plain or vectored
  std::size_t overclaim = 0;   // added to the count of a read that filled all it was asked for

  EntryReader::ReadAt read_at() {
    return [this](std::uint64_t off, char* dst, std::size_t n) -> Result<std::size_t> {
      const ReadPiece piece{dst, n};
      return read(std::span<const ReadPiece>(&piece, 1), off);
    };
  }
  EntryReader::ReadAtV read_at_v() {
    return [this](std::uint64_t off, std::span<const ReadPiece> pieces) -> Result<std::size_t> {
      return read(pieces, off);
    };
  }
  // A reader over this file: through pread alone, or with preadv as well.
  EntryReader reader(std::uint64_t size, bool vectored, const EntryCodecOptions& options = {}) {
    return vectored ? EntryReader(read_at(), read_at_v(), size, options) : EntryReader(read_at(), size, options);
  }

 private:
  Result<std::size_t> read(std::span<const ReadPiece> pieces, std::uint64_t off) {
    ++calls;
    std::size_t want = 0;
    for (const ReadPiece& p : pieces) want += p.size;
    furthest = std::max<std::uint64_t>(furthest, off + want);
    if (off >= data.size()) return std::size_t{0};
    const std::size_t k = std::min({want, step, static_cast<std::size_t>(data.size() - off)});
    std::size_t left = k;
    const char* from = data.data() + off;
    for (const ReadPiece& p : pieces) {
      const std::size_t n = std::min(left, p.size);
      std::memcpy(p.data, from, n);
      from += n;
      left -= n;
    }
    served += k;
    return k == want ? k + overclaim : k;
  }
};

Entry three_artifacts() {
  std::vector<Artifact> arts;
  // Larger than one read chunk (128 KiB), and not a multiple of it.
  arts.push_back({"cubin", Bytes::copy_of(testing::make_payload(300'001, 7))});
  arts.push_back({"empty", Bytes::copy_of("")});
  arts.push_back({"log", Bytes::copy_of("ptxas info: 12 registers")});
  return Entry(R"({"kind":"cubin"})", std::move(arts), 1'700'000'000'000'000'000);
}

std::string encode(const Entry& e, const EntryCodecOptions& o = {}) {
  auto r = encode_entry(test_key(), e, 1, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

void expect_same(const Entry& a, const Entry& b) {
  EXPECT_EQ(a.metadata(), b.metadata());
  EXPECT_EQ(a.created_unix_ns(), b.created_unix_ns());
  EXPECT_EQ(a.producer(), b.producer());
  ASSERT_EQ(a.artifacts().size(), b.artifacts().size());
  for (std::size_t i = 0; i < a.artifacts().size(); ++i) {
    EXPECT_EQ(a.artifacts()[i].name, b.artifacts()[i].name);
    EXPECT_EQ(a.artifacts()[i].data.view(), b.artifacts()[i].data.view());
  }
}

// The first artifact through read_primary, or the error.
Result<std::string> primary_of(EntryReader reader, const Key& key) {
  std::string out;
  int calls = 0;
  Status st = reader.read_primary(key, [&](std::size_t n) {
    ++calls;
    out.assign(n, '\0');
    return out.data();
  });
  if (!st.ok()) return st;
  EXPECT_EQ(calls, 1);
  return out;
}

// Reads `bytes` through a callable in chunks of each size in `steps`, as a
// whole entry and as its primary artifact: each equals `e`, and each byte
// is read once (the first read's bytes are not read again).
void expect_every_chunking_reads(const std::string& bytes, const Entry& e, std::initializer_list<std::size_t> steps) {
  for (const std::size_t step : steps) {
    for (const bool vectored : {false, true}) {
      FakeFile f{bytes, step};
      auto whole = f.reader(bytes.size(), vectored).read(test_key());
      ASSERT_TRUE(whole.ok()) << whole.status().to_string();
      expect_same(*whole, e);
      FakeFile g{bytes, step};
      auto primary = primary_of(g.reader(bytes.size(), vectored), test_key());
      ASSERT_TRUE(primary.ok()) << primary.status().to_string();
      EXPECT_EQ(*primary, e.artifacts()[0].data.view());
      EXPECT_EQ(f.served, bytes.size()) << "step " << step << (vectored ? ", vectored" : "");
      EXPECT_EQ(g.served, bytes.size()) << "step " << step << (vectored ? ", vectored" : "");
    }
  }
}

TEST(HmacSha256, StreamingEqualsOneShotAtEverySplit) {
  const std::string data = testing::make_payload(300, 3);
  for (const std::string& key : {std::string(), std::string("k"), std::string(64, 'x'), std::string(100, 'y')}) {
    const Digest256 want = hmac_sha256(key, data);
    for (std::size_t cut = 0; cut <= data.size(); cut += 7) {
      HmacSha256 mac(key);
      mac.update(std::string_view(data).substr(0, cut));
      mac.update(std::string_view(data).substr(cut));
      EXPECT_EQ(mac.finish(), want) << "key of " << key.size() << " bytes, cut at " << cut;
    }
  }
}

TEST(EntryReader, ReadThroughACallableEqualsDecodeHoweverReadsAreChunked) {
  const Entry e = three_artifacts();
  const std::string bytes = encode(e);
  expect_every_chunking_reads(bytes, e, {std::size_t{1} << 30, 4096, 4095, 1000});
  // From memory: the same entry, artifacts slicing the input.
  const Bytes in = Bytes::copy_of(bytes);
  auto mem = EntryReader(in).read(test_key());
  ASSERT_TRUE(mem.ok());
  expect_same(*mem, e);
  EXPECT_GE(mem->artifacts()[0].data.data(), in.data());
  EXPECT_LT(mem->artifacts()[0].data.data(), in.data() + in.size());
  auto mem_primary = primary_of(EntryReader(in), test_key());
  ASSERT_TRUE(mem_primary.ok());
  EXPECT_EQ(*mem_primary, e.artifacts()[0].data.view());
}

// An entry read whole by the first read (up to 16 KiB): the artifact and
// the trailer come out of that read; and reads cut short anywhere, in the
// artifact or in the trailer, still read each byte once (a larger entry too,
// whose artifact and trailer are read after the first read).
TEST(EntryReader, ReadsCutShortAnywhereEvenInTheTrailerReadEachByteOnce) {
  const Entry larger(R"({"kind":"cubin"})", {{"cubin", Bytes::copy_of(testing::make_payload(20'000, 6))}},
                     1'700'000'000'000'000'000);
  expect_every_chunking_reads(encode(larger), larger, {7, 5, 1});
  const Entry one(R"({"kind":"cubin"})", {{"cubin", Bytes::copy_of(testing::make_payload(100, 2))}},
                  1'700'000'000'000'000'000);
  expect_every_chunking_reads(encode(one), one, {std::size_t{1} << 30, 4096, 7, 1});
  std::vector<Artifact> arts{{"cubin", Bytes::copy_of(testing::make_payload(3000, 4))},
                             {"log", Bytes::copy_of("ptxas info: 12 registers")}};
  const Entry two(R"({"kind":"cubin"})", std::move(arts), 1'700'000'000'000'000'000);
  expect_every_chunking_reads(encode(two), two, {std::size_t{1} << 30, 4096, 7, 1});
  expect_every_chunking_reads(encode(two, {"a-signing-key"}), two, {std::size_t{1} << 30, 5});
}

TEST(EntryReader, EveryTruncationAndEveryFlippedByteFailsOnEveryReadPath) {
  std::vector<Artifact> arts{{"cubin", Bytes::copy_of(testing::make_payload(200, 1))}, {"log", Bytes::copy_of("ok")}};
  const Entry e(R"({"a":1})", std::move(arts));
  const EntryCodecOptions signer{"a-signing-key-of-some-length"};
  for (const EntryCodecOptions& opts : {EntryCodecOptions{}, signer}) {
    const std::string bytes = encode(e, opts);
    const auto all_fail = [&](const std::string& data, std::uint64_t size, const std::string& what) {
      for (const bool vectored : {false, true}) {
        const std::string how = vectored ? ", vectored" : "";
        FakeFile f{data, 13};
        EXPECT_FALSE(f.reader(size, vectored, opts).read(test_key()).ok()) << what << " (read" << how << ")";
        FakeFile g{data, 13};
        EXPECT_FALSE(primary_of(g.reader(size, vectored, opts), test_key()).ok()) << what << " (primary" << how << ")";
      }
      EXPECT_FALSE(primary_of(EntryReader(Bytes::copy_of(data.substr(0, size)), opts), test_key()).ok())
          << what << " (primary from memory)";
      EXPECT_FALSE(EntryReader(Bytes::copy_of(data.substr(0, size)), opts).read(test_key()).ok())
          << what << " (memory)";
    };
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      all_fail(bytes.substr(0, n), n, "prefix of " + std::to_string(n));
      // A file whose size says more than can be read (it shrank meanwhile).
      all_fail(bytes.substr(0, n), bytes.size(), "shrank to " + std::to_string(n));
    }
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
      all_fail(bad, bad.size(), "flip at " + std::to_string(i));
    }
  }
}

// A hit into the caller's memory (read_primary) and the whole-entry read
// take an artifact and the trailer after it in one vectored read: an entry
// over the first read's 16 KiB is two reads, the header's and that one.
TEST(EntryReader, TheLastArtifactAndTheTrailerAreOneRead) {
  for (const std::size_t size : {std::size_t{20'000}, std::size_t{65'536}, std::size_t{1} << 20}) {
    const Entry e(R"({"kind":"cubin"})", {{"cubin", Bytes::copy_of(testing::make_payload(size, 5))}},
                  1'700'000'000'000'000'000);
    const std::string bytes = encode(e);
    FakeFile f{bytes};
    auto primary = primary_of(f.reader(bytes.size(), /*vectored=*/true), test_key());
    ASSERT_TRUE(primary.ok()) << primary.status().to_string();
    EXPECT_EQ(*primary, e.artifacts()[0].data.view());
    EXPECT_EQ(f.calls, 2) << size << " bytes";
    FakeFile g{bytes};
    auto whole = g.reader(bytes.size(), /*vectored=*/true).read(test_key());
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    expect_same(*whole, e);
    EXPECT_EQ(g.calls, 2) << size << " bytes";
    FakeFile h{bytes};  // without preadv, one more
    ASSERT_TRUE(primary_of(h.reader(bytes.size(), /*vectored=*/false), test_key()).ok());
    EXPECT_EQ(h.calls, 3) << size << " bytes";
  }
}

// Entries over the first read's 16 KiB, signed and not, whose last
// artifact and trailer come through the vectored read: every truncation,
// shrink while read and flipped byte near the read's boundaries (the first
// read's end, the artifact's end, the trailer) fails on both read paths,
// with whole and cut-short reads.
TEST(EntryReader, DamageMetByTheVectoredReadIsAFailure) {
  const Entry e(R"({"kind":"cubin"})", {{"cubin", Bytes::copy_of(testing::make_payload(20'000, 12))}},
                1'700'000'000'000'000'000);
  const EntryCodecOptions signer{"a-signing-key-of-some-length"};
  for (const EntryCodecOptions& opts : {EntryCodecOptions{}, signer}) {
    const std::string bytes = encode(e, opts);
    const std::size_t size = bytes.size();
    const auto all_fail = [&](const std::string& data, std::uint64_t declared, const std::string& what) {
      for (const std::size_t step : {~std::size_t{0}, std::size_t{1000}}) {
        FakeFile f{data, step};
        EXPECT_FALSE(f.reader(declared, /*vectored=*/true, opts).read(test_key()).ok()) << what << " (read)";
        FakeFile g{data, step};
        EXPECT_FALSE(primary_of(g.reader(declared, /*vectored=*/true, opts), test_key()).ok()) << what << " (primary)";
      }
    };
    std::vector<std::size_t> at{0, 100, 4095, 4096, 4097, 10'000};
    for (std::size_t back = 1; back <= 64; ++back) at.push_back(size - back);
    for (const std::size_t n : at) {
      all_fail(bytes.substr(0, n), n, "prefix of " + std::to_string(n));
      all_fail(bytes.substr(0, n), size, "shrank to " + std::to_string(n));
      std::string bad = bytes;
      bad[n] = static_cast<char>(bad[n] ^ 0x10);
      all_fail(bad, size, "flip at " + std::to_string(n));
    }
  }
}

// A caller's buffer at any distance past the artifact's file offset,
// modulo a page, gets the same bytes. Those 1 to 31 bytes past it, where
// the kernel's copy runs slowly on the CPUs measured, are filled through a
// staging buffer in chunks (more reads); every other distance takes the one
// read.
TEST(EntryReader, ThePrimaryArrivesWholeWhereverTheCallersBufferLands) {
  for (const std::size_t size : {std::size_t{20'000}, std::size_t{300'001}}) {
    const Entry e(R"({"kind":"cubin"})", {{"cubin", Bytes::copy_of(testing::make_payload(size, 8))}},
                  1'700'000'000'000'000'000);
    const std::string bytes = encode(e);
    const std::uint64_t at = bytes.size() - k_entry_checksum_size - size;  // the artifact's file offset
    std::vector<char> arena(size + 2 * 4096);
    const auto page = (reinterpret_cast<std::uintptr_t>(arena.data()) + 4095) & ~std::uintptr_t{4095};
    for (const std::size_t past : {0, 1, 8, 15, 16, 31, 32, 48, 64, 100, 2048, 4095}) {
      char* dst = reinterpret_cast<char*>(page + (at + past) % 4096);
      for (const std::size_t step : {~std::size_t{0}, std::size_t{1000}}) {
        FakeFile f{bytes, step};
        std::memset(dst, 0, size);
        Status st = f.reader(bytes.size(), /*vectored=*/true).read_primary(test_key(), [&](std::size_t n) {
          EXPECT_EQ(n, size);
          return dst;
        });
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(std::string_view(dst, size), e.artifacts()[0].data.view()) << past << " bytes past";
        EXPECT_EQ(f.served, bytes.size()) << past << " bytes past, step " << step;
        if (step == ~std::size_t{0}) {
          const bool staged = past >= 1 && past < 32;
          EXPECT_EQ(f.calls > 2, staged) << past << " bytes past: " << f.calls << " reads";
        }
      }
    }
  }
}

// A read_at that claims more than it was asked for (a broken callable, or a
// file that grew) never makes the reader skip bytes it did not get: the
// claim counts for what was asked, so a good entry still reads.
TEST(EntryReader, ACallableClaimingMoreThanItWasAskedForNeverSkipsBytes) {
  const Entry e = three_artifacts();
  const std::string bytes = encode(e);
  for (const bool vectored : {false, true}) {
    FakeFile f{bytes};
    f.overclaim = 100;
    auto whole = f.reader(bytes.size(), vectored).read(test_key());
    ASSERT_TRUE(whole.ok()) << whole.status().to_string() << (vectored ? ", vectored" : "");
    expect_same(*whole, e);
    FakeFile g{bytes};
    g.overclaim = 100;
    auto primary = primary_of(g.reader(bytes.size(), vectored), test_key());
    ASSERT_TRUE(primary.ok()) << primary.status().to_string() << (vectored ? ", vectored" : "");
    EXPECT_EQ(*primary, e.artifacts()[0].data.view());
  }
}

TEST(EntryReader, SignaturesAreCheckedWhileStreaming) {
  const Entry e = three_artifacts();
  const EntryCodecOptions signer{"0123456789abcdef-secret"};
  const std::string signed_bytes = encode(e, signer);
  FakeFile f{signed_bytes, 5000};
  auto ok = primary_of(EntryReader(f.read_at(), signed_bytes.size(), signer), test_key());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, e.artifacts()[0].data.view());
  FakeFile g{signed_bytes};
  EXPECT_EQ(primary_of(EntryReader(g.read_at(), signed_bytes.size(), {"another-key"}), test_key()).status().code(),
            Code::permission_denied);
  const std::string unsigned_bytes = encode(e);
  FakeFile h{unsigned_bytes};
  EXPECT_EQ(EntryReader(h.read_at(), unsigned_bytes.size(), signer).read(test_key()).status().code(),
            Code::permission_denied);
  // The wrong key echo is damage, not a signature problem.
  FakeFile k{signed_bytes};
  EXPECT_EQ(EntryReader(k.read_at(), signed_bytes.size(), signer).read(KeyBuilder("other").finish()).status().code(),
            Code::data_loss);
}

TEST(EntryReader, AForgedLengthCostsOnlyTheFirstReadAndNoAllocation) {
  // One artifact claiming 1 TiB in a file of 96 bytes, then the same header
  // in a "file" whose size is 1 TiB but whose table does not add up to it.
  std::string forged = encode(Entry("{}", {})).substr(0, k_entry_fixed_header);
  forged[12] = 1;
  std::string row(16, '\0');
  const std::uint64_t tib = std::uint64_t{1} << 40;
  std::memcpy(row.data() + 8, &tib, 8);
  forged += row + std::string(16, '\0');
  for (const std::uint64_t size : {std::uint64_t{forged.size()}, tib}) {
    FakeFile f{forged};
    bool allocated = false;
    Status st = EntryReader(f.read_at(), size).read_primary(test_key(), [&](std::size_t) {
      allocated = true;
      return nullptr;
    });
    EXPECT_EQ(st.code(), Code::data_loss) << st.to_string();
    EXPECT_FALSE(allocated);
    EXPECT_LE(f.furthest, 4096u);
    FakeFile g{forged};
    EXPECT_EQ(EntryReader(g.read_at(), size).read(test_key()).status().code(), Code::data_loss);
    EXPECT_LE(g.furthest, 4096u);
  }
}

TEST(EntryReader, PrimaryOfAnEntryWithoutArtifactsIsEmptyAndAllocFailureIsReported) {
  const std::string empty = encode(Entry("{}", {}));
  auto got = primary_of(EntryReader(Bytes::copy_of(empty)), test_key());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "");
  const std::string bytes = encode(three_artifacts());
  FakeFile f{bytes};
  Status st = EntryReader(f.read_at(), bytes.size()).read_primary(test_key(), [](std::size_t) { return nullptr; });
  EXPECT_EQ(st.code(), Code::resource_exhausted) << st.to_string();
}

std::string compressible(std::size_t n, unsigned seed) {
  return testing::compressible_payload(n, seed);
}

Entry mixed_entry() {
  std::vector<Artifact> arts;
  arts.push_back({"cubin", Bytes::copy_of(compressible(300'001, 3))});
  arts.push_back({"random", Bytes::copy_of(testing::make_payload(20'000, 9))});
  arts.push_back({"log", Bytes::copy_of("ptxas info: 12 registers")});
  arts.push_back({"ptx", Bytes::copy_of(compressible(50'000, 11))});  // compressed, not first
  return Entry(R"({"kind":"cubin"})", std::move(arts), 1'700'000'000'000'000'000);
}

std::uint32_t encoding_of(const std::string& bytes, std::size_t artifact) {
  std::uint32_t v = 0;
  std::memcpy(&v, bytes.data() + k_entry_fixed_header + 16 * artifact + 4, 4);
  return v;
}

// Recomputes the checksum of an unsigned entry after it was edited: what a
// writer with access to the store could do, as opposed to damage.
void reseal(std::string& bytes) {
  const std::size_t body = bytes.size() - k_entry_checksum_size;
  const Digest128 d = xxh3_128(std::string_view(bytes).substr(0, body));
  bytes.replace(body, k_entry_checksum_size, as_view(d));
}

TEST(EntryReader, CompressedArtifactsDecodeToTheirOwnBytesOnEveryReadPath) {
  const Entry e = mixed_entry();
  const std::string plain = encode(e);
  for (const int level : {1, 3, 19}) {
    const std::string bytes = encode(e, {.compression_level = level});
    // Only what compression shrinks is stored compressed.
    EXPECT_EQ(encoding_of(bytes, 0), k_encoding_zstd) << "level " << level;
    EXPECT_EQ(encoding_of(bytes, 1), k_encoding_raw) << "random bytes stored compressed";
    EXPECT_EQ(encoding_of(bytes, 2), k_encoding_raw) << "a 24-byte log stored compressed";
    EXPECT_EQ(encoding_of(bytes, 3), k_encoding_zstd) << "level " << level;
    EXPECT_LT(bytes.size() * 3, plain.size()) << "level " << level << ": " << bytes.size() << " of " << plain.size();
    expect_every_chunking_reads(bytes, e, {std::size_t{1} << 30, 4096, 1000});
    auto mem = decode_entry(Bytes::copy_of(bytes), test_key());
    ASSERT_TRUE(mem.ok()) << mem.status().to_string();
    expect_same(*mem, e);
    auto mem_primary = primary_of(EntryReader(Bytes::copy_of(bytes)), test_key());
    ASSERT_TRUE(mem_primary.ok());
    EXPECT_EQ(*mem_primary, e.artifacts()[0].data.view());
    // Signed and compressed: the signature covers the stored bytes.
    const EntryCodecOptions both{.hmac_key = "a-signing-key-of-some-length", .compression_level = level};
    auto sig = decode_entry(Bytes::copy_of(encode(e, both)), test_key(), both);
    ASSERT_TRUE(sig.ok()) << sig.status().to_string();
    expect_same(*sig, e);
  }
  // Levels zstd would refuse, or that are not asked for, store every
  // artifact as it is: the same bytes as no compression.
  for (const int level : {0, -1, 20, 1000}) EXPECT_EQ(encode(e, {.compression_level = level}), plain) << level;
}

TEST(EntryReader, DamageToACompressedEntryFailsOnEveryReadPath) {
  std::vector<Artifact> arts{{"cubin", Bytes::copy_of(compressible(3000, 5))}, {"log", Bytes::copy_of("ok")}};
  const Entry e(R"({"a":1})", std::move(arts));
  const EntryCodecOptions opts{.compression_level = 3};
  const std::string bytes = encode(e, opts);
  ASSERT_EQ(encoding_of(bytes, 0), k_encoding_zstd);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ (1 << (i % 8)));
    FakeFile f{bad, 13};
    EXPECT_FALSE(EntryReader(f.read_at(), bad.size()).read(test_key()).ok()) << "flip at " << i;
    FakeFile g{bad, 13};
    EXPECT_FALSE(primary_of(EntryReader(g.read_at(), bad.size()), test_key()).ok()) << "flip at " << i;
    EXPECT_FALSE(decode_entry(Bytes::copy_of(bad), test_key()).ok()) << "flip at " << i;
  }
}

TEST(EntryReader, AFrameEditedUnderAValidChecksumNeverOverrunsOrOverAllocates) {
  // Someone who can write the store edits the stored frame and reseals the
  // checksum: decoding must stay within the declared size, and a frame that
  // no longer decodes exactly is data_loss, on every path.
  std::vector<Artifact> arts{{"cubin", Bytes::copy_of(compressible(3000, 5))}};
  const Entry e("{}", std::move(arts));
  const std::string bytes = encode(e, {.compression_level = 3});
  ASSERT_EQ(encoding_of(bytes, 0), k_encoding_zstd);
  const std::size_t frame_at = parse_entry_layout(bytes, bytes.size())->artifacts.front().data_offset;
  const std::size_t frame_end = bytes.size() - k_entry_checksum_size;
  int failed = 0;
  for (std::size_t i = frame_at; i < frame_end; ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    reseal(bad);
    std::size_t asked = 0;
    std::string out;
    Status st = EntryReader(Bytes::copy_of(bad)).read_primary(test_key(), [&](std::size_t n) {
      asked = n;
      out.assign(n, '\0');
      return out.data();
    });
    auto whole = decode_entry(Bytes::copy_of(bad), test_key());
    EXPECT_EQ(st.ok(), whole.ok()) << "byte " << i;
    if (st.ok()) {
      // The frame carries zstd's checksum of the decoded bytes: an edit
      // that still decodes must give the original bytes back.
      EXPECT_EQ(out, e.artifacts()[0].data.view()) << "byte " << i << " decoded to other bytes";
      EXPECT_EQ(whole->primary().view(), e.artifacts()[0].data.view()) << "byte " << i;
    } else {
      EXPECT_EQ(st.code(), Code::data_loss) << st.to_string();
      ++failed;
    }
    EXPECT_LE(asked, 256u * (frame_end - frame_at)) << "byte " << i;
  }
  EXPECT_GT(failed, 0);
}

TEST(EntryReader, AFrameDeclaringMoreThanItMayExpandToIsRefusedBeforeAllocating) {
  // 64 MiB of zeros is a frame of a few KiB: far past the 256-fold bound.
  const std::string zeros(std::size_t{64} << 20, '\0');
  std::string frame(ZSTD_compressBound(zeros.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), zeros.data(), zeros.size(), 1));
  ASSERT_LT(frame.size() * 256, zeros.size());
  // An entry whose one artifact is that frame, marked compressed, sealed.
  std::vector<Artifact> arts{{"cubin", Bytes::copy_of(frame)}};
  std::string bytes = encode(Entry("{}", std::move(arts)));
  const std::uint32_t zstd_encoding = k_encoding_zstd;
  std::memcpy(bytes.data() + k_entry_fixed_header + 4, &zstd_encoding, 4);
  reseal(bytes);
  bool allocated = false;
  Status st = EntryReader(Bytes::copy_of(bytes)).read_primary(test_key(), [&](std::size_t) {
    allocated = true;
    return nullptr;
  });
  EXPECT_EQ(st.code(), Code::data_loss) << st.to_string();
  EXPECT_NE(st.message().find("256 times"), std::string::npos) << st.message();
  EXPECT_FALSE(allocated);
  EXPECT_EQ(decode_entry(Bytes::copy_of(bytes), test_key()).status().code(), Code::data_loss);
  // The encoder never writes such a frame: it stores those bytes as they are.
  std::vector<Artifact> same{{"cubin", Bytes::copy_of(zeros)}};
  const std::string stored = encode(Entry("{}", std::move(same)), {.compression_level = 1});
  EXPECT_EQ(encoding_of(stored, 0), k_encoding_raw);
  // A skippable frame (not a standard one) in place of the artifact is
  // damage, though zstd would read it as empty.
  const std::string skippable(std::string("\x50\x2a\x4d\x18\x04\x00\x00\x00", 8) + "abcd");
  std::vector<Artifact> skip{{"cubin", Bytes::copy_of(skippable)}};
  std::string skipped = encode(Entry("{}", std::move(skip)));
  std::memcpy(skipped.data() + k_entry_fixed_header + 4, &zstd_encoding, 4);
  reseal(skipped);
  EXPECT_EQ(decode_entry(Bytes::copy_of(skipped), test_key()).status().code(), Code::data_loss);
  // An unknown encoding is damage.
  std::string unknown = encode(Entry("{}", {{"cubin", Bytes::copy_of("abc")}}));
  const std::uint32_t seven = 7;
  std::memcpy(unknown.data() + k_entry_fixed_header + 4, &seven, 4);
  reseal(unknown);
  EXPECT_EQ(decode_entry(Bytes::copy_of(unknown), test_key()).status().code(), Code::data_loss);
}

TEST(EntryReader, ManyFramesTogetherMayNotDecodeToMoreThanAnEntryMay) {
  // A frame of 32 MiB, within its own 256-fold bound.
  std::string data(std::size_t{32} << 20, '\0');
  std::mt19937 rng(3);
  for (std::size_t i = 0; i < data.size(); i += 64) data[i] = static_cast<char>(rng());
  std::string frame(ZSTD_compressBound(data.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), data.data(), data.size(), 1));
  ASSERT_GE(frame.size() * 256, data.size());
  // An entry of `n` artifacts, each that frame, marked compressed, sealed.
  const auto entry_of = [&](int n) {
    std::vector<Artifact> arts;
    for (int i = 0; i < n; ++i) arts.push_back({"a" + std::to_string(i), Bytes::copy_of(frame)});
    std::string bytes = encode(Entry("{}", std::move(arts)));
    const std::uint32_t zstd_encoding = k_encoding_zstd;
    for (int i = 0; i < n; ++i) std::memcpy(bytes.data() + k_entry_fixed_header + 16 * i + 4, &zstd_encoding, 4);
    reseal(bytes);
    return bytes;
  };
  // Two decode: the frames are sound.
  const std::string two = entry_of(2);
  auto fine = decode_entry(Bytes::copy_of(two), test_key());
  ASSERT_TRUE(fine.ok()) << fine.status().to_string();
  EXPECT_EQ(fine->artifacts()[1].data.view(), data);
  // 33 declare 1056 MiB from a few MiB: refused before any is expanded, on
  // every whole-entry read path (as a decode, through a file, as an import
  // checks it); a miss, never a gigabyte.
  const std::string many = entry_of(33);
  ASSERT_LT(many.size(), std::size_t{64} << 20);
  auto whole = decode_entry(Bytes::copy_of(many), test_key());
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.status().code(), Code::data_loss) << whole.status().to_string();
  EXPECT_NE(whole.status().message().find("in all"), std::string::npos) << whole.status().message();
  for (const bool vectored : {false, true}) {
    FakeFile f{many};
    EXPECT_EQ(f.reader(many.size(), vectored).read(test_key()).status().code(), Code::data_loss);
  }
  EXPECT_EQ(verify_encoded_entry(test_key(), many, {}).code(), Code::data_loss);
}

TEST(EntryReader, EveryEntryTheEncoderWritesItsReaderAccepts) {
  // From barely compressible to thousands of times: the encoder and the
  // decoder judge a frame's expansion by one test, so whatever is written
  // compressed is read back, and what would expand too far is stored raw.
  std::mt19937 rng(5);
  for (const std::size_t size : {std::size_t{600}, std::size_t{70'000}, std::size_t{1} << 20}) {
    for (std::size_t every = 1; every <= 16384; every *= 2) {
      std::string data(size, '\0');
      for (std::size_t i = 0; i < size; i += every) data[i] = static_cast<char>(rng());
      std::vector<Artifact> arts{{"cubin", Bytes::copy_of(data)}};
      const Entry e("{}", std::move(arts));
      for (const int level : {1, 19}) {
        if (level == 19 && size > 100'000) continue;  // seconds per entry at level 19
        const std::string bytes = encode(e, {.compression_level = level});
        auto back = decode_entry(Bytes::copy_of(bytes), test_key());
        ASSERT_TRUE(back.ok()) << size << " bytes, one in " << every << " random, level " << level << ": "
                               << back.status().to_string();
        EXPECT_EQ(back->primary().view(), data);
      }
    }
  }
}

}  // namespace
}  // namespace progcache
