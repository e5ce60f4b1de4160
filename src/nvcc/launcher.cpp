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
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "compile/depfile.h"
#include "compile/include_lexer.h"
#include "compile/scan_files.h"
#include "nvcc/counters.h"
#include "nvcc/manifest.h"
#include "nvcc/nvcc_command.h"
#include "progcache/key.h"
#include "progcache/lock_file.h"
#include "progcache/trust.h"
#include "store/file/layout.h"
#include "store/file/permissions.h"
#include "util/user_io.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
namespace nv = progcache::nvcc;
namespace dt = progcache::detail;
using cli::fail;
using cli::k_exit_error;
using cli::k_exit_miss;
using cli::k_exit_ok;
using cli::k_exit_usage;
using cli::OutputFile;
using cli::plain;
using cli::printable;
using cli::write_all_to;
using nlohmann::json;

constexpr std::string_view k_store = "nvcc";
constexpr std::string_view k_stats_file = "launcher-stats.json";
// What nvcc and the host compiler read from the environment (nvcc's own
// names as its program holds them), besides every variable nvcc.profile
// names, which is read from the profile at run time.
constexpr const char* k_keyed_variables[] = {
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",  "NVCC_CCBIN",      "CPATH",
    "C_INCLUDE_PATH",     "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
    "SOURCE_DATE_EPOCH",  "PTXAS_FLAGS",        "CUDAFE_FLAGS",    "NVVM_FLAGS",
    "NVASM_FLAGS",        "NVDISASM_FLAGS",     "NVLINK_FLAGS",    "NV_NVVM_VERSION",
    "CICC_PATH",          "NVVMIR_LIBRARY_DIR",
};
// The language and colours of what the tools print, which a hit replays:
// keyed by value (and followed: they name no file).
constexpr const char* k_print_variables[] = {
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "GCC_COLORS", "GCC_URLS",
};
// Variables nvcc reads whose value the key holds and whose words the
// launcher follows (NVCC_*_FLAGS, PTXAS_FLAGS, CUDAFE_FLAGS), or that do not
// bear on one compile's output beyond their value (PATH and LD_LIBRARY_PATH
// find the programs whose identities are keyed; LIBRARIES and NVLINK_FLAGS
// are nvlink's, which a compile does not run). Any other variable nvcc or
// its profile reads, set and not replaced by the profile, may name files
// the key cannot see: refused. So are GCC_EXEC_PREFIX and COMPILER_PATH
// (where the host compiler finds its own programs and specs files), and,
// for a device link, LIBRARIES and NVLINK_FLAGS (libraries, directories,
// objects for nvlink, not followed).
constexpr std::string_view k_followed_variables[] = {
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "PTXAS_FLAGS",    "CUDAFE_FLAGS",       "PATH",
    "LD_LIBRARY_PATH",    "SOURCE_DATE_EPOCH", "CPATH",      "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARIES",
    "NVLINK_FLAGS",
};
constexpr std::string_view k_link_variables[] = {"LIBRARIES", "NVLINK_FLAGS"};
// The toolkit's programs and data nvcc runs or reads besides the headers
// its dependency output lists, relative to nvcc's own directory.
// (nvlink loads libnvvm for a device link with -dlto.)
constexpr const char* k_toolkit_files[] = {
    "nvcc",
    "nvcc.profile",
    "cudafe++",
    "ptxas",
    "fatbinary",
    "nvlink",
    "bin2c",
    "../nvvm/bin/cicc",
    "../nvvm/libdevice/libdevice.10.bc",
    "../nvvm/lib64/libnvvm.so",
};

bool executable_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// This program's file identity: a candidate on PATH that is this program
// (a link named nvcc to progcache) must not run itself.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
};
std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

// `name` as the shell finds it: itself when it has a slash, else the first
// executable on PATH that is not this program.
std::optional<std::string> find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return executable_file(name) ? std::optional(name) : std::nullopt;
  const char* path = std::getenv("PATH");
  static const std::optional<FileId> self = file_id("/proc/self/exe");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const auto colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string cand = dt::join(dir, name);
    if (executable_file(cand)) {
      const auto id = file_id(cand);
      if (!self || !id || id->dev != self->dev || id->ino != self->ino) return cand;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

// `name` as a shell with PATH=`path` finds it: itself when it has a slash,
// else the first executable file in a directory of `path` (an empty entry
// is the working directory).
std::optional<std::string> find_on(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return executable_file(name) ? std::optional(name) : std::nullopt;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto colon = path.find(':', start);
    const std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return std::nullopt;
}

std::string real_path(const std::string& p) {
  std::error_code ec;
  auto r = std::filesystem::canonical(p, ec);
  return ec ? p : r.string();
}

// A program's or data file's identity in the key: its path, and the size,
// modification time, device and inode of the file it leads to (ccache's
// compiler_check=mtime), or absent.
void add_file_identity(KeyBuilder& kb, std::string_view label, const std::string& path) {
  struct stat st {};
  kb.add_string(label, path);
  if (::stat(path.c_str(), &st) != 0) {
    kb.add_bool("present", false);
    return;
  }
  kb.add_int("size", st.st_size)
      .add_int("mtime", dt::ns_of(st.st_mtim))
      .add_int("dev", static_cast<std::int64_t>(st.st_dev))
      .add_int("ino", static_cast<std::int64_t>(st.st_ino));
}

// The host compilers nvcc may run: -ccbin (a program, or a directory of
// them), else $NVCC_CCBIN, else gcc and g++ from PATH.
std::vector<std::string> host_compilers(const nv::Command& cmd) {
  std::optional<std::string> ccbin = cmd.ccbin;
  if (!ccbin) {
    if (const char* v = std::getenv("NVCC_CCBIN"); v != nullptr && *v != '\0') ccbin = v;
  }
  std::vector<std::string> names;
  std::string dir;
  struct stat st {};
  if (!ccbin) {
    names = {"gcc", "g++", "cc", "c++"};
  } else if (::stat(ccbin->c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    dir = *ccbin;
    names = {"gcc", "g++", "cc", "c++", "clang", "clang++", "cl"};
  } else {
    names = {*ccbin};
  }
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (!dir.empty()) {
      out.push_back(dt::join(dir, n));
    } else if (auto p = find_program(n)) {
      out.push_back(*p);
    } else {
      out.push_back("(not found) " + n);
    }
  }
  return out;
}

// Every variable the key holds: the fixed list, then those nvcc.profile names.
std::vector<std::string> keyed_variables(const nv::ProfileVariables& profile) {
  std::vector<std::string> out(std::begin(k_keyed_variables), std::end(k_keyed_variables));
  out.insert(out.end(), std::begin(k_print_variables), std::end(k_print_variables));
  for (const auto& n : profile.names) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

// The first variable set in the environment that nvcc or its profile reads,
// that the launcher does not follow and the profile does not replace.
std::optional<std::string> unfollowed_variable(const std::vector<std::string>& names,
                                               const nv::ProfileVariables& profile, bool device_link) {
  for (const auto& n : names) {
    const char* v = std::getenv(n.c_str());
    if (v != nullptr && device_link &&
        std::find(std::begin(k_link_variables), std::end(k_link_variables), n) != std::end(k_link_variables)) {
      return n;
    }
    if (v == nullptr || *v == '\0') continue;
    if (std::find(std::begin(k_followed_variables), std::end(k_followed_variables), n) !=
            std::end(k_followed_variables) ||
        std::find(std::begin(k_print_variables), std::end(k_print_variables), n) != std::end(k_print_variables)) {
      continue;
    }
    if (std::find(profile.replaced.begin(), profile.replaced.end(), n) != profile.replaced.end()) continue;
    return n;
  }
  return std::nullopt;
}

std::vector<std::string> env_dirs(const char* name);

// Whether the compile reaches a file through a relative path: the source,
// a directory of the command's or of the environment's search paths (an
// empty entry is the working directory), a file read by name. Device line
// information names such a file by the working directory joined to it.
bool follows_a_relative_path(const nv::Command& cmd) {
  auto relative = [](const std::string& p) { return !p.starts_with("/"); };
  if (relative(cmd.input)) return true;
  for (const auto* list : {&cmd.include_dirs, &cmd.system_dirs, &cmd.pre_includes}) {
    if (std::any_of(list->begin(), list->end(), relative)) return true;
  }
  for (const char* v : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"}) {
    const auto dirs = env_dirs(v);
    if (std::any_of(dirs.begin(), dirs.end(), relative)) return true;
  }
  return std::any_of(cmd.read_files.begin(), cmd.read_files.end(),
                     [&](const nv::Command::FileRead& f) { return relative(f.path); });
}

// Whether the key holds where the build runs (the working directory, $PWD).
bool place_keyed(const nv::Command& cmd) {
  return cmd.place_in_output || (cmd.line_info && follows_a_relative_path(cmd));
}

// ---- a base directory: two checkouts at different paths share entries

// Paths under the configured base directory (PROGCACHE_BASE_DIR), keyed
// relative to the working directory, as ccache's base_dir does: two
// checkouts under it, built from directories at the same place in each,
// reach one key. Only where what nvcc writes names no path of the checkout
// (relocation_for), and a result joins that key only when nothing it holds
// does (Launcher::store_relocated); a dependency file's paths are written
// for the checkout served.
struct Relocation {
  std::string base;  // absolute, lexically normal, not "/"
  std::string cwd;   // the working directory (getcwd: no link in it), under base

  // Characters a path may hold to be relocated: none that a dependency
  // file escapes, nvcc splits a list at (','), or a shell reads.
  static bool plain(std::string_view p) {
    return !p.empty() &&
           p.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+@=~") ==
               std::string_view::npos;
  }
  bool under(std::string_view p) const { return p == base || (p.starts_with(base) && p[base.size()] == '/'); }
  // A path under the base, moved: its head (up to its first "." or ".."
  // part: CMake writes `<dir>/../../Common`) relative to the working
  // directory, and the rest as written. The working directory joined to
  // the head, then the rest, spells the path again in every checkout,
  // and reaches the file the path reaches (the working directory has no
  // link in it, so climbing from it is climbing its spelling).
  struct Moved {
    std::string head;  // relative to the working directory
    std::string tail;  // from the first "." or ".." part on; empty if none
    // A path to open from the working directory.
    [[nodiscard]] std::string path() const { return tail.empty() ? head : head + "/" + tail; }
    // The spelling keyed: "//" (which no moved path holds) between the
    // two, so that no other split reaches the same key.
    [[nodiscard]] std::string keyed() const { return tail.empty() ? head : head + "//" + tail; }
  };
  // `p` moved, when it is an absolute path whose head is under the base,
  // with no empty part and, unless it is only looked at (`any_character`:
  // a manifest's path), plainly spelled; else nullopt.
  std::optional<Moved> move(const std::string& p, bool any_character = false) const {
    // A directory's place (a probe's operand ending in '/') keeps its slash.
    if (p.size() > 1 && p.back() == '/') {
      auto m = move(p.substr(0, p.size() - 1), any_character);
      if (!m) return std::nullopt;
      (m->tail.empty() ? m->head : m->tail) += "/";
      return m;
    }
    if (!p.starts_with("/") || (!any_character && !plain(p)) || p.find("//") != std::string::npos) {
      return std::nullopt;
    }
    std::size_t cut = p.size();
    for (std::size_t at = 0; at < p.size();) {
      const std::size_t next = std::min(p.find('/', at + 1), p.size());
      const std::string_view part = std::string_view(p).substr(at + 1, next - at - 1);
      if (part == "." || part == "..") {
        cut = at;
        break;
      }
      at = next;
    }
    const std::string head = p.substr(0, cut);
    if (head.empty() || !under(head)) return std::nullopt;
    std::string rel = std::filesystem::path(head).lexically_relative(cwd).string();
    if (rel.empty() || absolute(rel) != head) return std::nullopt;
    return Moved{std::move(rel), cut < p.size() ? p.substr(cut + 1) : std::string()};
  }
  // The keyed spelling of `p` moved (Moved::keyed), or nullopt.
  std::optional<std::string> relative(const std::string& p) const {
    auto m = move(p);
    if (!m) return std::nullopt;
    return m->keyed();
  }
  std::string absolute(const std::string& rel) const { return dt::normal(cwd + "/" + rel); }
};

// Whether a host compiler word leaves the checkout's paths out of the
// object. Most do; some write the command line (-frecord-gcc-switches,
// which names the -I directories), a sanitizer's or a profiler's source
// locations, or other files: only the common words known to write none
// are let through, and any other keeps the command off the relocated key.
bool path_free_host_word(std::string_view w) {
  static constexpr std::string_view k_words[] = {"-w",
                                                 "-pipe",
                                                 "-pthread",
                                                 "-fPIC",
                                                 "-fpic",
                                                 "-fPIE",
                                                 "-fpie",
                                                 "-fexceptions",
                                                 "-ffast-math",
                                                 "-fopenmp",
                                                 "-fpermissive",
                                                 "-fvisibility-inlines-hidden",
                                                 "-fstrict-aliasing"};
  static constexpr std::string_view k_prefixes[] = {
      "-O", "-W", "-std=", "-D", "-U", "-m", "-fno-", "-fvisibility=", "-fdiagnostics-", "-fmessage-length="};
  // Words handed on to the assembler, the preprocessor or the linker
  // (-Wa,--gdwarf-5, -Wp,-MD,file) are not warnings.
  if (w.starts_with("-Wa,") || w.starts_with("-Wp,") || w.starts_with("-Wl,")) return false;
  if (std::find(std::begin(k_words), std::end(k_words), w) != std::end(k_words)) return true;
  return std::any_of(std::begin(k_prefixes), std::end(k_prefixes),
                     [&](std::string_view p) { return w.starts_with(p); });
}

std::optional<std::string> relocated_word(const Relocation& r, const std::string& w);

// The relocation a command's key takes, or nullopt (paths keyed as
// written). Only outputs that name no path of the checkout qualify: whole
// program device code (a relocatable object's module ID is made from the
// source's path), without debug or line information (they name the files
// by their paths), as an object, cubin, PTX or fatbin. Checked by hand and
// by NvccLauncherBaseDirTest: such an object differs between two checkouts
// only by nvcc's temporary file's name, as two runs in one do, and the
// rest are byte-identical, unless the text names a path or opens an
// anonymous namespace (text_names_place, judged after the compile).
std::variant<Relocation, std::string> relocation_for(const std::string& base_dir, const nv::Command& cmd) {
  if (base_dir.empty() || base_dir == "/" || !base_dir.starts_with("/") || dt::normal(base_dir) != base_dir ||
      !Relocation::plain(base_dir)) {
    return std::string("no usable base directory");
  }
  switch (cmd.mode) {
    case nv::Mode::object:
    case nv::Mode::cubin:
    case nv::Mode::ptx:
    case nv::Mode::fatbin:
      break;
    default:
      return std::string("a --") + nv::mode_name(cmd.mode) + " output";
  }
  if (place_keyed(cmd) || cmd.line_info || cmd.source_in_ptx) {
    return std::string("debug or line information names the files by their paths");
  }
  for (const auto& w : cmd.canonical) {
    if (w == "--device-c" || w == "--device-w" || w.starts_with("--dlink-time-opt") ||
        w.starts_with("--extensible-whole-program") ||
        (w.starts_with("--relocatable-device-code") && w != "--relocatable-device-code=false")) {
      return std::string("relocatable device code: its module ID is made from the path of the source");
    }
    // The host compiler's words: -Xcompiler's, and those forwarded to it.
    if (w.starts_with("--compiler-options=")) {
      std::string_view rest = std::string_view(w).substr(std::string_view("--compiler-options=").size());
      while (true) {
        const auto comma = rest.find(',');
        if (!path_free_host_word(rest.substr(0, comma))) {
          return "host compiler word '" + std::string(rest.substr(0, comma)) + "' may write a path";
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (w.starts_with("-") && !w.starts_with("--") && !path_free_host_word(w)) {
      return "host compiler word '" + w + "' may write a path";
    }
  }
  std::error_code ec;
  Relocation r{base_dir, std::filesystem::current_path(ec).string()};
  if (ec || !Relocation::plain(r.cwd) || !r.under(r.cwd)) {
    return std::string("the working directory is not plainly spelled under the base");
  }
  // Every path under the base the command spells must be one relocated:
  // any other (a -MT target, a -D value, a host compiler word) is the same
  // string in every checkout, and names the first one's files.
  for (const auto& w : nv::keyed_words(cmd)) {
    if (w.find(base_dir) != std::string::npos && !relocated_word(r, w)) {
      return "word '" + w + "' names a path under the base that is not relocated";
    }
  }
  for (const auto& f : cmd.read_files) {
    if (f.path.find(base_dir) != std::string::npos && !r.relative(f.path)) {
      return "file '" + f.path + "' is under the base but not plainly spelled";
    }
  }
  // So with the environment's search directories and $TMPDIR (nvcc's
  // generated files include headers from there): the same strings in
  // every checkout.
  auto outside = [&](const std::string& d) { return !d.starts_with("/") || d.find(base_dir) == std::string::npos; };
  for (const char* v : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH"}) {
    const auto dirs = env_dirs(v);
    if (!std::all_of(dirs.begin(), dirs.end(), outside)) {
      return "variable '" + std::string(v) + "' names a directory under the base";
    }
  }
  const auto tmpdir = std::filesystem::temp_directory_path(ec).string();
  if (ec || !outside(tmpdir)) return std::string("$TMPDIR is under the base");
  return r;
}

// A keyed word with the paths under the base relocated (the input, and
// the values of -I, -isystem and -include, each path of a list), or
// nullopt when one is not (then it is keyed as written).
std::optional<std::string> relocated_word(const Relocation& r, const std::string& w) {
  if (!w.starts_with("-")) {
    if (auto rel = r.relative(w)) return rel;
    return std::nullopt;
  }
  const auto eq = w.find('=');
  if (eq == std::string::npos) return std::nullopt;
  const std::string_view name = std::string_view(w).substr(0, eq);
  if (name != "--include-path" && name != "--system-include" && name != "--pre-include") return std::nullopt;
  std::string out = w.substr(0, eq + 1);
  std::size_t start = eq + 1;
  while (start <= w.size()) {
    auto comma = w.find(',', start);
    if (comma == std::string::npos) comma = w.size();
    const std::string part = w.substr(start, comma - start);
    if (start != eq + 1) out += ',';
    // Every part, or none: a list mixing relocated and other paths would
    // reach the key of another mix (`-I../a,/ck/b` and `-I/ck/a,../b`).
    auto rel = r.relative(part);
    if (!rel) return std::nullopt;
    out += *rel;
    start = comma + 1;
  }
  return out;
}

// Whether a preprocessed text (no comments left) opens an anonymous
// namespace: nvcc names the device entities in one after a hash of the
// source's path (`_GLOBAL__N__<hash>_4_k_cu`), in the cubin and the object.
// Any `namespace` followed by `{` (white space and line markers between)
// counts; `inline namespace {` too.
bool has_anonymous_namespace(std::string_view text) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$'; };
  constexpr std::string_view k_word = "namespace";
  for (std::size_t at = text.find(k_word); at != std::string_view::npos; at = text.find(k_word, at + 1)) {
    if (at > 0 && ident(text[at - 1])) continue;
    std::size_t i = at + k_word.size();
    if (i < text.size() && ident(text[i])) continue;
    // White space, line markers and attributes ([[deprecated]],
    // __attribute__((...))) may stand between the word and the brace,
    // which may be spelled `<%`.
    while (i < text.size()) {
      const char c = text[i];
      const std::string_view rest = text.substr(i);
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++i;
      } else if (c == '#' && (i == 0 || text[i - 1] == '\n')) {  // a line marker
        const std::size_t nl = text.find('\n', i);
        i = nl == std::string_view::npos ? text.size() : nl + 1;
      } else if (rest.starts_with("[[") || rest.starts_with("<:<:")) {
        const std::size_t end = std::min(text.find("]]", i), text.find(":>:>", i));
        if (end == std::string_view::npos) return true;
        i = end + 2 + (text[end] == ':' ? 2 : 0);
      } else if (rest.starts_with("__attribute__") || rest.starts_with("__attribute") ||
                 rest.starts_with("__declspec") || rest.starts_with("alignas")) {
        const std::size_t open = text.find('(', i);
        if (open == std::string_view::npos) return true;
        int depth = 0;
        std::size_t j = open;
        for (; j < text.size(); ++j) {
          if (text[j] == '(') ++depth;
          if (text[j] == ')' && --depth == 0) break;
        }
        if (j >= text.size()) return true;
        i = j + 1;
      } else {
        break;
      }
    }
    if (i < text.size() && (text[i] == '{' || text.substr(i).starts_with("<%"))) return true;
  }
  return false;
}

// Whether a preprocessed text names a path under `base` other than in a
// line marker (__FILE__ expanded, a string a macro holds, an #ident), or
// asks the compiler for its own file's name (__builtin_FILE and
// __builtin_source_location: std::source_location), or opens an anonymous
// namespace (named after the source's path). Line markers name
// the files, and so the paths, in every text: without line information
// no output holds them.
bool text_names_place(std::string_view text, std::string_view base) {
  for (std::string_view w : {"__builtin_FILE", "__builtin_source_location", "__FILE__", "__BASE_FILE__"}) {
    if (text.find(w) != std::string_view::npos) return true;
  }
  if (has_anonymous_namespace(text)) return true;
  for (std::size_t at = text.find(base); at != std::string_view::npos; at = text.find(base, at + 1)) {
    const std::size_t nl = text.rfind('\n', at);
    const std::size_t line = nl == std::string_view::npos ? 0 : nl + 1;
    const bool marker = text.substr(line).starts_with("# ") && line + 2 < text.size() &&
                        std::isdigit(static_cast<unsigned char>(text[line + 2])) != 0;
    if (!marker) return true;
    at = text.find('\n', at);
    if (at == std::string_view::npos) break;
  }
  return false;
}

// A dependency file with each path under the base replaced by NUL, the
// path relative to the working directory, NUL (render_depfile writes it
// for another working directory), or nullopt when one is not a whole word
// that can be relocated (then the result is not shared).
std::optional<std::string> depfile_template(const Relocation& r, std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return std::nullopt;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::string out;
  std::size_t done = 0;
  for (std::size_t at = text.find(r.base); at != std::string_view::npos; at = text.find(r.base, done)) {
    // A whole word: after white space that no backslash escapes.
    if (at > 0 && (!space(text[at - 1]) || (at > 1 && text[at - 2] == '\\'))) return std::nullopt;
    std::size_t end = at;
    while (end < text.size() && !space(text[end])) ++end;
    const auto m = r.move(std::string(text.substr(at, end - at)));
    if (!m) return std::nullopt;
    out.append(text.substr(done, at - done)).append(1, '\0').append(m->head).append(1, '\0');
    if (!m->tail.empty()) out.append("/").append(m->tail);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

// The dependency file a template holds, for the working directory of `r`.
std::string render_depfile(const Relocation& r, std::string_view tmpl) {
  std::string out;
  bool path = false;
  for (std::size_t i = 0;;) {
    const std::size_t z = tmpl.find('\0', i);
    const std::string_view piece = tmpl.substr(i, z == std::string_view::npos ? std::string_view::npos : z - i);
    if (path) {
      out += r.absolute(std::string(piece));
    } else {
      out += piece;
    }
    if (z == std::string_view::npos) break;
    i = z + 1;
    path = !path;
  }
  return out;
}

// A manifest record with its paths under the base relative to the working
// directory (the rest as they are: the toolkit's, the system's, paths
// already relative), or nullopt when one cannot be relocated.
std::optional<nv::ManifestRecord> relocated_record(const Relocation& r, nv::ManifestRecord m) {
  auto move = [&](std::string& p) {
    if (!p.starts_with("/")) return true;
    if (auto moved = r.move(p, /*any_character=*/true)) {
      p = moved->path();
      return true;
    }
    return p.find(r.base) == std::string::npos;  // one naming the base is moved, or none is
  };
  for (auto& f : m.files) {
    if (!move(f.path)) return std::nullopt;
  }
  for (auto& a : m.absent) {
    if (!move(a)) return std::nullopt;
  }
  for (auto& p : m.present) {
    if (!move(p.path)) return std::nullopt;
  }
  return m;
}

// What `dir` is now: 0 nothing, 1 a directory, 2 something else.
// What a host compiler that is a script reads besides its words: keyed
// where `program` starts with "#!" (defined below).
void add_script_inputs(KeyBuilder& kb, const std::string& program);

int dir_kind(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.empty() ? "." : dir.c_str(), &st) != 0) return 0;
  return S_ISDIR(st.st_mode) ? 1 : 2;
}

// The command's key. With `reloc`, another key (its own domain), in which
// every path under the base is relative to the working directory; each
// such word is keyed under its own label, so no word written relative
// reaches the same key as one relocated (the dependency file would spell
// them differently).
// PATH decides a compile only through the programs it finds (nvcc's
// profile puts the toolkit's directories before it): keyed by what it finds
// for each program nvcc and a host compiler run by name, so two spellings
// that find the same programs share entries (an empty directory added, the
// directory of a link named nvcc to progcache), and one that finds another
// program does not. A host compiler that is a script is keyed with the
// environment, PATH as written included (add_script_inputs).
constexpr const char* k_path_programs[] = {"gcc",    "g++",   "cc",      "c++",      "clang", "clang++",
                                           "as",     "ld",    "cicc",    "cudafe++", "ptxas", "fatbinary",
                                           "nvlink", "bin2c", "nvprune", "cu++filt", "nvcc"};

void add_path_programs(KeyBuilder& kb) {
  kb.add_bool("path-set", std::getenv("PATH") != nullptr);
  for (const char* name : k_path_programs) {
    const auto found = find_program(name);
    kb.add_string("path-program", name);
    if (found) {
      add_file_identity(kb, "path-finds", *found);
    } else {
      kb.add_string("path-finds", "(not found)");
    }
  }
}

Key manifest_key(const std::string& nvcc_path, const nv::Command& cmd, const std::vector<std::string>& variables,
                 const Relocation* reloc = nullptr) {
  KeyBuilder kb(reloc != nullptr ? "nvcc-manifest-relocated" : "nvcc-manifest");
  kb.add_int("launcher-schema", 7);
  const std::string bin = dt::parent_of(real_path(nvcc_path));
  add_file_identity(kb, "nvcc", nvcc_path);
  for (const char* f : k_toolkit_files) add_file_identity(kb, "toolkit", bin + "/" + f);
  for (const auto& h : host_compilers(cmd)) {
    add_file_identity(kb, "host-compiler", h);
    add_script_inputs(kb, h);
  }
  // gcc finds no assembler among its own programs on common installs and
  // runs the first `as` on PATH: one made earlier on PATH assembles.
  const auto as = find_program("as");
  add_file_identity(kb, "assembler", as ? *as : std::string("(not found) as"));
  for (const auto& v : variables) {
    const char* value = std::getenv(v.c_str());
    if (v == "PATH") {
      add_path_programs(kb);
      continue;
    }
    kb.add_string("variable", v).add_string("value", value != nullptr ? value : "").add_bool("set", value != nullptr);
  }
  // nvcc hands cudafe++ and cicc the source's resolved path (its real
  // path, or the name as given when it has none), and the module ID of a
  // relocatable object (-dc) is made from it: keyed, so one checkout's -dc
  // object is never served for another checkout's copy of the source.
  // A device link's inputs are keyed by their contents (the manifest):
  // nvlink names them nowhere in its output.
  if (cmd.mode != nv::Mode::device_link) {
    const std::string source = real_path(cmd.input);
    const auto rel = reloc != nullptr ? reloc->relative(source) : std::nullopt;
    if (rel) {
      kb.add_string("source-path-relocated", *rel);
    } else {
      kb.add_string("source-path", source);
    }
  }
  // nvlink looks for -l libraries along LIBRARY_PATH too.
  if (cmd.mode == nv::Mode::device_link) {
    const char* value = std::getenv("LIBRARY_PATH");
    kb.add_string("library-path", value != nullptr ? value : "").add_bool("set", value != nullptr);
  }
  // Where the compile runs is in its output only through debug information
  // or -objtemp (the working directory, $PWD when it names it through
  // another path). Without them, paths in the key and the manifest are as
  // the command spells them, resolved against the working directory at each
  // lookup: two build directories of one checkout share entries, as with
  // ccache's hash_dir for builds without -g.
  if (place_keyed(cmd)) {
    std::error_code ec;
    kb.add_string("cwd", std::filesystem::current_path(ec).string());
    // As the host compiler judges it: $PWD names the working directory
    // when both are one file.
    const char* pwd = std::getenv("PWD");
    struct stat here {};
    struct stat there {};
    const bool names_cwd = pwd != nullptr && ::stat(".", &here) == 0 && ::stat(pwd, &there) == 0 &&
                           here.st_dev == there.st_dev && here.st_ino == there.st_ino;
    kb.add_string("pwd", names_cwd ? pwd : "");
  }
  // nvcc's temporary files are under $TMPDIR, and more than debug
  // information names them: a sanitizer's instrumentation (the stub file's
  // path) and the host compiler's warnings about the files nvcc generates.
  const char* tmpdir = std::getenv("TMPDIR");
  kb.add_string("tmpdir", tmpdir != nullptr ? tmpdir : "");
  kb.add_string("mode", nv::mode_name(cmd.mode));
  // Whether each directory the command and the environment name for
  // includes is one: the host compiler warns of one that is not
  // (-Wmissing-include-dirs), and a manifest's
  // places, all inside directories, do not show a directory gone.
  for (const auto* list : {&cmd.include_dirs, &cmd.system_dirs}) {
    for (const auto& d : *list) kb.add_int("search-dir", dir_kind(d));
  }
  for (const char* v : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"}) {
    for (const auto& d : env_dirs(v)) kb.add_int("env-search-dir", dir_kind(d));
  }
  for (const auto& w : nv::keyed_words(cmd)) {
    if (auto moved = reloc != nullptr ? relocated_word(*reloc, w) : std::nullopt) {
      kb.add_string("arg-relocated", *moved);
    } else {
      kb.add_string("arg", w);
    }
  }
  // Response and options files of every tool, the host compiler's -include
  // and -imacros: read by name, listed in no dependency output.
  for (const auto& f : cmd.read_files) {
    if (auto rel = reloc != nullptr ? reloc->relative(f.path) : std::nullopt) {
      kb.add_string("read-file-relocated", *rel).add_bytes("sha256", f.sha256);
    } else {
      kb.add_string("read-file", f.path).add_bytes("sha256", f.sha256);
    }
  }
  return kb.finish();
}

// ---- where a header created later would be found first

// A search-path variable's directories (CPATH, C_INCLUDE_PATH,
// CPLUS_INCLUDE_PATH): ':'-separated, an empty entry meaning the working
// directory, as gcc reads them.
std::vector<std::string> env_dirs(const char* name) {
  std::vector<std::string> out;
  const char* v = std::getenv(name);
  if (v == nullptr) return out;
  const std::string value = v;
  std::size_t start = 0;
  while (true) {
    const auto colon = value.find(':', start);
    std::string d = value.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    out.push_back(d.empty() ? "." : std::move(d));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

struct Ran {
  int status = 127;  // as a shell reports it: the exit code, or 128 + signal
  std::string out, err;
};

Ran run_child(const std::string& program, const std::vector<std::string>& args, bool echo, bool null_stdin,
              std::int64_t timeout_ns = 0, const std::vector<std::string>* env = nullptr);

// What the host compiler says of itself (-v): its own directories for
// <...> includes, in its order, its target and its version (as printed, and
// its major number), or nullopt when it cannot say. Asked once per process
// and compiler: a hit by the preprocessed text needs it for its key and
// again for the manifest record it adds (one run of the compiler less, 10
// to 20 ms).
struct HostCompiler {
  std::vector<std::string> dirs;  // its <...> search, as it prints it
  std::string target;
  std::vector<std::string> versions;
  // The directories whose headers are the compiler's own: `dirs`, but for
  // a host compiler that is a script, those of the compiler it runs (asked
  // without the script; none where it cannot be told), so that a directory
  // the script adds is the user's, its places recorded (docs/nvcc.md,
  // "Host compilers that are scripts").
  std::vector<std::string> own;
  // What a script adds to the search (its <...> directories that are not
  // `own`): searched first, as far as the key can tell.
  std::vector<std::string> added;
  bool adds_quoted = false;  // a script whose answer lists "..." directories (-iquote)
};
std::optional<HostCompiler> host_compiler_asked(const std::string& host);
std::optional<HostCompiler> host_compiler(const std::string& host) {
  static std::mutex mu;
  static std::map<std::string, std::optional<HostCompiler>> known;
  {
    const std::lock_guard lock(mu);
    if (const auto it = known.find(host); it != known.end()) return it->second;
  }
  auto said = host_compiler_asked(host);
  const std::lock_guard lock(mu);
  return known.try_emplace(host, std::move(said)).first->second;
}
std::optional<std::vector<std::string>> host_system_dirs(const std::string& host) {
  auto c = host_compiler(host);
  if (!c) return std::nullopt;
  return std::move(c->dirs);
}
std::vector<std::string> host_own_dirs(const std::string& host) {
  auto c = host_compiler(host);
  return c ? std::move(c->own) : std::vector<std::string>{};
}
std::vector<std::string> host_added_dirs(const std::string& host) {
  auto c = host_compiler(host);
  return c ? std::move(c->added) : std::vector<std::string>{};
}
bool host_adds_quoted_dirs(const std::string& host) {
  auto c = host_compiler(host);
  return c && c->adds_quoted;
}

// gcc reads a `specs` file, which can change any option it runs with, from
// each LIBRARY_PATH directory (as <dir>/specs and <dir>/<target>/<version>/specs)
// before its own: places that must stay empty (the gcc installation's own
// are the compiler's, whose identity is keyed). Why one is not, or nullopt.
std::optional<std::string> specs_places(const std::string& host, std::vector<std::string>& absent) {
  const auto c = host_compiler(host);
  for (const auto& dir : env_dirs("LIBRARY_PATH")) {
    std::vector<std::string> places = {dt::join(dir, "specs")};
    if (c && !c->target.empty()) {
      for (const auto& v : c->versions) places.push_back(dt::join(dir, c->target + "/" + v + "/specs"));
    }
    for (const auto& p : places) {
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0) return "a specs file for the host compiler in LIBRARY_PATH ('" + p + "')";
      absent.push_back(p);
    }
  }
  return std::nullopt;
}

// What `host -E -x c++ -v /dev/null` says (on stderr), asked once per
// process: the key of a script host compiler and the search directories
// both read it, and a relocated key reads it again.
const Ran& verbose_answer(const std::string& host) {
  static std::mutex mu;
  static std::map<std::string, Ran> known;
  {
    const std::lock_guard lock(mu);
    if (const auto it = known.find(host); it != known.end()) return it->second;
  }
  // A compiler that runs a minute to preprocess nothing is not asked again.
  constexpr std::int64_t k_probe_timeout_ns = 60'000'000'000;
  Ran ran = run_child(host, {host, "-E", "-x", "c++", "-v", "/dev/null"}, false, true, k_probe_timeout_ns);
  const std::lock_guard lock(mu);
  return known.try_emplace(host, std::move(ran)).first->second;
}

// The program a line of a -v answer names as one the compiler runs: gcc's
// " /path/cc1plus ...", clang's quoted " \"/path/clang\" -cc1 ...", and
// the driver gcc names as COLLECT_GCC (found as the shell finds it); ""
// for any other line.
std::string program_named(std::string_view line) {
  if (line.starts_with(" /")) return std::string(line.substr(1, line.find(' ', 1) - 1));
  if (line.starts_with(" \"/")) return std::string(line.substr(2, line.find('"', 2) - 2));
  if (line.starts_with("COLLECT_GCC=")) return find_program(std::string(line.substr(12))).value_or("");
  return "";
}

// The directories listed between `from` and `to` in a compiler's -v answer.
std::vector<std::string> listed_dirs(const std::string& text, std::size_t from, std::size_t to) {
  std::vector<std::string> out;
  std::size_t pos = text.find('\n', from) + 1;
  while (pos < to) {
    const auto nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.starts_with("#include")) continue;
    if (line.starts_with(" ")) line.erase(0, 1);
    if (const auto note = line.find(" (framework directory)"); note != std::string::npos) line.resize(note);
    if (!line.empty()) out.push_back(std::move(line));
  }
  return out;
}

bool is_script(const std::string& path);

// The compiler a script's -v answer says it ran: gcc's COLLECT_GCC, or the
// program of clang's quoted "-cc1" line; nullopt where it says neither.
std::optional<std::string> compiler_behind(const std::string& text) {
  for (std::size_t b = 0; b < text.size();) {
    std::size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    const std::string_view line = std::string_view(text).substr(b, e - b);
    b = e + 1;
    if (line.starts_with("COLLECT_GCC=") ||
        (line.starts_with(" \"/") && line.find("\" -cc1") != std::string_view::npos)) {
      if (auto named = program_named(line); !named.empty()) return named;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<HostCompiler> host_compiler_asked(const std::string& host) {
  const Ran& ran = verbose_answer(host);
  if (ran.status != 0) return std::nullopt;
  const std::string& text = ran.err;
  const auto quoted = text.find("#include \"...\" search starts here:\n");
  const auto begin = text.find("#include <...> search starts here:\n");
  const auto end = text.find("End of search list.");
  if (begin == std::string::npos || end == std::string::npos || end < begin) return std::nullopt;
  std::vector<std::string> out = listed_dirs(text, begin, end);
  if (out.empty()) return std::nullopt;
  HostCompiler c;
  c.dirs = std::move(out);
  c.own = c.dirs;
  if (is_script(host)) {
    c.own.clear();
    if (const auto behind = compiler_behind(text); behind && !is_script(*behind)) {
      if (const auto real = host_compiler_asked(*behind)) c.own = real->dirs;
    }
    for (auto& d : c.dirs) {
      if (std::find(c.own.begin(), c.own.end(), d) == c.own.end()) c.added.push_back(d);
    }
    // Its "..." list (-iquote) is searched for quoted names alone, which
    // the record's one search order cannot tell apart: such a result is
    // not stored.
    if (quoted != std::string::npos && quoted < begin) c.adds_quoted = !listed_dirs(text, quoted, begin).empty();
  }
  // "Target: x86_64-linux-gnu", "gcc version 12.2.0 (Debian ...)".
  for (std::size_t b = 0; b < text.size();) {
    std::size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    const std::string_view line = std::string_view(text).substr(b, e - b);
    b = e + 1;
    if (line.starts_with("Target: ")) c.target = std::string(line.substr(8));
    if (const auto at = line.find(" version "); at != std::string_view::npos && c.versions.empty()) {
      std::string_view v = line.substr(at + 9);
      v = v.substr(0, v.find(' '));
      if (!v.empty()) {
        c.versions.emplace_back(v);
        if (const auto dot = v.find('.'); dot != std::string_view::npos) c.versions.emplace_back(v.substr(0, dot));
      }
    }
  }
  return c;
}

// A host compiler that is a script, such as Spack's and conda's compiler
// wrappers, decides the compile by more than its own text: the environment
// (flags taken from a variable), the interpreter, and the compiler it runs
// in the end. Each is keyed for a program that starts with "#!":
// - every variable of the environment, by value, but for those a shell or
//   make sets for itself on each run (SHLVL, _, PWD and OLDPWD, MAKEFLAGS
//   and make's others, whose job-server names change with every build) and
//   progcache's own (docs/nvcc.md, "Host compilers that are scripts"). The
//   working directory is the launcher's to key (docs/nvcc.md, "Where the
//   build runs"), and the answer below is asked in it;
// - the interpreter's identity;
// - what the script says of the compile it runs (`-E -x c++ -v
//   /dev/null`: the real compiler's version, the programs it runs, the
//   options the script adds) and the identity of each program it names.
// A script that reads files by name besides these is not followed, and an
// nvcc that is a script is keyed by its identity alone (both limits are
// documented). A script that cannot be asked is keyed as one
// that said nothing, which no other run with another answer shares.
bool is_script(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return false;
  std::array<char, 2> head{};
  const ssize_t got = ::read(fd, head.data(), head.size());
  ::close(fd);
  return got == 2 && head[0] == '#' && head[1] == '!';
}

bool shell_own_variable(std::string_view name) {
  static constexpr std::string_view k_own[] = {
      "_",         "SHLVL",         "PWD",          "OLDPWD",       "MAKEFLAGS",   "MFLAGS",
      "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR", "GNUMAKEFLAGS"};
  return name.starts_with("PROGCACHE_") || std::find(std::begin(k_own), std::end(k_own), name) != std::end(k_own);
}

void add_script_inputs(KeyBuilder& kb, const std::string& program) {
  if (!is_script(program)) return;
  kb.add_string("script", program);
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv = *e;
    if (!shell_own_variable(kv.substr(0, kv.find('=')))) vars.emplace_back(kv);
  }
  std::sort(vars.begin(), vars.end());
  for (const auto& v : vars) kb.add_string("script-variable", v);
  if (const auto text = dt::read_regular(program); text.ok()) {
    const std::string_view first = std::string_view(*text).substr(0, text->find('\n'));
    std::string_view interpreter = first.substr(2);
    interpreter.remove_prefix(std::min(interpreter.find_first_not_of(" \t"), interpreter.size()));
    add_file_identity(kb, "script-interpreter", std::string(interpreter.substr(0, interpreter.find_first_of(" \t"))));
  }
  const Ran& said = verbose_answer(program);
  kb.add_int("script-status", said.status);
  for (std::size_t b = 0; b < said.err.size();) {
    std::size_t e = said.err.find('\n', b);
    if (e == std::string::npos) e = said.err.size();
    const std::string_view line = std::string_view(said.err).substr(b, e - b);
    b = e + 1;
    // gcc echoes make's flags (for its LTO job server) where make set them:
    // they are make's own, as above.
    if (line.starts_with("MAKEFLAGS=")) continue;
    kb.add_string("script-said", line);
    if (const auto named = program_named(line); !named.empty() && executable_file(named)) {
      add_file_identity(kb, "script-runs", named);
    }
  }
}

// The toolkit's include directories nvcc adds (nvcc.profile's INCLUDES and
// SYSTEM_INCLUDES: <toolkit>/targets/<target>/include, and its cccl), for
// every target the toolkit holds.
std::vector<std::string> toolkit_dirs(const std::string& bin, std::string_view sub) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string targets = dt::join(dt::parent_of(bin), "targets");
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(targets, ec)) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  out.reserve(found.size());
  for (const auto& t : found) out.push_back(dt::join(t, std::string(sub)));
  return out;
}

// The directories searched for <...> includes, in the preprocessor's order
// as nvcc runs it: -I, nvcc's include directory, CPATH, -isystem, nvcc's
// cccl directory, C_INCLUDE_PATH and CPLUS_INCLUDE_PATH, then the host
// compiler's own. A directory named twice (gcc keeps the first) is kept
// twice: a file in it then counts as found at both places, which only adds
// places that must stay absent.
std::vector<std::string> search_chain(const nv::Command& cmd, const std::string& bin,
                                      const std::vector<std::string>& system, const std::vector<std::string>& added) {
  // What a host compiler that is a script adds may come before any of it.
  std::vector<std::string> out = added;
  auto append = [&out](const std::vector<std::string>& ds) { out.insert(out.end(), ds.begin(), ds.end()); };
  append(cmd.include_dirs);
  append(toolkit_dirs(bin, "include"));
  append(env_dirs("CPATH"));
  append(cmd.system_dirs);
  append(toolkit_dirs(bin, "include/cccl"));
  append(env_dirs("C_INCLUDE_PATH"));
  append(env_dirs("CPLUS_INCLUDE_PATH"));
  append(system);
  return out;
}

// Whether a symbolic link on the way to `path` (the file itself or a
// directory above it) was made after `start`: a link retargeted (ln -sfn
// makes a new one) leads to another file while the file's own times stay
// old, so "unchanged since start" must look at the links too.
bool link_made_since(const std::string& path, std::int64_t start) {
  std::size_t pos = path.starts_with("/") ? 1 : 0;
  while (pos <= path.size()) {
    const auto slash = path.find('/', pos);
    const std::string prefix = path.substr(0, slash);
    struct stat st {};
    if (!prefix.empty() && ::lstat(prefix.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && dt::stamp_of(st).ctime > start) {
      return true;
    }
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return false;
}

// Whether a directory on the way to `path` below the search directory that
// holds it (the longest of `tops`, resolved) changed since `start`. A
// directory renamed into place (a rename stamps the moved directory's
// ctime) leads the same name to other files, whose own times are old. The
// tops themselves are judged by identity (search_dir_identities); a file
// outside every top is not judged here (nothing bounds the walk up).
bool moved_below(const std::string& path, const std::vector<std::string>& tops, std::int64_t start) {
  const std::string parent = dt::parent_of(path);
  const std::string dir = dt::real_or_normal(parent.empty() ? "." : parent);
  std::string top;
  for (const auto& t : tops) {
    if ((dir == t || dt::under(dir, t)) && t.size() > top.size()) top = t;
  }
  for (std::string d = dir; !top.empty() && d.size() > top.size(); d = dt::parent_of(d)) {
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0 || dt::ns_of(st.st_ctim) > start) return true;
  }
  return false;
}

// Adds to `named` every file a line marker of preprocessed output `text`
// names (`# 12 "inc/a.h" 1 3`), unescaped as the preprocessor escapes it.
void marker_names(std::string_view text, std::set<std::string>& named) {
  for (std::size_t b = 0; b < text.size();) {
    std::size_t e = text.find('\n', b);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view line = text.substr(b, e - b);
    b = e + 1;
    if (!line.starts_with("# ") || line.size() < 3 || std::isdigit(static_cast<unsigned char>(line[2])) == 0) continue;
    std::size_t q = line.find('"');
    if (q == std::string_view::npos) continue;
    std::string name;
    for (++q; q < line.size() && line[q] != '"'; ++q) {
      if (line[q] == '\\' && q + 1 < line.size()) ++q;
      name.push_back(line[q]);
    }
    named.insert(std::move(name));
  }
}

// The places `name` is looked for, in order: itself when absolute, else
// joined to `first` (a quoted include's directory; empty: the working
// directory), if given, then to each directory of `chain`.
std::vector<std::string> search_places(const std::string& name, const std::optional<std::string>& first,
                                       const std::vector<std::string>& chain) {
  if (name.starts_with("/")) return {name};
  std::vector<std::string> out;
  out.reserve(chain.size() + 1);
  auto add = [&](const std::string& d) { out.push_back(dt::join(d == "." ? "" : d, name)); };
  if (first) add(*first);
  for (const auto& d : chain) add(d);
  return out;
}

// A header of the generated files' closure, and whether the headers it
// includes are followed: those of the two the generated files include and
// of every header in a directory of the command, to the end; not those of
// the toolkit's or the host compiler's own headers below the first level
// (a superset of every branch's includes of the system's headers is about
// a thousand files, and their edits are the toolkit's and the compiler's,
// keyed by identity).
struct Generated {
  std::string place;
  bool expand = true;
};

// The headers nvcc's generated files (the stub and the fatbin source,
// written under $TMPDIR and compiled with the command's -I) include, and
// the headers those include in turn (Generated says how far), as the host
// compiler finds them now: each place found with the SHA-256 of its text, in the
// order found; nullopt when one of the two cannot be found, or a header
// found cannot be read. No preprocessing step reads them, so the
// preprocessed key holds them. An include found nowhere adds nothing: made
// later, it is found, and the key changes.
std::optional<std::vector<std::pair<std::string, std::string>>> generated_headers(
    const std::vector<std::string>& chain, const std::string& tmpdir, const std::vector<std::string>& trusted) {
  auto is_trusted = [&](const std::string& place) {
    const std::string r = dt::real_or_normal(place);
    return std::any_of(trusted.begin(), trusted.end(), [&r](const std::string& t) { return dt::under(r, t); });
  };
  // Where `name` is found: an absolute name as it is, else in `first` (a
  // quoted include's directory), then along the chain; a place that is
  // `includer` itself (#include_next of its own name) is passed over.
  // For #include_next (`next`), every place past the includer's own is
  // found (which directory found the includer is not known here).
  auto find = [&](const std::string& name, const std::optional<std::string>& first, const std::string& includer,
                  bool next) -> std::vector<std::string> {
    std::vector<std::string> found;
    for (const auto& place : search_places(name, first, chain)) {
      struct stat st {};
      if (::stat(place.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!includer.empty() && dt::real_or_normal(place) == includer) continue;
      found.push_back(place);
      if (!next) break;
    }
    return found;
  };
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<Generated> todo;
  for (const char* name : {"crt/host_runtime.h", "fatbinary_section.h"}) {
    const auto found = find(name, tmpdir, "", false);
    if (found.empty()) return std::nullopt;
    todo.push_back({found.front(), true});
  }
  std::reverse(todo.begin(), todo.end());
  std::set<std::string> seen;
  while (!todo.empty()) {
    const Generated g = std::move(todo.back());
    todo.pop_back();
    const std::string real = dt::real_or_normal(g.place);
    if (!seen.insert(real).second) continue;
    auto text = dt::read_regular(g.place);
    if (!text.ok()) return std::nullopt;
    const auto sum = pc::sha256(*text);
    out.emplace_back(g.place, std::string(pc::as_view(sum)));
    if (!g.expand) continue;
    for (const auto& d : dt::directives(*text)) {
      if (d.kind == dt::Operand::computed) continue;
      const auto inner = find(
          d.name, d.kind == dt::Operand::quoted ? std::optional(dt::parent_of(g.place)) : std::nullopt, real, d.next);
      for (auto it = inner.rbegin(); it != inner.rend(); ++it) todo.push_back({*it, !is_trusted(*it)});
    }
  }
  return out;
}

// Where a header the compile found, and every header a probe did not find,
// would be found first if created later: places that must stay absent, and
// those a probe found that must stay present.
class Places {
 public:
  Places(std::vector<std::string> chain, const std::vector<std::string>& deps, std::vector<std::string> trusted_roots)
      : m_chain(std::move(chain)), m_trusted(std::move(trusted_roots)) {
    for (const auto& c : m_chain) m_chain_real.push_back(dt::real_or_normal(c.empty() ? "." : c));
    for (const auto& d : deps) {
      m_deps.insert(real_file(d));
      m_dep_spellings.insert(dt::normal(d, /*keep_dotdot=*/true));
    }
  }

  // A header the compile read: found in a directory of `dirs` (the
  // source's own, then the chain). Which one found it is not in nvcc's
  // dependency output ("inc/a.h" is "a.h" found in inc/, or "inc/a.h"
  // found in the source's directory), so each directory that holds it, by
  // spelling or by where it leads, counts as having found it.
  void found(const std::string& dep, const std::string& source_dir) {
    std::vector<std::string> dirs = {source_dir};
    dirs.insert(dirs.end(), m_chain.begin(), m_chain.end());
    const std::string p = dt::normal(dep);
    const std::string rp = real_file(dep);
    for (std::size_t i = 0; i < dirs.size(); ++i) {
      std::set<std::string> rels;
      const std::string nd = dt::normal(dirs[i].empty() ? "." : dirs[i]);
      if (nd == ".") {
        if (!p.starts_with("/") && !p.starts_with("../")) rels.insert(p);
      } else if (dt::under(p, nd) && p != nd) {
        rels.insert(p.substr(nd.size() + (nd.ends_with("/") ? 0 : 1)));
      }
      const std::string rd = i == 0 ? dt::real_or_normal(nd) : m_chain_real[i - 1];
      if (dt::under(rp, rd) && rp != rd) rels.insert(rp.substr(rd.size() + (rd.ends_with("/") ? 0 : 1)));
      for (const auto& rel : rels) {
        for (std::size_t j = 0; j < i; ++j) {
          const std::string place = dt::join(dirs[j] == "." ? "" : dirs[j], rel);
          if (dt::normal(place) != p) absent_if_so(place);
          if (m_precompiled.count(rel) != 0) no_precompiled(place);
        }
        if (m_precompiled.count(rel) != 0) no_precompiled(dt::join(dirs[i] == "." ? "" : dirs[i], rel));
      }
    }
  }

  // Every #include, #include_next and __has_include operand of a file the
  // compile read: looked up as the preprocessor would; each place before
  // the one that holds it must stay absent, and the one found (when it is
  // not a header read, whose digest is keyed) must stay there. An include
  // through a macro names no place: in a file outside the toolkit and the
  // host compiler's directories, an error (what it would find if created
  // is not known).
  // `found`, if given, receives the place each operand was found at.
  // `directives` are the file's, as the include lexer read them.
  std::optional<std::string> probe_file(const std::string& file, const std::vector<dt::Directive>& directives,
                                        std::vector<std::string>* found = nullptr) {
    const std::string dir = dt::parent_of(file);
    for (const auto& d : directives) {
      if (d.kind == dt::Operand::computed) {
        if (!trusted(file)) return "an include through a macro in '" + file + "' cannot be followed";
        continue;
      }
      if (d.name.starts_with("/")) m_absolute_operands.push_back(d.name);
      auto places = probe(d.name, d.kind == dt::Operand::quoted ? std::optional(dir) : std::nullopt, file, d.next);
      if (found != nullptr) found->insert(found->end(), places.begin(), places.end());
    }
    return std::nullopt;
  }

  // The headers files read include or probe for by their absolute paths:
  // one under the base is a place no working directory moves (no
  // relocated record).
  const std::vector<std::string>& absolute_operands() const { return m_absolute_operands; }

  // nvcc's -include files (its own cuda_runtime.h first): the working
  // directory, then the chain.
  void probe_pre_include(const std::string& name) { (void)probe(name, std::string(), "", false); }

  // A header nvcc's generated files include (the stub and the fatbin
  // source, which it writes under $TMPDIR and the host compiler compiles
  // with the command's -I): a quoted include from `tmpdir`, then the chain.
  // No dependency output lists it. The place found, if any.
  std::optional<std::string> probe_generated(const std::string& name, const std::string& tmpdir) {
    auto found = probe(name, tmpdir, "", false);
    return found.empty() ? std::nullopt : std::optional(std::move(found.front()));
  }

  // Whether `file` is under the toolkit's or the host compiler's own
  // directories.
  bool trusted(const std::string& file) const {
    const std::string r = real_file(file);
    return std::any_of(m_trusted.begin(), m_trusted.end(), [&r](const std::string& t) { return dt::under(r, t); });
  }
  // Whether `place` is under those directories as it is spelled (not
  // where links on the way lead: a user's link into /usr/include is the
  // user's, and may be retargeted).
  bool trusted_as_spelled(const std::string& place) const {
    const std::string n = dt::normal(place);
    return n.starts_with("/") &&
           std::any_of(m_trusted.begin(), m_trusted.end(), [&n](const std::string& t) { return dt::under(n, t); });
  }

  std::vector<std::string> absent() const { return m_absent; }

  // A place that must stay absent (a library nvlink would find there).
  void absent_place(const std::string& place) { absent_if_so(place); }
  std::vector<std::string> present() const { return m_present; }

 private:
  // The place `name` is found at (empty: none). For #include_next (`next`)
  // the search would go on past the directory the includer was found in,
  // which is not known here: every place along the search is recorded
  // (absent, or present and kept as it is), and every one found returned,
  // the includer itself passed over. More than the compiler looks at:
  // only ever a miss too many.
  std::vector<std::string> probe(const std::string& name, const std::optional<std::string>& first_dir,
                                 const std::string& includer, bool next) {
    std::vector<std::string> out;
    if (name.empty()) return out;
    const std::string includer_real = includer.empty() ? std::string() : real_file(includer);
    for (const auto& place : search_places(name, first_dir, m_chain)) {
      if (m_precompiled.count(name) != 0) no_precompiled(place);
      struct stat st {};
      if (::stat(place.c_str(), &st) != 0) {
        absent_if_so(place);
        continue;
      }
      const std::string real = real_file(place);
      // #include_next of a header by its own name finds the header itself
      // first here: the search goes on past it.
      if (real == includer_real) continue;
      // A place that leads to a file read, but not by the spelling the
      // dependency list gives it, is a place as any other: gcc writes a
      // system header by its real path when that is shorter
      // (-fcanonical-system-headers), so the list names the file a link
      // led to, not the link the search took, and a link retargeted since
      // must show (outside the toolkit's and the host compiler's own
      // directories, which are theirs).
      const bool listed =
          m_deps.count(real) != 0 &&
          (m_dep_spellings.count(dt::normal(place, /*keep_dotdot=*/true)) != 0 || trusted_as_spelled(place));
      if (!listed && m_present_seen.insert(place).second) m_present.push_back(place);
      out.push_back(place);
      if (!next) break;
    }
    return out;
  }

  // gcc looks for a precompiled `<header>.gch` in each directory it
  // searches, before the header itself, and uses one it finds there, for
  // the headers included before the translation unit's first token: the
  // implicit stdc-predef.h of every compile (nvcc's host compile starts
  // with the source's tokens), and for a device link the stub's first
  // includes (`names`). Each such place must stay empty; one that is not
  // keeps the record from being stored. (Cheaper than every header's:
  // those doubled the places a hit looks at.)
 public:
  void precompiled(std::set<std::string> names) { m_precompiled = std::move(names); }
  void no_precompiled(const std::string& place) {
    const std::string gch = place + ".gch";
    struct stat st {};
    if (::stat(gch.c_str(), &st) == 0) {
      if (!m_refused) m_refused = "a precompiled header '" + gch + "' the host compiler may use";
      return;
    }
    absent_if_so(gch);
  }

 public:
  // Why what was found keeps the record from being stored, or nullopt.
  const std::optional<std::string>& refused() const { return m_refused; }

 private:
  void absent_if_so(const std::string& place) {
    if (m_absent_seen.count(place) != 0) return;
    struct stat st {};
    if (::stat(place.c_str(), &st) == 0) return;
    m_absent_seen.insert(place);
    m_absent.push_back(place);
  }

  // A file's directory resolved, its own name kept (a header that is a
  // symbolic link is found under its own name).
  static std::string real_file(const std::string& path) {
    const std::string parent = dt::parent_of(path);
    const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
    return dt::join(dt::real_or_normal(parent.empty() ? "." : parent), base);
  }

  std::vector<std::string> m_chain, m_chain_real, m_trusted;
  std::set<std::string> m_deps, m_dep_spellings, m_absent_seen, m_present_seen;
  std::vector<std::string> m_absent, m_present;
  std::optional<std::string> m_refused;
  std::set<std::string> m_precompiled = {"stdc-predef.h"};
  std::vector<std::string> m_absolute_operands;
};

// ---- counters (shown by `progcache stats`)

// `why` with each quoted name replaced by '…', so reasons count together.
std::string reason_class(const std::string& why) {
  std::string out;
  bool quoted = false;
  for (char c : why) {
    if (c == '\'') {
      if (!quoted) out += "'...'";
      quoted = !quoted;
    } else if (!quoted) {
      out += c;
    }
  }
  return out;
}

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

// Whether `data` can be what nvcc writes in `mode`: ELF for objects and
// cubins, the fatbin header for fatbins, something for the rest.
bool output_of_its_kind(nv::Mode mode, std::string_view data) {
  switch (mode) {
    case nv::Mode::object:
    case nv::Mode::device_link:
    case nv::Mode::cubin:
      return data.size() >= 64 && data.starts_with(
                                      "\x7f"
                                      "ELF");
    case nv::Mode::fatbin:
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

// Where the counters live and who may have written them: a regular file in
// the root's nvcc store, which the file store has accepted.
struct StatsFile {
  std::string path;
  pc::Sharing sharing = pc::Sharing::private_only;
  gid_t group = 0;  // the store directory's group (group sharing)
};

// An open counters file is used only when it is a regular file this user
// owns, or, in a group-shared root, one of the root's group; never writable
// by others. A FIFO, a device or another user's file planted there is left
// alone: counting is best effort, a build must not wait on it.
bool trusted_stats_file(const struct stat& st, const StatsFile& where) {
  if (!S_ISREG(st.st_mode)) return false;
  if (where.sharing == pc::Sharing::private_only) return st.st_uid == ::geteuid() && (st.st_mode & 022) == 0;
  return (st.st_uid == ::geteuid() || st.st_gid == where.group) && (st.st_mode & 002) == 0;
}

// Opens the counters file and takes its advisory lock, waited on for a
// bounded time; -1 when it cannot be used. Best effort: a counter that
// cannot be kept costs nothing, and never a wait on someone else's file.
int open_counters(const StatsFile& where) {
  const bool group = where.sharing == pc::Sharing::group;
  const int fd = ::open(where.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
                        group ? 0660 : 0600);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !trusted_stats_file(st, where)) {
    ::close(fd);
    return -1;
  }
  // Group members count in one file: it must stay writable by the group
  // whatever the umask of whoever made it.
  if (group && st.st_uid == ::geteuid() && (st.st_mode & 0660) != 0660) (void)::fchmod(fd, 0660);
  // Another process holds the lock only for a read and a write; one that
  // holds it longer (stopped, or holding it on purpose) costs this count.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    ::usleep(2000);
  }
  ::close(fd);
  return -1;
}

// The counters as the open file holds them (at most 1 MiB read); null when
// they are not a JSON object.
json read_counters(int fd) {
  std::string text;
  std::array<char, 4096> buf{};
  ssize_t n = 0;
  while ((n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(text.size()))) > 0 && text.size() < (1U << 20)) {
    text.append(buf.data(), static_cast<std::size_t>(n));
  }
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json(nullptr);
}

// Adds one to each of `counters`, or to `tally`'s count of `reason`, in
// <root>/nvcc/launcher-stats.json: one locked read and write.
void add_counts(const StatsFile& where, std::initializer_list<nv::Counter> counters,
                std::optional<std::pair<nv::Tally, std::string>> tally = std::nullopt) {
  const int fd = open_counters(where);
  if (fd < 0) return;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  json j = read_counters(fd);
  if (j.is_null()) j = json::object();
  auto bump = [](json& obj, const std::string& k) {
    if (!obj.contains(k) || !obj[k].is_number_unsigned()) obj[k] = 0U;
    obj[k] = obj[k].get<std::uint64_t>() + 1;
  };
  for (const nv::Counter c : counters) bump(j, std::string(nv::counter_name(c)));
  if (tally) {
    const std::string group(nv::tally_name(tally->first));
    if (!j.contains(group) || !j[group].is_object()) j[group] = json::object();
    bump(j[group], reason_class(tally->second));
  }
  const std::string out = j.dump(1);
  if (::ftruncate(fd, 0) == 0) (void)::pwrite(fd, out.data(), out.size(), 0);
}

void count(const StatsFile& where, std::initializer_list<nv::Counter> counters) {
  add_counts(where, counters);
}

void count(const StatsFile& where, nv::Tally tally, const std::string& reason) {
  add_counts(where, {}, std::pair{tally, reason});
}

// ---- running nvcc

[[noreturn]] void exec_nvcc(const std::string& nvcc, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(nvcc.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): execv's signature
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  argv.push_back(nullptr);
  ::execv(nvcc.c_str(), argv.data());
  std::fprintf(stderr, "progcache: cannot run '%s': %s\n", nvcc.c_str(), std::strerror(errno));
  std::_Exit(127);
}

// Runs `program` with `args` (argv[0] is `program`), reading its standard
// output and error through pipes (passed through as they come when `echo`)
// until it has exited. What decides the end is the child's exit, not the
// pipes' end: a wrapper that leaves a process behind holding them (a
// compiler server a wrapper starts) must not keep the build waiting once
// the compile returned. `timeout_ns` (0: none) kills a child that runs
// longer. `null_stdin` gives it /dev/null instead of this process's input.
Ran run_child(const std::string& program, const std::vector<std::string>& args, bool echo, bool null_stdin,
              std::int64_t timeout_ns, const std::vector<std::string>* env) {
  Ran r;
  std::array<int, 2> out_pipe{-1, -1};
  std::array<int, 2> err_pipe{-1, -1};
  if (::pipe2(out_pipe.data(), O_CLOEXEC) != 0 || ::pipe2(err_pipe.data(), O_CLOEXEC) != 0) {
    std::fprintf(stderr, "progcache: cannot make a pipe: %s\n", std::strerror(errno));
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (null_stdin) posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args)
    argv.push_back(
        const_cast<char*>(a.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): posix_spawn's signature
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (env != nullptr) {
    envp.reserve(env->size() + 1);
    for (const auto& e : *env)
      envp.push_back(
          const_cast<char*>(e.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): posix_spawn's signature
    envp.push_back(nullptr);
  }
  pid_t pid = -1;
  const int rc =
      ::posix_spawn(&pid, program.c_str(), &fa, nullptr, argv.data(), env != nullptr ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    std::fprintf(stderr, "progcache: cannot run '%s': %s\n", program.c_str(), std::strerror(rc));
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return r;
  }
  std::array<pollfd, 2> fds{pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<char, 1 << 16> buf{};
  // Reads what one pipe holds now; false once it is closed or failed.
  auto take = [&](std::size_t i) {
    const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      ::close(fds[i].fd);
      fds[i].fd = -1;
      return false;
    }
    const std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
    (i == 0 ? r.out : r.err).append(chunk);
    if (echo) (void)write_all_to(i == 0 ? 1 : 2, chunk, i == 0 ? "standard output" : "standard error");
    return true;
  };
  const std::int64_t deadline = timeout_ns > 0 ? dt::now_ns() + timeout_ns : 0;
  int status = 0;
  bool exited = false;
  while (!exited) {
    const int ready = ::poll(fds.data(), fds.size(), 50);
    if (ready < 0 && errno != EINTR) break;
    for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].fd >= 0 && fds[i].revents != 0) take(i);
    }
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    exited = w == pid || (w < 0 && errno != EINTR);
    if (!exited && deadline != 0 && dt::now_ns() > deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      exited = true;
    }
  }
  // The child is gone: take what it left in the pipes, without waiting for
  // an end that another holder of them may never give.
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].fd < 0) continue;
    (void)::fcntl(fds[i].fd, F_SETFL, ::fcntl(fds[i].fd, F_GETFL) | O_NONBLOCK);
    for (;;) {
      const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
      (i == 0 ? r.out : r.err).append(chunk);
      if (echo) (void)write_all_to(i == 0 ? 1 : 2, chunk, i == 0 ? "standard output" : "standard error");
    }
    ::close(fds[i].fd);
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs nvcc, passing its output through as it comes and keeping a copy.
Ran run_capturing(const std::string& nvcc, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {nvcc};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_child(nvcc, argv, true, false);
}

// The time the compile starts, on the fine clock, returned once the coarse
// clock has passed it. A file changed before it carries an earlier time,
// whichever clock stamped it; a file changed from the return on carries a
// later one: the coarse clock (which stamps most writes) is already past
// it, and a fine-grained stamp (multigrain timestamps, Linux 6.13 and
// later, which give a file read just after its write a time beyond the
// coarse clock) is later still. Taking the start from the coarse clock
// made every input written in the last tick before the launcher look
// changed during the run, and nothing was stored.
std::int64_t tick_start() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  const std::int64_t start = dt::ns_of(t);
  timespec now{};
  for (;;) {
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (dt::ns_of(now) > start) break;
    ::usleep(500);
  }
  return start;
}

// A new empty file in the temporary directory, named with `suffix` (the
// host compiler takes a file's kind from it).
std::optional<std::string> make_temp_file(const std::string& suffix) {
  std::error_code ec;
  std::string tmpl = (std::filesystem::temp_directory_path(ec) / ("progcache-nvcc-XXXXXX" + suffix)).string();
  if (ec) return std::nullopt;
  const int fd = ::mkstemps(tmpl.data(), static_cast<int>(suffix.size()));
  if (fd < 0) return std::nullopt;
  ::close(fd);
  return tmpl;
}

class Launcher {
 public:
  // `explain`: say what the command would do (a hit, or why not) and run,
  // write and count nothing.
  Launcher(std::string nvcc, std::vector<std::string> args, bool explain = false)
      : m_nvcc(std::move(nvcc)), m_args(std::move(args)), m_explain(explain) {}

  int run() {
    auto cfg = pc::resolve_config();
    if (!cfg.ok()) {
      if (m_explain) return fail(cfg.status());
      std::fprintf(stderr, "progcache: not caching (%s)\n", plain(cfg.status()).c_str());
      exec_nvcc(m_nvcc, m_args);
    }
    // A settings file that cannot be used is skipped (defaults apply), and said.
    for (const auto& w : cfg->warnings) std::fprintf(stderr, "progcache: warning: %s\n", w.c_str());
    if (cfg->disabled) {  // PROGCACHE_DISABLE: as if no launcher were set
      if (m_explain) return said(k_exit_miss, "not cached: " + cfg->disabled_by() + ", nvcc runs alone");
      exec_nvcc(m_nvcc, m_args);
    }
    // The root is judged before anything in it is read or written: a root
    // the file store refuses gets no counters, only nvcc.
    m_root = cfg->dir;
    pc::FileStoreOptions o = cfg->file_store_options();
    o.root = pc::join_path(m_root, std::string(k_store));
    if (!cfg->compression_given) o.codec.compression_level = pc::k_launcher_compression_level;
    if (m_explain) {
      // Asking changes nothing: the store is not opened (an open tidies a
      // shard, a lookup counts, stamps and drops a damaged entry); its
      // files are read as they are, where the store would accept the root.
      m_store_options = o;
    } else {
      auto store = pc::FileStore::open(o);
      if (!store.ok()) {
        std::fprintf(stderr, "progcache: not caching (%s)\n", plain(store.status()).c_str());
        exec_nvcc(m_nvcc, m_args);
      }
      m_store = std::move(*store);
    }
    m_stats.path = pc::join_path(o.root, std::string(k_stats_file));
    m_stats.sharing = o.sharing;
    if (struct stat st{}; ::stat(o.root.c_str(), &st) == 0) m_stats.group = st.st_gid;

    pc::nvcc::EnvFlags env;
    for (auto [name, value] :
         {std::pair{"NVCC_PREPEND_FLAGS", &env.prepend}, std::pair{"NVCC_APPEND_FLAGS", &env.append},
          std::pair{"PTXAS_FLAGS", &env.ptxas}, std::pair{"CUDAFE_FLAGS", &env.cudafe}}) {
      if (const char* v = std::getenv(name)) *value = v;
    }
    // Every variable nvcc.profile names is keyed (its own content is keyed
    // by the file's identity); one it extends that may name files is refused.
    m_bin = dt::parent_of(real_path(m_nvcc));
    nv::ProfileVariables profile;
    if (auto text = dt::read_regular(m_bin + "/nvcc.profile"); text.ok()) {
      profile = nv::profile_variables(*text);
      m_toolkit_nvcc = true;
    } else {
      // nvcc reached through a wrapper (a script that runs the real one):
      // its profile is not known, so the variables a stock profile names
      // are keyed and none counts as replaced.
      profile.names = {"TOP",      "CICC_PATH",       "NVVMIR_LIBRARY_DIR", "LD_LIBRARY_PATH", "PATH",
                       "INCLUDES", "SYSTEM_INCLUDES", "LIBRARIES",          "CUDAFE_FLAGS",    "PTXAS_FLAGS"};
    }
    m_variables = keyed_variables(profile);
    m_cmd = nv::parse_command(
        m_args, [this](const std::string& p) { return read_input(p); }, env);
    if (!m_cmd.uncacheable.empty()) uncacheable(m_cmd.uncacheable);
    if (auto v = unfollowed_variable(m_variables, profile, m_cmd.mode == nv::Mode::device_link)) {
      uncacheable("variable '" + *v + "' set: nvcc reads it, and what it names is not keyed");
    }
    // The host compiler's preprocessor writes a dependency file these name.
    for (const char* v : {"DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES"}) {
      if (std::getenv(v) != nullptr)
        uncacheable("variable '" + std::string(v) + "' set: the host compiler writes a file");
    }
    // clang's driver adds, removes or replaces options from it (-include, -I).
    if (std::getenv("CCC_OVERRIDE_OPTIONS") != nullptr) {
      uncacheable("variable 'CCC_OVERRIDE_OPTIONS' set: the host compiler's options are not those keyed");
    }
    // A hit renames a file over the output; a miss reads nvcc's output back.
    // Both only for a regular file (or none yet): a FIFO, a device, a
    // symbolic link (/dev/stdout) is nvcc's alone to write.
    std::vector<std::pair<std::string, std::string>> written = {{"output", m_cmd.output}};
    if (m_cmd.depfile) written.emplace_back("dependency file", *m_cmd.depfile);
    for (const auto& [what, path] : written) {
      struct stat st {};
      if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        uncacheable(std::string(what).append(" '").append(path).append("' is not a regular file"));
      }
    }
    // An object is host code, linked into programs: served only from a
    // private root or from signed, verified entries (trust.h).
    if (m_cmd.mode == nv::Mode::object || m_cmd.mode == nv::Mode::device_link) {
      if (const pc::CodeTrust trust = pc::host_code_trust(*cfg); !trust.disk) {
        uncacheable("host code (an object) in a group-shared root needs signed entries (PROGCACHE_HMAC_KEY_FILE)");
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
    if (m_explain) return explain();
    if (auto served = serve()) return *served;
    if (auto served = wait_for_another(cfg->lock_timeout, o.sharing == pc::Sharing::group)) return *served;
    return miss();
  }

 private:
  // Single flight across processes: identical commands (one manifest key)
  // started together compile once, and the others are served what it
  // stored. The lock (lock_file.h) is the kernel's: a holder that dies
  // drops it. The wait is bounded (PROGCACHE_LOCK_TIMEOUT); a lock that
  // cannot be taken costs the wait at most, never the build. A waiter that
  // then finds no result (the first compile's was not stored) compiles at
  // once, without the lock: waiting in turn would run identical compiles
  // one after another.
  std::optional<int> wait_for_another(std::chrono::milliseconds timeout, bool group) {
    bool waited = false;
    auto lock = pc::LockFile::acquire(pc::Env::posix(), pc::join_path(m_root, "locks"), "nvcc-" + m_mkey.hex(), timeout,
                                      &waited, group ? 02770 : 0700, group ? 0660 : 0600);
    if (!waited) {
      if (lock.ok()) m_lock.emplace(std::move(*lock));
      return std::nullopt;
    }
    count(m_stats, {nv::Counter::waited});
    return serve();
  }

  // The stored result, written out: 0, or nullopt for a miss. The
  // command's own key first, then (under a base directory) the relocated
  // one.
  std::optional<int> serve() {
    std::optional<int> served;
    auto got = m_store->get(m_mkey);
    const pc::Artifact* text = got.ok() && got->has_value() ? (*got)->find("manifest") : nullptr;
    if (text != nullptr) m_manifest = nv::decode_manifest(text->data.view());
    if (m_manifest) {
      m_had_manifest = true;
      nv::serve_first_holding(*m_manifest, [&](const pc::Key& rkey) {
        served = serve_result(rkey);
        return served.has_value();
      });
      if (served) return served;
    }
    if (!m_relocated_key) return std::nullopt;
    auto relocated = m_store->get(*m_relocated_key);
    const pc::Artifact* rtext = relocated.ok() && relocated->has_value() ? (*relocated)->find("manifest") : nullptr;
    const auto m = rtext != nullptr ? nv::decode_manifest(rtext->data.view()) : std::nullopt;
    if (!m) return std::nullopt;
    nv::serve_first_holding(*m, [&](const pc::Key& k) {
      served = serve_relocated(k);
      return served.has_value();
    });
    return served;
  }

  // A result found by the relocated key: its pointer entry names the
  // result a compile in another checkout stored (which printed nothing),
  // and holds its dependency file as a template, written here for this
  // working directory.
  std::optional<int> serve_relocated(const pc::Key& k) {
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
    count(m_stats, {nv::Counter::hits, nv::Counter::relocated_hits});
    return 0;
  }

  // Why nvcc would fail to write what a hit writes, or nullopt. An output
  // nvcc could not write (a file it may not write, a missing directory) is
  // nvcc's to report: a hit must not succeed where the compile would fail,
  // nor replace a file the user protected.
  std::optional<std::string> unwritable() const {
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

  // The result under `rkey`, written out: 0, or nullopt when it is not
  // there or cannot be written (then the next result, or a compile).
  std::optional<int> serve_result(const pc::Key& rkey, bool count_hit = true) {
    auto entry = m_store->get(rkey);
    if (!entry.ok() || !entry->has_value()) return std::nullopt;
    const pc::Artifact* output = (*entry)->find("output");
    const pc::Artifact* depfile = (*entry)->find("depfile");
    if (output == nullptr || (m_cmd.depfile.has_value() != (depfile != nullptr))) return std::nullopt;
    const auto dep = depfile != nullptr ? std::optional<std::string_view>(depfile->data.view()) : std::nullopt;
    if (!write_result(output->data.view(), dep, &**entry)) return std::nullopt;
    if (count_hit) count(m_stats, {nv::Counter::hits});
    return 0;
  }

  // Writes a result's output and dependency file, and replays what the
  // compile printed (`printed`, if given): false when they cannot be
  // written (then nothing was replaced).
  bool write_result(std::string_view output, const std::optional<std::string_view>& depfile, const pc::Entry* printed) {
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

  // A direct miss. The compile's preprocessed text is looked up too, as
  // ccache's preprocessor mode does: a comment edit, or a header rewritten
  // with the same text, leaves it as it was, and the result it led to is
  // served (once the command has a manifest: before, no result of it can
  // be stored under its text). Without a manifest the text is computed
  // beside the compile, for the next lookup. Only for the toolkit's own
  // nvcc.
  int miss() {
    const std::int64_t start = tick_start();
    m_dirs_at_start = search_dir_identities();
    // Through a wrapper script, what `--dryrun` prints is the wrapper's to
    // decide, and running it twice may do twice what it does: direct key
    // only. A device link has no preprocessed text.
    if (!m_toolkit_nvcc || m_cmd.mode == nv::Mode::device_link) return compile(start, std::nullopt);
    // -src-in-ptx copies the source lines, comments and all, into the PTX:
    // a comment edit changes the output, not the text, so the text is
    // computed for its list of files alone (below).
    if (m_had_manifest && !m_cmd.source_in_ptx) {
      auto pre = preprocess(start);
      if (pre) {
        if (!pre->printed) {
          if (auto served = serve_preprocessed(*pre, start)) return *served;
        }
      }
      return compile(start, pre ? std::optional(*pre) : std::nullopt);
    }
    std::optional<Preprocessed> pre;
    std::thread beside([&] { pre = preprocess(start); });
    const int status = compile(start, std::nullopt, &beside, &pre);
    if (beside.joinable()) beside.join();
    return status;
  }

  // What the preprocessing steps nvcc would run made of the files now: the
  // key of that text (under the manifest key) and the files they read.
  struct Preprocessed {
    pc::Key key;
    std::vector<std::string> deps;
    std::map<std::string, dt::FileStamp> stamps;  // of each file read, once the steps were done
    // A step printed (#warning, a redefined macro, an #endif with words
    // after it): the text does not hold what nvcc would print, so no result
    // is found or recorded by it. Its list of files stands.
    bool printed = false;
    // The preprocessor's own word on line markers: its output names a file
    // (by a line marker) that no dependency list holds, so a #line
    // directive or a line marker in some file named it, whatever spelling
    // hid it from the lexer.
    bool names_unread_file = false;
    // Under a base directory: a text names a path under it (text_names_place).
    bool names_place = false;
  };

  // Runs `nvcc --dryrun` and each host compiler -E step it lists, as nvcc
  // would (its variables set), into temporary files; nullopt when any of it
  // fails or cannot be read with certainty (then only the direct key is
  // used). Every file read must be unchanged since `start`.
  std::optional<Preprocessed> preprocess(std::int64_t start) {
    // One minute for all of it (a preprocessor run takes well under a
    // second): past it, no text, and nvcc's compile is what counts.
    const std::int64_t deadline = dt::now_ns() + 60'000'000'000;
    auto time_left = [&] { return std::max<std::int64_t>(1, deadline - dt::now_ns()); };
    std::vector<std::string> dry_args = {m_nvcc};
    dry_args.insert(dry_args.end(), m_args.begin(), m_args.end());
    dry_args.emplace_back("--dryrun");
    const Ran dry = run_child(m_nvcc, dry_args, false, true, time_left());
    if (dry.status != 0) return std::nullopt;
    auto plan = nv::parse_dryrun(dry.err);
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

  // Whether what the stored result `entry` printed is what nvcc would print
  // for the files read now (`now`). The text is the same, so every line
  // number, column and message is; but a diagnostic quotes source lines,
  // read from the files it names. So every file whose bytes differ from
  // those the stored compile read (its manifest record) must go unnamed in
  // what it printed (by file name, anywhere in it).
  bool replayable(const pc::Entry& entry, const pc::Key& rkey, const nv::ManifestRecord& now) const {
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

  // The result the preprocessed text led to, served, and recorded in the
  // manifest under the files read now (the next lookup is a direct hit);
  // nullopt for a miss. A result that printed is served this way only when
  // what it printed names no file that changed (replayable).
  std::optional<int> serve_preprocessed(const Preprocessed& pre, std::int64_t start) {
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
    if (!std::holds_alternative<nv::ManifestRecord>(record)) return std::nullopt;
    if ((*entry)->find("stdout") != nullptr || (*entry)->find("stderr") != nullptr) {
      const auto* now = std::get_if<nv::ManifestRecord>(&record);
      if (now == nullptr || m_line_directive || !replayable(**entry, *rkey, *now)) return std::nullopt;
    }
    if (auto served = serve_result(*rkey, /*count_hit=*/false); !served) return std::nullopt;
    count(m_stats, {nv::Counter::hits, nv::Counter::preprocessed_hits});
    if (auto* rec = std::get_if<nv::ManifestRecord>(&record); rec != nullptr && reads_the_same(pre, *rec)) {
      rec->result = *rkey;
      (void)put_manifest(m_mkey, *rec);
    }
    return 0;
  }

  // What a compile read, as a manifest record (its result key not yet
  // set), or why it cannot be recorded: a file changed since `start`, a
  // probe through a macro, a file whose text the key cannot hold.
  std::variant<nv::ManifestRecord, std::string> build_record(const std::vector<std::string>& deps, std::int64_t start) {
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
    const bool device_link = m_cmd.mode == nv::Mode::device_link;
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
    nv::Command searched = m_cmd;
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
      if (!places.probe_generated("fatbinary_section.h", std::filesystem::temp_directory_path(ec).string())) {
        return std::string("a header nvcc's generated files include cannot be found: fatbinary_section.h");
      }
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
      if (!places.trusted(path)) {
        if (auto why = judge_text(*text, read.facts)) return *why;
      }
      std::vector<std::string> inner;
      if (auto why = places.probe_file(path, read.directives, &inner)) return *why;
      for (auto& p : inner) todo.push_back({p, !places.trusted(p)});
    }
    nv::ManifestRecord m;
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
    m.absent = places.absent();
    for (const auto& p : places.present()) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) return std::string("an input vanished");
      // A directory (a macro naming "/tmp" looks like a header name to the
      // lexer) cannot be read as a header: only that it is there counts.
      m.present.push_back({p, S_ISDIR(st.st_mode) ? dt::FileStamp{} : dt::stamp_of(st)});
    }
    return m;
  }

  // What a device link reads whole: its inputs, and for each library (-l,
  // and nvcc's own cudadevrt) every lib<NAME>.so and lib<NAME>.a in the
  // directories nvlink searches (-L, the toolkit's lib/stubs and lib,
  // LIBRARY_PATH's). Every one there is keyed by its contents and every
  // other place must stay absent, whichever order nvlink takes them in.
  std::variant<std::vector<std::string>, std::string> link_files(Places& places, const std::string& bin) const {
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

  // The directories whose headers are the toolkit's (beside nvcc) and the
  // host compiler's own (`system`), resolved.
  std::vector<std::string> trusted_roots(const std::vector<std::string>& system) const {
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

  // Why what a file the compile read says keeps its result from being
  // stored, or nullopt. Device line information names a file by the
  // working directory joined to the name a #line directive (or a line
  // marker) gives: when the place is not keyed, such a name may be
  // relative. A #line naming a file: that file is read too (a diagnostic
  // quotes it, -src-in-ptx copies it) and is not in the dependency list. A
  // pragma naming a file (#pragma GCC dependency) warns by that file's time.
  // `facts` are the text's line facts, as the include lexer read them.
  std::optional<std::string> judge_text(const std::string& text, const dt::LineFacts& facts) {
    if (auto why = unkeyable_content(text)) return why;
    if (facts.file_pragma) {
      return std::string("an input has a pragma naming a file (#pragma GCC dependency): it is not keyed");
    }
    if (facts.line_directive) return line_directive_read();
    return std::nullopt;
  }

  // A #line directive or a line marker was read: what it keeps from being
  // stored (the result is not replayed by its text when it printed).
  std::optional<std::string> line_directive_read() {
    m_line_directive = true;
    if (m_cmd.line_info && !m_place_keyed) {
      return std::string("a #line directive with line information: the name it gives may be relative");
    }
    if (m_cmd.source_in_ptx) {
      return std::string("a #line directive with -src-in-ptx: the file it names is copied in, and not keyed");
    }
    return std::nullopt;
  }

  // Runs nvcc (files unchanged since `start` are what it reads) and stores
  // what it made: the result under the files it read, the manifest, and,
  // with `pre` (or the text computed `beside` it), the preprocessed text's
  // pointer to the result.
  int compile(std::int64_t start, std::optional<Preprocessed> pre, std::thread* beside = nullptr,
              std::optional<Preprocessed>* beside_result = nullptr) {
    std::vector<std::string> args = m_args;
    std::optional<std::string> own_depfile;
    // For an output of device code alone, a -MD nvcc is given adds a
    // preprocessor run of its own, which prints the source's warnings a
    // second time: the toolkit's nvcc then runs the command as given, and
    // the files it read are those its preprocessing steps read (the text,
    // computed beside it). An object's -MD adds no run.
    const bool deps_from_text =
        !m_cmd.depfile && m_cmd.mode != nv::Mode::object && m_toolkit_nvcc && (beside != nullptr || pre.has_value());
    if (!m_cmd.depfile && !deps_from_text) {
      own_depfile = make_temp_file(".d");
      if (!own_depfile) {
        if (beside != nullptr) beside->join();
        count(m_stats, nv::Tally::not_stored, "no temporary file for the dependency list");
        exec_nvcc(m_nvcc, m_args);
      }
      if (m_cmd.mode == nv::Mode::device_link) {
        // The host compiler's, for the registration stub it compiles (the
        // one step of a device link that reads headers); its output is
        // the same with it (tests/nvcc_launcher_test.cpp). nvcc splits the
        // value at commas and hands it through a shell: a name a shell or
        // the split would change ($TMPDIR's) cannot be given.
        if (own_depfile->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+") !=
            std::string::npos) {
          ::unlink(own_depfile->c_str());
          count(m_stats, nv::Tally::not_stored, "the name of $TMPDIR cannot be handed to the host compiler");
          exec_nvcc(m_nvcc, m_args);
        }
        args.push_back("-Xcompiler=-MD,-MF," + *own_depfile);
      } else {
        args.insert(args.end(), {"-MD", "-MF", *own_depfile});
      }
    }
    if (m_cmd.mode == nv::Mode::device_link) {
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
      count(m_stats, {nv::Counter::compile_failed});
      return ran.status;
    }
    count(m_stats, {nv::Counter::misses});
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
    if (m_cmd.mode == nv::Mode::device_link) {
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
    auto& m = std::get<nv::ManifestRecord>(record);
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
    const json meta = {{"kind", std::string("nvcc-") + nv::mode_name(m_cmd.mode)}, {"name", m_cmd.input}};
    std::vector<std::pair<std::string, std::string>> files;
    files.reserve(m.files.size());
    for (const auto& f : m.files) files.emplace_back(f.path, f.sha256);
    const pc::Key rkey = nv::result_key(m_mkey, files);
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
    if (m_base_set && !m_not_relocated.empty()) count(m_stats, nv::Tally::not_relocated, m_not_relocated);
    // The preprocessed text points at this result only when it is the text
    // nvcc compiled: every file it read unchanged since `start` (checked
    // when it was made) and among those nvcc read.
    if (pre && !pre->printed && !m_cmd.source_in_ptx && reads_the_same(*pre, m)) {
      const json pmeta = {{"kind", "nvcc-preprocessed"}, {"name", m_cmd.input}};
      (void)m_store->put(pre->key, pc::Entry(pmeta.dump(), {{"result", pc::Bytes::copy_of(rkey.view())}}));
    }
    return 0;
  }

  // Which directory each search directory of the command (the source's
  // own, -I, -isystem, the environment's) is: renaming another directory
  // into place changes it, and no file's own times show that.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> search_dir_identities() const {
    std::vector<std::string> dirs = {dt::parent_of(m_cmd.input).empty() ? "." : dt::parent_of(m_cmd.input)};
    dirs.insert(dirs.end(), m_cmd.include_dirs.begin(), m_cmd.include_dirs.end());
    dirs.insert(dirs.end(), m_cmd.system_dirs.begin(), m_cmd.system_dirs.end());
    dirs.insert(dirs.end(), m_cmd.library_dirs.begin(), m_cmd.library_dirs.end());
    if (m_cmd.mode == nv::Mode::device_link) dirs.emplace_back(".");
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

  // Whether the preprocessing steps read the very files `record` holds:
  // the same paths, each the same file (device, inode) with the same
  // stamp. Anything else (a header created, a directory renamed, a link
  // retargeted between the steps and nvcc) and the text does not vouch for
  // the record.
  static bool reads_the_same(const Preprocessed& pre, const nv::ManifestRecord& record) {
    if (pre.stamps.size() != record.files.size()) return false;
    return std::all_of(record.files.begin(), record.files.end(), [&](const nv::ManifestFile& f) {
      const auto it = pre.stamps.find(f.path);
      return it != pre.stamps.end() && it->second == f.stamp;
    });
  }

  // The result `m` (just stored, its output naming no path: the
  // preprocessed texts nvcc compiled name none, nothing was printed) under
  // the relocated key too: a record with the checkout's paths relative,
  // pointing at the result, with the dependency file as a template.
  std::optional<std::string> store_relocated(const nv::ManifestRecord& m,
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
    const pc::Key k = nv::result_key(*m_relocated_key, files);
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

  // Adds `record` to the manifest under `mkey` as the store holds it now.
  pc::Status put_manifest(const pc::Key& mkey, const nv::ManifestRecord& record) {
    const json mmeta = {{"kind", "nvcc-manifest"}, {"name", m_cmd.input}};
    return m_store->put(mkey, pc::Entry(mmeta.dump(), {{"manifest", pc::Bytes::adopt(nv::encode_manifest(
                                                                        nv::add_result(merge_base(mkey), record)))}}));
  }

  // The manifest this compile's result joins: the store's as it is now
  // (another process may have added a result while nvcc ran), or none. One
  // that cannot be read is replaced.
  std::optional<nv::Manifest> merge_base(const pc::Key& mkey) {
    auto got = m_store->get(mkey);
    if (!got.ok() || !got->has_value()) return std::nullopt;
    const pc::Artifact* text = (*got)->find("manifest");
    if (text == nullptr) return std::nullopt;
    return nv::decode_manifest(text->data.view());
  }

  // nvcc succeeded; its result is simply not kept.
  int not_stored(const std::string& why) {
    count(m_stats, nv::Tally::not_stored, why);
    return 0;
  }

  // Runs nvcc unchanged, counting why (explaining: says why).
  [[noreturn]] void uncacheable(const std::string& why) {
    if (m_explain) std::exit(said(k_exit_miss, "not cached: " + why));
    count(m_stats, nv::Tally::uncacheable, why);
    exec_nvcc(m_nvcc, m_args);
  }

  // A file the command names (options and response files, -include): read
  // without blocking, regular files only; its stat kept, so that an edit
  // while nvcc runs keeps the result out of the store.
  pc::Result<std::string> read_input(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return pc::errno_status(errno, "cannot read", path);
    m_inputs_read.emplace(path, dt::stamp_of(st));
    return dt::read_regular(path);
  }

  // The directories a file read is found under, resolved: the chain, the
  // source's, the working directory, the library directories.
  std::vector<std::string> tops_of(const std::vector<std::string>& chain) const {
    std::vector<std::string> out;
    auto add = [&](const std::string& d) { out.push_back(dt::real_or_normal(d.empty() ? "." : d)); };
    for (const auto& d : chain) add(d);
    add(dt::parent_of(m_cmd.input));
    add(".");
    for (const auto& d : m_cmd.library_dirs) add(d);
    for (const auto& d : env_dirs("LIBRARY_PATH")) add(d);
    return out;
  }

  // Whether a file the command names changed since it was read for the key.
  bool named_input_changed() const {
    for (const auto& [path, stamp] : m_inputs_read) {
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || !(dt::stamp_of(st) == stamp)) return true;
    }
    return false;
  }

  // `progcache explain nvcc ...`: whether the command would be served, and
  // on a miss, for each result the command's manifest holds (newest first),
  // the first file or place that is not as it was. The preprocessed text is
  // not computed (that runs the preprocessor): a direct miss may still be
  // served by it.
  int explain() {
    const std::string key = "command key " + m_mkey.hex();
    const pc::file_store::Layout layout(m_store_options.root);
    if (struct stat st{}; ::stat(layout.dir().c_str(), &st) != 0) {
      return said(k_exit_miss, "miss (" + key + "): nothing of the launcher's is in '" + m_root + "'");
    }
    // The directories as the store judges them: one it would refuse is a
    // build without the cache (the root, its version directory) or a miss
    // (a shard).
    pc::Env* env = pc::Env::posix();
    const pc::file_store::DirPolicy dirs(env, m_store_options.sharing);
    if (auto st = dirs.check_root(layout.root()); !st.ok()) return fail(st);
    if (auto v = env->lstat(layout.dir()); !v.ok() || !dirs.acceptable(*v)) {
      return fail(pc::Status(pc::Code::permission_denied,
                             "'" + layout.dir() + "' is not a directory the store trusts: a build runs nvcc uncached"));
    }
    // An entry as a lookup would judge it, or why it is damaged; nothing
    // changed.
    const auto peek = [&](const pc::Key& k) { return pc::FileStore::peek(m_store_options, k); };
    auto got = peek(m_mkey);
    if (!got.ok()) {
      return said(k_exit_error, "damaged (" + key + "): the manifest's entry cannot be read (" + plain(got.status()) +
                                    "); a build drops it and compiles");
    }
    // Under a base directory, a result another checkout stored.
    const auto relocated_hit = [&]() -> std::optional<std::string> {
      if (!m_relocated_key || unwritable()) return std::nullopt;
      auto r = peek(*m_relocated_key);
      const pc::Artifact* rtext = r.ok() && r->has_value() ? (*r)->find("manifest") : nullptr;
      const auto rm = rtext != nullptr ? nv::decode_manifest(rtext->data.view()) : std::nullopt;
      if (!rm) return std::nullopt;
      nv::HoldingCheck holds(*rm);
      for (std::size_t i = 0; i < rm->results.size(); ++i) {
        if (holds.first_mismatch(i)) continue;
        auto pointer = peek(rm->results[i].result);
        const pc::Artifact* raw = pointer.ok() && pointer->has_value() ? (*pointer)->find("result") : nullptr;
        if (raw == nullptr) continue;
        auto rkey = pc::Key::from_raw(raw->data.view());
        if (!rkey.ok()) continue;
        auto entry = peek(*rkey);
        if (!entry.ok() || !entry->has_value() || (*entry)->find("output") == nullptr) continue;
        return "hit (relocated key " + m_relocated_key->hex() + ", stored from another checkout under " +
               printable(m_reloc->base) + ")";
      }
      return std::nullopt;
    };
    if (!got->has_value()) {
      if (auto hit = relocated_hit()) return said(k_exit_ok, *hit);
      return said(k_exit_miss, "miss (" + key +
                                   "): never stored with these options, this nvcc and host compiler, these "
                                   "variables" +
                                   std::string(m_place_keyed ? " and this directory" : "") + " (or evicted since)");
    }
    const pc::Artifact* text = (*got)->find("manifest");
    auto m = text == nullptr ? std::nullopt : nv::decode_manifest(text->data.view());
    if (!m) return said(k_exit_error, "damaged (" + key + "): the manifest cannot be read; a build replaces it");
    nv::HoldingCheck check(*m);
    std::vector<std::string> lines;
    const std::string of = " of " + std::to_string(m->results.size());
    for (std::size_t i = 0; i < m->results.size(); ++i) {
      const std::string label = "result " + std::to_string(i + 1) + of + ": ";
      if (const auto mm = check.first_mismatch(i)) {
        static constexpr const char* k_kinds[] = {"edited", "gone", "created earlier in the search",
                                                  "changed (a place a probe found)"};
        lines.push_back(label + k_kinds[static_cast<int>(mm->kind)] + "  " + printable(mm->path));
        continue;
      }
      auto entry = peek(m->results[i].result);
      if (!entry.ok()) {
        lines.push_back(label + "every file as it was, but its output's entry is damaged (" + plain(entry.status()) +
                        ")");
        continue;
      }
      if (!entry->has_value() || (*entry)->find("output") == nullptr) {
        lines.push_back(label + "every file as it was, but its output is not in the store (evicted)");
        continue;
      }
      if (const auto why = unwritable()) {
        std::string line = "miss (" + key;
        line.append(", ").append(label).append("stored, but ").append(printable(*why));
        return said(k_exit_miss, line.append(": nvcc runs, and fails as it would without the launcher)"));
      }
      std::string line = "hit (" + key;
      line.append(", ").append(label).append(m->results[i].result.hex()).append(")");
      return said(k_exit_ok, line);
    }
    if (auto hit = relocated_hit()) return said(k_exit_ok, *hit);
    said(k_exit_miss, "miss (" + key + ")");
    for (const auto& l : lines) std::printf("  %s\n", l.c_str());
    if (m_toolkit_nvcc && !m_cmd.source_in_ptx) {
      std::printf("  (the preprocessed text is not computed here: a comment-only edit may still be served by it)\n");
    }
    return k_exit_miss;
  }

  // One line of `explain`, naming the source: returns `code`.
  int said(int code, const std::string& what) const {
    std::printf("%s: %s\n", printable(m_cmd.input.empty() ? std::string("nvcc") : m_cmd.input).c_str(), what.c_str());
    std::fflush(stdout);
    return code;
  }

  std::string m_nvcc;
  std::string m_bin;  // nvcc's directory, links resolved
  std::vector<std::string> m_variables;
  std::vector<std::string> m_args;
  nv::Command m_cmd;
  std::string m_root;
  StatsFile m_stats;
  std::map<std::string, dt::FileStamp> m_inputs_read;
  std::map<std::string, dt::FileStamp> m_link_inputs_before;  // a device link's inputs, before nvcc ran
  std::unique_ptr<pc::FileStore> m_store;
  pc::Key m_mkey;
  bool m_place_keyed = false;                                            // the working directory is in the key
  std::vector<std::pair<std::uint64_t, std::uint64_t>> m_dirs_at_start;  // search_dir_identities() at the start
  bool m_toolkit_nvcc = false;                   // nvcc.profile beside it: the toolkit's own nvcc, not a wrapper
  bool m_had_manifest = false;                   // the command's manifest was read (a result of it was stored)
  std::optional<nv::Manifest> m_manifest;        // as the direct lookup read it
  std::optional<Relocation> m_reloc;             // under a base directory (relocation_for)
  bool m_base_set = false;                       // PROGCACHE_BASE_DIR is set
  std::string m_not_relocated;                   // why a compile's result is not under the relocated key
  std::optional<pc::Key> m_relocated_key;        // the command's key with the checkout's paths relative
  bool m_line_directive = false;                 // a file read holds a #line directive (build_record)
  std::vector<std::string> m_absolute_operands;  // headers included by absolute path (build_record)
  std::optional<pc::LockFile> m_lock;            // held from a miss to the store of its result
  bool m_explain = false;                        // say what would happen; run, write and count nothing
  pc::FileStoreOptions m_store_options;          // explain's: where the store is, and how entries are checked
};

}  // namespace

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
  return Launcher(*nvcc, std::move(args)).run();
}

int explain_launcher_command(int argc, char** argv) {
  const std::string program = argv[0];
  auto nvcc = find_program(program);
  if (!nvcc) {
    std::fprintf(stderr, "progcache: %s: command not found\n", program.c_str());
    return k_exit_usage;
  }
  return Launcher(*nvcc, std::vector<std::string>(argv + 1, argv + argc), /*explain=*/true).run();
}

// The counters file of `root`'s nvcc store; nullopt when the store does
// not exist (the launcher never ran there).
std::optional<StatsFile> stats_file_of(const std::string& root, pc::Sharing sharing) {
  StatsFile where;
  where.path = pc::join_path(pc::join_path(root, std::string(k_store)), std::string(k_stats_file));
  where.sharing = sharing;
  struct stat st {};
  if (::stat(pc::join_path(root, std::string(k_store)).c_str(), &st) != 0) return std::nullopt;
  where.group = st.st_gid;
  return where;
}

void zero_launcher_stats(const std::string& root, const pc::Config& cfg) {
  const auto where = stats_file_of(root, cfg.sharing);
  if (!where) return;  // nothing to zero, nothing made
  const int fd = open_counters(*where);
  if (fd < 0) return;
  if (::ftruncate(fd, 0) == 0) (void)::pwrite(fd, "{}", 2, 0);
  ::close(fd);
}

json launcher_stats_json(const std::string& root, pc::Sharing sharing) {
  // Read only where counting and zeroing would write: a file others could
  // have written (or a FIFO planted in a shared root, which must not hang
  // `stats`) is not reported.
  const auto where = stats_file_of(root, sharing);
  if (!where) return nullptr;
  const int fd = ::open(where->path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return nullptr;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !trusted_stats_file(st, *where)) return nullptr;
  return read_counters(fd);
}

}  // namespace progcache::nvcc
