// nvcc/relocation.h — the nvcc launcher under a base directory: two
// checkouts at different paths share entries where what nvcc writes names
// no path of the checkout (docs/nvcc.md). Not public API.
#pragma once

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "compile/scan_files.h"
#include "nvcc/manifest.h"
#include "nvcc/nvcc_command.h"

namespace progcache::nvcc {

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
  std::string absolute(const std::string& rel) const { return progcache::detail::normal(cwd + "/" + rel); }
};

// Whether the key holds where the build runs (the working directory, $PWD).
bool place_keyed(const Command& cmd);

// The relocation a command's key takes, or nullopt (paths keyed as
// written). Only outputs that name no path of the checkout qualify: whole
// program device code (a relocatable object's module ID is made from the
// source's path), without debug or line information (they name the files
// by their paths), as an object, cubin, PTX or fatbin. Checked by hand and
// by NvccLauncherBaseDirTest: such an object differs between two checkouts
// only by nvcc's temporary file's name, as two runs in one do, and the
// rest are byte-identical, unless the text names a path or opens an
// anonymous namespace (text_names_place, judged after the compile).
std::variant<Relocation, std::string> relocation_for(const std::string& base_dir, const Command& cmd);

// A keyed word with the paths under the base relocated (the input, and
// the values of -I, -isystem and -include, each path of a list), or
// nullopt when one is not (then it is keyed as written).
std::optional<std::string> relocated_word(const Relocation& r, const std::string& w);

// Whether a preprocessed text names a path under `base` other than in a
// line marker (__FILE__ expanded, a string a macro holds, an #ident), or
// asks the compiler for its own file's name (__builtin_FILE and
// __builtin_source_location: std::source_location), or opens an anonymous
// namespace (named after the source's path). Line markers name
// the files, and so the paths, in every text: without line information
// no output holds them.
bool text_names_place(std::string_view text, std::string_view base);

// A dependency file with each path under the base replaced by NUL, the
// path relative to the working directory, NUL (render_depfile writes it
// for another working directory), or nullopt when one is not a whole word
// that can be relocated (then the result is not shared).
std::optional<std::string> depfile_template(const Relocation& r, std::string_view text);

// The dependency file a template holds, for the working directory of `r`.
std::string render_depfile(const Relocation& r, std::string_view tmpl);

// A manifest record with its paths under the base relative to the working
// directory (the rest as they are: the toolkit's, the system's, paths
// already relative), or nullopt when one cannot be relocated.
std::optional<ManifestRecord> relocated_record(const Relocation& r, ManifestRecord m);

}  // namespace progcache::nvcc
