// store/file/layout.h — every name in a file store, in one place (as
// leveldb's db/filename.h): the version directory, the 256 shards, entry
// files, temp and quarantine files, the accounting file and the eviction
// lock.
//
//   <root>/v1/accounting            shared counters (accounting.h)
//   <root>/v1/evict.lock            one trimming process at a time
//   <root>/v1/recency               the last read of each entry (recency.h)
//   <root>/v1/<2 hex>/<62 hex>      an entry: its key's hex, split after the first byte
//   <root>/v1/<2 hex>/.tmp.w.<p>.<n>.<r>  a put in flight (pid, counter, random),
//                                   locked by its writer while it lives
//   <root>/v1/<2 hex>/.tmp.<p>.<n>.<r>  a put of a version that took no lock
//   <root>/v1/<2 hex>/.q.<p>.<n>.<r>    a removal in flight
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "progcache/key.h"
#include "progcache/status.h"

namespace progcache::file_store {

inline constexpr int k_shards = 256;
// Hex digits of an entry's file name: the key's, less the shard's two.
inline constexpr std::size_t k_entry_name_size = 62;

// What a name found in a shard directory is.
enum class NameKind {
  entry,      // 62 lower-case hex digits
  transient,  // a temp or quarantine file: a put or removal in flight, or left by a crash
  other,      // anything else: never an entry, never ours to sweep
};

class Layout {
 public:
  // `root` is absolute and normalized.
  explicit Layout(std::string root);

  [[nodiscard]] const std::string& root() const { return m_root; }
  // <root>/v<entry format version>: everything the store writes is below.
  [[nodiscard]] const std::string& dir() const { return m_dir; }
  [[nodiscard]] std::string accounting_path() const;
  [[nodiscard]] std::string evict_lock_path() const;
  [[nodiscard]] std::string recency_path() const;
  [[nodiscard]] std::string shard_dir(int shard) const;
  [[nodiscard]] std::string entry_path(const Key& key) const;
  // A fresh name in `shard` for a put's temp file or a removal's quarantine
  // file (unique_temp_path, env.h).
  [[nodiscard]] std::string temp_path(int shard) const;
  [[nodiscard]] std::string quarantine_path(int shard) const;

  static int shard_of(const Key& key) { return key.bytes[0]; }
  static std::string shard_hex(int shard);
  static NameKind classify(std::string_view name);
  // Whether `name` is a temp file whose writer holds a lock on it while it
  // lives and charged its size to the shard (see FileStoreImpl::publish):
  // one made by temp_path. Older versions' temps and quarantine files are
  // transient too, but judged by age alone.
  static bool is_locked_temp(std::string_view name);
  // The pid a locked temp's name carries; 0 when it carries none.
  static long temp_writer_pid(std::string_view name);
  // The key whose entry is `name` in `shard`; data_loss when it is not an
  // entry name.
  static Result<Key> key_of(int shard, std::string_view name);

 private:
  std::string m_root;
  std::string m_dir;
};

}  // namespace progcache::file_store
