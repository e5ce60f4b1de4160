#include "progcache/tiered_store.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "store/store_meters.h"
#include "util/mutex.h"

namespace progcache {

namespace {

class Tiered final : public TieredStore {
 public:
  explicit Tiered(TieredStoreOptions o) : m_opt(std::move(o)) {
    if (m_opt.memory) m_tiers.push_back(m_opt.memory.get());
    if (m_opt.disk) m_tiers.push_back(m_opt.disk.get());
    if (m_opt.remote) {
      m_tiers.push_back(m_opt.remote.get());
      m_worker = std::thread([this] { drain(); });
    }
  }

  ~Tiered() override { close().ignore(); }

  Result<std::optional<Entry>> get(const Key& key) override {
    PROGCACHE_TRY(check_open());
    SampledTimer timer(sample_this_call<tiered_get>());
    Status last_error;
    bool any_answered = false;
    bool disk_missed = false;  // the disk tier looked and counted a miss
    for (std::size_t i = 0; i < m_tiers.size(); ++i) {
      auto r = m_tiers[i]->get(key);
      if (!r.ok()) {
        last_error = r.status();  // a failing tier is a miss there; try below
        continue;
      }
      any_answered = true;
      if (!r->has_value()) {
        disk_missed = disk_missed || m_tiers[i] == m_opt.disk.get();
        continue;
      }
      // Backfill the tiers above the one that hit.
      for (std::size_t j = 0; j < i; ++j) m_tiers[j]->put(key, **r).ignore();
      // The root's statistics (the disk's, host-wide) count the lookup as
      // the caller saw it: a hit wherever it was answered. The disk counted
      // nothing where memory answered, and a miss where the remote did; its
      // own counters keep saying what it answered.
      if (Store* disk = m_opt.disk.get(); disk != nullptr && m_tiers[i] != disk) {
        disk->count_served_above(disk_missed);
      }
      ++m_hits;
      m_meters.read((*r)->payload_size());
      timer.finish(m_meters.get_time);
      return r;
    }
    if (!any_answered && !m_tiers.empty()) {
      ++m_errors;
      return last_error;
    }
    ++m_misses;
    timer.finish(m_meters.get_time);
    return std::optional<Entry>();
  }

  Status put(const Key& key, const Entry& entry) override {
    PROGCACHE_TRY(check_open());
    SampledTimer timer(sample_this_call<tiered_put>());
    m_meters.wrote(entry.payload_size());
    Status first_error;
    bool any_ok = false;
    for (Store* t : {m_opt.memory.get(), m_opt.disk.get()}) {
      if (t == nullptr) continue;
      Status st = t->put(key, entry);
      if (st.ok())
        any_ok = true;
      else if (first_error.ok())
        first_error = st;
    }
    if (m_opt.remote) {
      MutexLock l(m_mu);
      if (m_stop) {
        // Closed since the check above (the worker is gone): refused, as
        // every call after close is, unless a tier above took it.
        if (first_error.ok()) first_error = failed_precondition("tiered store is closed");
      } else if (m_queue.size() >= m_opt.remote_queue) {
        ++m_dropped;    // full: counted, never queued to be lost silently
        any_ok = true;  // the remote is best effort
      } else {
        m_queue.emplace_back(key, entry);
        m_cv.notify_one();
        any_ok = true;
      }
    }
    if (any_ok || m_tiers.empty()) {
      ++m_puts;
      timer.finish(m_meters.put_time);
      return {};
    }
    ++m_errors;
    return first_error;
  }

  Result<bool> erase(const Key& key) override {
    PROGCACHE_TRY(check_open());
    bool any = false;
    Status first_error;
    for (Store* t : m_tiers) {
      auto r = t->erase(key);
      if (r.ok())
        any |= *r;
      else if (first_error.ok() && r.status().code() != Code::failed_precondition)
        first_error = r.status();
    }
    if (!first_error.ok() && !any) return first_error;
    return any;
  }

  Status clear() override {
    PROGCACHE_TRY(check_open());
    Status first_error;
    for (Store* t : m_tiers) {
      Status st = t->clear();
      if (!st.ok() && first_error.ok() && st.code() != Code::failed_precondition) first_error = st;
    }
    return first_error;
  }

  // The lowest local tier is the authority on what this host holds.
  Result<std::uint64_t> count() override {
    PROGCACHE_TRY(check_open());
    return local() != nullptr ? local()->count() : std::uint64_t{0};
  }
  Result<std::uint64_t> size_bytes() override {
    PROGCACHE_TRY(check_open());
    return local() != nullptr ? local()->size_bytes() : std::uint64_t{0};
  }

  // Hits, misses, puts and errors as the caller saw them (a get that hit
  // any tier is one hit); what each tier dropped as damaged or refused,
  // summed; what is held and what was evicted, from the lowest local tier
  // (an entry the memory tier evicts is still on disk: nothing was lost).
  StoreStats stats() override {
    StoreStats s;
    s.hits = m_hits;
    s.misses = m_misses;
    s.puts = m_puts;
    s.errors = m_errors;
    m_meters.fill(s);
    for (Store* t : m_tiers) {
      const StoreStats ts = t->stats();
      s.corrupt_dropped += ts.corrupt_dropped;
      s.rejected += ts.rejected;
    }
    if (!m_tiers.empty()) {
      const StoreStats held = local()->stats();
      s.evictions = held.evictions;
      s.bytes_stored = held.bytes_stored;
      s.entries = held.entries;
    }
    return s;
  }

  void count_copy_hit() override {
    ++m_hits;
    if (Store* l = local()) l->count_copy_hit();
  }

  void uncount_miss() override {
    std::uint64_t n = m_misses.load(std::memory_order_relaxed);
    while (n > 0 && !m_misses.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
    if (Store* l = local()) l->uncount_miss();
  }

  std::vector<TierStats> tier_stats() override {
    std::vector<TierStats> out;
    for (Store* t : m_tiers) out.push_back({t->name(), t->stats()});
    return out;
  }

  TieredStats tiered_stats() override {
    MutexLock l(m_mu);
    return {.dropped = m_dropped, .queued = m_queue.size()};
  }

  std::optional<RemoteStats> remote_stats() override {
    if (!m_opt.remote) return std::nullopt;
    return m_opt.remote->remote_stats();
  }

  Status flush() override {
    if (!m_opt.remote) return {};
    const auto deadline = std::chrono::steady_clock::now() + m_opt.flush_timeout;
    MutexLock l(m_mu);
    while (!m_queue.empty() || m_busy) {
      if (!m_idle_cv.wait_until(m_mu, deadline) && (!m_queue.empty() || m_busy)) break;
    }
    if (!m_queue.empty() || m_busy) {
      return Status(Code::deadline_exceeded, std::to_string(m_queue.size()) + " remote puts still queued after " +
                                                 std::to_string(m_opt.flush_timeout.count()) + " ms");
    }
    return {};
  }

  Status close() override {
    if (m_closed.exchange(true)) return {};
    Status st = flush();
    {
      MutexLock l(m_mu);
      m_stop = true;
      m_dropped += m_queue.size();
      m_queue.clear();
    }
    m_cv.notify_all();
    if (m_worker.joinable()) m_worker.join();
    for (Store* t : m_tiers) t->close().ignore();
    return st;
  }

  [[nodiscard]] std::string name() const override { return "tiered"; }

 private:
  // After close() every call fails as the tiers' own do; the remote queue
  // takes nothing more.
  Status check_open() const {
    if (m_closed.load()) return failed_precondition("tiered store is closed");
    return {};
  }
  // The lowest local tier, else the remote; nullptr with no tier at all.
  Store* local() {
    if (m_opt.disk) return m_opt.disk.get();
    if (m_opt.memory) return m_opt.memory.get();
    return m_tiers.empty() ? nullptr : m_tiers.front();
  }

  void drain() {
    while (true) {
      std::pair<Key, Entry> item;
      {
        MutexLock l(m_mu);
        while (!m_stop && m_queue.empty()) m_cv.wait(m_mu);
        if (m_stop) return;
        item = std::move(m_queue.front());
        m_queue.pop_front();
        m_busy = true;
      }
      m_opt.remote->put(item.first, item.second).ignore();  // counted by the remote store
      MutexLock l(m_mu);
      m_busy = false;
      if (m_queue.empty()) m_idle_cv.notify_all();
    }
  }

  TieredStoreOptions m_opt;
  std::vector<Store*> m_tiers;  // top first
  Mutex m_mu;
  CondVar m_cv, m_idle_cv;
  std::deque<std::pair<Key, Entry>> m_queue PROGCACHE_GUARDED_BY(m_mu);
  bool m_busy PROGCACHE_GUARDED_BY(m_mu) = false;
  bool m_stop PROGCACHE_GUARDED_BY(m_mu) = false;
  std::uint64_t m_dropped PROGCACHE_GUARDED_BY(m_mu) = 0;
  std::atomic<bool> m_closed{false};
  std::atomic<std::uint64_t> m_hits{0}, m_misses{0}, m_puts{0}, m_errors{0};
  StoreMeters m_meters;
  std::thread m_worker;
};

}  // namespace

std::unique_ptr<TieredStore> make_tiered_store(TieredStoreOptions options) {
  return std::make_unique<Tiered>(std::move(options));
}

}  // namespace progcache
