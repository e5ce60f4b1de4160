// The remote tier's policies, written once above every backend: sharding,
// deadlines, the circuit breaker, read-only mode, the entry format, stats.
#include "progcache/remote_store.h"

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <utility>

#include "progcache/env.h"
#include "progcache/hash.h"
#include "store/store_meters.h"
#include "util/mutex.h"

namespace progcache {

namespace {

// The breaker of one backend. Outages, timeouts and refused credentials open
// it: each would otherwise cost every call the same wait or the same refusal.
// Other errors (a refused write, garbage) say the server is there.
class Breaker {
 public:
  Breaker(int failures, std::chrono::milliseconds backoff) : m_limit(failures), m_backoff(backoff) {}

  bool allows() {
    MutexLock l(m_mu);
    if (m_failures < m_limit) return true;
    const auto now = RemoteClock::now();
    if (now < m_open_until) return false;
    // Half-open: let one probe through, and hold the others off until it
    // reports.
    m_open_until = now + m_backoff;
    return true;
  }

  static bool is_outage(const Status& st) {
    return st.code() == Code::unavailable || st.code() == Code::deadline_exceeded ||
           st.code() == Code::permission_denied;
  }

  // True when this failure opened the breaker.
  bool record(const Status& st) {
    MutexLock l(m_mu);
    if (st.ok() || !is_outage(st)) {
      m_failures = 0;
      return false;
    }
    if (++m_failures != m_limit) return false;
    m_open_until = RemoteClock::now() + m_backoff;
    return true;
  }

 private:
  const int m_limit;
  const std::chrono::milliseconds m_backoff;
  Mutex m_mu;
  int m_failures PROGCACHE_GUARDED_BY(m_mu) = 0;
  RemoteDeadline m_open_until PROGCACHE_GUARDED_BY(m_mu){};
};

struct Shard {
  Shard(std::unique_ptr<RemoteBackend> b, int breaker_failures, std::chrono::milliseconds backoff)
      : backend(std::move(b)), id_hash(xxh3_64(backend->id())), breaker(breaker_failures, backoff) {}
  std::unique_ptr<RemoteBackend> backend;
  std::uint64_t id_hash;
  Breaker breaker;
  std::atomic<bool> refusal_said{false};  // the first refusal is said once
};

class RemoteTier final : public RemoteStore {
 public:
  RemoteTier(std::vector<std::unique_ptr<RemoteBackend>> backends, const RemoteStoreOptions& o) : m_opt(o) {
    for (auto& b : backends)
      m_shards.push_back(std::make_unique<Shard>(std::move(b), o.breaker_failures, o.breaker_backoff));
  }

  Result<std::optional<Entry>> get(const Key& key) override {
    SampledTimer timer(sample_this_call<remote_get>());
    Shard& s = shard(key);
    auto r = call(s, deadline_of(s), [&](RemoteDeadline d) { return s.backend->get(key.hex(), d); });
    timer.finish(m_meters.get_time);
    MutexLock l(m_mu);
    if (!r.ok()) {
      ++m_base.errors;
      return r.status();
    }
    if (!r->has_value()) {
      ++m_base.misses;
      return std::optional<Entry>();
    }
    auto e = decode_entry(**r, key, m_opt.codec);
    if (!e.ok()) {
      (e.status().code() == Code::permission_denied ? m_base.rejected : m_base.corrupt_dropped)++;
      ++m_base.misses;
      return std::optional<Entry>();
    }
    ++m_base.hits;
    m_meters.read((*r)->size());
    return std::optional<Entry>(std::move(*e));
  }

  Status put(const Key& key, const Entry& entry) override {
    // A reader of signed entries that holds no private key would write
    // entries every other reader refuses: it is read-only.
    if (m_opt.read_only || (m_opt.codec.keys != nullptr && !m_opt.codec.keys->can_sign())) {
      MutexLock l(m_mu);
      ++m_remote.read_only_skips;
      return {};
    }
    PROGCACHE_ASSIGN_OR_RETURN(std::string value, encode_entry(key, entry, Env::posix()->now_ns(), m_opt.codec));
    if (value.size() > m_opt.max_value_bytes) {
      MutexLock l(m_mu);
      ++m_base.errors;
      return resource_exhausted("entry of " + std::to_string(value.size()) + " bytes exceeds the remote's " +
                                std::to_string(m_opt.max_value_bytes) + "-byte limit for one value; not sent");
    }
    Shard& s = shard(key);
    SampledTimer timer(sample_this_call<remote_put>());
    Status st = call(s, deadline_of(s), [&](RemoteDeadline d) { return s.backend->set(key.hex(), value, d); });
    if (st.ok()) {
      timer.finish(m_meters.put_time);
      m_meters.wrote(value.size());
    }
    MutexLock l(m_mu);
    (st.ok() ? m_base.puts : m_base.errors)++;
    return st;
  }

  Result<bool> erase(const Key& key) override {
    if (m_opt.read_only) return failed_precondition("remote store is read-only");
    Shard& s = shard(key);
    return call(s, deadline_of(s), [&](RemoteDeadline d) { return s.backend->remove(key.hex(), d); });
  }

  Status clear() override {
    if (m_opt.read_only) return failed_precondition("remote store is read-only");
    return walk([&](Shard& s, const std::string& name, RemoteDeadline walk_end) -> Status {
      return call(s, std::min(deadline_of(s), walk_end), [&](RemoteDeadline d) { return s.backend->remove(name, d); })
          .status();
    });
  }

  Result<std::uint64_t> count() override {
    std::uint64_t n = 0;
    PROGCACHE_TRY(walk([&](Shard&, const std::string&, RemoteDeadline) -> Status {
      ++n;
      return {};
    }));
    return n;
  }

  Result<std::uint64_t> size_bytes() override {
    std::uint64_t n = 0;
    PROGCACHE_TRY(walk([&](Shard& s, const std::string& name, RemoteDeadline walk_end) -> Status {
      PROGCACHE_ASSIGN_OR_RETURN(std::uint64_t b, call(s, std::min(deadline_of(s), walk_end),
                                                       [&](RemoteDeadline d) { return s.backend->size_of(name, d); }));
      n += b;
      return {};
    }));
    return n;
  }

  StoreStats stats() override {
    StoreStats out;
    {
      MutexLock l(m_mu);
      out = m_base;
    }
    m_meters.fill(out);
    return out;
  }
  RemoteStats remote_stats() override {
    MutexLock l(m_mu);
    return m_remote;
  }
  Status close() override { return {}; }
  [[nodiscard]] std::string name() const override { return "remote"; }
  [[nodiscard]] std::string server_for(const Key& key) const override { return shard(key).backend->id(); }

 private:
  static RemoteDeadline deadline_of(const Shard& s) { return RemoteClock::now() + s.backend->call_timeout(); }

  // Rendezvous (highest random weight) hashing: each backend scores the key;
  // the highest score owns it.
  [[nodiscard]] Shard& shard(const Key& key) const {
    std::size_t best = 0;
    std::uint64_t best_score = 0;
    for (std::size_t i = 0; i < m_shards.size() && m_shards.size() > 1; ++i) {
      const std::uint64_t score = xxh3_64(key.view(), m_shards[i]->id_hash);
      if (i == 0 || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    return *m_shards[best];
  }

  // One backend call through its breaker, counted.
  template <typename Fn>
  auto call(Shard& s, RemoteDeadline deadline, Fn&& fn) -> decltype(fn(deadline)) {
    if (!s.breaker.allows()) {
      MutexLock l(m_mu);
      ++m_remote.skipped;
      return unavailable("remote " + s.backend->id() + " skipped: circuit breaker open after repeated failures");
    }
    auto r = fn(deadline);
    Status st;
    if constexpr (std::is_same_v<decltype(r), Status>) {
      st = r;
    } else {
      st = r.status();
    }
    const bool tripped = s.breaker.record(st);
    if (!st.ok() && Breaker::is_outage(st)) {
      bool say = false;
      {
        MutexLock l(m_mu);
        if (st.code() == Code::permission_denied) {
          ++m_remote.refused;
          say = !s.refusal_said.exchange(true);
        } else {
          (st.code() == Code::deadline_exceeded ? m_remote.timeouts : m_remote.failures)++;
        }
        m_remote.last_error = st.message();  // backends' messages carry only redacted URLs
        if (tripped) ++m_remote.breaker_trips;
      }
      // A refusal is a setting to fix, not an outage to wait out: said once
      // per backend and process, so that it is not taken for misses.
      if (say) {
        std::fprintf(stderr, "progcache: warning: %s; until that is fixed, lookups there miss and writes are dropped\n",
                     st.message().c_str());
      }
    }
    return r;
  }

  // Visits every name on every backend, batch by batch. Each call has its
  // own deadline and the whole walk has `admin_timeout`: a backend whose
  // cursor never ends cannot keep stats, count or clear busy for ever.
  Status walk(const std::function<Status(Shard&, const std::string&, RemoteDeadline)>& per_name) {
    const auto walk_end = RemoteClock::now() + m_opt.admin_timeout;
    for (auto& sp : m_shards) {
      Shard& s = *sp;
      std::string cursor;
      do {
        if (RemoteClock::now() >= walk_end) {
          return deadline_exceeded("remote " + s.backend->id() + ": walking the keys did not finish within " +
                                   std::to_string(m_opt.admin_timeout.count()) + " ms");
        }
        std::vector<std::string> names;
        PROGCACHE_ASSIGN_OR_RETURN(cursor, call(s, std::min(deadline_of(s), walk_end),
                                                [&](RemoteDeadline d) { return s.backend->scan(cursor, &names, d); }));
        for (const auto& n : names) PROGCACHE_TRY(per_name(s, n, walk_end));
      } while (!cursor.empty());
    }
    return {};
  }

  const RemoteStoreOptions m_opt;
  std::vector<std::unique_ptr<Shard>> m_shards;
  Mutex m_mu;
  StoreStats m_base PROGCACHE_GUARDED_BY(m_mu);
  StoreMeters m_meters;
  RemoteStats m_remote PROGCACHE_GUARDED_BY(m_mu);
};

}  // namespace

Result<std::unique_ptr<RemoteStore>> make_remote_store(std::vector<std::unique_ptr<RemoteBackend>> backends,
                                                       const RemoteStoreOptions& options) {
  if (backends.empty()) return invalid_argument("a remote store needs at least one backend");
  for (const auto& b : backends) {
    if (b == nullptr) return invalid_argument("a remote store's backend is null");
  }
  return std::unique_ptr<RemoteStore>(std::make_unique<RemoteTier>(std::move(backends), options));
}

}  // namespace progcache
