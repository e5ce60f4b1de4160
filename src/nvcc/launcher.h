// nvcc/launcher.h — progcache as nvcc's compiler launcher: `progcache nvcc
// ARGS...`, `progcache /path/to/nvcc ARGS...`, or a link named nvcc to
// progcache (CMAKE_CUDA_COMPILER_LAUNCHER=progcache). The entry points;
// the key scheme (manifest_key.h), the search order and the places a header
// would shadow (places.h), the manifests (manifest.h), the preprocessed
// text, the single flight (launcher_impl.h) and the counters (counters.h)
// are the other rooms of src/nvcc (docs/architecture.md). The tool's main()
// hands the words here before any parsing of its own. See docs/nvcc.md.
// Not public API.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "progcache/config.h"

namespace progcache::nvcc {

// Whether the first word starts a launcher call: "nvcc", or a path to a
// compiler (no subcommand holds a '/').
bool is_launcher_call(std::string_view first);
// Whether progcache was started under the name nvcc (argv[0]'s last
// component): a link named nvcc to it, as ccache's masquerade.
bool is_masquerade(std::string_view argv0);
// Runs argv[0] (nvcc, found as the shell finds it) with argv[1..] through
// the cache; returns the exit status nvcc's own run would have.
int run_launcher(int argc, char** argv);
// `progcache explain nvcc ARGS...`: whether the launcher would serve the
// command, and on a miss what differs; argv[0] is nvcc. Runs nothing.
int explain_launcher_command(int argc, char** argv);
// The launcher's counters in `root`, or null when it never ran there.
nlohmann::json launcher_stats_json(const std::string& root, Sharing sharing);
// Zeroes the launcher's counters of `root` (stats --zero), under the same
// trust rules as counting.
void zero_launcher_stats(const std::string& root, const Config& cfg);

}  // namespace progcache::nvcc
