// store/store_meters.h — what every store measures of its own calls in this
// process beyond the event counts: bytes served and taken, and the sampled
// time of lookups and puts (util/latency.h). Internal to the library.
//
// Thread safety: all members are safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "progcache/store.h"
#include "util/latency.h"

namespace progcache {

// The call sites that sample their time (sample_this_call<Site>).
enum SampleSite : int { memory_get, memory_put, file_get, file_put, remote_get, remote_put, tiered_get, tiered_put };

// Sets the sampled-time fields of `s` from two summaries.
inline void set_times(StoreStats& s, const LatencySummary& get, const LatencySummary& put) {
  s.get_samples = get.samples;
  s.get_p50_ns = get.p50_ns;
  s.get_p99_ns = get.p99_ns;
  s.put_samples = put.samples;
  s.put_p50_ns = put.p50_ns;
  s.put_p99_ns = put.p99_ns;
}

struct StoreMeters {
  std::atomic<std::uint64_t> bytes_read{0};
  std::atomic<std::uint64_t> bytes_written{0};
  LatencyHistogram get_time;
  LatencyHistogram put_time;

  void read(std::uint64_t n) { bytes_read.fetch_add(n, std::memory_order_relaxed); }
  void wrote(std::uint64_t n) { bytes_written.fetch_add(n, std::memory_order_relaxed); }

  // Sets the byte counts and time summaries of `s`.
  void fill(StoreStats& s) const {
    s.bytes_read = bytes_read.load(std::memory_order_relaxed);
    s.bytes_written = bytes_written.load(std::memory_order_relaxed);
    set_times(s, get_time.summary(), put_time.summary());
  }
};

}  // namespace progcache
