// progcache — the operator's command-line tool: declares the global options
// and the command groups, parses, and dispatches to the one command given
// (or, for ccache's flags, to the commands they name, in order).
//
// Exit codes: 0 ok, 1 miss (or key absent), 2 usage error, 3 any other error.
// Messages are the status's message in plain words (plain() in common.cpp):
// a code's name such as invalid_argument only decides the exit code.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "progcache/remote_store.h"
#include "progcache/version.h"

using namespace progcache::cli;

namespace {

// The version and what this build has, as ccache's --version lists its
// features.
std::string version_text() {
  std::string remote;
  for (const auto& s : pc::remote_schemes()) remote += (remote.empty() ? "" : ", ") + s + "://";
  return std::string("progcache ") + PROGCACHE_VERSION_STRING +
         "\nremote tiers: " + (remote.empty() ? "none (built without hiredis and libcurl)" : remote) +
         "\ncompression: zstd\nsigning: HMAC-SHA256, Ed25519\n"
         "compilers (loaded at run time): NVRTC, nvJitLink, libNVVM";
}

// The first word that is not an option or an option's value, when it names
// no subcommand: said as such, rather than as a missing subcommand.
std::optional<std::string> unknown_subcommand(int argc, char** argv, const CLI::App& app) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--dir" || a == "--remote") {
      ++i;
      continue;
    }
    if (a.starts_with("-")) continue;
    for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == a) return std::nullopt;
    }
    return std::string(a);
  }
  return std::nullopt;
}

// ccache's operator flags, as a ccache user types them (ccache -s, -z, -C,
// -p, -V, -M SIZE, or the long spellings), each run as the progcache command
// it names.
struct CcacheFlag {
  char letter;
  std::string_view long_name;
  std::vector<std::string> words;  // the progcache command (-M's value follows them)
  bool takes_value = false;
};

constexpr const char* k_ccache_known = "; of ccache's options, progcache knows -s, -z, -C, -M, -V and -p";

// What to say of an option progcache does not take: where it is one of
// ccache's whose job a progcache command does, that command.
std::string unknown_option(std::string_view option) {
  static constexpr std::pair<std::string_view, std::string_view> k_done_by[] = {
      {"-c", "progcache prune"},
      {"--cleanup", "progcache prune"},
      {"-o", "progcache config set NAME VALUE"},
      {"--set-config", "progcache config set NAME VALUE"},
      {"-k", "progcache config (every setting and its source)"},
      {"--get-config", "progcache config (every setting and its source)"},
      {"--evict-older-than", "progcache prune --older-than AGE"},
      {"-F", "progcache config set max_entries N"},
      {"--max-files", "progcache config set max_entries N"},
      {"-x", "progcache stats"},
      {"--show-compression", "progcache stats"},
  };
  const std::string_view name = option.starts_with("--") ? option.substr(0, option.find('='))
                                                         : option.substr(0, std::min<std::size_t>(2, option.size()));
  for (const auto& [ccache, command] : k_done_by) {
    if (name == ccache) {
      return "unknown option '" + printable(std::string(option)) + "': in progcache, ccache's " + std::string(ccache) +
             " is '" + std::string(command) + "'";
    }
  }
  return "unknown option '" + printable(std::string(option)) + "'" + k_ccache_known;
}

const std::vector<CcacheFlag>& ccache_flags() {
  static const std::vector<CcacheFlag> flags = {
      {'s', "--show-stats", {"stats"}},  {'z', "--zero-stats", {"stats", "--zero"}},
      {'C', "--clear", {"clear"}},       {'p', "--show-config", {"config"}},
      {'V', "--version", {"--version"}}, {'M', "--max-size", {"config", "set", "max_size"}, true},
  };
  return flags;
}

// What the ccache flags of a command line ask for, in their order: each a
// whole command line of progcache's own words.
struct CcacheStep {
  std::vector<std::string> argv;
  bool closed = false;  // ends in a value (-M SIZE): no more words are its
};
struct CcachePlan {
  std::vector<CcacheStep> steps;
  std::string error;  // a usage error found while reading the flags
};

// The steps, or nothing when the first word (after the global options) is
// not a ccache flag. Flags may be given one by one (-z -s) or together
// (-zs), and run in that order, as ccache runs them; the words after the last
// flag go to its command (-s --json is stats --json).
std::optional<CcachePlan> ccache_plan(int argc, char** argv) {
  std::vector<std::string> globals;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view a = argv[i];
    if ((a == "--dir" || a == "--remote") && i + 1 < argc) {
      globals.emplace_back(a);
      globals.emplace_back(argv[++i]);
    } else if (a.starts_with("--dir=") || a.starts_with("--remote=")) {
      globals.emplace_back(a);
    } else {
      break;
    }
  }
  const auto find = [](auto pred) -> const CcacheFlag* {
    for (const auto& f : ccache_flags()) {
      if (pred(f)) return &f;
    }
    return nullptr;
  };
  CcachePlan plan;
  const auto add = [&](const CcacheFlag& f, const std::optional<std::string>& value) {
    CcacheStep step;
    step.argv = {argv[0]};
    step.argv.insert(step.argv.end(), globals.begin(), globals.end());
    step.argv.insert(step.argv.end(), f.words.begin(), f.words.end());
    if (f.takes_value) {
      step.argv.push_back(value.value_or(""));
      step.closed = true;
    }
    plan.steps.push_back(std::move(step));
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.starts_with("--")) {
      const std::string name = a.substr(0, a.find('='));
      const CcacheFlag* f = find([&](const CcacheFlag& c) { return c.long_name == name; });
      // --version is the parser's own (-V becomes it); --max-size is
      // ccache's only before any subcommand (prune --max-size is progcache's).
      if (a == "--version" || a == "--help" || name == "--dir" || name == "--remote") break;
      if (f == nullptr) {
        // An option before any subcommand that is neither progcache's nor
        // one of ccache's that progcache knows (ccache -c, -F, -x, ...).
        if (plan.steps.empty()) plan.error = unknown_option(a);
        break;
      }
      if (!f->takes_value) {
        if (name != a) plan.error = "'" + a + "' takes no value";
        add(*f, std::nullopt);
      } else if (name != a) {
        add(*f, a.substr(name.size() + 1));
      } else if (i + 1 < argc) {
        add(*f, argv[++i]);
      } else {
        plan.error = a + " needs a SIZE (e.g. 5G)";
      }
      continue;
    }
    if (a.size() < 2 || a[0] != '-') break;
    // A cluster of letters (-zs); a -M in it takes the rest, or the next word.
    if (find([&](const CcacheFlag& c) { return c.letter == a[1]; }) == nullptr) {
      if (plan.steps.empty() && a != "-h") plan.error = unknown_option(a);
      break;
    }
    for (std::size_t k = 1; k < a.size(); ++k) {
      const CcacheFlag* f = find([&](const CcacheFlag& c) { return c.letter == a[k]; });
      if (f == nullptr) {
        plan.error = std::string("unknown option '-") + a[k] + "' in '" + a + "'" + k_ccache_known;
        break;
      }
      if (!f->takes_value) {
        add(*f, std::nullopt);
      } else if (k + 1 < a.size()) {
        add(*f, a.substr(k + 1));
        break;
      } else if (i + 1 < argc) {
        add(*f, argv[++i]);
      } else {
        plan.error = "-M needs a SIZE (e.g. 5G)";
      }
    }
  }
  if (plan.steps.empty() && plan.error.empty()) return std::nullopt;
  // The words after the flags are the last command's (-s --json).
  if (!plan.steps.empty() && !plan.steps.back().closed) {
    for (; i < argc; ++i) plan.steps.back().argv.emplace_back(argv[i]);
  } else if (i < argc && plan.error.empty()) {
    plan.error = std::string("unexpected '") + argv[i] + "' after -M SIZE";
  }
  return plan;
}

int run(int argc, char** argv);

// Runs the steps of a ccache command line in order; the first that does not
// succeed ends the run with its exit code.
int run_ccache_plan(const CcachePlan& plan) {
  if (!plan.error.empty()) {
    std::cerr << "progcache: " << plan.error << " (see progcache --help)\n";
    return k_exit_usage;
  }
  for (const auto& step : plan.steps) {
    std::vector<std::string> words = step.argv;
    std::vector<char*> args;
    args.reserve(words.size() + 1);
    for (auto& w : words) args.push_back(w.data());
    args.push_back(nullptr);
    const int rc = run(static_cast<int>(words.size()), args.data());
    if (rc != k_exit_ok) return rc;
  }
  return k_exit_ok;
}

int run(int argc, char** argv) {
  if (auto plan = ccache_plan(argc, argv)) return run_ccache_plan(*plan);
  CLI::App app{
      "progcache: a cache for compiled GPU programs.\n\n"
      "KEY arguments are either exactly 64 hex digits (the key itself, as printed by\n"
      "'progcache ls' and 'compile'), or a string: 32 bytes are taken as a raw key\n"
      "(as Python's make_program_cache_key returns), any other length is hashed\n"
      "(SHA-256) into a key.\n\n"
      "Exit codes: 0 ok, 1 miss, 2 usage error, 3 error.",
      "progcache"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  app.fallthrough();  // global options (--dir) may follow the subcommand
  Globals g;
  app.add_option_function<std::string>(
         "--dir", [&](const std::string& d) { g.dir = d, g.have_dir = true; }, "Cache root (overrides PROGCACHE_DIR)")
      ->type_name("DIR");
  app.add_option("--remote", g.remote, "Remote tier URLs, comma-separated (overrides PROGCACHE_REMOTE)")
      ->type_name("URL[,URL]");

  std::vector<Command> commands;
  add_entry_commands(app, commands);
  add_admin_commands(app, commands);
  add_bundle_commands(app, commands);
  add_compile_command(app, commands);
  add_explain_command(app, commands);
  add_nvcc_command(app, commands);
  // After the subcommands, which would inherit it.
  app.footer(
      "ccache's flags work too: -s (stats), -z (stats --zero), -C (clear), -p (config), -V (--version),\n"
      "-M SIZE (config set max_size SIZE: the cap, in the root's settings file).");

  app.allow_extras();  // only commands that take extras accept any: checked below
  if (auto word = unknown_subcommand(argc, argv, app)) {
    std::string names;
    for (const auto& c : commands) names += (names.empty() ? "" : ", ") + c.sub->get_name();
    std::cerr << "progcache: unknown subcommand '" << *word << "' (one of: " << names << "; see progcache --help)\n";
    return k_exit_usage;
  }
  const Command* chosen = nullptr;
  std::vector<std::string> extras;
  try {
    app.parse(argc, argv);
    for (const auto& c : commands) {
      if (c.sub->parsed()) chosen = &c;
    }
    if (chosen == nullptr) return k_exit_usage;
    // Extras may surface on either level (global options fall through).
    if (chosen->takes_extras) extras = chosen->sub->remaining();
    for (auto& e : app.remaining()) extras.push_back(e);
    if (!chosen->takes_extras && !extras.empty()) throw CLI::ExtrasError(extras);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? k_exit_ok : k_exit_usage;
  }

  if (g.have_dir && g.dir.empty()) {
    std::cerr << "progcache: --dir needs a directory (an empty one would be the working directory)\n";
    return k_exit_usage;
  }
  // `config set` and `config unset` are how a settings file is repaired:
  // a file with a bad line does not stop them (one that cannot be trusted
  // still does, in set_config_value).
  const bool repairing = chosen->sub->get_name() == "config" && !chosen->sub->get_subcommands().empty();
  auto cfg = load_config(g, /*strict_files=*/!repairing);
  if (!cfg.ok()) return fail(cfg.status());
  return chosen->run(*cfg, extras);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // The launcher's words are nvcc's: no option of progcache's is read.
    if (argc >= 2 && is_launcher_call(argv[1])) return run_launcher(argc - 1, argv + 1);
    // `explain nvcc ...` (or a path to an nvcc): the launcher's words too.
    if (argc >= 3 && std::string_view(argv[1]) == "explain" && is_masquerade(argv[2])) {
      return explain_launcher_command(argc - 2, argv + 2);
    }
    // Called as nvcc (a link named nvcc to progcache, first on PATH, as
    // ccache's masquerade): the real nvcc is the next one on PATH that is not
    // this program.
    if (argc >= 1 && is_masquerade(argv[0])) {
      std::vector<char*> args(argv, argv + argc);
      static char nvcc_name[] = "nvcc";
      args[0] = nvcc_name;
      return run_launcher(argc, args.data());
    }
    return run(argc, argv);
  } catch (const std::exception& e) {  // out of memory, or a bug: an error, never an abort
    std::cerr << "progcache: internal error: " << e.what() << "\n";
    return k_exit_error;
  }
}
