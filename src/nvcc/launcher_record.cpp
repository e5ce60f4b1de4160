// nvcc/launcher_record.cpp — what a compile read, as a manifest record:
// the files, the places that must stay absent or present, and what keeps
// a result from being stored.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "compile/empty_places.h"
#include "compile/include_lexer.h"
#include "compile/scan_files.h"
#include "nvcc/environment.h"
#include "nvcc/host_compiler.h"
#include "nvcc/launcher_impl.h"
#include "nvcc/manifest.h"
#include "nvcc/nvcc_command.h"
#include "nvcc/places.h"
#include "nvcc/programs.h"
#include "nvcc/relocation.h"
#include "progcache/hash.h"
#include "util/user_io.h"

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
namespace dt = progcache::detail;

// Why a source or header's text makes the output depend on more than the
// files and key hold, or nullopt: the assembler's .incbin reads a file no
// dependency output lists; __DATE__ and __TIME__ change with the clock
// (unless SOURCE_DATE_EPOCH, which is keyed, fixes them), __TIMESTAMP__
// with the file's mtime (ccache refuses the same).
std::optional<std::string> unkeyable_content(std::string_view text) {
  if (text.find(".incbin") != std::string_view::npos) return "an input uses .incbin: the file it reads is not keyed";
  if (text.find("__TIMESTAMP__") != std::string_view::npos) return "an input uses __TIMESTAMP__";
  if (std::getenv("SOURCE_DATE_EPOCH") == nullptr &&
      (text.find("__DATE__") != std::string_view::npos || text.find("__TIME__") != std::string_view::npos)) {
    return "an input uses __DATE__ or __TIME__ (set SOURCE_DATE_EPOCH to cache it)";
  }
  return std::nullopt;
}

bool uses_import(const std::vector<dt::Directive>& directives) {
  return std::any_of(directives.begin(), directives.end(), [](const dt::Directive& d) { return d.import; });
}

}  // namespace

std::variant<ManifestRecord, std::string> Launcher::build_record(const std::vector<std::string>& deps,
                                                                 std::int64_t start) {
  // The search the preprocessor made: the host compiler's own
  // directories as it prints them, after those of the command and the
  // environment.
  const auto hosts = host_compilers(m_cmd);
  auto system = host_system_dirs(hosts.front());
  if (!system) return std::string("the host compiler's include directories cannot be read");
  if (host_adds_quoted_dirs(hosts.front())) {
    return std::string("the host compiler, a script, adds directories searched for quoted includes alone (-iquote)");
  }
  std::vector<std::string> trusted = trusted_roots(host_own_dirs(hosts.front()));
  // The toolkit beside nvcc; through a wrapper, the one whose
  // cuda_runtime.h the compile read (<toolkit>/targets/<t>/include).
  const bool device_link = m_cmd.mode == Mode::device_link;
  std::string toolkit_bin = m_bin;
  std::string stub;  // a device link's registration stub, <bin>/crt/link.stub
  if (device_link) {
    // A device link's one preprocessor run is the host compiler's, of
    // that stub, with -I. first; the toolkit is the stub's, also
    // through a wrapper of nvcc.
    const auto it =
        std::find_if(deps.begin(), deps.end(), [](const std::string& d) { return d.ends_with("/crt/link.stub"); });
    if (it == deps.end()) return std::string("no registration stub in the device link's dependency list");
    stub = *it;
    toolkit_bin = dt::parent_of(dt::parent_of(stub));
    trusted.push_back(dt::real_or_normal(dt::parent_of(toolkit_bin)));
  } else if (!m_toolkit_nvcc || toolkit_dirs(m_bin, "include").empty()) {
    for (const auto& d : deps) {
      if (!d.ends_with("/cuda_runtime.h")) continue;
      toolkit_bin = dt::join(dt::parent_of(dt::parent_of(dt::parent_of(dt::real_or_normal(d)))), "bin");
      trusted.push_back(dt::parent_of(toolkit_bin));
      break;
    }
  }
  Command searched = m_cmd;
  if (device_link) searched.include_dirs.insert(searched.include_dirs.begin(), ".");
  const auto chain = search_chain(searched, toolkit_bin, *system, host_added_dirs(hosts.front()));
  const auto tops = tops_of(chain);
  Places places(chain, deps, std::move(trusted));
  std::vector<std::string> no_specs;
  if (auto why = specs_places(hosts.front(), no_specs)) return *why;
  for (const auto& p : no_specs) places.absent_place(p);
  std::string source_dir = dt::parent_of(m_cmd.input).empty() ? "." : dt::parent_of(m_cmd.input);
  std::vector<Generated> todo;
  std::vector<std::string> binaries;  // read whole by nvlink, not preprocessed
  // Places the generated files' closure found: read, or perhaps read, by
  // a compile no dependency list speaks for (kept as they are below).
  std::set<std::string> unlisted_reads;
  // Whether a file read has an #import, for which gcc compares the file
  // imported with every file found before it, read or not (one found by
  // __has_include too): skipped, where one has its size, time and text.
  bool imports = false;
  // A host compiler -include file (read by name, keyed by contents) is
  // included first: gcc looks for its .gch beside it first.
  for (const auto& f : m_cmd.read_files) places.no_precompiled(f.path);
  if (device_link) {
    source_dir = dt::parent_of(stub);
    places.precompiled({"stdc-predef.h", "stddef.h", "crt/host_defines.h", "fatbinary_section.h"});
    // nvcc's fatbin source, in $TMPDIR, includes "fatbinary_section.h":
    // looked for beside it first (the stub's dependency list names the
    // one found, not the places before it).
    std::error_code ec;
    const auto found_section =
        places.probe_generated("fatbinary_section.h", std::filesystem::temp_directory_path(ec).string());
    if (!found_section) {
      return std::string("a header nvcc's generated files include cannot be found: fatbinary_section.h");
    }
    unlisted_reads.insert(*found_section);
    auto found = link_files(places, toolkit_bin);
    if (auto* why = std::get_if<std::string>(&found)) return *why;
    binaries = std::move(std::get<std::vector<std::string>>(found));
  } else {
    places.probe_pre_include("cuda_runtime.h");  // nvcc's own -include
    for (const auto& f : m_cmd.pre_includes) places.probe_pre_include(f);
    // The headers nvcc's generated files include, and theirs in turn.
    std::error_code ec;
    const std::string tmpdir = std::filesystem::temp_directory_path(ec).string();
    // None is in the dependency list: each is read and judged as a file
    // the compile read is, and so is every header it includes, to the end.
    for (const char* name : {"crt/host_runtime.h", "fatbinary_section.h"}) {
      const auto found = places.probe_generated(name, tmpdir);
      if (!found) return std::string("a header nvcc's generated files include cannot be found: ") + name;
      unlisted_reads.insert(*found);
      todo.push_back({*found, true});
    }
  }
  std::set<std::string> generated_seen;
  while (!todo.empty()) {
    const Generated g = std::move(todo.back());
    todo.pop_back();
    // A header not followed (below the first level, the toolkit's or
    // the host compiler's own) is a place its includer's probe recorded.
    if (!g.expand) continue;
    const std::string& path = g.place;
    if (!generated_seen.insert(dt::real_or_normal(path)).second) continue;
    // A directory a probe found (a macro's body that looks like a name)
    // only has to stay there, as the probe recorded.
    if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    auto text = dt::read_regular(path);
    if (!text.ok()) return "a header nvcc's generated files include cannot be read: '" + path + "'";
    // The toolkit's and the host compiler's own headers are taken as they
    // are (this is a superset of what the compile reads: every branch's
    // includes); one of the command's directories is judged.
    const dt::Scan read = dt::scan(*text);
    imports = imports || uses_import(read.directives);
    if (!places.trusted(path)) {
      if (auto why = judge_text(*text, read.facts)) return *why;
    }
    std::vector<std::string> inner;
    if (auto why = places.probe_file(path, read.directives, &inner)) return *why;
    for (auto& p : inner) {
      unlisted_reads.insert(p);
      todo.push_back({p, !places.trusted(p)});
    }
  }
  ManifestRecord m;
  const std::int64_t now = dt::now_ns();
  std::vector<std::string> read = deps;
  read.insert(read.end(), binaries.begin(), binaries.end());
  for (std::size_t i = 0; i < read.size(); ++i) {
    const std::string& path = read[i];
    const bool binary = i >= deps.size();
    struct stat st {};
    if (path.find('\n') != std::string::npos) return std::string("an input's path holds a newline");
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::string("an input vanished");
    const dt::FileStamp stamp = dt::stamp_of(st);
    // A change stamps ctime with the time it was made, which no one can set;
    // mtime can be anything (an archive from a machine whose clock runs
    // ahead, touch -d): a file whose mtime alone is later was not changed.
    if (stamp.ctime > start || link_made_since(path, start)) return std::string("an input changed while nvcc ran");
    // A device link's inputs are judged by the stamps they had before
    // nvcc ran (their directory is where the output is written, so its
    // own times move); every other file by the directories on its way.
    if (binary) {
      const auto before = m_link_inputs_before.find(path);
      if (before != m_link_inputs_before.end() && !(before->second == stamp)) {
        return std::string("an input changed while nvcc ran");
      }
    } else if (moved_below(path, tops, start)) {
      return std::string("an input changed while nvcc ran");
    }
    auto text = dt::read_regular(path);
    if (!text.ok()) return std::string("an input cannot be read");
    const auto sum = pc::sha256(*text);
    if (!binary) {
      places.found(path, source_dir);
      const dt::Scan scanned = dt::scan(*text);
      imports = imports || uses_import(scanned.directives);
      if (auto why = places.probe_file(path, scanned.directives)) return *why;
      if (auto why = judge_text(*text, scanned.facts)) return *why;
    }
    // Stat again: the digest is of the file nvcc read only if nothing
    // touched it in between.
    struct stat after {};
    if (::stat(path.c_str(), &after) != 0 || !(dt::stamp_of(after) == stamp)) {
      return std::string("an input changed while nvcc ran");
    }
    const bool recent = now - std::max(stamp.mtime, stamp.ctime) < dt::k_recent_ns;
    m.files.push_back({path, stamp, recent, std::string(pc::as_view(sum))});
  }
  if (search_dir_identities() != m_dirs_at_start) return std::string("an input changed while nvcc ran");
  if (places.refused()) return *places.refused();
  m_absolute_operands = places.absolute_operands();
  // Each place that must stay absent is watched by the deepest directory on
  // its path that exists, where that directory can vouch for it
  // (compile/empty_places.h): a lookup then stats one directory for every
  // place in it. A directory whose identity changed while the places were
  // looked at watches none.
  std::map<std::string, std::optional<dt::FileStamp>> watch_after;
  for (const auto& p : places.absent()) {
    ManifestAbsent a{p, {}};
    if (const auto w = dt::watch_of_empty(p); w && dt::watch_settled(*w, start))
      a.watch = {w->dir, dt::stamp_of(w->st)};
    m.absent.push_back(std::move(a));
  }
  for (auto& a : m.absent) {
    if (a.watch.path.empty()) continue;
    auto it = watch_after.find(a.watch.path);
    if (it == watch_after.end()) {
      struct stat st {};
      const bool dir = dt::identity_stat(a.watch.path, st) == 0 && S_ISDIR(st.st_mode);
      it = watch_after.emplace(a.watch.path, dir ? std::optional(dt::stamp_of(st)) : std::nullopt).first;
    }
    if (it->second != a.watch.stamp) a.watch = {};
  }
  // What a place found but not listed must keep (ManifestPlace): one the
  // generated files' closure found (read by a compile that lists
  // nothing), a file that leads to one read (another spelling of it,
  // through a link), one that #pragma once could have taken for a copy of
  // one read (gcc skips a file of the same size, mtime and text; here any
  // of the same size), any where a file read has an #import, and anything
  // but a regular file (a FIFO gcc would block on), is kept as it is; any
  // other was left unread by the branch it is in, and only its being there
  // counts (__has_include): what it holds decides nothing, so a checkout
  // where it is another file of that name is served.
  std::set<std::pair<std::uint64_t, std::uint64_t>> read_ids;
  std::set<std::int64_t> read_sizes;
  for (const auto& f : m.files) {
    read_ids.emplace(f.stamp.dev, f.stamp.ino);
    read_sizes.insert(f.stamp.size);
  }
  for (const auto& p : places.present()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return std::string("an input vanished");
    // A directory (a macro naming "/tmp" looks like a header name to the
    // lexer) cannot be read as a header: only that it is there counts.
    if (S_ISDIR(st.st_mode)) {
      m.present.push_back({p, dt::FileStamp{}});
      continue;
    }
    const dt::FileStamp stamp = dt::stamp_of(st);
    const bool as_it_is = imports || !S_ISREG(st.st_mode) || unlisted_reads.count(p) != 0 ||
                          read_ids.count({stamp.dev, stamp.ino}) != 0 || read_sizes.count(stamp.size) != 0;
    m.present.push_back(as_it_is ? ManifestPlace{p, stamp} : ManifestPlace{p, {}, /*any_file=*/true});
  }
  return m;
}

std::variant<std::vector<std::string>, std::string> Launcher::link_files(Places& places, const std::string& bin) const {
  std::vector<std::string> out = m_cmd.inputs;
  std::vector<std::string> dirs = m_cmd.library_dirs;
  for (const auto* sub : {"lib/stubs", "lib"}) {
    const auto more = toolkit_dirs(bin, sub);
    dirs.insert(dirs.end(), more.begin(), more.end());
  }
  const auto env = env_dirs("LIBRARY_PATH");
  dirs.insert(dirs.end(), env.begin(), env.end());
  std::vector<std::string> names = m_cmd.libraries;
  names.emplace_back("cudadevrt");
  std::set<std::string> seen(out.begin(), out.end());
  for (const auto& name : names) {
    for (const auto* ext : {".so", ".a"}) {
      for (const auto& d : dirs) {
        const std::string place = dt::join(d.empty() ? "." : d, "lib" + name + ext);
        struct stat st {};
        if (::stat(place.c_str(), &st) != 0) {
          places.absent_place(place);
        } else if (!S_ISREG(st.st_mode)) {
          return "library place '" + place + "' is not a regular file";
        } else if (seen.insert(place).second) {
          out.push_back(place);
        }
      }
    }
  }
  return out;
}

std::vector<std::string> Launcher::trusted_roots(const std::vector<std::string>& system) const {
  // The toolkit nvcc is in (its profile beside it); a wrapper's
  // directory is no toolkit, whatever is beside it (one in ~/bin would
  // make the home directory the toolkit's): build_record finds the
  // toolkit by the cuda_runtime.h the compile read.
  std::vector<std::string> out;
  if (m_toolkit_nvcc && !toolkit_dirs(m_bin, "include").empty()) {
    out.push_back(dt::real_or_normal(dt::parent_of(m_bin)));
  }
  // The host compiler lists the directories CPATH and its kin add among
  // its own (it is asked in this environment): they are the user's.
  std::set<std::string> user;
  for (const char* v : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"}) {
    for (const auto& d : env_dirs(v)) user.insert(dt::real_or_normal(d));
  }
  for (const auto& d : system) {
    if (auto r = dt::real_or_normal(d); user.count(r) == 0) out.push_back(std::move(r));
  }
  return out;
}

std::optional<std::string> Launcher::judge_text(const std::string& text, const dt::LineFacts& facts) {
  if (auto why = unkeyable_content(text)) return why;
  if (facts.file_pragma) {
    return std::string("an input has a pragma naming a file (#pragma GCC dependency): it is not keyed");
  }
  if (facts.line_directive) return line_directive_read();
  return std::nullopt;
}

std::optional<std::string> Launcher::line_directive_read() {
  m_line_directive = true;
  if (m_cmd.line_info && !m_place_keyed) {
    return std::string("a #line directive with line information: the name it gives may be relative");
  }
  if (m_cmd.source_in_ptx) {
    return std::string("a #line directive with -src-in-ptx: the file it names is copied in, and not keyed");
  }
  return std::nullopt;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> Launcher::search_dir_identities() const {
  std::vector<std::string> dirs = {dt::parent_of(m_cmd.input).empty() ? "." : dt::parent_of(m_cmd.input)};
  dirs.insert(dirs.end(), m_cmd.include_dirs.begin(), m_cmd.include_dirs.end());
  dirs.insert(dirs.end(), m_cmd.system_dirs.begin(), m_cmd.system_dirs.end());
  dirs.insert(dirs.end(), m_cmd.library_dirs.begin(), m_cmd.library_dirs.end());
  if (m_cmd.mode == Mode::device_link) dirs.emplace_back(".");
  for (const char* v : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH"}) {
    const auto more = env_dirs(v);
    dirs.insert(dirs.end(), more.begin(), more.end());
  }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  out.reserve(dirs.size());
  for (const auto& d : dirs) {
    struct stat st {};
    if (::stat(d.empty() ? "." : d.c_str(), &st) == 0) {
      out.emplace_back(st.st_dev, st.st_ino);
    } else {
      out.emplace_back(0, 0);
    }
  }
  return out;
}

std::vector<std::string> Launcher::tops_of(const std::vector<std::string>& chain) const {
  std::vector<std::string> out;
  auto add = [&](const std::string& d) { out.push_back(dt::real_or_normal(d.empty() ? "." : d)); };
  for (const auto& d : chain) add(d);
  add(dt::parent_of(m_cmd.input));
  add(".");
  for (const auto& d : m_cmd.library_dirs) add(d);
  for (const auto& d : env_dirs("LIBRARY_PATH")) add(d);
  return out;
}

}  // namespace progcache::nvcc
