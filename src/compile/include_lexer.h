// The include lexer: every include-like operand of a C++ text.
//
// It finds, on logical lines (after line splices and comments, as the
// preprocessor's translation phases 2 and 3 leave them), each #include,
// #include_next, #import and __has_include operand, whatever #if branch it
// sits in, and each macro whose whole body is a header name (what a
// computed include usually expands to). Trigraphs are read both ways. The
// result is a superset of what the compiler reads; the resolver
// (source_deps.cpp) looks each operand up where NVRTC would.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace progcache::detail {

enum class Operand { quoted, angled, computed };
struct Directive {
  Operand kind;
  std::string name;     // the operand ("a.h" for "a.h" and <a.h>), or the macro text for a computed one
  int line;             // physical line the directive starts on
  bool next = false;    // #include_next or __has_include_next: the search goes on past the includer's directory
  bool import = false;  // #import: skipped where a file already found has its size, time and text
};

// Whether `text` may hold a directive: a '#', or what can become one (the
// digraph '%:', also with a splice between its two characters, and any
// trigraph), or __has_include. A program with none of them has nothing to
// scan; scanning one that includes nothing was most of a warm hit's time.
bool may_hold_directives(std::string_view text);

// Every include-like operand of `text`, with trigraphs read both ways and
// united: whether they are replaced depends on the language standard, and
// reading them the wrong way could hide an include (a "??/" ending a comment
// would splice the next line into it). Raw strings and digit separators
// likewise: where the text has what they would read, it is read with and
// without them.
std::vector<Directive> directives(std::string_view text);

// Whether `text` has a #line directive or a line marker (`# 12 "f.cu"`) on
// any logical line, in any of the readings `directives` unites: one that
// names a file makes the compiler read it (a diagnostic quotes it, device
// line information names it) though no #include does.
bool has_line_directive(std::string_view text);

// What the logical lines of `text` hold, in any of the readings
// `directives` unites, that makes a compiler read or print more than its
// includes: a #line directive or a line marker (has_line_directive), and a
// pragma that names a file (GCC's `#pragma GCC dependency "f"`, which
// warns when f is newer than the file it is in, and `#pragma GCC
// pch_preprocess "f"`), as a directive or through _Pragma.
struct LineFacts {
  bool line_directive = false;
  bool file_pragma = false;
};
LineFacts line_facts(std::string_view text);

// `directives` and `line_facts` of one text, read once: each reading's
// logical lines are made once and looked at for both. A reading that can
// only repeat one already made is left out (see for_each_reading); with
// `every_reading` it is made too, which only a test wants (what it finds
// must be the same).
struct Scan {
  std::vector<Directive> directives;
  LineFacts facts;
};
Scan scan(std::string_view text, bool every_reading = false);

}  // namespace progcache::detail
