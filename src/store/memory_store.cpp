#include "progcache/memory_store.h"

#include <atomic>
#include <bit>
#include <mutex>
#include <vector>

#include "store/store_meters.h"
#include "util/lru.h"
#include "util/mutex.h"

namespace progcache {

namespace {

// One LRU shard under its own lock.
// Its hits, misses, puts and bytes are counted under that lock, which a
// call holds anyway: plain adds, no atomic instruction on a 30 ns hit.
class Shard {
 public:
  std::optional<Entry> get(const Key& key) {
    MutexLock lock(m_mu);
    std::uint64_t charge = 0;  // the entry's payload_size(), kept by the LRU
    const Entry* e = m_lru.find(key, &charge);
    if (e == nullptr) {
      ++m_counts.misses;
      return std::nullopt;
    }
    ++m_counts.hits;
    m_counts.bytes_read += charge;
    return *e;
  }

  // Returns the number of entries evicted to make room (an entry that could
  // never fit counts as one).
  std::uint64_t put(const Key& key, const Entry& entry, std::uint64_t charge, const LruLimits& limits) {
    MutexLock lock(m_mu);
    ++m_counts.puts;
    m_counts.bytes_written += charge;
    const auto r = m_lru.put(key, entry, charge, limits);
    return r.stored ? r.evicted : 1;
  }

  // Adds this shard's counts to `s`.
  void add_counts(StoreStats& s) {
    MutexLock lock(m_mu);
    s.hits += m_counts.hits;
    s.misses += m_counts.misses;
    s.puts += m_counts.puts;
    s.bytes_read += m_counts.bytes_read;
    s.bytes_written += m_counts.bytes_written;
  }

  bool erase(const Key& key) {
    MutexLock lock(m_mu);
    return m_lru.erase(key);
  }

  void clear() {
    MutexLock lock(m_mu);
    m_lru.clear();
  }

  std::pair<std::uint64_t, std::uint64_t> usage() {
    MutexLock lock(m_mu);
    return {m_lru.size(), m_lru.bytes()};
  }

 private:
  Mutex m_mu;
  LruMap<Key, Entry, KeyHash> m_lru PROGCACHE_GUARDED_BY(m_mu);
  StoreStats m_counts PROGCACHE_GUARDED_BY(m_mu);
};

class MemoryStore final : public Store {
 public:
  MemoryStore(const MemoryStoreOptions& o, unsigned shards) : m_shards(shards) {
    m_mask = shards - 1;
    if (o.max_size_bytes) m_byte_share = *o.max_size_bytes / shards;
    if (o.max_entries) m_entry_share = *o.max_entries / shards;
    m_disabled = (o.max_size_bytes && *o.max_size_bytes == 0);
  }

  Result<std::optional<Entry>> get(const Key& key) override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    SampledTimer timer(sample_this_call<memory_get>());
    auto e = shard(key).get(key);
    timer.finish(m_meters.get_time);
    return e;
  }

  Status put(const Key& key, const Entry& entry) override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    SampledTimer timer(sample_this_call<memory_put>());
    if (m_disabled) {
      m_disabled_puts.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    const std::uint64_t ev = shard(key).put(key, entry, entry.payload_size(), {m_byte_share, m_entry_share});
    if (ev != 0) m_evictions.fetch_add(ev, std::memory_order_relaxed);
    timer.finish(m_meters.put_time);
    return {};
  }

  Result<bool> erase(const Key& key) override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    return shard(key).erase(key);
  }

  Status clear() override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    for (auto& s : m_shards) s.clear();
    return {};
  }

  Result<std::uint64_t> count() override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    return usage().first;
  }
  Result<std::uint64_t> size_bytes() override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    return usage().second;
  }

  StoreStats stats() override {
    StoreStats s;
    m_meters.fill(s);  // the times (its byte counts stay zero: the shards count bytes)
    for (auto& sh : m_shards) sh.add_counts(s);
    s.puts += m_disabled_puts.load(std::memory_order_relaxed);
    s.evictions = m_evictions.load(std::memory_order_relaxed);
    std::tie(s.entries, s.bytes_stored) = usage();
    return s;
  }

  Status close() override {
    if (!m_closed.exchange(true)) {
      for (auto& s : m_shards) s.clear();
    }
    return {};
  }

  [[nodiscard]] std::string name() const override { return "memory"; }

 private:
  static Status closed() { return failed_precondition("memory store is closed"); }

  Shard& shard(const Key& key) {
    // Keys are SHA-256 output, so any byte is uniform; use the last one so
    // the file store's first-byte sharding and this one are independent.
    return m_shards[key.bytes[31] & m_mask];
  }

  std::pair<std::uint64_t, std::uint64_t> usage() {
    std::uint64_t n = 0, b = 0;
    for (auto& s : m_shards) {
      auto [sn, sb] = s.usage();
      n += sn;
      b += sb;
    }
    return {n, b};
  }

  std::vector<Shard> m_shards;
  unsigned m_mask = 0;
  std::optional<std::uint64_t> m_byte_share;
  std::optional<std::uint64_t> m_entry_share;
  bool m_disabled = false;
  std::atomic<bool> m_closed{false};
  std::atomic<std::uint64_t> m_disabled_puts{0}, m_evictions{0};
  StoreMeters m_meters;
};

}  // namespace

Result<std::unique_ptr<Store>> make_memory_store(const MemoryStoreOptions& options) {
  if (options.shards > 256 || (options.shards != 0 && !std::has_single_bit(options.shards))) {
    return invalid_argument("memory store shard count must be 0 (automatic) or a power of two up to 256, got " +
                            std::to_string(options.shards));
  }
  unsigned shards = options.shards;
  if (shards == 0) {
    // Sharding only pays under thread contention, and a shard's share of the
    // cap bounds the largest entry it can hold. Keep every share at least
    // k_min_share so a small cap behaves as one exact LRU (the semantics of
    // cuda.core's InMemoryProgramCache) and large caps spread over 16 locks.
    constexpr std::uint64_t k_min_share = std::uint64_t{256} << 20;
    shards = 16;
    while (shards > 1 && options.max_size_bytes && *options.max_size_bytes / shards < k_min_share) shards /= 2;
  }
  return std::unique_ptr<Store>(std::make_unique<MemoryStore>(options, shards));
}

}  // namespace progcache
