// What one nvcc command line asks for, as the launcher needs to know it:
// whether its result can be cached (one CUDA source compiled to one output
// file), where that output and the dependency file go, and the command in a
// canonical spelling for the key.
//
// Options are read against nvcc's own table (nvcc_option_table.inc,
// generated from `nvcc --help`), so every option's value is taken with it
// whichever way it is written (`-o f`, `-o=f`, `--output-file f`, `-Idir`).
// An option the table does not know makes the command uncacheable (its
// value, if any, cannot be told from an input), unless the command forwards
// unknown options to the host compiler, when nvcc itself takes them as flags.
//
// nvcc hands words to other tools (-Xcompiler to the host compiler,
// -Xptxas, -Xnvlink, -Xcudafe, -Xlinker, -Xarchive), and some of those words
// name files the tool reads: response files (@file), options files, the host
// compiler's -include and -imacros. nvcc's dependency output does not list
// them, so their contents are read here and keyed (`read_files`). A host
// compiler word not known to read and write no file makes the command
// uncacheable: refused, not guessed at.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "progcache/status.h"

namespace progcache::nvcc {

// The output a cacheable command makes.
// device_link: `nvcc -dlink` of relocatable objects into the object that
// registers their device code (an object, host code like the others).
enum class Mode { object, cubin, ptx, fatbin, optix_ir, ltoir, device_link };
const char* mode_name(Mode m);

struct Command {
  // Empty when the result can be cached; else why not (counted per reason).
  std::string uncacheable;
  Mode mode = Mode::object;
  std::string input;  // the one source file, as given (a device link: its first input)
  // A device link's inputs (objects and archives), as given, in order;
  // a compile's one source.
  std::vector<std::string> inputs;
  // A device link's libraries (-l NAME) and their directories (-L), as
  // given: nvlink looks for lib<NAME>.so, then lib<NAME>.a, in the -L
  // directories, the toolkit's and LIBRARY_PATH's (launcher.cpp).
  std::vector<std::string> libraries;
  std::vector<std::string> library_dirs;
  std::string output;  // where nvcc writes it (-o, or nvcc's default name)
  // -MD with -MF: the dependency file the command asks for.
  std::optional<std::string> depfile;
  // Every option in canonical spelling (--long-name or --long-name=value),
  // with options files expanded in place, and the input last: what is keyed.
  std::vector<std::string> canonical;
  // The directories the command names for includes, as given (relative to
  // the working directory), each list in command-line order: -I, then
  // -isystem. nvcc puts its own include directory after the -I list and its
  // cccl directory after the -isystem list; the launcher adds those, the
  // environment's and the host compiler's (launcher.cpp).
  std::vector<std::string> include_dirs;
  std::vector<std::string> system_dirs;
  // nvcc's -include files (--pre-include), as given: found in the working
  // directory first, then along the include search.
  std::vector<std::string> pre_includes;
  // Whether the compile writes where it ran into what it makes: debug
  // information (-g, -G, or a debug word for the host compiler or ptxas)
  // names the working directory, the temporary
  // files' directory and the output's; -objtemp names the temporary files
  // after the output. Without either, the output depends on none of them,
  // and the key holds none of them (TMPDIR excepted: a sanitizer's or a
  // warning's text can name nvcc's temporary files): two build directories
  // of one checkout share entries.
  bool place_in_output = false;
  // Whether device line information is asked for (-lineinfo, -src-in-ptx,
  // ptxas's -lineinfo): the PTX names each file by the working directory
  // joined to the path it was reached by, so the working directory is in
  // the output only when a path the compile follows is relative (the
  // launcher decides: it knows the environment's search paths too).
  bool line_info = false;
  // -src-in-ptx: the PTX holds the source lines themselves, comments and
  // all, of every file the line information names.
  bool source_in_ptx = false;
  // Whether the output's name is in what the command writes: the
  // dependency file's target when no -MT names one (nvcc writes the -o name).
  bool output_name_written = false;
  // -ccbin's value, if given.
  std::optional<std::string> ccbin;
  // Every file read by name from the command line besides the source and
  // what nvcc's dependency output lists (options files at any depth, the
  // sub-tools' response and options files, the host compiler's -include and
  // -imacros), in order, with the SHA-256 (raw) of the contents read: what
  // the key holds. A file that cannot be read makes the command uncacheable.
  struct FileRead {
    std::string path;
    std::string sha256;
  };
  std::vector<FileRead> read_files;
};

// NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS as nvcc sees them: words that go
// before and after the command line's own. Unset is nullopt.
// PTXAS_FLAGS and CUDAFE_FLAGS (which nvcc.profile appends to) are words
// nvcc hands to ptxas and cudafe++, judged as the -Xptxas and -Xcudafe
// words are.
struct EnvFlags {
  std::optional<std::string> prepend;
  std::optional<std::string> append;
  std::optional<std::string> ptxas;
  std::optional<std::string> cudafe;
};

// The words of `cmd.canonical` the key holds: all of them, less the output
// file's and the dependency file's names where the output does not depend
// on them (neither `place_in_output` nor `output_name_written`).
std::vector<std::string> keyed_words(const Command& cmd);

// Reads an options file (--options-file): its text, or an error.
using ReadFile = std::function<Result<std::string>(const std::string& path)>;

// Reads nvcc's arguments (without the program name), with the words of
// `env` around them, as nvcc reads them. Never fails: what it cannot read is
// an uncacheable command, and nvcc runs it as it would. Every file is read
// through `read_file`, which must not block (a FIFO, a device).
Command parse_command(const std::vector<std::string>& args, const ReadFile& read_file, const EnvFlags& env = {});

// The words of NVCC_PREPEND_FLAGS or NVCC_APPEND_FLAGS: split at white
// space. invalid_argument when the value holds a quote or a backslash: nvcc
// does not read those as a shell would, so what it makes of them is not
// known here.
Result<std::vector<std::string>> split_env_flags(std::string_view value);

// The words of a host compiler response file (@file): whitespace-separated,
// with '...' and "..." quoting and backslash escapes, as gcc reads them.
// nvcc's own options files (and ptxas's and nvlink's) are split with
// split_env_flags: nvcc takes a quote as part of a word ('-DC='1'' defines
// C as '1'), so one holding a quote or a backslash is refused.
std::vector<std::string> split_options_file(const std::string& text);

// What an nvcc.profile says about the environment: every variable it names
// (assigned, or read as $(NAME)), in order of first mention, and those it
// assigns with a plain '=' (the environment's value is then replaced, not
// extended).
struct ProfileVariables {
  std::vector<std::string> names;
  std::vector<std::string> replaced;
};
ProfileVariables profile_variables(std::string_view text);

// What `nvcc --dryrun` says it would run, as far as the launcher's
// preprocessed key needs it: the variables nvcc sets for its tools (each
// `NAME=value` line whose value is one word), and the preprocessing steps
// (the host compiler's `-E` runs: one for the host code, one per device
// architecture), each without its `-o` file and dependency options, which
// the launcher gives its own. invalid_argument for a text it cannot read
// with certainty: a step holding `$` or a quote it cannot follow, a step
// without its `-o`, or no preprocessing step at all.
struct DryRun {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::vector<std::string>> preprocess;
};
Result<DryRun> parse_dryrun(std::string_view text);

}  // namespace progcache::nvcc
