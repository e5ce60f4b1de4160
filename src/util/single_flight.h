// util/single_flight.h — calls for one key that overlap in time share one
// execution: the first caller leads and runs the work, the others wait for
// its result. compile() shares a compile among the threads of a process
// this way, and Python's KernelCache a build. (Across processes the leader
// also takes the key's LockFile, lock_file.h.)
//
// Only calls in flight are held: the leader's finish() forgets the key, so
// a later call runs again (and finds the cache filled). Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "util/mutex.h"

namespace progcache {

template <typename K, typename T>
class FlightTable {
 public:
  class Flight {
   public:
    // Blocks until the leader has finished. (Python releases the GIL around
    // this and reads result() after taking it back.)
    void wait() {
      MutexLock lock(m_mu);
      while (!m_done) m_cv.wait(m_mu);
    }
    // The leader's result, once finished; nullopt when it ended without one
    // (it failed in a way its followers should not share: they try again).
    std::optional<T> result() {
      MutexLock lock(m_mu);
      return m_result;
    }

   private:
    friend class FlightTable;
    Mutex m_mu;
    CondVar m_cv;
    bool m_done PROGCACHE_GUARDED_BY(m_mu) = false;
    std::optional<T> m_result PROGCACHE_GUARDED_BY(m_mu);
  };

  // Joins the call for `key`: its flight, and whether this caller leads it.
  std::pair<std::shared_ptr<Flight>, bool> join(const K& key) {
    MutexLock lock(m_mu);
    auto& slot = m_flights[key];
    const bool leader = !slot;
    if (leader) slot = std::make_shared<Flight>();
    return {slot, leader};
  }

  // The leader's end: forgets the key, then hands `result` to the waiters.
  void finish(const K& key, const std::shared_ptr<Flight>& flight, std::optional<T> result) {
    {
      MutexLock lock(m_mu);
      m_flights.erase(key);
    }
    {
      MutexLock lock(flight->m_mu);
      flight->m_result = std::move(result);
      flight->m_done = true;
    }
    flight->m_cv.notify_all();
  }

 private:
  Mutex m_mu;
  std::map<K, std::shared_ptr<Flight>> m_flights PROGCACHE_GUARDED_BY(m_mu);
};

}  // namespace progcache
