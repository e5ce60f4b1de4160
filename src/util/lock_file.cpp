#include "progcache/lock_file.h"

#include <algorithm>
#include <thread>

namespace progcache {

Result<LockFile> LockFile::acquire(Env* env, const std::string& dir, const std::string& name,
                                   std::chrono::milliseconds timeout, bool* waited, std::uint32_t dir_perms,
                                   std::uint32_t file_perms) {
  if (Status s = env->mkdir(dir, dir_perms); !s.ok() && s.code() != Code::failed_precondition) {
    return s.with_context("making the lock directory");
  }
  const std::string path = join_path(dir, name + ".lock");
  // Clamped to a year, so a huge timeout cannot overflow the deadline.
  const auto deadline =
      std::chrono::steady_clock::now() + std::min(timeout, std::chrono::milliseconds(std::chrono::hours(24 * 365)));
  auto backoff = std::chrono::milliseconds(1);
  if (waited != nullptr) *waited = false;
  while (true) {
    PROGCACHE_ASSIGN_OR_RETURN(const int fd, env->open_file(path, OpenMode::read_write, file_perms));
    auto got = env->lock(fd, LockKind::exclusive, LockWait::try_only);
    if (!got.ok()) {
      env->close_file(fd).ignore();
      return got.status();
    }
    if (*got) {
      auto held = env->fstat(fd);
      auto named = env->stat(path);
      if (held.ok() && named.ok() && held->same_file(*named)) return LockFile(env, path, fd);
      env->close_file(fd).ignore();  // the holder unlinked it as we locked: try the new file
      continue;
    }
    env->close_file(fd).ignore();
    if (waited != nullptr) *waited = true;
    if (std::chrono::steady_clock::now() >= deadline) {
      return deadline_exceeded("timed out after " + std::to_string(timeout.count()) + " ms waiting for the lock '" +
                               path + "' (another process holds it)");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

LockFile::LockFile(LockFile&& other) noexcept : m_env(other.m_env), m_path(std::move(other.m_path)), m_fd(other.m_fd) {
  other.m_fd = -1;
}

void LockFile::release() {
  if (m_fd < 0) return;
  // Unlinked while still held, so no one can lock this file afterwards and
  // believe they hold the path's lock.
  m_env->unlink(m_path).ignore();
  m_env->close_file(m_fd).ignore();
  m_fd = -1;
}

}  // namespace progcache
