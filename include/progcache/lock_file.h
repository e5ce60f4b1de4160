// progcache/lock_file.h — a host-wide lock named by a file: how one process
// of many gets to compile a key while the others wait (compile()'s
// single-flight and Python's KernelCache both take it).
//
// flock(2) on <dir>/<name>.lock. The kernel drops the lock when its holder
// dies, so a crash leaves no stale lock; the holder unlinks the file when it
// releases, so lock files do not pile up; a waiter that wins the lock on a
// file already unlinked sees that its descriptor no longer names the path
// and tries again. Each acquire opens its own file description, so threads
// of one process exclude each other too.
//
// Thread safety: a LockFile is one holder's; acquire is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "progcache/env.h"
#include "progcache/status.h"

namespace progcache {

class LockFile {
 public:
  // Takes the lock on <dir>/<name>.lock, making `dir` (one level, with
  // `dir_perms`) and the file (`file_perms`) if missing. Polls with backoff
  // (1 ms doubling to 50 ms) for up to `timeout` (at most a year), then
  // deadline_exceeded.
  // `waited` (optional) is set when another holder was found.
  static Result<LockFile> acquire(Env* env, const std::string& dir, const std::string& name,
                                  std::chrono::milliseconds timeout, bool* waited = nullptr,
                                  std::uint32_t dir_perms = 0700, std::uint32_t file_perms = 0600);

  LockFile(LockFile&& other) noexcept;
  LockFile& operator=(LockFile&&) = delete;
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;
  ~LockFile() { release(); }

  // Unlinks the file and drops the lock; idempotent.
  void release();
  [[nodiscard]] const std::string& path() const { return m_path; }

 private:
  LockFile(Env* env, std::string path, int fd) : m_env(env), m_path(std::move(path)), m_fd(fd) {}
  Env* m_env;
  std::string m_path;
  int m_fd;
};

}  // namespace progcache
