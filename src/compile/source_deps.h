// The files NVRTC can read while compiling a program, as one digest for the
// program's key.
//
// NVRTC reports no dependencies, so progcache works out, before every
// compile and every lookup, a superset of what the compiler can read:
//   * every #include, #include_next, #import and __has_include operand of
//     the source, of each pre-include (-include) and of every file found,
//     recursively, whether or not its #if branch is taken;
//   * for each operand, every place NVRTC would look, in order: the including
//     file's directory (quoted includes; the source's directory is that of
//     the program name, relative to the working directory), then each -I
//     directory; each place is recorded as absent, or present with the
//     SHA-256 of its content (symbolic links followed), so a header created
//     later earlier in the search path changes the digest too;
//   * when a file inside an -I directory includes through a macro
//     (#include MACRO, as Thrust does), every -I directory whole: relative
//     path, size, mtime, ctime and inode of each file below it, symbolic
//     links followed; a file changed in the last two seconds is hashed by
//     content, as a stat cannot tell two edits within one timestamp tick
//     apart.
// A computed include outside every -I directory cannot be resolved and is
// refused with a message that says what to do.
// docs/compile.md describes the design and its limits.
#pragma once

#include <string>
#include <vector>

#include "progcache/compile.h"
#include "progcache/status.h"

namespace progcache::detail {

// One file the compiler can read. Every place an operand is looked for is
// consulted, so a file later in the search path than one found is listed
// too (after it): that is how a header created earlier in the path shows.
struct DepFile {
  std::string path;     // as the scan reached it, in normal form
  std::string sha256;   // hex digest of its content
  std::string operand;  // the include operand that led to it (a pre-include: its name as given)
};

struct SourceDeps {
  std::string digest;          // hex SHA-256 over everything consulted
  std::vector<DepFile> files;  // files read, in the order first found
};

// For a C++ program. invalid_argument for a computed include it cannot
// follow; I/O errors other than "not there" are errors (the compile would
// meet them too).
// `state_dir` holds the scan memo (deps-memo.json); empty: memory only.
Result<SourceDeps> scan_source_deps(const Program& p, const std::string& state_dir);

}  // namespace progcache::detail
