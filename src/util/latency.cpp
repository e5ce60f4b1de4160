#include "util/latency.h"

namespace progcache {

std::uint64_t latency_bucket_middle(int bucket) {
  if (bucket <= 0) return 8;
  const int k = 4 + (bucket - 1) / 4;
  const int sub = (bucket - 1) % 4;
  const std::uint64_t width = std::uint64_t{1} << (k - 2);
  const std::uint64_t low = (std::uint64_t{1} << k) + static_cast<std::uint64_t>(sub) * width;
  return low + width / 2;
}

LatencySummary summarize_latency(std::span<const std::uint64_t> counts) {
  LatencySummary s;
  for (const std::uint64_t c : counts) s.samples += c;
  if (s.samples == 0) return s;
  // The smallest bucket by which at least q of the samples have been seen.
  auto at = [&](std::uint64_t need) {
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < counts.size(); ++b) {
      seen += counts[b];
      if (seen >= need) return latency_bucket_middle(static_cast<int>(b));
    }
    return latency_bucket_middle(static_cast<int>(counts.size()) - 1);
  };
  s.p50_ns = at((s.samples + 1) / 2);
  s.p99_ns = at(s.samples - s.samples / 100);
  return s;
}

LatencySummary LatencyHistogram::summary() const {
  std::uint64_t counts[k_latency_buckets];
  for (int i = 0; i < k_latency_buckets; ++i) counts[i] = m_counts[i].load(std::memory_order_relaxed);
  return summarize_latency(counts);
}

void LatencyHistogram::reset() {
  for (auto& c : m_counts) c.store(0, std::memory_order_relaxed);
}

}  // namespace progcache
