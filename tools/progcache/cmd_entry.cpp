// progcache put / get / rm: one entry by KEY, through every configured tier.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "cli.h"

namespace progcache::cli {

namespace {

struct EntryArgs {
  std::string key;
  std::string file;
  std::string output;
  std::string artifact = "code";
  bool string_key = false;
};

int run_put(const EntryArgs& a, const pc::Config& cfg) {
  auto key = parse_key(a.key, a.string_key);
  if (!key.ok()) return fail(key.status());
  auto data = read_file(a.file);
  if (!data.ok()) return fail(data.status());
  if (cfg.disabled) {
    std::cerr << "progcache: " << cfg.disabled_by() << "; nothing stored\n";
    return k_exit_ok;
  }
  auto tiers = open_data_store(cfg);
  if (!tiers.ok()) return fail(tiers.status());
  json meta{{"source_file", std::filesystem::path(a.file).filename().string()}};
  std::vector<pc::Artifact> arts;
  arts.push_back({"code", pc::Bytes::adopt(std::move(*data))});
  pc::Status st = (*tiers)->put(*key, pc::Entry(meta.dump(), std::move(arts)));
  if (st.ok()) st = (*tiers)->close();
  warn_remote(tiers->get());
  if (!st.ok()) return fail(st);
  std::cout << key->hex() << "\n";
  return k_exit_ok;
}

int run_get(const EntryArgs& a, const pc::Config& cfg) {
  auto key = parse_key(a.key, a.string_key);
  if (!key.ok()) return fail(key.status());
  if (pc::Status st = check_output_path(a.output); !st.ok()) return fail(st);
  if (cfg.disabled) {
    std::cerr << "progcache: " << cfg.disabled_by() << "; miss\n";
    return k_exit_miss;
  }
  auto tiers = open_data_store(cfg, /*for_reading=*/true);
  if (!tiers.ok()) return fail(tiers.status());
  if (*tiers == nullptr) {  // no cache directory, no remote: nothing stored anywhere
    std::cerr << "progcache: miss: no entry for key " << key->hex() << " (no cache directory at " << cfg.dir << ")\n";
    return k_exit_miss;
  }
  auto entry = (*tiers)->get(*key);
  warn_remote(tiers->get());
  if (!entry.ok()) return fail(entry.status());
  if (!*entry) {
    std::cerr << "progcache: miss: no entry for key " << key->hex() << "\n";
    return k_exit_miss;
  }
  const pc::Artifact* art = (*entry)->find(a.artifact);
  if (art == nullptr && a.artifact == "code" && !(*entry)->artifacts().empty()) {
    art = &(*entry)->artifacts().front();
  }
  if (art == nullptr) {
    return fail(pc::not_found("entry " + key->hex() + " has no artifact named '" + a.artifact + "'"));
  }
  const std::string output = a.output.empty() ? "-" : a.output;
  if (output == "-" && ::isatty(1) != 0) {
    return fail(pc::invalid_argument("refusing to write binary data to a terminal; use -o FILE"));
  }
  pc::Status st = write_output(output, art->data.view());
  if (!st.ok()) return fail(st);
  return k_exit_ok;
}

int run_rm(const EntryArgs& a, const pc::Config& cfg) {
  auto key = parse_key(a.key, a.string_key);
  if (!key.ok()) return fail(key.status());
  auto tiers = open_data_store(cfg);
  if (!tiers.ok()) return fail(tiers.status());
  auto removed = (*tiers)->erase(*key);
  warn_remote(tiers->get());
  if (!removed.ok()) return fail(removed.status());
  if (!*removed) {
    std::cerr << "progcache: no entry for key " << key->hex() << "\n";
    return k_exit_miss;
  }
  return k_exit_ok;
}

}  // namespace

void add_entry_commands(CLI::App& app, std::vector<Command>& out) {
  auto a = std::make_shared<EntryArgs>();
  const char* key_help = "Key: 64 hex digits, or any string (hashed)";

  auto* put = app.add_subcommand("put", "Store FILE's bytes under KEY");
  put->add_option("KEY", a->key, key_help)->required();
  put->add_option("FILE", a->file, "File to store; - reads standard input")->required();
  add_string_flag(put, a->string_key);
  out.push_back({put, [a](const pc::Config& cfg, const std::vector<std::string>&) { return run_put(*a, cfg); }});

  auto* get = app.add_subcommand("get", "Write the raw artifact stored under KEY (to stdout or -o FILE)");
  get->add_option("KEY", a->key, key_help)->required();
  get->add_option("-o,--output", a->output, "Output file (written atomically)");
  get->add_option("--artifact", a->artifact, "Artifact name (default: code, else the first)");
  add_string_flag(get, a->string_key);
  out.push_back({get, [a](const pc::Config& cfg, const std::vector<std::string>&) { return run_get(*a, cfg); }});

  auto* rm = app.add_subcommand("rm", "Remove the entry under KEY (exit 1 if absent)");
  rm->add_option("KEY", a->key, key_help)->required();
  add_string_flag(rm, a->string_key);
  out.push_back({rm, [a](const pc::Config& cfg, const std::vector<std::string>&) { return run_rm(*a, cfg); }});
}

}  // namespace progcache::cli
