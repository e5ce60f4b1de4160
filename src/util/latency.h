// util/latency.h — how long store calls take, cheaply enough for a 30 ns
// memory hit: a call is timed only when sampled (one call in
// k_sample_every, counted per thread, so no shared counter is touched to
// decide; the first call of each thread too), and its duration lands in a log-linear histogram (four buckets
// per power of two, so a percentile read from it is within 12.5 % of the
// truth) of relaxed atomic counts. The same bucket layout is used for the
// host-wide histograms of a file store's mapped accounting file.
//
// Thread safety: record() and the readers are safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>

namespace progcache {

inline constexpr int k_latency_buckets = 160;
inline constexpr std::uint32_t k_sample_every = 16;

// The bucket of a duration: 0 for under 16 ns, then four per power of two,
// the last holding everything from about 73 minutes up.
inline int latency_bucket(std::uint64_t ns) {
  if (ns < 16) return 0;
  const int k = 63 - __builtin_clzll(ns);  // 2^k <= ns < 2^(k+1), k >= 4
  const int sub = static_cast<int>((ns >> (k - 2)) & 3);
  const int b = 1 + (k - 4) * 4 + sub;
  return b < k_latency_buckets ? b : k_latency_buckets - 1;
}

// The middle of a bucket's range, in nanoseconds.
std::uint64_t latency_bucket_middle(int bucket);

struct LatencySummary {
  std::uint64_t samples = 0;
  std::uint64_t p50_ns = 0;
  std::uint64_t p99_ns = 0;
};
// The percentiles of bucket counts (k_latency_buckets of them).
LatencySummary summarize_latency(std::span<const std::uint64_t> counts);

// Whether this call is one to time: the first of the thread (so a process
// that makes one lookup, as a CLI run does, still reports its time) and
// every k_sample_every-th after it.
// Each call site counts apart (`Site`: any constant of the caller's), so a
// process's first put is timed after any number of lookups, and a call that
// makes others (a tiered store's lookup makes its tiers') never keeps them
// from being sampled by falling on the same count.
template <int Site>
inline bool sample_this_call() {
  thread_local std::uint32_t calls = 0;
  return calls++ % k_sample_every == 0;
}

inline std::uint64_t now_ns_steady() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

class LatencyHistogram {
 public:
  void record(std::uint64_t ns) { m_counts[latency_bucket(ns)].fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] LatencySummary summary() const;
  void reset();

 private:
  std::atomic<std::uint64_t> m_counts[k_latency_buckets] = {};
};

// Times a call when it is sampled: construct at the start, finish() (or
// let it go) at the end. Unsampled calls read no clock.
class SampledTimer {
 public:
  // `sampled`: sample_this_call<Site>() of the call site.
  explicit SampledTimer(bool sampled) : m_start(sampled ? now_ns_steady() : 0) {}
  // Records into `h` (once) if this call was sampled.
  void finish(LatencyHistogram& h) {
    if (m_start != 0) h.record(now_ns_steady() - m_start);
    m_start = 0;
  }
  // The elapsed time if sampled, else nullopt-like 0 (the caller records it
  // where it wants, such as a shared histogram).
  [[nodiscard]] bool sampled() const { return m_start != 0; }
  [[nodiscard]] std::uint64_t elapsed() const { return m_start != 0 ? now_ns_steady() - m_start : 0; }

 private:
  std::uint64_t m_start;
};

}  // namespace progcache
