// nvcc/manifest_key.cpp — the command's key: the identities of the programs
// and files that decide the compile besides its headers.
#include "nvcc/manifest_key.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "compile/scan_files.h"
#include "nvcc/environment.h"
#include "nvcc/host_compiler.h"
#include "nvcc/nvcc_command.h"
#include "nvcc/programs.h"
#include "nvcc/relocation.h"
#include "progcache/key.h"

namespace progcache::nvcc {

namespace {

namespace dt = progcache::detail;

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

// What `dir` is now: 0 nothing, 1 a directory, 2 something else.

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

}  // namespace

Key manifest_key(const std::string& nvcc_path, const Command& cmd, const std::vector<std::string>& variables,
                 const Relocation* reloc) {
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
  if (cmd.mode != Mode::device_link) {
    const std::string source = real_path(cmd.input);
    const auto rel = reloc != nullptr ? reloc->relative(source) : std::nullopt;
    if (rel) {
      kb.add_string("source-path-relocated", *rel);
    } else {
      kb.add_string("source-path", source);
    }
  }
  // nvlink looks for -l libraries along LIBRARY_PATH too.
  if (cmd.mode == Mode::device_link) {
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
  kb.add_string("mode", mode_name(cmd.mode));
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
  for (const auto& w : keyed_words(cmd)) {
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

}  // namespace progcache::nvcc
