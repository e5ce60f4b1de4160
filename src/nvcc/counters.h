// nvcc/counters.h — the nvcc launcher's counters: what each is called in
// <root>/nvcc/launcher-stats.json, in `progcache stats` (text, JSON) and in
// Prometheus's format. One table, read by the launcher that counts and by
// the commands that show and zero them, so a counter cannot be counted under
// one name and shown under another.
#pragma once

#include <array>
#include <string_view>

namespace progcache::nvcc {

// Counted once per launcher run that ends that way.
enum class Counter {
  hits,               // served from the store
  preprocessed_hits,  // of the hits, served by the preprocessed text
  relocated_hits,     // of the hits, served from another checkout (PROGCACHE_BASE_DIR)
  misses,             // nvcc compiled (the result stored or not)
  compile_failed,     // nvcc compiled and failed
  waited,             // waited for another process compiling the same command
};

// Counted by reason: the reason's class is the key under the counter.
enum class Tally {
  uncacheable,  // nvcc ran unchanged: the command cannot be cached
  not_stored,   // nvcc compiled; its result was not kept
  // Under a base directory (PROGCACHE_BASE_DIR): nvcc compiled, and its
  // result is not shared with other checkouts.
  not_relocated,
};

struct CounterInfo {
  Counter counter;
  std::string_view name;  // in the counters file, JSON and Prometheus
  std::string_view text;  // in `progcache stats`
};

inline constexpr std::array<CounterInfo, 6> k_counters = {{
    {Counter::hits, "hits", "hits"},
    {Counter::preprocessed_hits, "preprocessed_hits", "  by the text"},
    {Counter::relocated_hits, "relocated_hits", "  from another checkout"},
    {Counter::misses, "misses", "misses"},
    {Counter::compile_failed, "compile_failed", "compile failed"},
    {Counter::waited, "waited", "waited"},
}};

inline constexpr std::array<std::string_view, 3> k_tallies = {"uncacheable", "not_stored", "not_relocated"};

constexpr std::string_view counter_name(Counter c) {
  for (const auto& info : k_counters) {
    if (info.counter == c) return info.name;
  }
  return "unknown";
}

constexpr std::string_view tally_name(Tally t) {
  return k_tallies[static_cast<std::size_t>(t)];
}

}  // namespace progcache::nvcc
