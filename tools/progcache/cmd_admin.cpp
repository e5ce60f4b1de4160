// progcache ls / stats / verify / prune / clear / config: the disk stores of
// the cache root as a whole (its own and the companion stores that exist,
// file_store.h), and the configuration.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "nvcc/counters.h"
#include "progcache/remote_store.h"

namespace progcache::cli {

namespace {

// "kernels: " before a companion's lines; nothing before the root's own.
std::string prefix_of(const NamedFileStore& s) {
  return s.name == "programs" ? std::string() : s.name + ": ";
}

struct AdminArgs {
  bool long_format = false;
  bool json = false;
  bool zero = false;
  std::string format = "text";
  bool repair = false;
  std::string prune_size;
  std::string prune_age;
  // config set NAME VALUE / config unset NAME
  std::string setting;
  std::string value;
  bool to_user = false;
  bool to_root = false;
};

// config set / unset: one line of a settings file, as ccache -o. The value
// is checked as it will be read; the file is replaced whole or not at all.
int run_config_set(const AdminArgs& a, const pc::Config& cfg, bool unset) {
  const auto scope =
      a.to_user ? pc::ConfigFileScope::user : (a.to_root ? pc::ConfigFileScope::root : pc::ConfigFileScope::automatic);
  auto change = pc::set_config_value(a.setting, unset ? std::nullopt : std::optional<std::string>(a.value), scope, cfg);
  if (!change.ok()) return fail(change.status());
  if (unset && !change->changed) {
    std::cout << change->name << " is not set in " << change->path << "\n";
  } else if (unset) {
    std::cout << change->name << " removed from " << change->path << "\n";
  } else {
    std::cout << change->name << " = " << change->shown << "  (written to " << change->path << ")\n";
  }
  if (!change->overridden_by.empty()) {
    std::cerr << "progcache: note: " << change->overridden_by << " sets " << change->name
              << " for this root, which wins over the user's file\n";
  }
  if (const char* v = std::getenv(change->variable.c_str()); v != nullptr && *v != '\0') {
    std::cerr << "progcache: note: " << change->variable << " is set in this environment, which wins over the file\n";
  }
  return k_exit_ok;
}

int run_config(const AdminArgs& a, const pc::Config& cfg) {
  if (a.json) {
    json j = json::array();
    for (const auto& s : cfg.settings) j.push_back({{"name", s.name}, {"value", s.value}, {"source", s.source}});
    std::cout << j.dump(2) << "\n";
  } else {
    const auto file_line = [](const char* what, const std::string& path) {
      struct stat st {};
      std::cout << "# " << what << " settings file: " << path << (::stat(path.c_str(), &st) == 0 ? "" : " (none)")
                << "\n";
    };
    file_line("user", pc::user_config_path());
    file_line("root", pc::root_config_path(cfg.dir));
    for (const auto& s : cfg.settings) std::cout << s.name << " = " << s.value << "  (" << s.source << ")\n";
  }
  return k_exit_ok;
}

// What an entry is, in words a person recognises, from the kind and name
// its writer recorded: ("triton kernel", "add") for Triton's "group" named
// "add.json", ("nvcc cubin", "k.cu") for the launcher's "nvcc-cubin".
// Entries with no metadata (cuda.core's caches and `put` store bytes only)
// are "bytes".
}  // namespace

std::pair<std::string, std::string> describe_entry(const std::string& store, std::string kind, std::string name) {
  const auto strip = [](std::string& s, std::string_view suffix) {
    if (s.ends_with(suffix)) s.resize(s.size() - suffix.size());
  };
  if (store == "triton") {
    if (kind == "group") {
      strip(name, ".json");
      return {"triton kernel", name};
    }
    if (kind == "file" || kind == "remote-file") return {"triton file", name};
  }
  if (kind.starts_with("nvcc-")) {
    kind[4] = ' ';
    return {kind, name};
  }
  static const std::pair<std::string_view, std::string_view> k_words[] = {
      {"tilelang-kernel", "tilelang kernel"}, {"tilelang-compilers", "tilelang compilers"},
      {"torch-object", "torch object"},       {"torch-cpp", "torch C++ library"},
      {"torch-isa-probe", "torch probe"},     {"pyptx-cubin", "pyptx cubin"},
      {"triton-key-memo", "triton memo"},     {"triton-tool-memo", "triton memo"}};
  for (const auto& [from, to] : k_words) {
    if (kind == from) return {std::string(to), name};
  }
  if (kind.empty()) kind = store == "kernels" ? "kernel" : "bytes";
  return {kind, name};
}

namespace {

int run_ls(const AdminArgs& a, Stores& stores) {
  json j = json::array();
  if (a.long_format && !a.json)
    std::printf("%-64s  %9s  %-20s  %-20s  %-8s  %-14s  %s\n", "KEY", "SIZE", "CREATED", "LAST USED", "STORE", "KIND",
                "NAME");
  for (auto& [name, store] : stores) {
    auto entries = store->list();
    if (!entries.ok()) return fail(entries.status());
    for (const auto& e : *entries) {
      const auto [kind, label] = describe_entry(name, e.kind, e.name);
      if (a.json) {
        j.push_back({{"key", e.key.hex()},
                     {"size", e.size},
                     {"created", format_time(e.created_unix_ns)},
                     {"last_used", format_time(e.last_used_ns)},
                     {"store", name},
                     {"kind", kind},
                     {"name", label.empty() ? json(nullptr) : json(label)}});
      } else if (a.long_format) {
        std::printf("%s  %9s  %-20s  %-20s  %-8s  %-14s  %s\n", e.key.hex().c_str(), pc::format_size(e.size).c_str(),
                    format_time(e.created_unix_ns).c_str(), format_time(e.last_used_ns).c_str(), name.c_str(),
                    printable(kind).c_str(), label.empty() ? "-" : printable(label).c_str());
      } else if (name == "programs") {
        // Bare keys are the root's own, so they can be fed to get and rm;
        // companions' entries are listed with --long and --json.
        std::printf("%s\n", e.key.hex().c_str());
      }
    }
  }
  if (a.json) std::cout << j.dump(2) << "\n";
  return k_exit_ok;
}

// Per remote URL: reachable, and how many entries and bytes it holds; a
// server that answers but refuses (credentials, a missing bucket, a skewed
// clock) is told apart from one that does not answer.
pc::Result<json> remote_summary(const pc::Config& cfg) {
  json remote = json::array();
  for (const auto& url : cfg.remote_urls) {
    // A store makes no contact until asked.
    PROGCACHE_ASSIGN_OR_RETURN(
        auto r, pc::make_remote_store({.urls = {url}, .password = cfg.remote_password, .read_only = true}));
    json j{{"url", pc::check_remote_url(url)->shown}};
    auto n = r->count();
    auto b = n.ok() ? r->size_bytes() : pc::Result<std::uint64_t>(n.status());
    if (!n.ok() && n.status().code() == pc::Code::failed_precondition) {
      // A server that cannot list its entries (an HTTP cache): reachable is
      // what one lookup of a key nobody stores says.
      auto probe = r->get(*pc::Key::from_hex(std::string(64, '0')));
      j["reachable"] = probe.ok();
      j["refused"] = probe.status().code() == pc::Code::permission_denied;
      j["entries"] = nullptr;
      j["bytes_stored"] = nullptr;
      j[probe.ok() ? "note" : "error"] = probe.ok() ? "the server does not list its entries" : plain(probe.status());
    } else if (n.ok() && b.ok()) {
      j["reachable"] = true;
      j["refused"] = false;
      j["entries"] = *n;
      j["bytes_stored"] = *b;
    } else {
      const pc::Status& st = n.ok() ? b.status() : n.status();
      j["reachable"] = false;
      j["refused"] = st.code() == pc::Code::permission_denied;
      j["error"] = plain(st);
    }
    remote.push_back(j);
  }
  return remote;
}

// A label value in Prometheus's text format: backslash, double quote and
// line feed escaped as it says; other control characters shown as '?'.
std::string prom_label(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

// The stats of every store of the root in Prometheus's text format: one
// sample per store (label store="programs", or the companion's name) for each
// field of store_stat_fields(), durations in seconds, plus the hit rate.
void print_prometheus(const Stores& stores) {
  auto metric = [](const pc::StatField& f) {
    std::string name = std::string("progcache_") + f.name;
    if (f.unit == pc::StatField::Unit::nanoseconds) name = name.substr(0, name.size() - 3) + "_seconds";
    return f.counter ? name + "_total" : name;
  };
  std::vector<std::pair<std::string, pc::StoreStats>> rows;
  for (const auto& named : stores) rows.emplace_back(named.name, named.store->host_stats());
  for (const auto& f : pc::store_stat_fields()) {
    const std::string name = metric(f);
    std::printf("# HELP %s %s (host-wide, all processes)\n# TYPE %s %s\n", name.c_str(), f.label, name.c_str(),
                f.counter ? "counter" : "gauge");
    for (const auto& [store, st] : rows) {
      const std::uint64_t v = st.*f.member;
      if (f.unit == pc::StatField::Unit::nanoseconds) {
        std::printf("%s{store=\"%s\"} %.9g\n", name.c_str(), prom_label(store).c_str(), static_cast<double>(v) / 1e9);
      } else {
        std::printf("%s{store=\"%s\"} %llu\n", name.c_str(), prom_label(store).c_str(),
                    static_cast<unsigned long long>(v));
      }
    }
  }
  std::printf(
      "# HELP progcache_hit_rate hits / (hits + misses) (host-wide; NaN before any lookup)\n"
      "# TYPE progcache_hit_rate gauge\n");
  for (const auto& [store, st] : rows) {
    if (st.hits + st.misses == 0) {
      std::printf("progcache_hit_rate{store=\"%s\"} NaN\n", prom_label(store).c_str());
    } else {
      std::printf("progcache_hit_rate{store=\"%s\"} %.6g\n", prom_label(store).c_str(), pc::hit_rate(st));
    }
  }
}

// The nvcc launcher's counters as JSON shows them: every counter (0 where
// the launcher never counted it) and every tally (empty where it has none),
// as the text and Prometheus show them, whether or not it has run.
json launcher_counters(const json& raw) {
  json out = json::object();
  for (const auto& info : pc::nvcc::k_counters) {
    const std::string name(info.name);
    out[name] = raw.is_object() && raw.contains(name) && raw[name].is_number_unsigned() ? raw[name] : json(0);
  }
  for (const std::string_view tally : pc::nvcc::k_tallies) {
    const std::string name(tally);
    json group = json::object();
    if (raw.is_object() && raw.contains(name) && raw[name].is_object()) {
      for (const auto& [why, count] : raw[name].items()) {
        if (count.is_number_unsigned()) group[why] = count;
      }
    }
    out[name] = group;
  }
  return out;
}

// The nvcc launcher's counters (src/nvcc/counters.h), when it has run.
void print_launcher_stats(const json& j) {
  if (!j.is_object()) return;
  auto n = [&](const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<std::uint64_t>() : 0; };
  // A root the launcher never used shows no launcher at all.
  bool counted = false;
  for (const auto& info : pc::nvcc::k_counters) counted = counted || n(std::string(info.name).c_str()) != 0;
  for (const std::string_view tally : pc::nvcc::k_tallies) {
    const std::string group(tally);
    counted = counted || (j.contains(group) && j[group].is_object() && !j[group].empty());
  }
  if (!counted) return;
  std::printf("\nnvcc launcher\n");
  for (const auto& info : pc::nvcc::k_counters) {
    const std::string name(info.name);
    std::printf("  %-15s %llu\n", std::string(info.text).c_str(), static_cast<unsigned long long>(n(name.c_str())));
  }
  for (const std::string_view tally : pc::nvcc::k_tallies) {
    const std::string group(tally);
    if (!j.contains(group) || !j[group].is_object()) continue;
    for (const auto& [why, count] : j[group].items()) {
      if (!count.is_number()) continue;
      std::printf("  %-15s %llu  %s\n", group.c_str(), static_cast<unsigned long long>(count.get<std::uint64_t>()),
                  printable(why).c_str());
    }
  }
}

// What an integration records beside its store for `stats` to show (its
// framework's own settings that decide what is stored: JAX's thresholds):
// `<store>/framework.json`, {"notes": [text, ...]}. Written by another
// process, so read bounded and shown without control characters; anything
// else there shows nothing.
std::vector<std::string> framework_notes(const std::string& store_root) {
  constexpr std::size_t k_max_bytes = 4096;
  constexpr std::size_t k_max_notes = 8;
  constexpr std::size_t k_max_chars = 300;
  std::vector<std::string> out;
  std::FILE* f = std::fopen((store_root + "/framework.json").c_str(), "rb");
  if (f == nullptr) return out;
  std::string text(k_max_bytes + 1, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  if (text.size() > k_max_bytes) return out;
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("notes") || !j["notes"].is_array()) return out;
  for (const auto& n : j["notes"]) {
    if (!n.is_string() || out.size() == k_max_notes) continue;
    std::string s = printable(n.get<std::string>());
    if (s.size() > k_max_chars) s.resize(k_max_chars);
    out.push_back(std::move(s));
  }
  return out;
}

// The root as one cache: what every store holds (one cap bounds them
// together), and the lookups its users made: each store's, with the nvcc
// launcher's own hits and misses in place of its store's (one launcher
// lookup reads a manifest, then a result: two store lookups).
struct RootSummary {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  [[nodiscard]] bool looked_up() const { return hits + misses != 0; }
  [[nodiscard]] double hit_rate() const {
    return !looked_up() ? 0.0 : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
};

RootSummary root_summary(const Stores& stores, const json& launcher) {
  RootSummary r;
  for (const auto& named : stores) {
    const pc::StoreStats st = named.store->host_stats();
    r.entries += st.entries;
    r.bytes += st.bytes_stored;
    if (named.name == "nvcc") continue;
    r.hits += st.hits;
    r.misses += st.misses;
  }
  if (launcher.is_object()) {
    for (const auto& [counter, into] :
         {std::pair{pc::nvcc::Counter::hits, &r.hits}, std::pair{pc::nvcc::Counter::misses, &r.misses}}) {
      const std::string field(pc::nvcc::counter_name(counter));
      if (launcher.contains(field) && launcher[field].is_number_unsigned())
        *into += launcher[field].get<std::uint64_t>();
    }
  }
  return r;
}

json root_json(const RootSummary& r, const pc::Config& cfg) {
  return {{"entries", r.entries},
          {"bytes_stored", r.bytes},
          {"max_size_bytes", cfg.max_size_bytes ? json(*cfg.max_size_bytes) : json(nullptr)},
          {"max_entries", cfg.max_entries ? json(*cfg.max_entries) : json(nullptr)},
          {"hits", r.hits},
          {"misses", r.misses},
          {"hit_rate", r.looked_up() ? json(r.hit_rate()) : json(nullptr)}};
}

// The launcher's counters and the remote tiers in Prometheus's format, as
// the text and JSON show them.
void print_prometheus_root(const RootSummary& r, const pc::Config& cfg, const json& launcher, const json& remote) {
  // One sample of a metric with no labels, with its HELP and TYPE lines;
  // NaN where there is no value (a rate before any lookup).
  const auto one = [](const char* name, const char* type, const char* help, double value) {
    if (std::isnan(value)) {
      std::printf("# HELP %s %s\n# TYPE %s %s\n%s NaN\n", name, help, name, type, name);
    } else {
      std::printf("# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, value);
    }
  };
  const auto as_double = [](std::uint64_t n) { return static_cast<double>(n); };
  one("progcache_root_entries", "gauge", "entries of every store of the root", as_double(r.entries));
  one("progcache_root_bytes_stored", "gauge", "bytes of every store of the root (one cap bounds them)",
      as_double(r.bytes));
  one("progcache_root_hits_total", "counter", "lookups served (every store; the nvcc launcher's own count)",
      as_double(r.hits));
  one("progcache_root_misses_total", "counter", "lookups missed (every store; the nvcc launcher's own count)",
      as_double(r.misses));
  one("progcache_root_hit_rate", "gauge", "hits / (hits + misses) of the root (NaN before any lookup)",
      r.looked_up() ? r.hit_rate() : std::nan(""));
  // The caps, as the text and JSON show them; absent where there is none.
  if (cfg.max_size_bytes) {
    one("progcache_root_max_size_bytes", "gauge", "the cap on the bytes of every store of the root",
        as_double(*cfg.max_size_bytes));
  }
  if (cfg.max_entries) {
    one("progcache_root_max_entries", "gauge", "the cap on the entries of every store of the root",
        as_double(*cfg.max_entries));
  }
  if (launcher.is_object()) {
    for (const auto& info : pc::nvcc::k_counters) {
      const std::string name(info.name);
      const char* field = name.c_str();
      const std::uint64_t v =
          launcher.contains(name) && launcher[name].is_number_unsigned() ? launcher[name].get<std::uint64_t>() : 0;
      std::printf(
          "# HELP progcache_nvcc_launcher_%s_total the nvcc launcher's %s\n"
          "# TYPE progcache_nvcc_launcher_%s_total counter\nprogcache_nvcc_launcher_%s_total %llu\n",
          field, field, field, field, static_cast<unsigned long long>(v));
    }
    for (const std::string_view tally : pc::nvcc::k_tallies) {
      const std::string name(tally);
      const char* group = name.c_str();
      std::printf(
          "# HELP progcache_nvcc_launcher_%s_total %s\n"
          "# TYPE progcache_nvcc_launcher_%s_total counter\n",
          group,
          name == "not_relocated" ? "compiles the nvcc launcher did not share with other checkouts, by reason"
                                  : "commands the nvcc launcher ran uncached, by reason",
          group);
      if (!launcher.contains(group) || !launcher[group].is_object()) continue;
      for (const auto& [why, count] : launcher[group].items()) {
        if (!count.is_number_unsigned()) continue;
        std::printf("progcache_nvcc_launcher_%s_total{reason=\"%s\"} %llu\n", group, prom_label(why).c_str(),
                    static_cast<unsigned long long>(count.get<std::uint64_t>()));
      }
    }
  }
  if (!remote.empty()) {
    // One series per configured URL: `tier` (its place in PROGCACHE_REMOTE)
    // keeps two URLs that are shown alike apart.
    const auto series = [&](const char* name, const char* type, const char* help, const char* field) {
      std::printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
      for (std::size_t i = 0; i < remote.size(); ++i) {
        const json& t = remote[i];
        if (!t.contains(field)) continue;  // an unreachable tier reports no counts
        const json& v = t.at(field);
        if (!v.is_number() && !v.is_boolean()) continue;
        const unsigned long long n = v.is_boolean() ? (v.get<bool>() ? 1ULL : 0ULL) : v.get<unsigned long long>();
        std::printf("%s{url=\"%s\",tier=\"%zu\"} %llu\n", name, prom_label(t["url"].get<std::string>()).c_str(), i, n);
      }
    };
    series("progcache_remote_up", "gauge", "whether the remote tier answered", "reachable");
    series("progcache_remote_entries", "gauge", "entries the remote tier holds", "entries");
    series("progcache_remote_bytes_stored", "gauge", "bytes the remote tier holds", "bytes_stored");
  }
}

int run_stats(const AdminArgs& a, Stores& stores, const pc::Config& cfg) {
  if (a.zero) {
    for (auto& named : stores) named.store->zero_stats();
    // Everything: the launcher's counters too.
    if (!stores.empty()) zero_launcher_stats(stores.front().store->root(), cfg);
    std::printf("statistics zeroed%s\n", stores.empty() ? " (the cache directory does not exist)" : "");
    return k_exit_ok;
  }
  // Every counter, zero where the launcher never counted (or never ran).
  const json launcher = launcher_counters(
      stores.empty() ? json(nullptr) : launcher_stats_json(stores.front().store->root(), cfg.sharing));
  const RootSummary summary = root_summary(stores, launcher);
  if (a.format == "prometheus") {
    auto remote = remote_summary(cfg);
    if (!remote.ok()) return fail(remote.status());
    print_prometheus(stores);
    print_prometheus_root(summary, cfg, launcher, *remote);
    return k_exit_ok;
  }
  // No cache directory yet: all zeros, and it is not made.
  const bool exists = !stores.empty();
  const pc::StoreStats s = exists ? stores.front().store->host_stats() : pc::StoreStats{};
  const std::string root = exists ? stores.front().store->root() : cfg.dir;
  auto remote = remote_summary(cfg);
  if (!remote.ok()) return fail(remote.status());
  if (a.json || a.format == "json") {
    json j = stats_json(s);
    j["remote"] = *remote;
    j["dir"] = root;
    j["exists"] = exists;
    j["max_size_bytes"] = cfg.max_size_bytes ? json(*cfg.max_size_bytes) : json(nullptr);
    j["max_entries"] = cfg.max_entries ? json(*cfg.max_entries) : json(nullptr);
    json companions = json::array();
    for (std::size_t i = 1; i < stores.size(); ++i) {
      json c = stats_json(stores[i].store->host_stats());
      c["name"] = stores[i].name;
      c["dir"] = stores[i].store->root();
      c["framework_notes"] = framework_notes(stores[i].store->root());
      companions.push_back(c);
    }
    j["companions"] = companions;
    j["nvcc_launcher"] = launcher;
    j["root"] = root_json(summary, cfg);
    std::cout << j.dump(2) << "\n";
    return k_exit_ok;
  }
  std::printf("%-17s %s%s\n", "cache directory", root.c_str(), exists ? "" : " (does not exist yet)");
  // The headline: the root as one cache, then each store and tier under it.
  std::string held = std::to_string(summary.entries) + " entries, " + pc::format_size(summary.bytes);
  if (cfg.max_size_bytes) held += " of " + pc::format_size(*cfg.max_size_bytes);
  if (cfg.max_entries) held += " (at most " + std::to_string(*cfg.max_entries) + " entries)";
  std::printf("%-17s %s\n", "all stores", held.c_str());
  if (summary.hits + summary.misses == 0) {
    std::printf("%-17s no lookups yet\n", "all lookups");
  } else {
    std::printf("%-17s %llu hits, %llu misses: hit rate %.1f %%\n", "all lookups",
                static_cast<unsigned long long>(summary.hits), static_cast<unsigned long long>(summary.misses),
                100.0 * summary.hit_rate());
  }
  std::printf("\n%-17s %s\n", "programs store", root.c_str());
  print_stats_text(s);
  for (std::size_t i = 1; i < stores.size(); ++i) {
    std::printf("\n%-17s %s\n", (stores[i].name + " store").c_str(), stores[i].store->root().c_str());
    print_stats_text(stores[i].store->host_stats(),
                     stores[i].name == "nvcc" ? StoreLookups::reads : StoreLookups::lookups);
    for (const auto& note : framework_notes(stores[i].store->root())) std::printf("  %s\n", note.c_str());
  }
  if (exists) print_launcher_stats(launcher);
  for (const auto& r : *remote) {
    if (r["reachable"] && r["entries"].is_null()) {
      std::printf("remote %s: reachable (%s)\n", r["url"].get<std::string>().c_str(),
                  r["note"].get<std::string>().c_str());
    } else if (r["reachable"]) {
      std::printf("remote %s: %llu entries, %s\n", r["url"].get<std::string>().c_str(),
                  static_cast<unsigned long long>(r["entries"].get<std::uint64_t>()),
                  pc::format_size(r["bytes_stored"].get<std::uint64_t>()).c_str());
    } else {
      // The error names the URL too: said once, at the start of the line.
      const auto url = r["url"].get<std::string>();
      auto error = r["error"].get<std::string>();
      if (error.starts_with("remote " + url + ": ")) error.erase(0, url.size() + 9);
      std::printf("remote %s: %s (%s)\n", url.c_str(), r.value("refused", false) ? "refused" : "unreachable",
                  error.c_str());
    }
  }
  return k_exit_ok;
}

int run_verify(const AdminArgs& a, Stores& stores) {
  std::size_t remaining = 0;
  json reports = json::array();
  for (auto& named : stores) {
    auto report =
        named.store->verify(a.repair ? pc::Repair::yes : pc::Repair::no, progress_bar("verify", ProgressUnit::bytes));
    if (!report.ok()) return fail(report.status());
    std::size_t left = 0;
    for (const auto& p : report->problems) left += p.removed ? 0 : 1;
    remaining += left;
    if (a.json) {
      json probs = json::array();
      for (const auto& p : report->problems) {
        probs.push_back({{"path", p.path}, {"reason", p.reason}, {"removed", p.removed}});
      }
      reports.push_back({{"store", named.name},
                         {"checked", report->checked},
                         {"ok", report->ok},
                         {"damaged", report->problems.size()},
                         {"temps_removed", report->temps_removed},
                         {"problems", probs}});
      continue;
    }
    for (const auto& p : report->problems) {
      std::printf("%s: %s%s\n", p.path.c_str(), p.reason.c_str(), p.removed ? " (removed)" : "");
    }
    std::printf("%schecked %llu, ok %llu, damaged %zu, removed %zu, stale temps swept %llu\n", prefix_of(named).c_str(),
                static_cast<unsigned long long>(report->checked), static_cast<unsigned long long>(report->ok),
                report->problems.size(), report->problems.size() - left,
                static_cast<unsigned long long>(report->temps_removed));
  }
  if (stores.empty()) {  // no cache directory: nothing to check
    if (a.json) {
      std::cout << json{{"checked", 0},
                        {"ok", 0},
                        {"damaged", 0},
                        {"temps_removed", 0},
                        {"problems", json::array()},
                        {"companions", json::array()}}
                       .dump(2)
                << "\n";
    } else {
      std::printf("checked 0, ok 0, damaged 0, removed 0, stale temps swept 0\n");
    }
    return k_exit_ok;
  }
  if (a.json) {
    // The root's own report at the top level, as before; companions beside it.
    json out = reports.front();
    out.erase("store");
    reports.erase(reports.begin());
    out["companions"] = reports;
    std::cout << out.dump(2) << "\n";
  }
  return remaining == 0 ? k_exit_ok : k_exit_error;
}

int run_prune(const AdminArgs& a, Stores& stores, const pc::Config& cfg) {
  std::optional<std::uint64_t> max_size = cfg.max_size_bytes;
  std::optional<std::int64_t> age;
  if (!a.prune_size.empty()) {
    if (pc::Status st = pc::check_size_unit("--max-size", a.prune_size); !st.ok()) return fail(st);
    auto n = pc::parse_size(a.prune_size);
    if (!n.ok()) return fail(n.status().with_context("--max-size"));
    // 0 is "no cap" for every setting; here it would remove everything.
    if (*n == 0) {
      return fail(pc::invalid_argument("--max-size 0 would remove every entry: 'progcache clear' (-C) does that"));
    }
    max_size = *n;
  }
  if (!a.prune_age.empty()) {
    auto d = parse_age("--older-than", a.prune_age);
    if (!d.ok()) return fail(d.status());
    age = *d;
    if (a.prune_size.empty()) max_size.reset();
  }
  if (stores.empty()) {
    std::printf("removed 0 entries (0 B); 0 entries (0 B) remain\n");
    return k_exit_ok;
  }
  // One cap per root: the root's store prunes every store of the root
  // together, least recently used first across them.
  auto report = stores.front().store->prune(max_size, age, progress_bar("prune", ProgressUnit::steps));
  if (!report.ok()) return fail(report.status());
  std::printf("removed %llu entries (%s); %llu entries (%s) remain in %llu store%s\n",
              static_cast<unsigned long long>(report->removed), pc::format_size(report->bytes_removed).c_str(),
              static_cast<unsigned long long>(report->remaining), pc::format_size(report->bytes_remaining).c_str(),
              static_cast<unsigned long long>(report->stores), report->stores == 1 ? "" : "s");
  return k_exit_ok;
}

// Runs `fn` on the disk stores of the root the configuration names.
template <typename Fn>
auto on_disk_stores(Fn fn) {
  return [fn](const pc::Config& cfg, const std::vector<std::string>&) {
    auto stores = open_stores(cfg);
    if (!stores.ok()) return fail(stores.status());
    return fn(*stores, cfg);
  };
}

int run_clear(Stores& stores) {
  for (auto& named : stores) {
    if (const pc::Status st = named.store->clear(); !st.ok()) return fail(st);
  }
  return k_exit_ok;
}

}  // namespace

void add_admin_commands(CLI::App& app, std::vector<Command>& out) {
  auto a = std::make_shared<AdminArgs>();

  auto* ls = app.add_subcommand("ls", "List entries");
  ls->add_flag("-l,--long", a->long_format, "Show size, creation and last use");
  ls->add_flag("--json", a->json, "JSON output");
  out.push_back({ls, on_disk_stores([a](Stores& s, const pc::Config&) { return run_ls(*a, s); })});

  auto* stats = app.add_subcommand(
      "stats",
      "Show host-wide counters of the disk stores (all processes, kept in the cache directory): entries and\n"
      "size held; hits, misses and the hit rate; puts, evictions, damaged and refused entries, errors; bytes\n"
      "read and written; lookup and put time (p50, p99, from one call in 16)");
  stats->add_flag("--json", a->json, "JSON output (--format json)");
  stats->add_option("--format", a->format, "text (default), json or prometheus (the text exposition format)")
      ->check(CLI::IsMember({"text", "json", "prometheus"}));
  stats->add_flag("-z,--zero", a->zero,
                  "Zero the counters, byte counts and timings of every store of the root (what is held stays)");
  out.push_back({stats, on_disk_stores([a](Stores& s, const pc::Config& cfg) { return run_stats(*a, s, cfg); })});

  auto* verify = app.add_subcommand("verify", "Check every entry; list damaged ones with the reason");
  verify->add_flag("--repair", a->repair, "Remove damaged entries");
  verify->add_flag("--json", a->json, "JSON output");
  out.push_back({verify, on_disk_stores([a](Stores& s, const pc::Config&) { return run_verify(*a, s); })});

  auto* prune = app.add_subcommand("prune", "Remove least recently used entries");
  prune->add_option("--max-size", a->prune_size, "Trim to at most SIZE (e.g. 2G); default: the configured cap")
      ->type_name("SIZE");
  prune->add_option("--older-than", a->prune_age, "Remove entries unused for DURATION (e.g. 7d, 12h)")
      ->type_name("DURATION");
  out.push_back({prune, on_disk_stores([a](Stores& s, const pc::Config& cfg) { return run_prune(*a, s, cfg); })});

  auto* clear = app.add_subcommand("clear", "Remove every entry");
  out.push_back({clear, on_disk_stores([](Stores& s, const pc::Config&) { return run_clear(s); })});

  auto* config = app.add_subcommand(
      "config",
      "Show each resolved setting and where it came from; set or unset one in a settings file\n"
      "(the root's file for max_size, max_entries, compression and durability, the user's for the rest)");
  config->add_flag("--json", a->json, "JSON output");
  auto* set = config->add_subcommand("set", "Write NAME = VALUE to a settings file (as ccache -o)");
  set->add_option("NAME", a->setting, "Setting (max_size or PROGCACHE_MAX_SIZE)")->required();
  set->add_option("VALUE", a->value, "Value, checked as it will be read")->required();
  auto* unset =
      config->add_subcommand("unset", "Remove NAME from a settings file (the default, or another file, applies)");
  unset->add_option("NAME", a->setting, "Setting")->required();
  for (auto* sub : {set, unset}) {
    auto* user = sub->add_flag("--user", a->to_user, "The user's file, even for a setting of the root");
    sub->add_flag("--root", a->to_root, "The root's file")->excludes(user);
  }
  out.push_back({config, [a, set, unset](const pc::Config& cfg, const std::vector<std::string>&) {
                   if (set->parsed() || unset->parsed()) return run_config_set(*a, cfg, unset->parsed());
                   return run_config(*a, cfg);
                 }});
}

}  // namespace progcache::cli
