#include "store/file/accounting.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "store/file/mapped_file.h"
#include "util/mapped_access.h"

namespace progcache::file_store {

namespace {

constexpr std::uint64_t k_magic = 0x31544e43434350ULL;  // "PCCCNT1"
constexpr std::uint64_t k_version = 1;
constexpr std::size_t k_file_size = 8192;
// How long an open waits for the initialisation lock of a file nobody has
// initialised yet (a rebuild from the files of a large store takes seconds).
constexpr std::int64_t k_lock_wait_ns = 20'000'000'000;
constexpr int k_events = 7;

std::int64_t atomic_add(std::int64_t& field, std::int64_t delta) {
  return std::atomic_ref<std::int64_t>(field).fetch_add(delta, std::memory_order_relaxed) + delta;
}
std::int64_t atomic_load(std::int64_t& field) {
  return std::atomic_ref<std::int64_t>(field).load(std::memory_order_relaxed);
}
void atomic_store(std::int64_t& field, std::int64_t v) {
  std::atomic_ref<std::int64_t>(field).store(v, std::memory_order_relaxed);
}
std::uint64_t clamp0(std::int64_t v) {
  return v < 0 ? 0 : static_cast<std::uint64_t>(v);
}

}  // namespace

// Runs `f` on the mapping unless it is closed. An access that met the file
// cut short under it (another writer of the store truncated it) leaves the
// accounting acting as closed until a later call extends the file back, at
// most once a second; the counters it lost are zeros then, which the next
// process to open the store rebuilds (the magic is gone) and maintenance
// reconciles. false: `f` did not run to its end.
template <typename F>
bool Accounting::touch(F&& f) const {
  Shared* const m = m_map;
  if (m == nullptr || (m_faulted.load(std::memory_order_relaxed) && !heal())) return false;
  if (detail::guarded([&] { f(m); })) return true;
  m_faulted.store(true, std::memory_order_relaxed);
  return false;
}

bool Accounting::heal() const {
  if (!extend_cut_file(m_env, m_fd, k_file_size, m_next_heal_ns)) return false;
  m_faulted.store(false, std::memory_order_relaxed);
  return true;
}

// Offset 0 of the file. The layout is the on-disk format: fields are only
// ever appended, and k_version changes when one changes meaning.
struct Accounting::Shared {
  std::int64_t magic;
  std::int64_t version;
  std::int64_t pad0[6];
  struct ShardCounters {
    std::int64_t bytes;
    std::int64_t count;
  } shards[k_shards];
  std::int64_t retired_total_bytes;  // totals are now sums of the shards
  std::int64_t retired_total_count;
  std::int64_t events[k_events];  // indexed by Event
  // Appended (zero in files written before): bytes of hits and puts, and
  // sampled durations of lookups and puts in util/latency.h's buckets.
  std::int64_t bytes_read;
  std::int64_t bytes_written;
  std::int64_t get_time[k_latency_buckets];
  std::int64_t put_time[k_latency_buckets];
};

Status Accounting::open(Env* env, const std::string& path, std::uint32_t file_perms, const Rebuild& rebuild) {
  m_env = env;
  m_path = path;
  PROGCACHE_ASSIGN_OR_RETURN(m_fd, m_env->open_file(path, OpenMode::read_write, file_perms));
  // The lock guards only the file's initialisation. Anyone who can open the
  // file can hold it (in a group-shared root, any member), so it is never
  // waited on without bound: a file already initialised is used as it is,
  // and past the deadline the store does not open (a miss for the caller,
  // never a hang).
  const std::int64_t deadline = m_env->now_ns() + k_lock_wait_ns;
  for (;;) {
    PROGCACHE_ASSIGN_OR_RETURN(bool locked, m_env->lock(m_fd, LockKind::exclusive, LockWait::try_only));
    if (locked) break;
    if (map_if_initialised()) return {};
    if (m_env->now_ns() > deadline) {
      return unavailable("the accounting file '" + m_path + "' is held locked by another process and was never " +
                         "initialised; not using the store");
    }
    ::usleep(10'000);
  }
  Status st = init_locked(rebuild);
  m_env->unlock(m_fd).ignore();
  return st;
}

Status Accounting::open_initialised(Env* env, const std::string& path, std::uint32_t file_perms) {
  m_env = env;
  m_path = path;
  PROGCACHE_ASSIGN_OR_RETURN(m_fd, m_env->open_file(path, OpenMode::read_write, file_perms));
  if (map_if_initialised()) return {};
  return unavailable("the accounting file '" + m_path + "' is not initialised");
}

std::pair<std::uint64_t, std::uint64_t> Accounting::identity() const {
  if (m_fd < 0 || m_env == nullptr) return {0, 0};
  auto info = m_env->fstat(m_fd);
  return info.ok() ? std::pair{info->dev, info->ino} : std::pair<std::uint64_t, std::uint64_t>{0, 0};
}

bool Accounting::map_if_initialised() {
  auto info = m_env->fstat(m_fd);
  if (!info.ok() || info->size < k_file_size) return false;
  auto p = m_env->map_shared(m_fd, k_file_size);
  if (!p.ok()) return false;
  auto* map = static_cast<Shared*>(*p);
  bool initialised = false;
  const bool read = detail::guarded([&] {
    initialised = atomic_load(map->magic) == static_cast<std::int64_t>(k_magic) &&
                  atomic_load(map->version) == static_cast<std::int64_t>(k_version);
  });
  if (read && initialised) {
    m_map = map;
    return true;
  }
  m_env->unmap(map, k_file_size);
  return false;
}

Status Accounting::init_locked(const Rebuild& rebuild) {
  static_assert(sizeof(Shared) <= k_file_size);
  PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, m_env->fstat(m_fd));
  if (info.size < k_file_size) PROGCACHE_TRY(m_env->ftruncate(m_fd, k_file_size));
  // Done on every open (free when the blocks exist): a file left sparse by a
  // crash or an older version is filled in too.
  if (Status st = m_env->allocate(m_fd, k_file_size); !st.ok()) {
    return Status(st.code(), "cannot reserve disk space for the accounting file '" + m_path +
                                 "' (is the disk full?): " + st.message());
  }
  PROGCACHE_ASSIGN_OR_RETURN(void* p, m_env->map_shared(m_fd, k_file_size));
  m_map = static_cast<Shared*>(p);
  const auto cut_short = [&] {
    return unavailable("the accounting file '" + m_path + "' was cut short while it was opened");
  };
  // A file shorter than the layout was truncated (or is new): whatever its
  // first words say, the counters past the cut are zeros, not truth.
  const bool truncated = info.size < k_file_size;
  bool initialised = false;
  if (!touch([&](Shared* m) {
        initialised = atomic_load(m->magic) == static_cast<std::int64_t>(k_magic) &&
                      atomic_load(m->version) == static_cast<std::int64_t>(k_version);
      })) {
    return cut_short();
  }
  if (!truncated && initialised) return {};
  // New or damaged: rebuild from the files, then publish the magic last so a
  // crash part-way leaves the next opener to rebuild again.
  if (!touch([](Shared* m) { std::memset(static_cast<void*>(m), 0, sizeof(Shared)); })) return cut_short();
  PROGCACHE_TRY(rebuild());
  if (!touch([](Shared* m) {
        atomic_store(m->version, static_cast<std::int64_t>(k_version));
        atomic_store(m->magic, static_cast<std::int64_t>(k_magic));
      })) {
    return cut_short();
  }
  return {};
}

void Accounting::close() {
  if (m_map != nullptr) m_env->unmap(m_map, k_file_size);
  m_map = nullptr;
  m_faulted.store(false, std::memory_order_relaxed);
  m_next_heal_ns.store(0, std::memory_order_relaxed);
  if (m_fd >= 0) m_env->close_file(m_fd).ignore();
  m_fd = -1;
}

void Accounting::count(Event e) {
  const auto i = static_cast<int>(e);
  m_events[i].fetch_add(1, std::memory_order_relaxed);
  touch([&](Shared* m) { atomic_add(m->events[i], 1); });
}

void Accounting::uncount_miss() {
  const auto i = static_cast<int>(Event::miss);
  std::uint64_t mine = m_events[i].load(std::memory_order_relaxed);
  while (mine > 0 && !m_events[i].compare_exchange_weak(mine, mine - 1, std::memory_order_relaxed)) {
  }
  uncount_host_miss();
}

void Accounting::count_host(Event e) {
  touch([&](Shared* m) { atomic_add(m->events[static_cast<int>(e)], 1); });
}

void Accounting::uncount_host_miss() {
  // Not below zero: a `stats --zero` between the miss and now took it already.
  touch([](Shared* m) {
    std::atomic_ref<std::int64_t> host(m->events[static_cast<int>(Event::miss)]);
    std::int64_t v = host.load(std::memory_order_relaxed);
    while (v > 0 && !host.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
    }
  });
}

void Accounting::read(std::uint64_t n) {
  m_meters.read(n);
  touch([&](Shared* m) { atomic_add(m->bytes_read, static_cast<std::int64_t>(n)); });
}

void Accounting::wrote(std::uint64_t n) {
  m_meters.wrote(n);
  touch([&](Shared* m) { atomic_add(m->bytes_written, static_cast<std::int64_t>(n)); });
}

void Accounting::finish_get(SampledTimer& t) {
  if (!t.sampled()) return;
  const std::uint64_t ns = t.elapsed();
  m_meters.get_time.record(ns);
  touch([&](Shared* m) { atomic_add(m->get_time[latency_bucket(ns)], 1); });
}

void Accounting::finish_put(SampledTimer& t) {
  if (!t.sampled()) return;
  const std::uint64_t ns = t.elapsed();
  m_meters.put_time.record(ns);
  touch([&](Shared* m) { atomic_add(m->put_time[latency_bucket(ns)], 1); });
}

void Accounting::zero() {
  touch([](Shared* m) {
    for (auto& e : m->events) atomic_store(e, 0);
    atomic_store(m->bytes_read, 0);
    atomic_store(m->bytes_written, 0);
    for (auto& b : m->get_time) atomic_store(b, 0);
    for (auto& b : m->put_time) atomic_store(b, 0);
  });
}

void Accounting::charge(int shard, std::int64_t dbytes, std::int64_t dcount) {
  touch([&](Shared* m) {
    atomic_add(m->shards[shard].bytes, dbytes);
    atomic_add(m->shards[shard].count, dcount);
  });
}

void Accounting::reconcile(int shard, std::int64_t bytes, std::int64_t count) {
  touch([&](Shared* m) {
    atomic_store(m->shards[shard].bytes, bytes);
    atomic_store(m->shards[shard].count, count);
  });
}

// A counter slightly below zero is not damage either: a remover can charge
// an entry before the put that published it has charged it (the put charges
// after its rename). Resetting such a shard to a listing would then let the
// late charge count a file that is gone.
bool Accounting::grossly_off(int shard, std::int64_t bytes, std::int64_t count) const {
  const std::int64_t counted_bytes = shard_bytes(shard);
  const std::int64_t counted = shard_count(shard);
  return std::abs(counted - count) > 8 + count / 4 ||
         std::abs(counted_bytes - bytes) > bytes / 4 + (std::int64_t{4} << 20);
}

std::int64_t Accounting::shard_bytes(int shard) const {
  std::int64_t v = 0;
  touch([&](Shared* m) { v = atomic_load(m->shards[shard].bytes); });
  return v;
}

std::int64_t Accounting::shard_count(int shard) const {
  std::int64_t v = 0;
  touch([&](Shared* m) { v = atomic_load(m->shards[shard].count); });
  return v;
}

std::int64_t Accounting::total_bytes() const {
  std::int64_t sum = 0;
  touch([&](Shared* m) {
    for (auto& s : m->shards) sum += std::max<std::int64_t>(0, atomic_load(s.bytes));
  });
  return sum;
}

std::int64_t Accounting::total_count() const {
  std::int64_t sum = 0;
  touch([&](Shared* m) {
    for (auto& s : m->shards) sum += std::max<std::int64_t>(0, atomic_load(s.count));
  });
  return sum;
}

namespace {
StoreStats from_events(const std::uint64_t (&v)[k_events]) {
  StoreStats s;
  s.hits = v[static_cast<int>(Event::hit)];
  s.misses = v[static_cast<int>(Event::miss)];
  s.puts = v[static_cast<int>(Event::put)];
  s.evictions = v[static_cast<int>(Event::eviction)];
  s.corrupt_dropped = v[static_cast<int>(Event::corrupt)];
  s.rejected = v[static_cast<int>(Event::rejected)];
  s.errors = v[static_cast<int>(Event::error)];
  return s;
}
}  // namespace

StoreStats Accounting::process_stats() const {
  std::uint64_t v[k_events];
  for (int i = 0; i < k_events; ++i) v[i] = m_events[i].load(std::memory_order_relaxed);
  StoreStats s = from_events(v);
  if (m_map != nullptr && !m_faulted.load(std::memory_order_relaxed)) {
    s.bytes_stored = clamp0(total_bytes());
    s.entries = clamp0(total_count());
  }
  m_meters.fill(s);
  return s;
}

StoreStats Accounting::host_stats() const {
  std::uint64_t v[k_events] = {};
  std::uint64_t gets[k_latency_buckets] = {};
  std::uint64_t puts[k_latency_buckets] = {};
  std::int64_t bytes_read = 0;
  std::int64_t bytes_written = 0;
  const bool mapped = touch([&](Shared* m) {
    for (int i = 0; i < k_events; ++i) v[i] = clamp0(atomic_load(m->events[i]));
    bytes_read = atomic_load(m->bytes_read);
    bytes_written = atomic_load(m->bytes_written);
    for (int i = 0; i < k_latency_buckets; ++i) gets[i] = clamp0(atomic_load(m->get_time[i]));
    for (int i = 0; i < k_latency_buckets; ++i) puts[i] = clamp0(atomic_load(m->put_time[i]));
  });
  if (!mapped) return {};
  StoreStats s = from_events(v);
  s.bytes_stored = clamp0(total_bytes());
  s.entries = clamp0(total_count());
  s.bytes_read = clamp0(bytes_read);
  s.bytes_written = clamp0(bytes_written);
  set_times(s, summarize_latency(gets), summarize_latency(puts));
  return s;
}

}  // namespace progcache::file_store
