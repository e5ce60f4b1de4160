// nvcc/counters_file.h — where the nvcc launcher counts (counters.h names
// the counters). Not public API.
#pragma once

#include <sys/types.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "nvcc/counters.h"
#include "progcache/config.h"

namespace progcache::nvcc {

// The launcher's store in a cache root, and its counters file there.
constexpr std::string_view k_store = "nvcc";
constexpr std::string_view k_stats_file = "launcher-stats.json";

// Where the counters live and who may have written them: a regular file in
// the root's nvcc store, which the file store has accepted.
struct StatsFile {
  std::string path;
  progcache::Sharing sharing = progcache::Sharing::private_only;
  gid_t group = 0;  // the store directory's group (group sharing)
};

// Adds one to each of `counters`, or to `tally`'s count of `reason` (its
// quoted names left out, so that reasons count together), in one locked
// read and write of the counters file; best effort, never a wait on a
// file someone else controls.
void count(const StatsFile& where, std::initializer_list<Counter> counters);
void count(const StatsFile& where, Tally tally, const std::string& reason);

}  // namespace progcache::nvcc
