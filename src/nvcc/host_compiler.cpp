// nvcc/host_compiler.cpp — what the host compiler says of itself (-v), and
// what a host compiler that is a script reads.
#include "nvcc/host_compiler.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/scan_files.h"
#include "nvcc/environment.h"
#include "nvcc/programs.h"
#include "nvcc/spawn.h"
#include "progcache/key.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace progcache::nvcc {

namespace {

namespace dt = progcache::detail;

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

}  // namespace

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

}  // namespace progcache::nvcc
