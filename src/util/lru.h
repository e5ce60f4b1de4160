// util/lru.h — the one least-recently-used map: the memory store's shards
// and the Python module's in-memory cache (which holds Python objects) are
// both this template. Capped by a sum of per-value charges and, optionally,
// a count. Not thread-safe: callers hold their own lock.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace progcache {

struct LruLimits {
  std::optional<std::uint64_t> bytes;    // the sum of charges; nullopt: none
  std::optional<std::uint64_t> entries;  // nullopt: none
};

// `Hash` and `Eq` may be transparent, so a map keyed by std::string is
// searched with a std::string_view without building a string.
template <typename K, typename V, typename Hash = std::hash<K>, typename Eq = std::equal_to<>>
class LruMap {
 public:
  struct PutResult {
    bool stored = false;        // false: the value alone is over the limits
    std::uint64_t evicted = 0;  // older values removed to make room
  };

  // The value under `key`, now the most recently used; nullptr if none.
  template <typename Q>
  V* find(const Q& key) {
    return find(key, nullptr);
  }
  // The same, also giving the value's charge (in the node the lookup
  // touches anyway).
  template <typename Q>
  V* find(const Q& key, std::uint64_t* charge) {
    auto it = m_index.find(key);
    if (it == m_index.end()) return nullptr;
    m_list.splice(m_list.begin(), m_list, it->second);
    if (charge != nullptr) *charge = it->second->charge;
    return &it->second->value;
  }

  // Inserts or replaces, then evicts least recently used values until the
  // limits hold. A value that could never fit replaces nothing: the old one
  // is removed and the new one is not stored.
  PutResult put(K key, V value, std::uint64_t charge, const LruLimits& limits) {
    PutResult r;
    erase(key);
    if ((limits.bytes && charge > *limits.bytes) || (limits.entries && *limits.entries == 0)) return r;
    while (!m_list.empty() && ((limits.bytes && m_bytes + charge > *limits.bytes) ||
                               (limits.entries && m_list.size() + 1 > *limits.entries))) {
      Node& victim = m_list.back();
      m_bytes -= victim.charge;
      m_index.erase(victim.key);
      m_list.pop_back();
      ++r.evicted;
    }
    m_list.push_front(Node{key, std::move(value), charge});
    m_index.emplace(std::move(key), m_list.begin());
    m_bytes += charge;
    r.stored = true;
    return r;
  }

  template <typename Q>
  bool erase(const Q& key) {
    auto it = m_index.find(key);
    if (it == m_index.end()) return false;
    m_bytes -= it->second->charge;
    m_list.erase(it->second);
    m_index.erase(it);
    return true;
  }

  void clear() {
    m_index.clear();
    m_list.clear();
    m_bytes = 0;
  }

  [[nodiscard]] std::size_t size() const { return m_list.size(); }
  [[nodiscard]] std::uint64_t bytes() const { return m_bytes; }

 private:
  // Invariant: m_bytes is the sum of charges over m_list, and m_index holds
  // exactly the keys of m_list. The front of m_list is the most recent.
  struct Node {
    K key;
    V value;
    std::uint64_t charge;
  };
  std::list<Node> m_list;
  std::unordered_map<K, typename std::list<Node>::iterator, Hash, Eq> m_index;
  std::uint64_t m_bytes = 0;
};

}  // namespace progcache
