// The progcache command-line tool: what its files share.
//
// main.cpp declares the global options, turns ccache's flags (-s, -z, -C,
// -p, -V, -M) into the commands they name, and dispatches; each command group
// lives in its own file (cmd_entry.cpp: put, get, rm; cmd_admin.cpp: ls,
// stats, verify, prune, clear, config; cmd_compile.cpp: compile;
// cmd_bundle.cpp: export, import; cmd_explain.cpp: explain; cmd_nvcc.cpp: the
// nvcc launcher) and the
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

#include "progcache/compile.h"
#include "progcache/config.h"
#include "progcache/file_store.h"
#include "progcache/store.h"
#include "progress.h"

namespace progcache::cli {

namespace pc = progcache;
using nlohmann::json;

// Exit codes: 0 ok, 1 miss (or key absent), 2 usage error, 3 any other error.
constexpr int k_exit_ok = 0;
constexpr int k_exit_miss = 1;
constexpr int k_exit_usage = 2;
constexpr int k_exit_error = 3;

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

// ---- cmd_nvcc.cpp: the compiler launcher, which takes its words unparsed

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
json launcher_stats_json(const std::string& root, pc::Sharing sharing);
// What an entry is and its name, in words a person recognises, from the
// kind and name its writer recorded and the store it is in (cmd_admin.cpp):
// what `ls --long` shows and `export --name` matches.
std::pair<std::string, std::string> describe_entry(const std::string& store, std::string kind, std::string name);
// Zeroes the launcher's counters of `root` (stats --zero), under the same
// trust rules as counting.
void zero_launcher_stats(const std::string& root, const pc::Config& cfg);

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

// What a user is told of `st`: its message, in plain words, without the
// code's name (which sets the exit code only).
std::string plain(const pc::Status& st);
// Prints the error and returns its exit code (usage for invalid_argument).
int fail(const pc::Status& st);
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
// An output of any command, written as the user asked and only there: "-"
// is standard output; a regular file (or a new one) is written to a temp
// file beside it and renamed over it by commit(), keeping an existing file's
// mode (a new one gets 0666 less the umask), so a failed or interrupted
// command leaves the old file; a symbolic link is followed and its target
// written so, the link kept; anything else (a device, a FIFO) is opened and
// written in place, never renamed over. A regular file the user may write
// in a directory they may not is written in place, as cp would. Every
// output of the tool goes through this class (write_output for one piece).
class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Without a commit(), the temp file (if any) is removed.
  ~OutputFile();
  // Decides where the bytes go and opens it; an error names the path.
  // `durability` fsync: the temp file is synced before the rename.
  pc::Status open(const std::string& path, pc::Durability durability = pc::Durability::none);
  pc::Status write(std::string_view data);
  // Closes the output and, for a regular file, renames the temp over it.
  pc::Status commit();

 private:
  pc::Status open_in_place(int flags);
  std::string m_path;    // as the user named it
  std::string m_target;  // what is written: the link's target, or m_path
  std::string m_temp;    // empty unless a temp file is being written
  pc::Durability m_durability = pc::Durability::none;
  int m_fd = -1;
};
// Writes `data` to `path` through one OutputFile.
pc::Status write_output(const std::string& path, std::string_view data);
// Writes all of `data` to `fd` (retrying short writes and EINTR).
pc::Status write_all_to(int fd, std::string_view data, const std::string& what);
// One disk store of the cache root: its own ("programs") or a companion.
struct NamedFileStore {
  std::string name;
  std::unique_ptr<pc::FileStore> store;
};
using Stores = std::vector<NamedFileStore>;
// The root's own store, then each companion store that exists (nothing is
// made by looking; none at all when the cache directory does not exist).
pc::Result<Stores> open_stores(const pc::Config& cfg);
// `s` with control characters shown as '?'.
std::string printable(std::string s);
// StoreStats as JSON and as aligned text, from store_stat_fields().
json stats_json(const pc::StoreStats& s);
// One store's statistics, a line per field (the cap is the root's, shown
// once above the stores).
void print_stats_text(const pc::StoreStats& s);

}  // namespace progcache::cli
