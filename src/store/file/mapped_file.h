// store/file/mapped_file.h — what the accounting file and the recency table
// share after an access met their file cut short (util/mapped_access.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "progcache/env.h"

namespace progcache::file_store {

// Extends the mapped file `fd` back to `size` bytes (the part lost reads as
// zeros), at most once a second per `next_ns`. true: the mapping can be
// used again; false: not now (tried within the second) or it failed.
inline bool extend_cut_file(Env* env, int fd, std::uint64_t size, std::atomic<std::int64_t>& next_ns) {
  constexpr std::int64_t k_every_ns = 1'000'000'000;
  const std::int64_t now = env->now_ns();
  std::int64_t next = next_ns.load(std::memory_order_relaxed);
  if (now < next || !next_ns.compare_exchange_strong(next, now + k_every_ns)) return false;
  auto info = env->fstat(fd);
  if (!info.ok()) return false;
  return info->size >= size || (env->ftruncate(fd, size).ok() && env->allocate(fd, size).ok());
}

}  // namespace progcache::file_store
