// Mutex and MutexLock with clang's thread-safety annotations, so that
// "this field is guarded by that mutex" is checked by the compiler
// (-Wthread-safety, on for clang builds), not only written in a comment.
// libstdc++'s std::mutex carries no annotations, hence this thin wrapper, as
// leveldb's port::Mutex. Under other compilers the annotations vanish.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define PROGCACHE_TSA(x) __attribute__((x))
#else
#define PROGCACHE_TSA(x)
#endif

#define PROGCACHE_CAPABILITY(x) PROGCACHE_TSA(capability(x))
#define PROGCACHE_SCOPED_CAPABILITY PROGCACHE_TSA(scoped_lockable)
#define PROGCACHE_GUARDED_BY(x) PROGCACHE_TSA(guarded_by(x))
#define PROGCACHE_REQUIRES(...) PROGCACHE_TSA(requires_capability(__VA_ARGS__))
#define PROGCACHE_ACQUIRE(...) PROGCACHE_TSA(acquire_capability(__VA_ARGS__))
#define PROGCACHE_RELEASE(...) PROGCACHE_TSA(release_capability(__VA_ARGS__))
#define PROGCACHE_TRY_ACQUIRE(...) PROGCACHE_TSA(try_acquire_capability(__VA_ARGS__))

namespace progcache {

class PROGCACHE_CAPABILITY("mutex") Mutex {
 public:
  void lock() PROGCACHE_ACQUIRE() { m_mu.lock(); }
  void unlock() PROGCACHE_RELEASE() { m_mu.unlock(); }
  bool try_lock() PROGCACHE_TRY_ACQUIRE(true) { return m_mu.try_lock(); }

 private:
  std::mutex m_mu;
};

// Holds a Mutex for its scope.
class PROGCACHE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) PROGCACHE_ACQUIRE(mu) : m_mu(mu) { m_mu.lock(); }
  ~MutexLock() PROGCACHE_RELEASE() { m_mu.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_mu;
};

// Waits on a Mutex the caller holds: wait() releases it while blocked and
// holds it again on return, so to the analysis the caller holds it
// throughout. Write waits as `while (!ready) cv.wait(mu);`.
class CondVar {
 public:
  void wait(Mutex& mu) PROGCACHE_REQUIRES(mu) { m_cv.wait(mu); }
  // False when the deadline passed.
  template <typename Clock, typename Duration>
  bool wait_until(Mutex& mu, const std::chrono::time_point<Clock, Duration>& deadline) PROGCACHE_REQUIRES(mu) {
    return m_cv.wait_until(mu, deadline) == std::cv_status::no_timeout;
  }
  void notify_one() { m_cv.notify_one(); }
  void notify_all() { m_cv.notify_all(); }

 private:
  std::condition_variable_any m_cv;
};

}  // namespace progcache
