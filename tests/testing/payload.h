// Self-describing payloads for the multi-process tests and the stress
// harness: "<key id>:<writer>:<seq>:<len>:" + filler + 16 hex digits of
// XXH3-64 over the rest. A torn, stale-keyed or foreign read fails
// payload_ok().
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>

#include "progcache/hash.h"

namespace progcache::testing {

inline std::string checked_payload(int key_id, int writer, std::uint64_t seq, std::size_t filler) {
  std::string s = std::to_string(key_id) + ":" + std::to_string(writer) + ":" + std::to_string(seq) + ":" +
                  std::to_string(filler) + ":";
  std::mt19937 rng(static_cast<unsigned>(key_id * 1000003u + writer * 7919u + seq));
  for (std::size_t i = 0; i < filler; ++i) s.push_back(static_cast<char>('a' + rng() % 26));
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(xxh3_64(s)));
  return s + sum;
}

inline bool payload_ok(std::string_view p, int key_id) {
  if (p.size() < 16) return false;
  const std::string_view body = p.substr(0, p.size() - 16);
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(xxh3_64(body)));
  return p.substr(p.size() - 16) == sum && body.starts_with(std::to_string(key_id) + ":");
}

}  // namespace progcache::testing
