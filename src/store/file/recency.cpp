#include "store/file/recency.h"

#include <array>
#include <atomic>
#include <bit>
#include <cstring>

#include "store/file/mapped_file.h"
#include "util/mapped_access.h"

namespace progcache::file_store {

namespace {

// A key not read for this long may lose its slot to another (its time goes
// to its file's atime); a time this far ahead of the clock is no evidence
// of use either.
constexpr std::int64_t k_idle_ns = std::int64_t{60} * 1'000'000'000;
constexpr std::size_t k_ways = RecencyTable::k_ways;
constexpr std::size_t k_groups = RecencyTable::k_slots / k_ways;
static_assert(std::has_single_bit(k_groups));

// A slot's state word: the low two bits say what it holds, the rest count
// its changes of key, so a reader that compared a key while the slot changed
// hands sees a different word after and does not trust what it read.
constexpr std::uint64_t k_empty = 0;
constexpr std::uint64_t k_busy = 1;
constexpr std::uint64_t k_owned = 2;
constexpr std::uint64_t k_junk = 3;  // no state progcache writes (a damaged table): free
constexpr std::uint64_t k_status_mask = 3;
constexpr std::uint64_t k_generation_step = 4;

std::uint64_t load(std::uint64_t& w, std::memory_order o = std::memory_order_relaxed) {
  return std::atomic_ref<std::uint64_t>(w).load(o);
}
void store(std::uint64_t& w, std::uint64_t v, std::memory_order o = std::memory_order_relaxed) {
  std::atomic_ref<std::uint64_t>(w).store(v, o);
}
bool claim(std::uint64_t& w, std::uint64_t expected) {
  return std::atomic_ref<std::uint64_t>(w).compare_exchange_strong(
      expected, (expected & ~k_status_mask) | k_busy, std::memory_order_acquire, std::memory_order_relaxed);
}

std::array<std::uint64_t, 4> words_of(const Key& key) {
  std::array<std::uint64_t, 4> w{};
  std::memcpy(w.data(), key.bytes.data(), sizeof w);
  return w;
}

}  // namespace

Status RecencyTable::open(Env* env, const std::string& path, std::uint32_t file_perms) {
  close();
  PROGCACHE_ASSIGN_OR_RETURN(int fd, env->open_file(path, OpenMode::read_write, file_perms));
  // Every process sizes the file the same way, so no lock is needed: a
  // file made longer by zeros is a table with more empty slots.
  Status st = [&]() -> Status {
    PROGCACHE_ASSIGN_OR_RETURN(FileInfo info, env->fstat(fd));
    if (!info.is_regular()) return failed_precondition("'" + path + "' is not a regular file");
    if (info.size < k_file_size) PROGCACHE_TRY(env->ftruncate(fd, k_file_size));
    PROGCACHE_TRY(env->allocate(fd, k_file_size));
    PROGCACHE_ASSIGN_OR_RETURN(void* p, env->map_shared(fd, k_file_size));
    m_slots = static_cast<Slot*>(p);
    return {};
  }();
  if (!st.ok()) {
    env->close_file(fd).ignore();
    return st;
  }
  m_env = env;
  m_fd = fd;
  return {};
}

void RecencyTable::close() {
  if (m_slots != nullptr) m_env->unmap(m_slots, k_file_size);
  if (m_fd >= 0) m_env->close_file(m_fd).ignore();
  m_slots = nullptr;
  m_fd = -1;
  m_faulted.store(false, std::memory_order_relaxed);
  m_next_heal_ns.store(0, std::memory_order_relaxed);
}

// Keys are digests, but callers' test keys may differ in any one word:
// every word takes part.
std::size_t RecencyTable::group_of(const Key& key) {
  const auto w = words_of(key);
  const std::uint64_t mix = w[0] ^ std::rotl(w[1], 17) ^ std::rotl(w[2], 31) ^ std::rotl(w[3], 47);
  return static_cast<std::size_t>((mix * 0x9E3779B97F4A7C15ULL) >> (64 - std::countr_zero(k_groups)));
}

// A displaced record is emplaced only once every word of it was read, so
// it stands when a later access of the same call faults.
bool RecencyTable::record(const Key& key, std::int64_t now_ns, std::optional<Displaced>* displaced) {
  if (m_slots == nullptr || (m_faulted.load(std::memory_order_relaxed) && !heal())) return false;
  bool recorded = false;
  if (detail::guarded([&] { recorded = record_mapped(key, now_ns, displaced); })) return recorded;
  m_faulted.store(true, std::memory_order_relaxed);
  return false;
}

void RecencyTable::forget(const Key& key) {
  if (m_slots == nullptr || (m_faulted.load(std::memory_order_relaxed) && !heal())) return;
  if (!detail::guarded([&] { forget_mapped(key); })) m_faulted.store(true, std::memory_order_relaxed);
}

std::int64_t RecencyTable::last_read(const Key& key) const {
  if (m_slots == nullptr || (m_faulted.load(std::memory_order_relaxed) && !heal())) return 0;
  std::int64_t read = 0;
  if (detail::guarded([&] { read = last_read_mapped(key); })) return read;
  m_faulted.store(true, std::memory_order_relaxed);
  return 0;
}

bool RecencyTable::heal() const {
  if (!extend_cut_file(m_env, m_fd, k_file_size, m_next_heal_ns)) return false;
  m_faulted.store(false, std::memory_order_relaxed);
  return true;
}

bool RecencyTable::record_mapped(const Key& key, std::int64_t now_ns, std::optional<Displaced>* displaced) {
  const auto want = words_of(key);
  Slot* group = m_slots + group_of(key) * k_ways;
  const auto holds = [&](Slot& s, std::uint64_t state) {
    for (std::size_t i = 0; i < 4; ++i) {
      if (load(s.key[i]) != want[i]) return false;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    return load(s.state) == state;
  };
  std::uint64_t states[k_ways];
  for (std::size_t i = 0; i < k_ways; ++i) {
    Slot& s = group[i];
    states[i] = load(s.state, std::memory_order_acquire);
    if ((states[i] & k_status_mask) == k_owned && holds(s, states[i])) {
      store(s.read_ns, static_cast<std::uint64_t>(now_ns));
      return true;
    }
  }
  // Not held: an empty slot, else the one idle longest (a minute at least).
  int pick = -1;
  std::int64_t pick_read = 0;
  for (std::size_t i = 0; i < k_ways; ++i) {
    const std::uint64_t status = states[i] & k_status_mask;
    if (status == k_empty || status == k_junk) {
      pick = static_cast<int>(i);
      break;
    }
    if (status != k_owned) continue;
    const auto read = static_cast<std::int64_t>(load(group[i].read_ns));
    const bool idle = read < now_ns - k_idle_ns || read > now_ns + k_idle_ns;
    if (idle && (pick < 0 || read < pick_read)) {
      pick = static_cast<int>(i);
      pick_read = read;
    }
  }
  if (pick < 0) return false;
  Slot& s = group[pick];
  if (!claim(s.state, states[pick])) return false;  // another process took it first
  std::atomic_thread_fence(std::memory_order_release);
  if ((states[pick] & k_status_mask) == k_owned && displaced != nullptr) {
    Displaced d;
    for (std::size_t i = 0; i < 4; ++i) {
      const std::uint64_t w = load(s.key[i]);
      std::memcpy(d.key.bytes.data() + i * 8, &w, 8);
    }
    d.read_ns = static_cast<std::int64_t>(load(s.read_ns));
    displaced->emplace(d);
  }
  for (std::size_t i = 0; i < 4; ++i) store(s.key[i], want[i]);
  store(s.read_ns, static_cast<std::uint64_t>(now_ns));
  store(s.state, (states[pick] & ~k_status_mask) + k_generation_step + k_owned, std::memory_order_release);
  return true;
}

void RecencyTable::forget_mapped(const Key& key) {
  const auto want = words_of(key);
  Slot* group = m_slots + group_of(key) * k_ways;
  for (std::size_t i = 0; i < k_ways; ++i) {
    Slot& s = group[i];
    const std::uint64_t state = load(s.state, std::memory_order_acquire);
    if ((state & k_status_mask) != k_owned) continue;
    bool same = true;
    for (std::size_t w = 0; w < 4; ++w) same = same && load(s.key[w]) == want[w];
    std::atomic_thread_fence(std::memory_order_acquire);
    // Claimed only as it was when compared: a slot that changed hands since
    // is left to its new key.
    if (!same || !claim(s.state, state)) continue;
    store(s.state, (state & ~k_status_mask) + k_generation_step + k_empty, std::memory_order_release);
  }
}

std::int64_t RecencyTable::last_read_mapped(const Key& key) const {
  const auto want = words_of(key);
  Slot* group = m_slots + group_of(key) * k_ways;
  for (std::size_t i = 0; i < k_ways; ++i) {
    Slot& s = group[i];
    const std::uint64_t state = load(s.state, std::memory_order_acquire);
    if ((state & k_status_mask) != k_owned) continue;
    bool same = true;
    for (std::size_t w = 0; w < 4; ++w) same = same && load(s.key[w]) == want[w];
    const auto read = static_cast<std::int64_t>(load(s.read_ns));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (same && load(s.state) == state) return read;
  }
  return 0;
}

}  // namespace progcache::file_store
