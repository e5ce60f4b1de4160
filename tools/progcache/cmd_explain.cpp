// progcache explain: why a program hit or missed, without compiling.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "progcache/explain.h"

namespace progcache::cli {

namespace {

struct ExplainArgs {
  std::string arch;
  std::string target = "cubin";
  std::vector<std::string> name_exprs;
  bool json_out = false;
};

const char* outcome_name(pc::Explanation::Outcome o) {
  switch (o) {
    case pc::Explanation::Outcome::hit:
      return "hit";
    case pc::Explanation::Outcome::miss:
      return "miss";
    case pc::Explanation::Outcome::damaged:
      return "damaged";
  }
  return "?";
}

int exit_of(pc::Explanation::Outcome o) {
  switch (o) {
    case pc::Explanation::Outcome::hit:
      return k_exit_ok;
    case pc::Explanation::Outcome::miss:
      return k_exit_miss;
    case pc::Explanation::Outcome::damaged:
      return k_exit_error;
  }
  return k_exit_error;
}

json to_json(const std::string& input, const std::string& store, const pc::Explanation& e) {
  json diffs = json::array();
  for (const auto& d : e.differences) {
    diffs.push_back({{"component", d.component},
                     {"change", d.change},
                     {"subject", d.subject},
                     {"before", d.before},
                     {"after", d.after}});
  }
  json record = e.record.empty() ? json() : json::parse(e.record, nullptr, /*allow_exceptions=*/false);
  json j{{"key", e.key.hex()},
         {"outcome", outcome_name(e.outcome)},
         {"name", e.program_name},
         {"target", e.target},
         {"same_name", e.same_name},
         {"without_record", e.without_record},
         {"nearest", e.nearest ? json(e.nearest->hex()) : json()},
         {"differences", std::move(diffs)},
         {"record", record.is_discarded() ? json() : std::move(record)}};
  if (!input.empty()) j["input"] = input;
  if (!store.empty()) j["store"] = store;
  if (!e.detail.empty()) j["detail"] = e.detail;
  return j;
}

// One difference as a line: "option changed  --gpu-architecture: sm_80 -> sm_90".
void print_difference(const pc::InputDifference& d) {
  std::string line = "  " + d.component + " " + d.change;
  if (!d.subject.empty()) line += "  " + printable(d.subject);
  if (d.change == "shadowed") {
    line += ": now found before " + printable(d.before);
  } else if (d.change == "changed" || d.change == "edited" || d.change == "reordered") {
    line += ": " + printable(d.before) + " -> " + printable(d.after);
  }
  std::printf("%s\n", line.c_str());
}

void print_explanation(const std::string& label, const pc::Explanation& e) {
  const std::string name = printable(e.program_name);
  switch (e.outcome) {
    case pc::Explanation::Outcome::hit:
      std::printf("%s: hit (key %s)\n", label.c_str(), e.key.hex().c_str());
      return;
    case pc::Explanation::Outcome::damaged:
      std::printf("%s: the entry under key %s is damaged (%s): a lookup drops it and compiles again\n", label.c_str(),
                  e.key.hex().c_str(), printable(e.detail).c_str());
      break;
    case pc::Explanation::Outcome::miss:
      std::printf("%s: miss (key %s)\n", label.c_str(), e.key.hex().c_str());
      break;
  }
  if (e.nearest) {
    std::printf("  nearest stored entry of '%s': %s (%llu of that name)\n", name.c_str(), e.nearest->hex().c_str(),
                static_cast<unsigned long long>(e.same_name));
    if (e.differences.empty()) {
      std::printf("  no recorded input differs: the key changed through something the record cannot show\n");
    }
    for (const auto& d : e.differences) print_difference(d);
  } else if (e.same_name == 0 && e.outcome == pc::Explanation::Outcome::miss) {
    std::printf("  no stored entry is named '%s': never compiled into this cache, or evicted since\n", name.c_str());
  }
  if (e.without_record > 0) {
    std::printf("  %llu stored entr%s of '%s' carry no key record (stored by an older progcache, or by put)\n",
                static_cast<unsigned long long>(e.without_record), e.without_record == 1 ? "y" : "ies", name.c_str());
  }
}

// `progcache explain KEY`: whichever store of the root holds it.
int explain_one_key(const pc::Key& key, const ExplainArgs& a, const pc::Config& cfg) {
  auto stores = open_stores(cfg);
  if (!stores.ok()) return fail(stores.status());
  pc::Explanation found;
  found.key = key;
  std::string where;
  for (auto& s : *stores) {
    auto e = pc::explain_key(key, *s.store);
    if (!e.ok()) return fail(e.status());
    if (e->outcome != pc::Explanation::Outcome::miss) {
      found = std::move(*e);
      where = s.name;
      break;
    }
  }
  if (a.json_out) {
    std::cout << to_json("", where, found).dump(2) << "\n";
    return exit_of(found.outcome);
  }
  const std::string hex = key.hex();
  switch (found.outcome) {
    case pc::Explanation::Outcome::miss:
      std::printf("%s: no entry under this key in '%s'\n", hex.c_str(), cfg.dir.c_str());
      break;
    case pc::Explanation::Outcome::damaged:
      std::printf("%s: the entry in the %s store is damaged (%s): a lookup drops it\n", hex.c_str(), where.c_str(),
                  printable(found.detail).c_str());
      break;
    case pc::Explanation::Outcome::hit: {
      std::printf("%s: hit in the %s store: '%s'%s%s\n", hex.c_str(), where.c_str(),
                  printable(found.program_name).c_str(), found.target.empty() ? "" : ", ",
                  printable(found.target).c_str());
      const json r = found.record.empty() ? json() : json::parse(found.record, nullptr, false);
      if (!r.is_object()) {
        std::printf("  no key record (stored by an older progcache, by put, or by an integration)\n");
        break;
      }
      for (const char* f : {"code_type", "target", "code"}) {
        if (r.contains(f) && r[f].is_string())
          std::printf("  %-14s %s\n", f, printable(r[f].get<std::string>()).c_str());
      }
      for (const char* f : {"options", "name_expressions"}) {
        if (!r.contains(f) || !r[f].is_array()) continue;
        for (const auto& v : r[f]) {
          if (v.is_string()) std::printf("  %-14s %s\n", f, printable(v.get<std::string>()).c_str());
        }
      }
      if (r.contains("files") && r["files"].is_array()) {
        std::printf("  %-14s %zu read from disk\n", "files", r["files"].size());
      }
      break;
    }
  }
  return exit_of(found.outcome);
}

bool looks_like_key(const std::string& text) {
  std::error_code ec;
  return text.size() == 64 && !std::filesystem::exists(text, ec) && pc::Key::from_hex(text).ok();
}

int run_explain(const ExplainArgs& a, const std::vector<std::string>& extras, const pc::Config& cfg) {
  auto words = split_words(extras, a.arch);
  if (!words.ok()) return fail(words.status());
  if (words->files.size() != 1) {
    return fail(pc::invalid_argument("explain: give one input file (with compile's options) or one 64-digit key"));
  }
  const std::string& input = words->files.front();
  if (words->opts.empty() && words->arch.empty() && looks_like_key(input)) {
    if (!cache_dir_exists(cfg)) {
      std::printf("%s: no entry (the cache directory '%s' does not exist)\n", input.c_str(), cfg.dir.c_str());
      return k_exit_miss;
    }
    return explain_one_key(*pc::Key::from_hex(input), a, cfg);
  }
  if (pc::Status st = check_arch("explain", words->arch); !st.ok()) return fail(st);
  auto target = pc::parse_target_type(a.target);
  if (!target.ok()) return fail(target.status());
  std::vector<std::string> opts = words->opts;
  opts.insert(opts.begin(), "-arch=" + words->arch);
  pc::Program p;
  if (pc::Status st = load_program(input, opts, a.name_exprs, &p); !st.ok()) return fail(st);

  pc::CompileOptions co;
  co.state_dir = cfg.dir;
  pc::Explanation e;
  if (!cache_dir_exists(cfg)) {
    // Nothing is made by asking: the key alone, and a miss.
    auto key = pc::program_key(p, *target, co);
    if (!key.ok()) return fail(key.status());
    e.key = *key;
    e.program_name = p.name;
    e.target = a.target;
  } else {
    auto store = open_store(cfg);
    if (!store.ok()) return fail(store.status());
    auto r = pc::explain(p, *target, **store, co);
    if (!r.ok()) return fail(r.status());
    e = std::move(*r);
  }
  if (a.json_out) {
    std::cout << to_json(input, "programs", e).dump(2) << "\n";
  } else {
    print_explanation(input, e);
  }
  return exit_of(e.outcome);
}

}  // namespace

void add_explain_command(CLI::App& app, std::vector<Command>& out) {
  auto a = std::make_shared<ExplainArgs>();
  auto* explain = app.add_subcommand(
      "explain",
      "Say whether a compile would hit and, on a miss, which inputs differ from the nearest stored entry of the\n"
      "same program: the code, each option, each header by path (edited, added, shadowed, removed), name\n"
      "expressions, target, compiler. Takes compile's arguments (nothing is compiled), or one KEY.\n"
      "'progcache explain nvcc ARGS...' (or a path to nvcc) asks the same of a launcher command: a hit, or\n"
      "for each stored result of the command the first file that differs (nothing is run or written).\n"
      "Exit status: 0 hit, 1 miss, 3 damaged entry.");
  explain->add_option("--arch", a->arch, "Target architecture, e.g. sm_90")->type_name("sm_XX");
  explain->add_option("--target", a->target, "cubin (default), ptx or ltoir");
  explain->add_option("--name-expr", a->name_exprs, "Name expression to lower (repeatable), e.g. 'k<float>'");
  explain->add_flag("--json", a->json_out, "Key, outcome, nearest entry, each difference and the key record");
  explain->allow_extras();
  explain->positionals_at_end(false);
  out.push_back(
      {explain,
       [a](const pc::Config& cfg, const std::vector<std::string>& extras) { return run_explain(*a, extras, cfg); },
       /*takes_extras=*/true});
}

}  // namespace progcache::cli
