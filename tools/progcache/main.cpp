// progcache — the operator's command-line tool: declares the global options
// and the command groups, parses, and dispatches to the one command given.
//
// Exit codes: 0 ok, 1 miss (or key absent), 2 usage error, 3 any other error.
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

int run(int argc, char** argv) {
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

  auto cfg = load_config(g);
  if (!cfg.ok()) return fail(cfg.status());
  return chosen->run(*cfg, extras);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // The launcher's words are nvcc's: no option of progcache's is read.
    if (argc >= 2 && is_launcher_call(argv[1])) return run_launcher(argc - 1, argv + 1);
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
