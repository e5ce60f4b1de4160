// nvcc/launcher_preprocess.cpp — the preprocessed text: what nvcc's
// preprocessing steps make of the files now, and the result it led to.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "compile/depfile.h"
#include "compile/scan_files.h"
#include "nvcc/counters.h"
#include "nvcc/counters_file.h"
#include "nvcc/host_compiler.h"
#include "nvcc/launcher_impl.h"
#include "nvcc/manifest.h"
#include "nvcc/nvcc_command.h"
#include "nvcc/places.h"
#include "nvcc/programs.h"
#include "nvcc/relocation.h"
#include "nvcc/spawn.h"
#include "progcache/hash.h"
#include "progcache/key.h"
#include "util/user_io.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
namespace dt = progcache::detail;

}  // namespace

std::optional<Launcher::Preprocessed> Launcher::preprocess(std::int64_t start) {
  // One minute for all of it (a preprocessor run takes well under a
  // second): past it, no text, and nvcc's compile is what counts.
  const std::int64_t deadline = dt::now_ns() + 60'000'000'000;
  auto time_left = [&] { return std::max<std::int64_t>(1, deadline - dt::now_ns()); };
  std::vector<std::string> dry_args = {m_nvcc};
  dry_args.insert(dry_args.end(), m_args.begin(), m_args.end());
  dry_args.emplace_back("--dryrun");
  const Ran dry = run_child(m_nvcc, dry_args, false, true, time_left());
  if (dry.status != 0) return std::nullopt;
  auto plan = parse_dryrun(dry.err);
  if (!plan.ok()) return std::nullopt;
  // With --threads, nvcc prints the steps in the order its threads reach
  // them, which varies from run to run: the key takes them in one order.
  std::sort(plan->preprocess.begin(), plan->preprocess.end());
  // The environment nvcc's tools get: this one, with nvcc's variables.
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : plan->env) vars[k] = v;
  std::vector<std::string> env;
  env.reserve(vars.size());
  for (const auto& [k, v] : vars) env.push_back(std::string(k).append("=").append(v));
  KeyBuilder kb("nvcc-preprocessed");
  kb.add_bytes("manifest", m_mkey.view());
  std::vector<std::string> deps;
  std::set<std::string> seen;
  std::set<std::string> named;  // every file a line marker of the output names
  bool printed = false;
  bool names_place = false;
  for (const auto& step : plan->preprocess) {
    const auto program = find_on(step.front(), vars["PATH"]);
    if (!program) return std::nullopt;
    const auto text_path = make_temp_file(".ii");
    const auto deps_path = make_temp_file(".d");
    struct Remover {
      std::vector<std::string> paths;
      ~Remover() {
        for (const auto& p : paths) ::unlink(p.c_str());
      }
    } remover;
    if (text_path) remover.paths.push_back(*text_path);
    if (deps_path) remover.paths.push_back(*deps_path);
    if (!text_path || !deps_path) return std::nullopt;
    std::vector<std::string> argv = step;
    argv.insert(argv.end(), {"-o", *text_path, "-MD", "-MF", *deps_path});
    if (dt::now_ns() >= deadline) return std::nullopt;
    const Ran ran = run_child(*program, argv, false, true, time_left(), &env);
    if (ran.status != 0) return std::nullopt;
    if (!ran.out.empty() || !ran.err.empty()) printed = true;
    auto text = dt::read_regular(*text_path);
    auto listed = dt::read_regular(*deps_path);
    if (!text.ok() || !listed.ok()) return std::nullopt;
    auto files = dt::parse_depfile(*listed);
    if (!files.ok()) return std::nullopt;
    for (const auto& w : step) kb.add_string("word", w);
    marker_names(*text, named);
    if (m_reloc && text_names_place(*text, m_reloc->base)) names_place = true;
    const auto sum = pc::sha256(*text);
    kb.add_bytes("text", pc::as_view(sum));
    for (auto& f : *files) {
      if (seen.insert(f).second) deps.push_back(std::move(f));
    }
  }
  // What nvcc's generated files will include, found now.
  const auto hosts = host_compilers(m_cmd);
  auto system = host_system_dirs(hosts.front());
  if (!system) return std::nullopt;
  // A specs file changes the compile, not the text: none may be there.
  if (std::vector<std::string> no_specs; specs_places(hosts.front(), no_specs)) return std::nullopt;
  std::error_code ec;
  const auto chain = search_chain(m_cmd, m_bin, *system, host_added_dirs(hosts.front()));
  auto generated = generated_headers(chain, std::filesystem::temp_directory_path(ec).string(),
                                     trusted_roots(host_own_dirs(hosts.front())));
  if (!generated) return std::nullopt;
  for (const auto& [place, digest] : *generated) kb.add_string("generated-header", place).add_bytes("sha256", digest);
  // What was read must be what is there: nothing changed since `start`.
  // Each file's stamp is kept: what nvcc reads, or what is recorded, must
  // be the same files (a directory renamed, a link retargeted leaves each
  // file's own times as they were, not its device and inode).
  if (search_dir_identities() != m_dirs_at_start) return std::nullopt;
  std::map<std::string, dt::FileStamp> stamps;
  const auto tops = tops_of(chain);
  for (const auto& d : deps) {
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0 || dt::stamp_of(st).ctime > start || link_made_since(d, start) ||
        moved_below(d, tops, start)) {
      return std::nullopt;
    }
    stamps.emplace(d, dt::stamp_of(st));
  }
  const bool unread = std::any_of(named.begin(), named.end(), [&](const std::string& n) {
    return !(n.starts_with("<") && n.ends_with(">")) && seen.count(n) == 0;
  });
  return Preprocessed{kb.finish(), std::move(deps), std::move(stamps), printed, unread, names_place};
}

bool Launcher::replayable(const pc::Entry& entry, const pc::Key& rkey, const ManifestRecord& now) const {
  const auto then = m_manifest ? m_manifest->find(rkey) : std::nullopt;
  if (!then) return false;
  std::map<std::string, std::string> before;
  for (const auto& f : then->files) before.emplace(f.path, f.sha256);
  std::set<std::string> changed;
  for (const auto& f : now.files) {
    const auto b = before.find(f.path);
    if (b == before.end() || b->second != f.sha256) changed.insert(f.path);
    if (b != before.end()) before.erase(b);
  }
  for (const auto& [path, sum] : before) changed.insert(path);  // read then, not now
  for (const char* name : {"stdout", "stderr"}) {
    const pc::Artifact* a = entry.find(name);
    if (a == nullptr) continue;
    const std::string_view printed = a->data.view();
    for (const auto& path : changed) {
      const auto slash = path.rfind('/');
      const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
      if (printed.find(base) != std::string_view::npos) return false;
    }
  }
  return true;
}

std::optional<int> Launcher::serve_preprocessed(const Preprocessed& pre, std::int64_t start) {
  auto pointer = m_store->get(pre.key);
  if (!pointer.ok() || !pointer->has_value()) return std::nullopt;
  const pc::Artifact* raw = (*pointer)->find("result");
  if (raw == nullptr) return std::nullopt;
  auto rkey = pc::Key::from_raw(raw->data.view());
  if (!rkey.ok()) return std::nullopt;
  auto entry = m_store->get(*rkey);
  if (!entry.ok() || !entry->has_value()) return std::nullopt;
  if (pre.names_unread_file && line_directive_read()) return std::nullopt;
  // Recorded before it is served: what is recorded is what was read;
  // what cannot be recorded (a place or a file the record refuses) is
  // not served by its text either.
  auto record = build_record(pre.deps, start);
  if (!std::holds_alternative<ManifestRecord>(record)) return std::nullopt;
  if ((*entry)->find("stdout") != nullptr || (*entry)->find("stderr") != nullptr) {
    const auto* now = std::get_if<ManifestRecord>(&record);
    if (now == nullptr || m_line_directive || !replayable(**entry, *rkey, *now)) return std::nullopt;
  }
  if (auto served = serve_result(*rkey, /*count_hit=*/false); !served) return std::nullopt;
  count(m_stats, {Counter::hits, Counter::preprocessed_hits});
  if (auto* rec = std::get_if<ManifestRecord>(&record); rec != nullptr && reads_the_same(pre, *rec)) {
    rec->result = *rkey;
    (void)put_manifest(m_mkey, *rec);
  }
  return 0;
}

bool Launcher::reads_the_same(const Preprocessed& pre, const ManifestRecord& record) {
  if (pre.stamps.size() != record.files.size()) return false;
  return std::all_of(record.files.begin(), record.files.end(), [&](const ManifestFile& f) {
    const auto it = pre.stamps.find(f.path);
    return it != pre.stamps.end() && it->second == f.stamp;
  });
}

}  // namespace progcache::nvcc
