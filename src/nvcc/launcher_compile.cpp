// nvcc/launcher_compile.cpp — a miss: nvcc runs, and what it made is
// stored under the files it read (and, under a base directory, the
// relocated key).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
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
#include "progcache/key.h"
#include "progcache/status.h"
#include "util/user_io.h"

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
namespace dt = progcache::detail;
using nlohmann::json;

// Whether `data` can be what nvcc writes in `mode`: ELF for objects and
// cubins, the fatbin header for fatbins, something for the rest.
bool output_of_its_kind(Mode mode, std::string_view data) {
  switch (mode) {
    case Mode::object:
    case Mode::device_link:
    case Mode::cubin:
      return data.size() >= 64 && data.starts_with(
                                      "\x7f"
                                      "ELF");
    case Mode::fatbin:
      return data.size() >= 16 && data.starts_with("\x50\xed\x55\xba");
    default:
      return !data.empty();
  }
}

// The largest output or dependency file read back into an entry.
constexpr std::uint64_t k_max_output_bytes = std::uint64_t{1} << 32;

// A file nvcc wrote, read back for the entry: only a regular file reached
// without a symbolic link, opened so that a FIFO or device never blocks (an
// output named /dev/stdout, or replaced by a FIFO while nvcc ran, must not
// hang the build after nvcc returned).
pc::Result<std::string> read_back(const std::string& path) {
  return pc::read_regular_file(pc::Env::posix(), path, k_max_output_bytes, pc::OpenMode::read);
}

}  // namespace

Outcome Launcher::compile(std::int64_t start, std::optional<Preprocessed> pre, std::thread* beside,
                          std::optional<Preprocessed>* beside_result) {
  std::vector<std::string> args = m_args;
  std::optional<std::string> own_depfile;
  // For an output of device code alone, a -MD nvcc is given adds a
  // preprocessor run of its own, which prints the source's warnings a
  // second time: the toolkit's nvcc then runs the command as given, and
  // the files it read are those its preprocessing steps read (the text,
  // computed beside it). An object's -MD adds no run.
  const bool deps_from_text =
      !m_cmd.depfile && m_cmd.mode != Mode::object && m_toolkit_nvcc && (beside != nullptr || pre.has_value());
  if (!m_cmd.depfile && !deps_from_text) {
    own_depfile = make_temp_file(".d");
    if (!own_depfile) {
      if (beside != nullptr) beside->join();
      count(m_stats, Tally::not_stored, "no temporary file for the dependency list");
      return Outcome::unchanged();
    }
    if (m_cmd.mode == Mode::device_link) {
      // The host compiler's, for the registration stub it compiles (the
      // one step of a device link that reads headers); its output is
      // the same with it (tests/nvcc_launcher_test.cpp). nvcc splits the
      // value at commas and hands it through a shell: a name a shell or
      // the split would change ($TMPDIR's) cannot be given.
      if (own_depfile->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+") !=
          std::string::npos) {
        ::unlink(own_depfile->c_str());
        count(m_stats, Tally::not_stored, "the name of $TMPDIR cannot be handed to the host compiler");
        return Outcome::unchanged();
      }
      args.push_back("-Xcompiler=-MD,-MF," + *own_depfile);
    } else {
      args.insert(args.end(), {"-MD", "-MF", *own_depfile});
    }
  }
  if (m_cmd.mode == Mode::device_link) {
    for (const auto& in : m_cmd.inputs) {
      struct stat st {};
      if (::stat(in.c_str(), &st) == 0) m_link_inputs_before.emplace(in, dt::stamp_of(st));
    }
  }
  const Ran ran = run_capturing(m_nvcc, args);
  pc::Result<std::string> deps_text = std::string();
  if (!deps_from_text) deps_text = read_back(own_depfile ? *own_depfile : *m_cmd.depfile);
  if (own_depfile) ::unlink(own_depfile->c_str());
  if (beside != nullptr) {
    beside->join();
    pre = *beside_result;
  }
  if (ran.status != 0) {
    count(m_stats, {Counter::compile_failed});
    return Outcome::exit(ran.status);
  }
  count(m_stats, {Counter::misses});
  if (named_input_changed()) return not_stored("an input changed while nvcc ran");
  if (pre && pre->names_unread_file) {
    if (auto why = line_directive_read()) return not_stored(*why);
  }
  pc::Result<std::vector<std::string>> deps = std::vector<std::string>();
  if (deps_from_text) {
    if (!pre) return not_stored("no dependency list: the preprocessing steps failed");
    deps = pre->deps;
  } else {
    if (!deps_text.ok()) return not_stored("no dependency list from nvcc");
    deps = dt::parse_depfile(*deps_text);
  }
  if (!deps.ok() || deps->empty()) return not_stored("no dependency list from nvcc");
  if (m_cmd.mode == Mode::device_link) {
    // The stub's other two inputs are nvcc's own temporary files, made
    // from the inputs and gone by now (one still there is not nvcc's,
    // and is keyed as any other).
    std::error_code ec;
    const std::string tmpdir = dt::normal(std::filesystem::temp_directory_path(ec).string());
    std::erase_if(*deps, [&](const std::string& d) {
      const std::string name = d.substr(d.rfind('/') + 1);
      struct stat st {};
      return dt::parent_of(dt::normal(d)) == tmpdir && name.starts_with("tmpxft_") &&
             (name.ends_with(".reg.c") || name.ends_with(".fatbin.c")) && ::lstat(d.c_str(), &st) != 0;
    });
  }
  auto record = build_record(*deps, start);
  if (auto* why = std::get_if<std::string>(&record)) return not_stored(*why);
  auto& m = std::get<ManifestRecord>(record);
  auto output = read_back(m_cmd.output);
  if (!output.ok()) return not_stored("the output cannot be read back as a regular file");
  // nvcc (ptxas) can exit 0 having written an empty or cut-short file (a
  // full disk): what it wrote must at least be of its kind.
  if (!output_of_its_kind(m_cmd.mode, *output)) return not_stored("the output is empty or not of its kind");
  // What nvcc printed quotes lines of the files it names; one a #line
  // directive names is not keyed.
  if ((!ran.out.empty() || !ran.err.empty()) && m_line_directive) {
    return not_stored("a #line directive names a file what nvcc printed may quote, and it is not keyed");
  }
  // Under a base directory, the dependency file as a template (before it
  // moves into the entry); nullopt: it cannot be relocated.
  std::optional<std::string> dep_template;
  if (m_reloc && m_cmd.depfile) dep_template = depfile_template(*m_reloc, *deps_text);
  std::vector<pc::Artifact> artifacts;
  artifacts.push_back({"output", pc::Bytes::adopt(std::move(*output))});
  if (m_cmd.depfile) artifacts.push_back({"depfile", pc::Bytes::adopt(std::move(*deps_text))});
  if (!ran.out.empty()) artifacts.push_back({"stdout", pc::Bytes::copy_of(ran.out)});
  if (!ran.err.empty()) artifacts.push_back({"stderr", pc::Bytes::copy_of(ran.err)});
  const json meta = {{"kind", std::string("nvcc-") + mode_name(m_cmd.mode)}, {"name", m_cmd.input}};
  std::vector<std::pair<std::string, std::string>> files;
  files.reserve(m.files.size());
  for (const auto& f : m.files) files.emplace_back(f.path, f.sha256);
  const pc::Key rkey = result_key(m_mkey, files);
  m.result = rkey;
  if (auto st = m_store->put(rkey, pc::Entry(meta.dump(), std::move(artifacts))); !st.ok()) {
    return not_stored("the store refused the entry");
  }
  if (!put_manifest(m_mkey, m).ok()) return not_stored("the store refused the manifest");
  // Under a base directory: the result under the relocated key too, or
  // why not (counted, by reason).
  if (m_reloc) {
    std::optional<std::string> why;
    if (!pre) {
      why = "no preprocessed text to show the output names no path";
    } else if (pre->printed || !ran.out.empty() || !ran.err.empty()) {
      why = "nvcc printed something, which may name a path";
    } else if (pre->names_place) {
      why =
          "the preprocessed text names a path under the base (__FILE__, a string, std::source_location) or opens an "
          "anonymous namespace";
    } else if (m_line_directive) {
      why = "a #line directive";
    } else if (!reads_the_same(*pre, m)) {
      why = "the preprocessed text is not of the files nvcc read";
    } else if (m_cmd.depfile && !dep_template) {
      why = "the dependency file names a path under the base that cannot be relocated";
    } else {
      why = store_relocated(m, dep_template);
    }
    if (why) m_not_relocated = std::move(*why);
  }
  if (m_base_set && !m_not_relocated.empty()) count(m_stats, Tally::not_relocated, m_not_relocated);
  // The preprocessed text points at this result only when it is the text
  // nvcc compiled: every file it read unchanged since `start` (checked
  // when it was made) and among those nvcc read.
  if (pre && !pre->printed && !m_cmd.source_in_ptx && reads_the_same(*pre, m)) {
    const json pmeta = {{"kind", "nvcc-preprocessed"}, {"name", m_cmd.input}};
    (void)m_store->put(pre->key, pc::Entry(pmeta.dump(), {{"result", pc::Bytes::copy_of(rkey.view())}}));
  }
  return Outcome::exit(0);
}

std::optional<std::string> Launcher::store_relocated(const ManifestRecord& m,
                                                     const std::optional<std::string>& dep_template) {
  for (const auto& op : m_absolute_operands) {
    if (m_reloc->under(dt::normal(op))) return "a header is included by its absolute path under the base";
  }
  // Every directory searched under the base must be one the command
  // names (and so relocated): nvcc's own or the host compiler's is the
  // same string in every checkout.
  const auto system = host_system_dirs(host_compilers(m_cmd).front());
  if (!system) return std::string("the include directories of the host compiler cannot be read");
  std::set<std::string> named;
  for (const auto* list : {&m_cmd.include_dirs, &m_cmd.system_dirs}) {
    for (const auto& d : *list) named.insert(dt::normal(d));
  }
  for (const auto& d : search_chain(m_cmd, m_bin, *system, host_added_dirs(host_compilers(m_cmd).front()))) {
    const std::string n = dt::normal(d);
    if (n.starts_with("/") && m_reloc->under(n) && named.count(n) == 0) {
      return "search directory '" + n + "' is under the base, and not one the command names";
    }
  }
  auto r = relocated_record(*m_reloc, m);
  if (!r) return std::string("a path read is under the base but cannot be relocated");
  std::vector<std::pair<std::string, std::string>> files;
  files.reserve(r->files.size());
  for (const auto& f : r->files) files.emplace_back(f.path, f.sha256);
  const pc::Key k = result_key(*m_relocated_key, files);
  std::vector<pc::Artifact> artifacts;
  artifacts.push_back({"result", pc::Bytes::copy_of(m.result.view())});
  if (dep_template) artifacts.push_back({"depfile-relocated", pc::Bytes::copy_of(*dep_template)});
  const json meta = {{"kind", "nvcc-relocated"}, {"name", m_cmd.input}};
  if (!m_store->put(k, pc::Entry(meta.dump(), std::move(artifacts))).ok()) {
    return std::string("the store refused the entry");
  }
  r->result = k;
  if (!put_manifest(*m_relocated_key, *r).ok()) return std::string("the store refused the manifest");
  return std::nullopt;
}

pc::Status Launcher::put_manifest(const pc::Key& mkey, const ManifestRecord& record) {
  const json mmeta = {{"kind", "nvcc-manifest"}, {"name", m_cmd.input}};
  return m_store->put(
      mkey,
      pc::Entry(mmeta.dump(), {{"manifest", pc::Bytes::adopt(encode_manifest(add_result(merge_base(mkey), record)))}}));
}

std::optional<Manifest> Launcher::merge_base(const pc::Key& mkey) {
  auto got = m_store->get(mkey);
  if (!got.ok() || !got->has_value()) return std::nullopt;
  const pc::Artifact* text = (*got)->find("manifest");
  if (text == nullptr) return std::nullopt;
  return decode_manifest(text->data.view());
}

}  // namespace progcache::nvcc
