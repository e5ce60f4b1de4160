// What signing costs a hit: verifying an entry from memory (checksum only,
// HMAC-SHA256, Ed25519) at 4 KiB, 64 KiB and 1 MiB, and what it costs a put
// (encoding with each). Decoding from memory isolates the verification from
// any I/O; a file or remote hit adds its own read to the same figure.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <random>

#include "progcache/entry.h"
#include "progcache/signing.h"

namespace pc = progcache;

namespace {

std::string pem_of(EVP_PKEY* key, bool private_key) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (private_key) {
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  } else {
    PEM_write_bio_PUBKEY(bio, key);
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return out;
}

// The writer's options and the reader's, per mode: 0 none, 1 HMAC, 2 Ed25519.
struct Codecs {
  pc::EntryCodecOptions writer, reader;
};

Codecs codecs(std::int64_t mode) {
  if (mode == 1) return {{.hmac_key = "bench-hmac-key-0123456789"}, {.hmac_key = "bench-hmac-key-0123456789"}};
  if (mode == 2) {
    EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
    const std::string priv = pem_of(key, true), pub = pem_of(key, false);
    EVP_PKEY_free(key);
    return {{.keys = *pc::SigningKeys::from_pem(priv, "")}, {.keys = *pc::SigningKeys::from_pem("", pub)}};
  }
  return {};
}

pc::Entry entry_of(std::size_t size) {
  std::string payload(size, '\0');
  std::mt19937_64 rng(3);
  for (auto& c : payload) c = static_cast<char>(rng());
  std::vector<pc::Artifact> arts;
  arts.push_back({"cubin", pc::Bytes::copy_of(payload)});
  return pc::Entry("{}", std::move(arts));
}

const pc::Key& bench_key() {
  static const pc::Key k = pc::KeyBuilder("signing-bench").finish();
  return k;
}

void BM_VerifyHit(benchmark::State& state) {
  const Codecs c = codecs(state.range(0));
  const auto size = static_cast<std::size_t>(state.range(1));
  const pc::Bytes encoded = pc::Bytes::adopt(*pc::encode_entry(bench_key(), entry_of(size), 1, c.writer));
  for (auto _ : state) {
    auto e = pc::decode_entry(encoded, bench_key(), c.reader);
    if (!e.ok()) state.SkipWithError(e.status().to_string().c_str());
    benchmark::DoNotOptimize(e);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(1));
}
BENCHMARK(BM_VerifyHit)
    ->ArgNames({"mode", "bytes"})
    ->ArgsProduct({{0, 1, 2}, {4 << 10, 64 << 10, 1 << 20}})
    ->Unit(benchmark::kMicrosecond);

void BM_SignPut(benchmark::State& state) {
  const Codecs c = codecs(state.range(0));
  const pc::Entry e = entry_of(static_cast<std::size_t>(state.range(1)));
  for (auto _ : state) {
    auto bytes = pc::encode_entry(bench_key(), e, 1, c.writer);
    benchmark::DoNotOptimize(bytes);
  }
}
BENCHMARK(BM_SignPut)->ArgNames({"mode", "bytes"})->ArgsProduct({{0, 1, 2}, {64 << 10}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
