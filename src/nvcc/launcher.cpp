// progcache as nvcc's compiler launcher: `progcache nvcc ARGS...` or
// `progcache /path/to/nvcc ARGS...` (CMAKE_CUDA_COMPILER_LAUNCHER=progcache).
//
// A command that compiles one .cu file to one output (-c, -dc, -cubin,
// -ptx, -fatbin, -optix-ir, -ltoir) is looked up in the root's "nvcc"
// store in two steps, as ccache's direct mode does:
//   1. the manifest key: nvcc's and the host compiler's identities, the
//      variables nvcc and the host compiler read, the working directory and
//      the options in canonical spelling. It names a manifest: the files the
//      last compile of this command read (from nvcc's own dependency output)
//      with their stat identities and digests, and the places where a header
//      that would shadow one of them must stay absent;
//   2. the result key: the manifest key and every listed file's path and
//      current content digest (a file whose stat changed is hashed again).
// A hit writes the output (and the -MF dependency file) atomically and
// replays what nvcc printed; nvcc does not run. Anything else runs nvcc
// unchanged, with its own output and exit status, and is counted with its
// reason (`progcache stats`). A cache that fails costs a compile, never the
// build: every store error falls back to running nvcc.
//
// Nothing here may wait on a file someone else controls: outputs and
// dependency files are read back only from regular files (opened without
// following symlinks, never blocking on a FIFO or device), the counters only
// from a regular file of the accepted root under a bounded lock wait, and
// objects (host code, linked into programs) are served and stored only where
// progcache::host_code_trust allows.
#include "nvcc/launcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "compile/scan_files.h"
#include "nvcc/counters.h"
#include "nvcc/counters_file.h"
#include "nvcc/environment.h"
#include "nvcc/launcher_impl.h"
#include "nvcc/manifest.h"
#include "nvcc/manifest_key.h"
#include "nvcc/nvcc_command.h"
#include "nvcc/programs.h"
#include "nvcc/relocation.h"
#include "nvcc/spawn.h"
#include "progcache/config.h"
#include "progcache/file_store.h"
#include "progcache/key.h"
#include "progcache/lock_file.h"
#include "progcache/status.h"
#include "progcache/trust.h"
#include "util/user_io.h"

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
namespace dt = progcache::detail;
using cli::fail;
using cli::k_exit_miss;
using cli::k_exit_usage;
using cli::OutputFile;
using cli::plain;
using cli::write_all_to;

}  // namespace

Outcome Launcher::run() {
  auto cfg = pc::resolve_config();
  if (!cfg.ok()) {
    if (m_explain) return Outcome::exit(fail(cfg.status()));
    std::fprintf(stderr, "progcache: not caching (%s)\n", plain(cfg.status()).c_str());
    return Outcome::unchanged();
  }
  // A settings file that cannot be used is skipped (defaults apply), and said.
  for (const auto& w : cfg->warnings) std::fprintf(stderr, "progcache: warning: %s\n", w.c_str());
  if (cfg->disabled) {  // PROGCACHE_DISABLE: as if no launcher were set
    if (m_explain) return Outcome::exit(said(k_exit_miss, "not cached: " + cfg->disabled_by() + ", nvcc runs alone"));
    return Outcome::unchanged();
  }
  // The root is judged before anything in it is read or written: a root
  // the file store refuses gets no counters, only nvcc.
  m_root = cfg->dir;
  pc::FileStoreOptions o = cfg->file_store_options();
  o.root = pc::join_path(m_root, std::string(k_store));
  o.codec.compression_level = cfg->compressing_store_level();
  if (m_explain) {
    // Asking changes nothing: the store is not opened (an open tidies a
    // shard, a lookup counts, stamps and drops a damaged entry); its
    // files are read as they are, where the store would accept the root.
    m_store_options = o;
  } else {
    auto store = pc::FileStore::open(o);
    if (!store.ok()) {
      std::fprintf(stderr, "progcache: not caching (%s)\n", plain(store.status()).c_str());
      return Outcome::unchanged();
    }
    m_store = std::move(*store);
  }
  m_stats.path = pc::join_path(o.root, std::string(k_stats_file));
  m_stats.sharing = o.sharing;
  if (struct stat st{}; ::stat(o.root.c_str(), &st) == 0) m_stats.group = st.st_gid;

  pc::nvcc::EnvFlags env;
  for (auto [name, value] : {std::pair{"NVCC_PREPEND_FLAGS", &env.prepend}, std::pair{"NVCC_APPEND_FLAGS", &env.append},
                             std::pair{"PTXAS_FLAGS", &env.ptxas}, std::pair{"CUDAFE_FLAGS", &env.cudafe}}) {
    if (const char* v = std::getenv(name)) *value = v;
  }
  // Every variable nvcc.profile names is keyed (its own content is keyed
  // by the file's identity); one it extends that may name files is refused.
  m_bin = dt::parent_of(real_path(m_nvcc));
  ProfileVariables profile;
  if (auto text = dt::read_regular(m_bin + "/nvcc.profile"); text.ok()) {
    profile = profile_variables(*text);
    m_toolkit_nvcc = true;
  } else {
    // nvcc reached through a wrapper (a script that runs the real one):
    // its profile is not known, so the variables a stock profile names
    // are keyed and none counts as replaced.
    profile.names = {"TOP",      "CICC_PATH",       "NVVMIR_LIBRARY_DIR", "LD_LIBRARY_PATH", "PATH",
                     "INCLUDES", "SYSTEM_INCLUDES", "LIBRARIES",          "CUDAFE_FLAGS",    "PTXAS_FLAGS"};
  }
  m_variables = keyed_variables(profile);
  m_cmd = parse_command(
      m_args, [this](const std::string& p) { return read_input(p); }, env);
  if (!m_cmd.uncacheable.empty()) return uncacheable(m_cmd.uncacheable);
  if (auto v = unfollowed_variable(m_variables, profile, m_cmd.mode == Mode::device_link)) {
    return uncacheable("variable '" + *v + "' set: nvcc reads it, and what it names is not keyed");
  }
  // The host compiler's preprocessor writes a dependency file these name.
  for (const char* v : {"DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"}) {
    if (std::getenv(v) != nullptr)
      return uncacheable("variable '" + std::string(v) + "' set: the host compiler writes a file");
  }
  // clang's driver adds, removes or replaces options from it (-include, -I).
  if (std::getenv("CCC_OVERRIDE_OPTIONS") != nullptr) {
    return uncacheable("variable 'CCC_OVERRIDE_OPTIONS' set: the host compiler's options are not those keyed");
  }
  // A hit renames a file over the output; a miss reads nvcc's output back.
  // Both only for a regular file (or none yet): a FIFO, a device, a
  // symbolic link (/dev/stdout) is nvcc's alone to write.
  std::vector<std::pair<std::string, std::string>> written = {{"output", m_cmd.output}};
  if (m_cmd.depfile) written.emplace_back("dependency file", *m_cmd.depfile);
  for (const auto& [what, path] : written) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      return uncacheable(std::string(what).append(" '").append(path).append("' is not a regular file"));
    }
  }
  // An object is host code, linked into programs: served only from a
  // private root or from signed, verified entries (trust.h).
  if (m_cmd.mode == Mode::object || m_cmd.mode == Mode::device_link) {
    if (const pc::CodeTrust trust = pc::host_code_trust(*cfg); !trust.disk) {
      return uncacheable("host code (an object) in a group-shared root needs signed entries (PROGCACHE_HMAC_KEY_FILE)");
    }
  }
  m_mkey = manifest_key(m_nvcc, m_cmd, m_variables);
  m_place_keyed = place_keyed(m_cmd);
  // Under a base directory, a second key with the checkout's paths
  // relative: looked up after the command's own, and joined only by
  // results that name no path (store_relocated), which the preprocessed
  // text (the toolkit's nvcc) shows.
  m_base_set = !cfg->base_dir.empty();
  if (m_base_set && !m_toolkit_nvcc) m_not_relocated = "nvcc through a wrapper: no preprocessed text";
  if (m_base_set && m_toolkit_nvcc) {
    auto reloc = relocation_for(cfg->base_dir, m_cmd);
    if (auto* r = std::get_if<Relocation>(&reloc)) {
      m_reloc = std::move(*r);
      m_relocated_key = manifest_key(m_nvcc, m_cmd, m_variables, &*m_reloc);
    } else {
      m_not_relocated = std::get<std::string>(reloc);
    }
  }
  if (m_explain) return Outcome::exit(explain());
  if (auto served = serve()) return Outcome::exit(*served);
  if (auto served = wait_for_another(cfg->lock_timeout, o.sharing == pc::Sharing::group)) {
    return Outcome::exit(*served);
  }
  return miss();
}

std::optional<int> Launcher::wait_for_another(std::chrono::milliseconds timeout, bool group) {
  bool waited = false;
  auto lock = pc::LockFile::acquire(pc::Env::posix(), pc::join_path(m_root, "locks"), "nvcc-" + m_mkey.hex(), timeout,
                                    &waited, group ? 02770 : 0700, group ? 0660 : 0600);
  if (!waited) {
    if (lock.ok()) m_lock.emplace(std::move(*lock));
    return std::nullopt;
  }
  count(m_stats, {Counter::waited});
  return serve();
}

std::optional<int> Launcher::serve() {
  std::optional<int> served;
  auto got = m_store->get(m_mkey);
  const pc::Artifact* text = got.ok() && got->has_value() ? (*got)->find("manifest") : nullptr;
  if (text != nullptr) m_manifest = decode_manifest(text->data.view());
  if (m_manifest) {
    m_had_manifest = true;
    serve_first_holding(*m_manifest, [&](const pc::Key& rkey) {
      served = serve_result(rkey);
      return served.has_value();
    });
    if (served) return served;
  }
  if (!m_relocated_key) return std::nullopt;
  auto relocated = m_store->get(*m_relocated_key);
  const pc::Artifact* rtext = relocated.ok() && relocated->has_value() ? (*relocated)->find("manifest") : nullptr;
  const auto m = rtext != nullptr ? decode_manifest(rtext->data.view()) : std::nullopt;
  if (!m) return std::nullopt;
  serve_first_holding(*m, [&](const pc::Key& k) {
    served = serve_relocated(k);
    return served.has_value();
  });
  return served;
}

std::optional<int> Launcher::serve_relocated(const pc::Key& k) {
  auto pointer = m_store->get(k);
  if (!pointer.ok() || !pointer->has_value()) return std::nullopt;
  const pc::Artifact* raw = (*pointer)->find("result");
  const pc::Artifact* tmpl = (*pointer)->find("depfile-relocated");
  if (raw == nullptr || m_cmd.depfile.has_value() != (tmpl != nullptr)) return std::nullopt;
  auto rkey = pc::Key::from_raw(raw->data.view());
  if (!rkey.ok()) return std::nullopt;
  auto entry = m_store->get(*rkey);
  if (!entry.ok() || !entry->has_value()) return std::nullopt;
  const pc::Artifact* output = (*entry)->find("output");
  if (output == nullptr || (*entry)->find("stdout") != nullptr || (*entry)->find("stderr") != nullptr) {
    return std::nullopt;
  }
  std::optional<std::string> depfile;
  if (tmpl != nullptr) depfile = render_depfile(*m_reloc, tmpl->data.view());
  if (!write_result(output->data.view(), depfile, nullptr)) return std::nullopt;
  count(m_stats, {Counter::hits, Counter::relocated_hits});
  return 0;
}

std::optional<std::string> Launcher::unwritable() const {
  for (const std::string* path : {&m_cmd.output, m_cmd.depfile ? &*m_cmd.depfile : nullptr}) {
    if (path == nullptr) continue;
    const bool exists = ::access(path->c_str(), F_OK) == 0;
    if (exists && ::access(path->c_str(), W_OK) != 0) return "'" + *path + "' cannot be written";
    const std::string dir = dt::parent_of(*path).empty() ? "." : dt::parent_of(*path);
    if (struct stat st{}; ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return "the directory of '" + *path + "' does not exist";
    }
    // A new file is made in its directory (an existing one is written in place).
    if (!exists && ::access(dir.c_str(), W_OK | X_OK) != 0) {
      return "the directory of '" + *path + "' cannot be written";
    }
  }
  // nvcc writes its temporary files under $TMPDIR first: where it could
  // not, it fails, and so must this.
  std::error_code ec;
  const auto tmpdir = std::filesystem::temp_directory_path(ec);
  if (ec || ::access(tmpdir.c_str(), W_OK | X_OK) != 0) return std::string("$TMPDIR cannot be written");
  return std::nullopt;
}

std::optional<int> Launcher::serve_result(const pc::Key& rkey, bool count_hit) {
  auto entry = m_store->get(rkey);
  if (!entry.ok() || !entry->has_value()) return std::nullopt;
  const pc::Artifact* output = (*entry)->find("output");
  const pc::Artifact* depfile = (*entry)->find("depfile");
  if (output == nullptr || (m_cmd.depfile.has_value() != (depfile != nullptr))) return std::nullopt;
  const auto dep = depfile != nullptr ? std::optional<std::string_view>(depfile->data.view()) : std::nullopt;
  if (!write_result(output->data.view(), dep, &**entry)) return std::nullopt;
  if (count_hit) count(m_stats, {Counter::hits});
  return 0;
}

bool Launcher::write_result(std::string_view output, const std::optional<std::string_view>& depfile,
                            const pc::Entry* printed) {
  if (unwritable()) return false;
  // Both files are written before either replaces anything: a dependency
  // file that cannot be written (its directory gone) leaves the output as
  // it was, as nvcc's failure does.
  OutputFile out;
  OutputFile dep;
  if (!out.open(m_cmd.output).ok() || !out.write(output).ok()) return false;
  if (m_cmd.depfile && (!depfile || !dep.open(*m_cmd.depfile).ok() || !dep.write(*depfile).ok())) return false;
  if (!out.commit().ok()) return false;
  if (m_cmd.depfile && !dep.commit().ok()) return false;
  if (printed != nullptr) {
    for (const auto& [name, fd] : {std::pair{"stdout", 1}, std::pair{"stderr", 2}}) {
      if (const pc::Artifact* a = printed->find(name)) (void)write_all_to(fd, a->data.view(), name);
    }
  }
  return true;
}

Outcome Launcher::miss() {
  const std::int64_t start = tick_start();
  m_dirs_at_start = search_dir_identities();
  // Through a wrapper script, what `--dryrun` prints is the wrapper's to
  // decide, and running it twice may do twice what it does: direct key
  // only. A device link has no preprocessed text.
  if (!m_toolkit_nvcc || m_cmd.mode == Mode::device_link) return compile(start, std::nullopt);
  // -src-in-ptx copies the source lines, comments and all, into the PTX:
  // a comment edit changes the output, not the text, so the text is
  // computed for its list of files alone (below).
  if (m_had_manifest && !m_cmd.source_in_ptx) {
    auto pre = preprocess(start);
    if (pre) {
      if (!pre->printed) {
        if (auto served = serve_preprocessed(*pre, start)) return Outcome::exit(*served);
      }
    }
    return compile(start, pre ? std::optional(*pre) : std::nullopt);
  }
  std::optional<Preprocessed> pre;
  std::thread beside([&] { pre = preprocess(start); });
  const Outcome outcome = compile(start, std::nullopt, &beside, &pre);
  if (beside.joinable()) beside.join();
  return outcome;
}

Outcome Launcher::not_stored(const std::string& why) {
  count(m_stats, Tally::not_stored, why);
  return Outcome::exit(0);
}

Outcome Launcher::uncacheable(const std::string& why) {
  if (m_explain) return Outcome::exit(said(k_exit_miss, "not cached: " + why));
  count(m_stats, Tally::uncacheable, why);
  return Outcome::unchanged();
}

pc::Result<std::string> Launcher::read_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return pc::errno_status(errno, "cannot read", path);
  m_inputs_read.emplace(path, dt::stamp_of(st));
  return dt::read_regular(path);
}

bool Launcher::named_input_changed() const {
  for (const auto& [path, stamp] : m_inputs_read) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !(dt::stamp_of(st) == stamp)) return true;
  }
  return false;
}

bool is_masquerade(std::string_view argv0) {
  const auto slash = argv0.rfind('/');
  return (slash == std::string_view::npos ? argv0 : argv0.substr(slash + 1)) == "nvcc";
}

bool is_launcher_call(std::string_view first) {
  return first == "nvcc" || first.find('/') != std::string_view::npos;
}

int run_launcher(int argc, char** argv) {
  const std::string program = argv[0];
  std::vector<std::string> args(argv + 1, argv + argc);
  auto nvcc = find_program(program);
  if (!nvcc) {
    std::fprintf(stderr, "progcache: %s: command not found\n", program.c_str());
    return 127;
  }
  // The one place the launcher hands the process to nvcc.
  const Outcome outcome = Launcher(*nvcc, args).run();
  if (outcome.run_nvcc) exec_nvcc(*nvcc, args);
  return outcome.status;
}

int explain_launcher_command(int argc, char** argv) {
  const std::string program = argv[0];
  auto nvcc = find_program(program);
  if (!nvcc) {
    std::fprintf(stderr, "progcache: %s: command not found\n", program.c_str());
    return k_exit_usage;
  }
  // Explaining runs nothing: every outcome is an answer.
  return Launcher(*nvcc, std::vector<std::string>(argv + 1, argv + argc), /*explain=*/true).run().status;
}

}  // namespace progcache::nvcc
