#include "nvcc/nvcc_command.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <tuple>

#include "progcache/hash.h"

namespace progcache::nvcc {

namespace {

struct Option {
  std::string_view long_name;
  std::string_view short_name;
  bool takes_value;
};

constexpr Option k_options[] = {
#include "nvcc/nvcc_option_table.inc"
    // Not in `nvcc --help`, but nvcc takes it (CMake projects pass it):
    // words for cudafe++.
    {"cudafe-options", "Xcudafe", true},
};

// Options files nest; a file that names itself must not recurse forever.
constexpr int k_max_options_file_depth = 8;

const Option* find_option(std::string_view name) {
  for (const auto& o : k_options) {
    if (o.long_name == name || o.short_name == name) return &o;
  }
  return nullptr;
}

// Single-letter options whose value may follow with no space or '='
// (-Idir, -DNAME, -O3), as nvcc and every C compiler accept.
const Option* find_attached(std::string_view word) {
  if (word.size() < 3 || word[0] != '-' || word[1] == '-') return nullptr;
  const std::string_view letter = word.substr(1, 1);
  const Option* o = find_option(letter);
  return o != nullptr && o->takes_value ? o : nullptr;
}

struct ModeName {
  std::string_view option;
  Mode mode;
};
constexpr ModeName k_cacheable_modes[] = {
    {"compile", Mode::object}, {"device-c", Mode::object},   {"cubin", Mode::cubin}, {"ptx", Mode::ptx},
    {"fatbin", Mode::fatbin},  {"optix-ir", Mode::optix_ir}, {"ltoir", Mode::ltoir}, {"device-link", Mode::device_link},
};
// Steps that make no single cacheable output (or no output at all).
constexpr std::string_view k_other_modes[] = {
    "cuda",
    "preprocess",
    "generate-dependencies",
    "generate-nonsystem-dependencies",
    "device-w",
    "link",
    "lib",
    "run",
    "fdevice-syntax-only",
    "clean-targets",
    "list-gpu-code",
    "list-gpu-arch",
    "help",
    "version",
    "dryrun",
};
// Options whose effect is outside the one output file: kept files, timing
// files, another output directory.
constexpr std::string_view k_uncacheable_options[] = {
    "generate-nonsystem-dependencies-with-compile",  // lists no system header: too little to key by
    "keep",
    "keep-dir",
    "save-temps",
    "time",
    "fdevice-time-trace",
    "output-directory",
    "run-args",
    // libdevice from a directory the key does not cover.
    "libdevice-directory",
};

// The tools nvcc hands words to, by the option that carries them.
struct ToolOption {
  std::string_view option;
  std::string_view tool;
};
constexpr ToolOption k_tool_options[] = {
    {"ptxas-options", "ptxas"},   {"nvlink-options", "nvlink"},    {"cudafe-options", "cudafe++"},
    {"linker-options", "linker"}, {"archive-options", "archiver"},
};

// Host compiler words known to read and write no file: keyed as words.
// Every other word given to the host compiler is refused, since a flag that
// reads a file the key cannot see (-fprofile-use=, -specs=, -B, -fplugin=,
// -Wp,...) would serve the output of a file's old contents.
constexpr std::string_view k_host_flag_prefixes[] = {
    "-D",
    "-U",
    "-O",
    "-W",
    "-m",
    "-g",
    "-std=",
    "-fno-",
    "-fvisibility",
    "-fsanitize=",
    "-fsanitize-recover",
    "-fstack-protector",
    "-fcf-protection",
    "-fdiagnostics-color",
    "-fmax-errors=",
    "-ftemplate-depth=",
    "-ftemplate-backtrace-limit=",
    "-fconstexpr-",
    "-fdebug-prefix-map=",
    "-ffile-prefix-map=",
    "-fmacro-prefix-map=",
    "-ffp-contract=",
    "-fexcess-precision=",
    "-fabi-version=",
    "-ftls-model=",
    "-fmessage-length=",
    "-finput-charset=",
    "-fexec-charset=",
    "-fopenmp",
    "-flto",
};
constexpr std::string_view k_host_flags[] = {
    "-fPIC",
    "-fpic",
    "-fPIE",
    "-fpie",
    "-pthread",
    "-pipe",
    "-w",
    "-pedantic",
    "-pedantic-errors",
    "-ansi",
    "-fexceptions",
    "-frtti",
    "-fasynchronous-unwind-tables",
    "-funwind-tables",
    "-ffast-math",
    "-fstrict-aliasing",
    "-fwrapv",
    "-ftrapv",
    "-fcommon",
    "-ffunction-sections",
    "-fdata-sections",
    "-fomit-frame-pointer",
    "-fsigned-char",
    "-funsigned-char",
    "-fpermissive",
    "-fsized-deallocation",
    "-faligned-new",
    "-fconcepts",
    "-fcoroutines",
    "-fchar8_t",
    "-finline-functions",
    "-funroll-loops",
    "-ftree-vectorize",
    "-fstack-clash-protection",
    "-fmath-errno",
    "-frecord-gcc-switches",
    "-ffreestanding",
    "-fshort-wchar",
    "-fshort-enums",
    "-fthreadsafe-statics",
    "-fuse-cxa-atexit",
    "-fzero-initialized-in-bss",
    "-fdiagnostics-show-option",
    "-shared",
    "-static",
    "-rdynamic",
    "-v",
};
// ... less these, which match a prefix above yet read or write files: the
// assembler's and the preprocessor's own words, split DWARF (.dwo files).
constexpr std::string_view k_host_file_prefixes[] = {"-Wa,", "-Wp,", "-gsplit-dwarf"};

// What a POSIX shell reads in a word besides its letters: white space,
// quotes, escapes, expansions, operators and globs.
constexpr std::string_view k_shell_chars = " \t\n'\"\\$`;|&<>()*?[]{}~#!";

bool starts_with_any(std::string_view w, std::span<const std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [w](std::string_view p) { return w.starts_with(p); });
}

bool plain_host_flag(std::string_view w) {
  if (starts_with_any(w, k_host_file_prefixes)) return false;
  return std::find(std::begin(k_host_flags), std::end(k_host_flags), w) != std::end(k_host_flags) ||
         starts_with_any(w, k_host_flag_prefixes);
}

template <typename Range>
bool contains(const Range& r, std::string_view s) {
  return std::find(std::begin(r), std::end(r), s) != std::end(r);
}

std::string stem_of(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (const auto dot = base.find_last_of('.'); dot != std::string::npos && dot > 0) base.resize(dot);
  return base;
}

std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = v.find(',', start);
    out.push_back(v.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

class Parser {
 public:
  explicit Parser(const ReadFile& read_file) : m_read_file(read_file) {}

  Command run(const std::vector<std::string>& command_line, const EnvFlags& env) {
    // nvcc reads NVCC_PREPEND_FLAGS before the command line's words and
    // NVCC_APPEND_FLAGS after them: an options file, -ccbin or -o there acts
    // as on the command line, so it is read as part of it.
    std::vector<std::string> args;
    for (const auto& [name, value, before] :
         {std::tuple{"NVCC_PREPEND_FLAGS", &env.prepend, true}, std::tuple{"NVCC_APPEND_FLAGS", &env.append, false}}) {
      if (!value->has_value()) continue;
      auto split = split_env_flags(**value);
      if (!split.ok()) {
        refuse(std::string(name) + " holds a quote or a backslash: how nvcc splits it is not known");
        continue;
      }
      (before ? m_prepend : m_append) = std::move(*split);
    }
    // PTXAS_FLAGS and CUDAFE_FLAGS: words for ptxas and cudafe++ (an
    // options file there is read by that tool, so it is keyed here).
    for (const auto& [name, value, tool] :
         {std::tuple{"PTXAS_FLAGS", &env.ptxas, "ptxas"}, std::tuple{"CUDAFE_FLAGS", &env.cudafe, "cudafe++"}}) {
      if (!value->has_value()) continue;
      auto split = split_env_flags(**value);
      if (!split.ok()) {
        refuse(std::string(name) + " holds a quote or a backslash: how nvcc splits it is not known");
        continue;
      }
      auto& ws = m_tool_words[tool];
      ws.insert(ws.end(), split->begin(), split->end());
    }
    args = m_prepend;
    args.insert(args.end(), command_line.begin(), command_line.end());
    args.insert(args.end(), m_append.begin(), m_append.end());
    m_forward_unknown = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "-forward-unknown-to-host-compiler" || a == "--forward-unknown-to-host-compiler" ||
             a == "-forward-unknown-opts" || a == "--forward-unknown-opts";
    });
    words(args, 0);
    host_words(m_host_words, 0);
    for (const auto& [tool, ws] : m_tool_words) tool_words(tool, ws, 0);
    finish();
    return std::move(m_cmd);
  }

 private:
  void refuse(std::string why) {
    if (m_cmd.uncacheable.empty()) m_cmd.uncacheable = std::move(why);
  }

  void words(const std::vector<std::string>& args, int depth) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& w = args[i];
      if (w.size() < 2 || w[0] != '-') {
        m_inputs.push_back(w);
        continue;
      }
      const std::string_view bare = std::string_view(w).substr(w[1] == '-' ? 2 : 1);
      const auto eq = bare.find('=');
      const std::string_view name = bare.substr(0, eq);
      const Option* o = find_option(name);
      std::optional<std::string> value;
      if (o != nullptr) {
        if (eq != std::string_view::npos) {
          if (!o->takes_value) {
            refuse("option '" + w + "' given a value it does not take");
            continue;
          }
          value = std::string(bare.substr(eq + 1));
        } else if (o->takes_value) {
          if (i + 1 >= args.size()) {
            refuse("option '" + w + "' without its value");
            continue;
          }
          value = args[++i];
        }
      } else if ((o = find_attached(w)) != nullptr) {
        value = w.substr(2);
      } else {
        // nvcc passes it to the host compiler as a flag when told to;
        // otherwise whether it takes a value cannot be known: nvcc decides.
        if (m_forward_unknown) {
          m_cmd.canonical.push_back(w);
          m_host_words.push_back(w);
        } else {
          refuse("unknown option '" + w + "'");
        }
        continue;
      }
      option(*o, value, depth);
    }
  }

  void option(const Option& o, const std::optional<std::string>& value, int depth) {
    const std::string_view n = o.long_name;
    if (n == "options-file") {
      if (depth >= k_max_options_file_depth) return refuse("options files nested too deeply");
      for (const auto& path : split_commas(*value)) {
        auto text = read_keyed(path);
        if (!text) return refuse("options file '" + path + "' cannot be read");
        // nvcc splits an options file at white space and takes quotes as
        // part of a word: a quote or a backslash is refused, not guessed at.
        auto split = split_env_flags(*text);
        if (!split.ok())
          return refuse("options file '" + path + "' holds a quote or a backslash: how nvcc splits it is not known");
        words(*split, depth + 1);
      }
      return;
    }
    m_cmd.canonical.push_back("--" + std::string(n) + (value ? "=" + *value : ""));
    for (const auto& m : k_cacheable_modes) {
      if (m.option == n) m_modes.push_back(m.mode);
    }
    if (contains(k_other_modes, n)) refuse("--" + std::string(n) + " makes no single cacheable output");
    if (contains(k_uncacheable_options, n)) refuse("--" + std::string(n) + " writes or omits files outside the output");
    if (n == "gpu-architecture" || n == "gpu-code" || n == "generate-code") {
      // -arch=native builds for the GPUs of the machine that compiles (with
      // none visible, nvcc picks a default): what it decided is not known
      // here, and a root shared by machines of other GPUs would serve it
      // there. -arch=all and all-major depend on the toolkit only (keyed).
      for (const auto& part : split_commas(*value)) {
        const std::string_view v = std::string_view(part).substr(part.find('=') + 1);
        if (v == "native")
          return refuse("--" + std::string(n) + " '" + *value + "' depends on the GPUs of the machine");
      }
    }
    if (n == "generate-line-info" || n == "source-in-ptx") m_cmd.line_info = true;
    if (n == "source-in-ptx") m_cmd.source_in_ptx = true;
    // --verbose prints the tools' command lines: the output's name and the
    // temporary files' are in what is replayed.
    if (n == "debug" || n == "device-debug" || n == "objdir-as-tempdir" || n == "verbose") {
      m_cmd.place_in_output = true;
    }
    if (n == "dependency-target-name") m_target_named = true;
    if (n == "pre-include") {
      for (auto& f : split_commas(*value)) m_cmd.pre_includes.push_back(std::move(f));
    }
    if (n == "output-file") m_output = *value;
    if (n == "generate-dependencies-with-compile") m_md = true;
    if (n == "dependency-output") m_mf = *value;
    if (n == "compiler-bindir") m_cmd.ccbin = *value;
    if (n == "x") m_language = *value;
    if (n == "compiler-options") {
      for (auto& w : split_commas(*value)) m_host_words.push_back(std::move(w));
    }
    for (const auto& t : k_tool_options) {
      if (t.option != n) continue;
      auto& ws = m_tool_words[std::string(t.tool)];
      for (auto& w : split_commas(*value)) ws.push_back(std::move(w));
    }
    if (n == "library") {
      for (auto& l : split_commas(*value)) m_cmd.libraries.push_back(std::move(l));
    }
    if (n == "library-path") {
      for (auto& d : split_commas(*value)) m_cmd.library_dirs.push_back(std::move(d));
    }
    if (n == "include-path") {
      for (auto& d : split_commas(*value)) m_includes.push_back(std::move(d));
    }
    if (n == "system-include") {
      for (auto& d : split_commas(*value)) m_system.push_back(std::move(d));
    }
  }

  // Reads a file the command names, for the key: its contents, or nullopt.
  std::optional<std::string> read_keyed(const std::string& path) {
    auto text = m_read_file(path);
    if (!text.ok()) return std::nullopt;
    const auto d = sha256(*text);
    m_cmd.read_files.push_back({path, std::string(as_view(d))});
    return std::move(*text);
  }

  // The words the host compiler gets, in order (-Xcompiler values are
  // comma-separated lists; several -Xcompiler options make one list; with
  // -forward-unknown-to-host-compiler, unknown options join it).
  void host_words(const std::vector<std::string>& ws, int depth) {
    for (std::size_t i = 0; i < ws.size() && m_cmd.uncacheable.empty(); ++i) {
      const std::string& w = ws[i];
      if (w.starts_with("@")) {  // a response file: its words are the host compiler's too
        if (depth >= k_max_options_file_depth) return refuse("response files nested too deeply");
        auto text = read_keyed(w.substr(1));
        if (!text) return refuse("host compiler response file '" + w.substr(1) + "' cannot be read");
        host_words(split_options_file(*text), depth + 1);
        continue;
      }
      std::optional<std::string> file;  // -include FILE, -includeFILE, --include=FILE (and -imacros)
      if (w == "-include" || w == "-imacros" || w == "--include" || w == "--imacros") {
        if (i + 1 >= ws.size()) return refuse("host compiler option '" + w + "' without its value");
        file = ws[++i];
      } else if (w.starts_with("--include=") || w.starts_with("--imacros=")) {
        file = w.substr(w.find('=') + 1);
      } else if (w.starts_with("-include") || w.starts_with("-imacros")) {
        file = w.substr(std::string_view("-include").size());
      }
      if (file) {
        // The host compiler looks in the working directory first (gcc's
        // -include): a file there is the one read. One found further along
        // the search cannot be keyed with certainty.
        if (!read_keyed(*file)) {
          return refuse("host compiler file '" + *file + "' is not a readable file in the working directory");
        }
        continue;
      }
      // nvcc hands these words to the host compiler through a shell, which
      // splits them at white space and reads quotes and $: what the
      // compiler gets is then not these words.
      if (depth == 0 && w.find_first_of(k_shell_chars) != std::string::npos) {
        return refuse("host compiler word '" + w + "' holds characters a shell reads (nvcc hands it through one)");
      }
      if (!plain_host_flag(w)) return refuse("host compiler word '" + w + "' may read files the key cannot see");
      // -v: the host compiler prints its command lines (output and
      // temporary names), which are replayed.
      if ((w.starts_with("-g") && w != "-g0") || w == "-v") m_cmd.place_in_output = true;
      // -march=native, -mtune=native, -mcpu=native: decided by the CPU of
      // the machine that compiles, which the key does not hold.
      if (w.ends_with("=native")) return refuse("host compiler word '" + w + "' depends on the machine's CPU");
    }
  }

  // The words another tool gets: its response files and options files are
  // keyed by content (their words too); ptxas's -o would write elsewhere.
  void tool_words(const std::string& tool, const std::vector<std::string>& ws, int depth) {
    for (std::size_t i = 0; i < ws.size() && m_cmd.uncacheable.empty(); ++i) {
      const std::string& w = ws[i];
      if (depth == 0 && w.find_first_of(k_shell_chars) != std::string::npos) {
        return refuse(std::string(tool).append(" word '").append(w).append(
            "' holds characters a shell reads (nvcc hands it through one)"));
      }
      if (tool == "nvlink" && !m_nvlink_library &&
          (w.starts_with("-l") || w.starts_with("-L") || w.starts_with("--library"))) {
        m_nvlink_library = w;
      }
      // nvlink's timing file (written) and its uidx file (read).
      if (tool == "nvlink" &&
          (w.starts_with("--time") || w.starts_with("-time") || w.find("uidx") != std::string::npos)) {
        return refuse("nvlink word '" + w + "' reads or writes a file outside the output");
      }
      // ptxas's and nvlink's own debug words (-g, --device-debug) and line
      // information words (-lineinfo, --generate-line-info).
      if ((w.starts_with("-g") && w != "-g0") || w.find("debug") != std::string::npos) {
        m_cmd.place_in_output = true;
      } else if (w.find("line") != std::string::npos) {
        m_cmd.line_info = true;
      }
      std::optional<std::string> file;
      if (w.starts_with("@")) {
        file = w.substr(1);
      } else if (w == "-optf" || w == "--options-file" || w == "-options-file") {
        if (i + 1 >= ws.size())
          return refuse(std::string(tool).append(" option '").append(w).append("' without its value"));
        file = ws[++i];
      } else if (w.starts_with("--options-file=") || w.starts_with("-optf=")) {
        file = w.substr(w.find('=') + 1);
      } else if (tool == "ptxas" && (w == "-o" || w == "--output-file" || w.starts_with("--output-file="))) {
        return refuse("ptxas option '" + w + "' writes a file outside the output");
      } else if (!w.empty() && w[0] != '-' && w.find_first_not_of("0123456789") != std::string::npos) {
        // A word that is not an option and not a number (an option's value
        // given apart) is an input to the tool: `-Xptxas extra.ptx` compiles
        // that file into the output, and nothing keys it.
        return refuse(std::string(tool).append(" word '").append(w).append(
            "' is not an option: the tool may read it as an input"));
      }
      if (!file) continue;
      if (depth >= k_max_options_file_depth) return refuse("options files nested too deeply");
      auto text = read_keyed(*file);
      if (!text) return refuse(tool + " options file '" + *file + "' cannot be read");
      // Split as nvcc's own options files are; how the tool reads quotes
      // is not known here.
      auto split = split_env_flags(*text);
      if (!split.ok()) {
        return refuse(tool + " options file '" + *file +
                      "' holds a quote or a backslash: how it is split is not known");
      }
      tool_words(tool, *split, depth + 1);
    }
  }

  void finish() {
    if (m_modes.empty()) refuse("no compile step (-c, -cubin, -ptx, -fatbin, -dlink): linking or another step");
    if (m_modes.size() > 1) refuse("more than one output kind");
    if (!m_cmd.uncacheable.empty()) return;
    m_cmd.mode = m_modes.front();
    if (m_cmd.mode == Mode::device_link) return finish_device_link();
    if (m_inputs.size() != 1) return refuse(std::to_string(m_inputs.size()) + " input files");
    m_cmd.input = m_inputs.front();
    m_cmd.inputs = m_inputs;
    const bool cuda = m_language ? *m_language == "cu" : m_cmd.input.ends_with(".cu");
    if (!cuda) return refuse("input '" + m_cmd.input + "' is not CUDA source (.cu)");
    if (m_md != m_mf.has_value()) return refuse(m_md ? "-MD without -MF" : "-MF without -MD");
    if (m_mf) m_cmd.depfile = m_mf;
    m_cmd.output_name_written = m_mf.has_value() && !m_target_named;
    if (m_output) {
      if (*m_output == "-" || m_output->empty()) return refuse("output to standard output");
      m_cmd.output = *m_output;
    } else {
      static constexpr std::array<const char*, 4> k_suffix = {".o", ".cubin", ".ptx", ".fatbin"};
      const auto index = static_cast<std::size_t>(m_cmd.mode);
      if (index >= k_suffix.size()) return refuse("no -o for a --" + std::string(mode_name(m_cmd.mode)) + " output");
      m_cmd.output = stem_of(m_cmd.input) + k_suffix.at(index);
    }
    m_cmd.canonical.push_back(m_cmd.input);
    m_cmd.include_dirs = std::move(m_includes);
    m_cmd.system_dirs = std::move(m_system);
  }

  // A device link (-dlink): relocatable objects and archives in, one
  // object out. What nvlink and the host compiler (which compiles nvcc's
  // registration stub) read besides the inputs is found by the launcher:
  // the libraries of -l, the stub's headers (its dependency list).
  void finish_device_link() {
    if (m_inputs.empty()) return refuse("a device link without inputs");
    for (const auto& in : m_inputs) {
      if (!in.ends_with(".o") && !in.ends_with(".obj") && !in.ends_with(".a")) {
        return refuse("device link input '" + in + "' is not an object or an archive");
      }
    }
    if (m_language) return refuse("-x in a device link");
    if (m_md || m_mf) return refuse("a dependency file from a device link");
    if (!m_output) return refuse("a device link without -o");
    if (*m_output == "-" || m_output->empty()) return refuse("output to standard output");
    for (const auto& l : m_cmd.libraries) {
      // GNU ld's -l:FILE, or a path: not a name nvlink searches for as here.
      if (l.empty() || l.find_first_of(":/") != std::string::npos) return refuse("library '" + l + "' is not a name");
    }
    // Libraries named to nvlink itself (also in its options files, at any
    // depth), and words for the host linker or archiver: their search is
    // not followed here.
    if (m_nvlink_library) {
      return refuse("nvlink word '" + *m_nvlink_library + "' names a library: its search is not followed");
    }
    for (const auto& [tool, ws] : m_tool_words) {
      if (tool == "linker" || tool == "archiver") return refuse(tool + " words in a device link");
    }
    // Line information in a device link is the inputs' own (nvlink copies
    // it): where the link runs is not in the output (two directories, one
    // object: tests/nvcc_launcher_test.cpp).
    m_cmd.line_info = false;
    m_cmd.output = *m_output;
    m_cmd.inputs = m_inputs;
    m_cmd.input = m_inputs.front();
    m_cmd.canonical.insert(m_cmd.canonical.end(), m_inputs.begin(), m_inputs.end());
    m_cmd.include_dirs = std::move(m_includes);
    m_cmd.system_dirs = std::move(m_system);
  }

  const ReadFile& m_read_file;
  Command m_cmd;
  bool m_forward_unknown = false;
  std::optional<std::string> m_nvlink_library;  // the first nvlink word naming a library
  std::vector<std::string> m_inputs;
  std::vector<Mode> m_modes;
  std::optional<std::string> m_output;
  bool m_md = false;
  bool m_target_named = false;  // -MT
  std::optional<std::string> m_mf;
  std::optional<std::string> m_language;
  std::vector<std::string> m_includes, m_system;
  std::vector<std::string> m_prepend, m_append;
  std::vector<std::string> m_host_words;
  std::map<std::string, std::vector<std::string>> m_tool_words;
};

}  // namespace

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::object:
      return "object";
    case Mode::cubin:
      return "cubin";
    case Mode::ptx:
      return "ptx";
    case Mode::fatbin:
      return "fatbin";
    case Mode::optix_ir:
      return "optix-ir";
    case Mode::ltoir:
      return "ltoir";
    case Mode::device_link:
      return "device-link";
  }
  return "?";
}

Command parse_command(const std::vector<std::string>& args, const ReadFile& read_file, const EnvFlags& env) {
  return Parser(read_file).run(args, env);
}

std::vector<std::string> keyed_words(const Command& cmd) {
  if (cmd.place_in_output || cmd.output_name_written) return cmd.canonical;
  std::vector<std::string> out;
  out.reserve(cmd.canonical.size());
  for (const auto& w : cmd.canonical) {
    if (w.starts_with("--output-file=") || w.starts_with("--dependency-output=")) continue;
    out.push_back(w);
  }
  return out;
}

Result<std::vector<std::string>> split_env_flags(std::string_view value) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : value) {
    if (c == '\'' || c == '"' || c == '\\')
      return invalid_argument("quotes or backslashes in '" + std::string(value) + "'");
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::vector<std::string> split_options_file(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        cur += text[++i];
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      if (in_word) out.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(std::move(cur));
  return out;
}

}  // namespace progcache::nvcc
