#include "store/file/layout.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "progcache/entry.h"
#include "progcache/env.h"

namespace progcache::file_store {

namespace {
constexpr std::string_view k_temp_prefix = ".tmp.";
constexpr std::string_view k_quarantine_prefix = ".q.";
}  // namespace

Layout::Layout(std::string root)
    : m_root(std::move(root)), m_dir(join_path(m_root, "v" + std::to_string(k_entry_format_version))) {}

std::string Layout::accounting_path() const {
  return join_path(m_dir, "accounting");
}

std::string Layout::evict_lock_path() const {
  return join_path(m_dir, "evict.lock");
}

std::string Layout::shard_hex(int shard) {
  static constexpr char k_digits[] = "0123456789abcdef";
  return {k_digits[(shard >> 4) & 0xf], k_digits[shard & 0xf]};
}

std::string Layout::shard_dir(int shard) const {
  return join_path(m_dir, shard_hex(shard));
}

std::string Layout::entry_path(const Key& key) const {
  const std::string hex = key.hex();
  std::string p = m_dir;
  p += '/';
  p.append(hex, 0, 2);
  p += '/';
  p.append(hex, 2, std::string::npos);
  return p;
}

std::string Layout::unique_name(int shard, std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::uint64_t n = m_counter.fetch_add(1, std::memory_order_relaxed);
  return join_path(shard_dir(shard), std::string(prefix) + std::to_string(::getpid()) + "." + std::to_string(n) + "." +
                                         std::to_string(rng() & 0xffffffffu));
}

std::string Layout::temp_path(int shard) {
  return unique_name(shard, k_temp_prefix);
}

std::string Layout::quarantine_path(int shard) {
  return unique_name(shard, k_quarantine_prefix);
}

NameKind Layout::classify(std::string_view name) {
  if (name.starts_with(k_temp_prefix) || name.starts_with(k_quarantine_prefix)) return NameKind::transient;
  const bool hex = name.size() == k_entry_name_size && std::all_of(name.begin(), name.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   });
  return hex ? NameKind::entry : NameKind::other;
}

Result<Key> Layout::key_of(int shard, std::string_view name) {
  if (classify(name) != NameKind::entry) return data_loss("not an entry name");
  return Key::from_hex(shard_hex(shard) + std::string(name));
}

}  // namespace progcache::file_store
