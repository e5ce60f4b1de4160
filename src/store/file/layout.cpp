#include "store/file/layout.h"

#include <algorithm>
#include <charconv>

#include "progcache/bytes.h"
#include "progcache/entry.h"
#include "progcache/env.h"

namespace progcache::file_store {

namespace {
constexpr std::string_view k_quarantine_prefix = ".q.";
// Starts with k_temp_prefix, so every version classifies it as transient; a
// pid never starts with 'w', so no older version's temp has this prefix.
constexpr std::string_view k_locked_temp_prefix = ".tmp.w.";
}  // namespace

Layout::Layout(std::string root)
    : m_root(std::move(root)), m_dir(join_path(m_root, "v" + std::to_string(k_entry_format_version))) {}

std::string Layout::accounting_path() const {
  return join_path(m_dir, "accounting");
}

std::string Layout::evict_lock_path() const {
  return join_path(m_dir, "evict.lock");
}

std::string Layout::recency_path() const {
  return join_path(m_dir, "recency");
}

std::string Layout::shard_hex(int shard) {
  const char byte = static_cast<char>(shard);
  return to_hex(std::string_view(&byte, 1));
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

std::string Layout::temp_path(int shard) const {
  return unique_temp_path(shard_dir(shard), k_locked_temp_prefix);
}

std::string Layout::quarantine_path(int shard) const {
  return unique_temp_path(shard_dir(shard), k_quarantine_prefix);
}

NameKind Layout::classify(std::string_view name) {
  if (name.starts_with(k_temp_prefix) || name.starts_with(k_quarantine_prefix)) return NameKind::transient;
  const bool hex = name.size() == k_entry_name_size && std::all_of(name.begin(), name.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   });
  return hex ? NameKind::entry : NameKind::other;
}

bool Layout::is_locked_temp(std::string_view name) {
  return name.starts_with(k_locked_temp_prefix);
}

long Layout::temp_writer_pid(std::string_view name) {
  if (!is_locked_temp(name)) return 0;
  name.remove_prefix(k_locked_temp_prefix.size());
  long pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  return ec == std::errc() && end != name.data() && pid > 0 ? pid : 0;
}

Result<Key> Layout::key_of(int shard, std::string_view name) {
  if (classify(name) != NameKind::entry) return data_loss("not an entry name");
  return Key::from_hex(shard_hex(shard) + std::string(name));
}

}  // namespace progcache::file_store
