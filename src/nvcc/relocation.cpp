// nvcc/relocation.cpp — a base directory (PROGCACHE_BASE_DIR): which
// commands two checkouts at different paths may share, and their paths
// relative to the working directory.
#include "nvcc/relocation.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "compile/scan_files.h"
#include "nvcc/environment.h"
#include "nvcc/manifest.h"
#include "nvcc/nvcc_command.h"
#include "util/user_io.h"

namespace progcache::nvcc {

namespace {

namespace dt = progcache::detail;

// Whether the compile reaches a file through a relative path: the source,
// a directory of the command's or of the environment's search paths (an
// empty entry is the working directory), a file read by name. Device line
// information names such a file by the working directory joined to it.
bool follows_a_relative_path(const Command& cmd) {
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
                     [&](const Command::FileRead& f) { return relative(f.path); });
}

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

}  // namespace

bool place_keyed(const Command& cmd) {
  return cmd.place_in_output || (cmd.line_info && follows_a_relative_path(cmd));
}

std::variant<Relocation, std::string> relocation_for(const std::string& base_dir, const Command& cmd) {
  if (base_dir.empty() || base_dir == "/" || !base_dir.starts_with("/") || dt::normal(base_dir) != base_dir ||
      !Relocation::plain(base_dir)) {
    return std::string("no usable base directory");
  }
  switch (cmd.mode) {
    case Mode::object:
    case Mode::cubin:
    case Mode::ptx:
    case Mode::fatbin:
      break;
    default:
      return std::string("a --") + mode_name(cmd.mode) + " output";
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
  for (const auto& w : keyed_words(cmd)) {
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

std::optional<ManifestRecord> relocated_record(const Relocation& r, ManifestRecord m) {
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
    if (!move(a.path)) return std::nullopt;
    a.watch = {};  // another checkout's directories are other directories
  }
  for (auto& p : m.present) {
    if (!move(p.path)) return std::nullopt;
  }
  return m;
}

}  // namespace progcache::nvcc
