#include "progcache/memory_store.h"

#include <atomic>
#include <bit>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "util/mutex.h"

namespace progcache {

namespace {

struct Node {
  Key key;
  Entry entry;
  std::uint64_t charge;
};

// One LRU shard. Invariant: m_bytes == sum of charge over m_list, and
// m_index holds exactly the keys of m_list. Front of m_list = most recent.
class Shard {
 public:
  std::optional<Entry> get(const Key& key) {
    MutexLock lock(m_mu);
    auto it = m_index.find(key);
    if (it == m_index.end()) return std::nullopt;
    m_list.splice(m_list.begin(), m_list, it->second);
    return it->second->entry;
  }

  // Returns the number of entries evicted to make room.
  std::uint64_t put(const Key& key, const Entry& entry, std::uint64_t charge, std::optional<std::uint64_t> byte_cap,
                    std::optional<std::uint64_t> entry_cap, bool* stored) {
    MutexLock lock(m_mu);
    std::uint64_t evicted = 0;
    if (auto it = m_index.find(key); it != m_index.end()) {
      m_bytes -= it->second->charge;
      m_list.erase(it->second);
      m_index.erase(it);
    }
    if ((byte_cap && charge > *byte_cap) || (entry_cap && *entry_cap == 0)) {
      *stored = false;
      return 1;
    }
    while (!m_list.empty() &&
           ((byte_cap && m_bytes + charge > *byte_cap) || (entry_cap && m_list.size() + 1 > *entry_cap))) {
      Node& victim = m_list.back();
      m_bytes -= victim.charge;
      m_index.erase(victim.key);
      m_list.pop_back();
      ++evicted;
    }
    m_list.push_front(Node{key, entry, charge});
    m_index.emplace(key, m_list.begin());
    m_bytes += charge;
    *stored = true;
    return evicted;
  }

  bool erase(const Key& key) {
    MutexLock lock(m_mu);
    auto it = m_index.find(key);
    if (it == m_index.end()) return false;
    m_bytes -= it->second->charge;
    m_list.erase(it->second);
    m_index.erase(it);
    return true;
  }

  void clear() {
    MutexLock lock(m_mu);
    m_index.clear();
    m_list.clear();
    m_bytes = 0;
  }

  std::pair<std::uint64_t, std::uint64_t> usage() {
    MutexLock lock(m_mu);
    return {m_list.size(), m_bytes};
  }

 private:
  Mutex m_mu;
  std::list<Node> m_list PROGCACHE_GUARDED_BY(m_mu);
  std::unordered_map<Key, std::list<Node>::iterator, KeyHash> m_index PROGCACHE_GUARDED_BY(m_mu);
  std::uint64_t m_bytes PROGCACHE_GUARDED_BY(m_mu) = 0;
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
    auto e = shard(key).get(key);
    (e ? m_hits : m_misses).fetch_add(1, std::memory_order_relaxed);
    return e;
  }

  Status put(const Key& key, const Entry& entry) override {
    if (m_closed.load(std::memory_order_relaxed)) return closed();
    m_puts.fetch_add(1, std::memory_order_relaxed);
    if (m_disabled) return {};
    bool stored = false;
    const std::uint64_t ev = shard(key).put(key, entry, entry.payload_size(), m_byte_share, m_entry_share, &stored);
    if (ev != 0) m_evictions.fetch_add(ev, std::memory_order_relaxed);
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

  Result<std::uint64_t> count() override { return usage().first; }
  Result<std::uint64_t> size_bytes() override { return usage().second; }

  StoreStats stats() override {
    StoreStats s;
    s.hits = m_hits.load(std::memory_order_relaxed);
    s.misses = m_misses.load(std::memory_order_relaxed);
    s.puts = m_puts.load(std::memory_order_relaxed);
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
  std::atomic<std::uint64_t> m_hits{0}, m_misses{0}, m_puts{0}, m_evictions{0};
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
