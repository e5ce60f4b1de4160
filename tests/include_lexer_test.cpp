// The include lexer (src/compile/include_lexer.h): what it finds on the
// logical lines of a text, in every reading a language standard may give it.
#include "compile/include_lexer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace dt = progcache::detail;

namespace {

bool includes(const std::string& text, const std::string& name) {
  const auto all = dt::directives(text);
  return std::any_of(all.begin(), all.end(), [&](const dt::Directive& d) { return d.name == name; });
}

}  // namespace

TEST(IncludeLexerTest, ALineDirectiveIsFoundInEverySpellingThePreprocessorReads) {
  for (const std::string& text : std::vector<std::string>{
           "#line 3 \"f.cu\"\n", "int a;\n# 12 \"f.cu\" 2\n",
           "%: 7 \"o.txt\"\n",                                   // a digraph
           "%\\\n: 7 \"o.txt\"\n",                               // a digraph split by a joined line
           "#/**/ 7 \"o.txt\"\n",                                // a comment after the '#'
           "#\\\n 7 \"o.txt\"\n",                                // a joined line after the '#'
           "/* c */ # line 7\n",                                 // a comment before it
           "/* a\ncomment */ #line 7\n",                         // ... that spans lines: one logical line
           "?\?=line 4\n",                                       // a trigraph (read under C++03 and C++11)
           "const char* r = R\"x(\" /* )x\";\n# 7 \"o.txt\"\n",  // a raw string holding '"' and "/*"
           "int a = 1'/*';\n#line 5 \"x\"\n*/\n",                // before C++14: a number, then the literal '/*'
           "const char* r = R\"(\n#line 9\n)\";\n",              // in C, R"( is a name and an open string
           "const char* r = R\\\n\"(\n#line 9\n)\";\n",          // ... also with a joined line after the R
           "#if 0\n1'2'/*'\n#endif\n# 7 \"o.txt\" // */\n",      // the number 1'2, then the literal '/*'
           "#if __has_include(<nothere/*x>)\n#endif\n# 7 \"o.txt\" // */\n",  // "/*" in a header name
           std::string("#\0 7 \"o.txt\"\n", 13),                              // a NUL, which gcc takes for white space
           "#if 0\n1.'a'/*'\n#endif\n# 7 \"o.txt\" // */\n",                  // the number 1.'a, then '/*'
           "#if 0\n1e+'a'/*'\n#endif\n# 7 \"o.txt\" // */\n",                 // a sign after an exponent
           // in a skipped group, a string: the backslash escapes the quote
           "#if 0\n__has_include(\"a\\\" /* \")\n#endif\n# 7 \"o.txt\" // */\n",
           "#\\ \n 7 \"o.txt\"\n",                               // gcc joins lines at a backslash and white space
           "/* c *\\ \n/\n# 7 \"o.txt\"\n// */\n",               // ... which ends this comment
           "int a;\r# 7 \"o.txt\"\r",                            // a lone CR ends a line
           "1e+'a/*\n#line 5 \"o.txt\"\n",                       // C++11: 1e+ and an open literal, no comment
           "1$'a' /*\n#line 5 \"o.txt\"\n",                      // '$' continues a number (and a name)
           "1\xc3\xa9'a' /*\n#line 5 \"o.txt\"\n",               // ... and so does UTF-8
           "$1e+'a/*\n#line 5 \"o.txt\"\n",                      // $1e is a name
           "R\"\"(\n/*)\"\"\n#line 5 \"o.txt\"\n",               // '"' in a raw string's delimiter
           "R\"(x)\\\n\" /*\n)\"\n#line 5 \"o.txt\"\n// */\n",   // no splice inside a raw string
           std::string("/* *\\\0\n/\n#line 5 \"o.txt\"\n", 25),  // a NUL before a splice's line end
           "\xef\xbb\xbf#line 5 \"o.txt\"\n",                    // after a byte-order mark
           "#if 0\nR\"(\n/*\n)\"\n$R\"x(\"\n#endif\n#line 5 \"o.txt\"\n)x\"\n// */\n",  // $R is no prefix
       }) {
    EXPECT_TRUE(dt::has_line_directive(text)) << text;
  }
}

TEST(IncludeLexerTest, APragmaNamingAFileIsFound) {
  for (const std::string text : {
           "#pragma GCC dependency \"x.h\"\n",
           "%:pragma GCC dependency \"x.h\" extra words\n",
           "_Pragma(\"GCC dependency \\\"x.h\\\"\")\n",
           "#pragma GCC pch_preprocess \"x.gch\"\n",
           "#if 0\n1'2'/*'\n#endif\n#pragma GCC dependency \"x.h\" // */\n",
           "_Pragma(\n\"GCC dependency \\\"x.h\\\"\")\n",
           "#define P(x) _Pragma(#x)\nP(GCC dependency \"x.h\")\n",
           "#define PR _Pragma\nPR(\"GCC dependency \\\"x.h\\\"\")\n",
           "#define S \"GCC dependency \\\"x.h\\\"\"\n_Pragma(S)\n",
       }) {
    EXPECT_TRUE(dt::line_facts(text).file_pragma) << text;
  }
  for (const std::string text : {"// a dependency\n#pragma once\n", "#pragma once\nint dependency;\n"}) {
    EXPECT_FALSE(dt::line_facts(text).file_pragma) << text;
  }
}

TEST(IncludeLexerTest, WhatOnlyLooksLikeALineDirectiveIsNone) {
  for (const std::string text : {
           "const char* s = \"#line 5\";\n",
           "// #line 5\n",
           "/*\n#line 5\n*/\n",
           "#include <line.h>\n#define LINE 5\n#pragma once\n",
           "int a = 1'000; // #line\n",
           "int line = 3; a # 5;\n",
       }) {
    EXPECT_FALSE(dt::has_line_directive(text)) << text;
  }
}

TEST(IncludeLexerTest, AnIncludeAnyReadingFindsIsFound) {
  // Found in C++ (the raw string ends before it) and in C (it does not).
  EXPECT_TRUE(includes("const char* r = R\"x(\" /* )x\";\n#include \"a.h\"\n", "a.h"));
  // Inside a raw string in C++, a real include in C: a superset has it.
  EXPECT_TRUE(includes("const char* r = R\"x(\n#include \"b.h\"\n)x\";\n", "b.h"));
  // Before C++14 '/*' after a number is a character literal, not a comment.
  EXPECT_TRUE(includes("int a = 1'/*';\n#include \"c.h\"\n// */\n", "c.h"));
  // 1'2'/*' is the number 1'2 and the literal '/*': no comment opens.
  EXPECT_TRUE(includes("#if 0\n1'2'/*'\n#endif\n#include \"c2.h\" // */\n", "c2.h"));
  EXPECT_TRUE(includes("#if 0\n__has_include(\"a\\\" /* \")\n#endif\n#include \"h2.h\" // */\n", "h2.h"));
  EXPECT_TRUE(includes("int a;\r#include \"cr.h\"\r", "cr.h"));
  EXPECT_TRUE(includes("\xef\xbb\xbf#include \"bom.h\"\n", "bom.h"));
  EXPECT_TRUE(includes("1$'a' /*\n#include \"dollar.h\"\n", "dollar.h"));
  // Trigraphs both ways, as before.
  EXPECT_TRUE(includes("?\?=include \"d.h\"\n", "d.h"));
  // A comment hides in every reading.
  EXPECT_FALSE(includes("/*\n#include \"e.h\"\n*/\n", "e.h"));
}

// A reading left out because one made already relied on nothing of the
// difference (no quote taken for a digit separator, no raw string opened)
// finds nothing that one did not: over texts made of the pieces that
// change what a reading sees, the directives and line facts are those of
// every reading made.
TEST(IncludeLexerTest, ReadingsLeftOutFindNothingMore) {
  const std::vector<std::string> pieces = {"#",
                                           "include",
                                           "\"a.h\"",
                                           "<b.h>",
                                           "<c'd.h>",
                                           "\"e\\\"f.h\"",
                                           "\\\n",
                                           "\n",
                                           "\r",
                                           "/*",
                                           "*/",
                                           "//",
                                           "R\"x(",
                                           ")x\"",
                                           "R\"(",
                                           ")\"",
                                           "R",
                                           "\\\n\"",
                                           "\"",
                                           "'",
                                           "'a'",
                                           "1",
                                           "0x1",
                                           "e+",
                                           ".",
                                           "%:",
                                           "?\?/",
                                           "?\?=",
                                           "line 3 \"q.cu\"",
                                           "__has_include",
                                           "(",
                                           "_next",
                                           " ",
                                           "define",
                                           "X",
                                           "pragma GCC dependency \"z\"",
                                           "_Pragma(\"x\")",
                                           "dependency",
                                           "don't"};
  std::mt19937 random(20261127);  // fixed: a failure is reproducible
  auto as_set = [](const dt::Scan& s) {
    std::set<std::tuple<int, std::string, int, bool>> out;
    for (const auto& d : s.directives) out.emplace(static_cast<int>(d.kind), d.name, d.line, d.next);
    return out;
  };
  for (int n = 0; n < 20000; ++n) {
    std::string text;
    for (std::size_t k = random() % 30 + 1; k > 0; --k) text += pieces[random() % pieces.size()];
    const dt::Scan fast = dt::scan(text);
    const dt::Scan every = dt::scan(text, true);
    ASSERT_EQ(as_set(fast), as_set(every)) << text;
    ASSERT_EQ(fast.facts.line_directive, every.facts.line_directive) << text;
    ASSERT_EQ(fast.facts.file_pragma, every.facts.file_pragma) << text;
  }
}
