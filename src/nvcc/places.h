// nvcc/places.h — the nvcc launcher's search order and places: where a
// header created later would be found first, and what must stay as it
// was for a stored result to stand. Not public API.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/include_lexer.h"
#include "compile/scan_files.h"
#include "nvcc/nvcc_command.h"

namespace progcache::nvcc {

// The toolkit's include directories nvcc adds (nvcc.profile's INCLUDES and
// SYSTEM_INCLUDES: <toolkit>/targets/<target>/include, and its cccl), for
// every target the toolkit holds.
std::vector<std::string> toolkit_dirs(const std::string& bin, std::string_view sub);

// The directories searched for <...> includes, in the preprocessor's order
// as nvcc runs it: -I, nvcc's include directory, CPATH, -isystem, nvcc's
// cccl directory, C_INCLUDE_PATH and CPLUS_INCLUDE_PATH, then the host
// compiler's own. A directory named twice (gcc keeps the first) is kept
// twice: a file in it then counts as found at both places, which only adds
// places that must stay absent.
std::vector<std::string> search_chain(const Command& cmd, const std::string& bin,
                                      const std::vector<std::string>& system, const std::vector<std::string>& added);

// Whether a symbolic link on the way to `path` (the file itself or a
// directory above it) was made after `start`: a link retargeted (ln -sfn
// makes a new one) leads to another file while the file's own times stay
// old, so "unchanged since start" must look at the links too.
bool link_made_since(const std::string& path, std::int64_t start);

// Whether a directory on the way to `path` below the search directory that
// holds it (the longest of `tops`, resolved) changed since `start`. A
// directory renamed into place (a rename stamps the moved directory's
// ctime) leads the same name to other files, whose own times are old. The
// tops themselves are judged by identity (search_dir_identities); a file
// outside every top is not judged here (nothing bounds the walk up).
bool moved_below(const std::string& path, const std::vector<std::string>& tops, std::int64_t start);

// Adds to `named` every file a line marker of preprocessed output `text`
// names (`# 12 "inc/a.h" 1 3`), unescaped as the preprocessor escapes it.
void marker_names(std::string_view text, std::set<std::string>& named);

// The places `name` is looked for, in order: itself when absolute, else
// joined to `first` (a quoted include's directory; empty: the working
// directory), if given, then to each directory of `chain`.
std::vector<std::string> search_places(const std::string& name, const std::optional<std::string>& first,
                                       const std::vector<std::string>& chain);

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
    const std::vector<std::string>& chain, const std::string& tmpdir, const std::vector<std::string>& trusted);

// Where a header the compile found, and every header a probe did not find,
// would be found first if created later: places that must stay absent, and
// those a probe found that must stay present.
class Places {
 public:
  Places(std::vector<std::string> chain, const std::vector<std::string>& deps, std::vector<std::string> trusted_roots)
      : m_chain(std::move(chain)), m_trusted(std::move(trusted_roots)) {
    for (const auto& c : m_chain) m_chain_real.push_back(progcache::detail::real_or_normal(c.empty() ? "." : c));
    for (const auto& d : deps) {
      m_deps.insert(real_file(d));
      m_dep_spellings.insert(progcache::detail::normal(d, /*keep_dotdot=*/true));
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
    const std::string p = progcache::detail::normal(dep);
    const std::string rp = real_file(dep);
    for (std::size_t i = 0; i < dirs.size(); ++i) {
      std::set<std::string> rels;
      const std::string nd = progcache::detail::normal(dirs[i].empty() ? "." : dirs[i]);
      if (nd == ".") {
        if (!p.starts_with("/") && !p.starts_with("../")) rels.insert(p);
      } else if (progcache::detail::under(p, nd) && p != nd) {
        rels.insert(p.substr(nd.size() + (nd.ends_with("/") ? 0 : 1)));
      }
      const std::string rd = i == 0 ? progcache::detail::real_or_normal(nd) : m_chain_real[i - 1];
      if (progcache::detail::under(rp, rd) && rp != rd) rels.insert(rp.substr(rd.size() + (rd.ends_with("/") ? 0 : 1)));
      for (const auto& rel : rels) {
        for (std::size_t j = 0; j < i; ++j) {
          const std::string place = progcache::detail::join(dirs[j] == "." ? "" : dirs[j], rel);
          if (progcache::detail::normal(place) != p) absent_if_so(place);
          if (m_precompiled.count(rel) != 0) no_precompiled(place);
        }
        if (m_precompiled.count(rel) != 0) no_precompiled(progcache::detail::join(dirs[i] == "." ? "" : dirs[i], rel));
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
  std::optional<std::string> probe_file(const std::string& file,
                                        const std::vector<progcache::detail::Directive>& directives,
                                        std::vector<std::string>* found = nullptr) {
    const std::string dir = progcache::detail::parent_of(file);
    for (const auto& d : directives) {
      if (d.kind == progcache::detail::Operand::computed) {
        if (!trusted(file)) return "an include through a macro in '" + file + "' cannot be followed";
        continue;
      }
      if (d.name.starts_with("/")) m_absolute_operands.push_back(d.name);
      auto places =
          probe(d.name, d.kind == progcache::detail::Operand::quoted ? std::optional(dir) : std::nullopt, file, d.next);
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
    return std::any_of(m_trusted.begin(), m_trusted.end(),
                       [&r](const std::string& t) { return progcache::detail::under(r, t); });
  }
  // Whether `place` is under those directories as it is spelled (not
  // where links on the way lead: a user's link into /usr/include is the
  // user's, and may be retargeted).
  bool trusted_as_spelled(const std::string& place) const {
    const std::string n = progcache::detail::normal(place);
    return n.starts_with("/") && std::any_of(m_trusted.begin(), m_trusted.end(),
                                             [&n](const std::string& t) { return progcache::detail::under(n, t); });
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
      // gcc passes over a directory where it looks for a header, as if
      // nothing were there, and searches on: it must stay a directory
      // (a file made in its place would be found first), and the places
      // after it are recorded as any other.
      if (S_ISDIR(st.st_mode)) {
        if (m_present_seen.insert(place).second) m_present.push_back(place);
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
      const bool listed = m_deps.count(real) != 0 &&
                          (m_dep_spellings.count(progcache::detail::normal(place, /*keep_dotdot=*/true)) != 0 ||
                           trusted_as_spelled(place));
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
    const std::string parent = progcache::detail::parent_of(path);
    const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
    return progcache::detail::join(progcache::detail::real_or_normal(parent.empty() ? "." : parent), base);
  }

  std::vector<std::string> m_chain, m_chain_real, m_trusted;
  std::set<std::string> m_deps, m_dep_spellings, m_absent_seen, m_present_seen;
  std::vector<std::string> m_absent, m_present;
  std::optional<std::string> m_refused;
  std::set<std::string> m_precompiled = {"stdc-predef.h"};
  std::vector<std::string> m_absolute_operands;
};

}  // namespace progcache::nvcc
