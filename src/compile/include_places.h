// Where a compile that searches as gcc does would find a file created
// later: for every include-like operand of every file the compile read
// (the include lexer's, in every #if branch), each place in the search
// where a header of that name would be read first. progcache.torch's g++
// builds record and check these (python/src/held_places.cpp).
#pragma once

#include <string>
#include <vector>

#include "progcache/status.h"

namespace progcache::detail {

struct IncludeSearch {
  // Every directory an angled include is looked for in, in order: -I,
  // -isystem, then the compiler's own. A quoted one is looked for in the
  // including file's directory first.
  std::vector<std::string> dirs;
  // gcc looks for NAME.gch in each directory before NAME, and uses a valid
  // one instead of the header, a directory of them included (gcc's manual,
  // "Using Precompiled Headers"). -MD lists neither.
  bool precompiled = false;
  // Headers the compiler includes before the first file's own text, looked
  // for as <NAME> (gcc's stdc-predef.h, which -MD lists where it is found).
  std::vector<std::string> implicit;
};

struct IncludePlaces {
  std::vector<std::string> headers;      // where a header of an operand's name may be, each once
  std::vector<std::string> precompiled;  // where gcc would take NAME.gch instead (with `precompiled`)
  std::vector<std::string> computed;     // "FILE:LINE" of each include named through a macro
};

// The places of every operand of `files` (read whole, as the compiler
// reads them); an error naming the file where one cannot be read.
Result<IncludePlaces> include_places(const std::vector<std::string>& files, const IncludeSearch& search);

}  // namespace progcache::detail
