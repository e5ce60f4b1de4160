// The progcache command-line tool: what its files share.
//
// main.cpp declares the global options, turns ccache's flags (-s, -z, -C,
// -p, -V, -M) into the commands they name, and dispatches; each command group
// lives in its own file (cmd_entry.cpp: put, get, rm; cmd_admin.cpp: ls,
// stats, verify, prune, clear, config; cmd_compile.cpp: compile;
// cmd_bundle.cpp: export, import; cmd_explain.cpp: explain; cmd_nvcc.cpp: the
// nvcc launcher's help, the launcher being the library's: src/nvcc) and the
// helpers they share (configuration, stores, keys, inputs and outputs) in
// common.cpp. The tool decides nothing the library decides: settings come
// from resolve_config, keys from key_from_user, stores from the library's
// factories.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nvcc/launcher.h"
#include "progcache/compile.h"
#include "progcache/config.h"
#include "progcache/file_store.h"
#include "progcache/store.h"
#include "progress.h"
#include "util/user_io.h"

namespace progcache::cli {

namespace pc = progcache;
using nlohmann::json;

// The global options, which may also follow the subcommand.
struct Globals {
  std::string dir;
  std::string max_size;
  std::string remote;
  bool have_dir = false;
};

// One subcommand as declared by its group: `run` is called with the
// resolved configuration and the words the parser did not take (only
// commands with `takes_extras` accept any).
struct Command {
  CLI::App* sub = nullptr;
  std::function<int(const pc::Config&, const std::vector<std::string>& extras)> run;
  bool takes_extras = false;
};

void add_entry_commands(CLI::App& app, std::vector<Command>& out);
void add_admin_commands(CLI::App& app, std::vector<Command>& out);
void add_compile_command(CLI::App& app, std::vector<Command>& out);
void add_bundle_commands(CLI::App& app, std::vector<Command>& out);
void add_explain_command(CLI::App& app, std::vector<Command>& out);
void add_nvcc_command(CLI::App& app, std::vector<Command>& out);

// ---- the nvcc launcher: src/nvcc/launcher.h
using nvcc::explain_launcher_command;
using nvcc::is_launcher_call;
using nvcc::is_masquerade;
using nvcc::launcher_stats_json;
using nvcc::run_launcher;
using nvcc::zero_launcher_stats;

// What an entry is and its name, in words a person recognises, from the
// kind and name its writer recorded and the store it is in (cmd_admin.cpp):
// what `ls --long` shows and `export --name` matches.
std::pair<std::string, std::string> describe_entry(const std::string& store, std::string kind, std::string name);
// ---- cmd_compile.cpp, shared with explain

// The words after `compile` or `explain`: input files, and compiler options
// passed through (each with its value); -arch in any spelling sets `arch`.
struct CompileWords {
  std::vector<std::string> files;
  std::vector<std::string> opts;
  std::string arch;
};
pc::Result<CompileWords> split_words(const std::vector<std::string>& extras, std::string arch);
// A usage error naming `command` for a missing or malformed --arch.
pc::Status check_arch(const std::string& command, const std::string& arch);
// One input file as a Program: its code type from the extension, its path
// as the program name (as nvcc: NVRTC looks for quoted includes in the
// program's directory, and __FILE__ names it).
pc::Status load_program(const std::string& f, const std::vector<std::string>& opts,
                        const std::vector<std::string>& name_exprs, pc::Program* p);

// ---- common.cpp

pc::Result<pc::Key> parse_key(const std::string& text, bool as_string);
// Adds the --string flag that makes KEY always a hashed string.
void add_string_flag(CLI::App* sub, bool& string_key);
// The configuration for a command; `strict_files`: a settings file that
// cannot be used is an error (exit 2) rather than skipped with a warning.
pc::Result<pc::Config> load_config(const Globals& g, bool strict_files = true);
pc::Result<std::unique_ptr<pc::FileStore>> open_store(const pc::Config& c);
// Whether the configured cache directory exists (nothing is made by asking).
bool cache_dir_exists(const pc::Config& c);
pc::Result<std::unique_ptr<pc::Store>> open_data_store(const pc::Config& c, bool for_reading = false);
void warn_remote(pc::Store* store);
std::string format_time(std::int64_t ns);
// A duration given to `option` (7d, 12h); a bare number is a usage error, as
// in ccache (30 what?).
pc::Result<std::int64_t> parse_age(const std::string& option, const std::string& text);
// A progress line on stderr when it is a terminal (tools/progcache/progress.h);
// an empty function otherwise.
pc::ProgressFn progress_bar(const char* label, ProgressUnit unit);
pc::Result<std::string> read_file(const std::string& path);
pc::Status check_output_path(const std::string& path);
// Writes `data` to `path` through one OutputFile.
pc::Status write_output(const std::string& path, std::string_view data);
// One disk store of the cache root: its own ("programs") or a companion.
struct NamedFileStore {
  std::string name;
  std::unique_ptr<pc::FileStore> store;
};
using Stores = std::vector<NamedFileStore>;
// The root's own store, then each companion store that exists (nothing is
// made by looking; none at all when the cache directory does not exist).
pc::Result<Stores> open_stores(const pc::Config& cfg);
// StoreStats as JSON and as aligned text, from store_stat_fields().
json stats_json(const pc::StoreStats& s);
// One store's statistics, a line per field (the cap is the root's, shown
// once above the stores). `reads`: the store's lookups are another
// component's reads (the nvcc launcher's manifests and results), shown as
// reads with no hit rate of their own.
enum class StoreLookups { lookups, reads };
void print_stats_text(const pc::StoreStats& s, StoreLookups lookups = StoreLookups::lookups);

}  // namespace progcache::cli
