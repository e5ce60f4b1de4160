// `progcache nvcc`: the subcommand's help. The launcher itself (its key
// scheme, manifests, counters and runs of nvcc) is the library's:
// src/nvcc/launcher.h; main() hands it the words before any parsing.
#include "cli.h"

namespace progcache::cli {

void add_nvcc_command(CLI::App& app, std::vector<Command>& out) {
  auto* sub =
      app.add_subcommand("nvcc",
                         "Run nvcc through the cache: 'progcache nvcc ARGS...' or 'progcache /path/to/nvcc ARGS...'\n"
                         "(CMAKE_CUDA_COMPILER_LAUNCHER=progcache). One .cu file compiled to one output\n"
                         "(-c, -dc, -cubin, -ptx, -fatbin, -optix-ir, -ltoir) is served from the root's nvcc\n"
                         "store when every file nvcc read is unchanged; anything else runs nvcc unchanged.\n"
                         "nvcc's output and exit status are its own; 'progcache stats' counts hits, misses\n"
                         "and uncacheable commands by reason. See docs/nvcc.md.");
  // Reached only when an option of progcache's came first (`progcache --dir D
  // nvcc ...`): main() hands `progcache nvcc ...` to the launcher untouched.
  out.push_back({sub,
                 [](const pc::Config&, const std::vector<std::string>&) {
                   std::fprintf(stderr,
                                "progcache: 'nvcc' must be the first word: every word after it is nvcc's (set the "
                                "cache root with PROGCACHE_DIR)\n");
                   return k_exit_usage;
                 },
                 true});
}

}  // namespace progcache::cli
