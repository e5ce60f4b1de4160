// The nvcc launcher's reading of nvcc's command line (src/nvcc): what is
// cacheable, where outputs go, one canonical spelling per option, and the
// dependency files nvcc writes.
#include "nvcc/nvcc_command.h"

#include <gtest/gtest.h>

#include <map>

namespace progcache::nvcc {
namespace {

Command parse(const std::vector<std::string>& args, const std::map<std::string, std::string>& files = {}) {
  return parse_command(args, [&](const std::string& p) -> Result<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return not_found("no file " + p);
    return it->second;
  });
}

TEST(NvccCommandTest, EverySpellingOfAnOptionIsOneCanonicalWord) {
  const Command a = parse({"-arch=sm_90", "-c", "k.cu", "-o", "out/k.o", "-I", "inc", "-DX=1", "-O3", "-Xptxas", "-v"});
  const Command b = parse({"--gpu-architecture", "sm_90", "--compile", "k.cu", "--output-file=out/k.o", "-Iinc",
                           "--define-macro", "X=1", "--optimize=3", "--ptxas-options=-v"});
  ASSERT_EQ(a.uncacheable, "");
  ASSERT_EQ(b.uncacheable, "");
  EXPECT_EQ(a.canonical, b.canonical);
  EXPECT_EQ(a.output, "out/k.o");
  EXPECT_EQ(a.input, "k.cu");
  EXPECT_EQ(a.mode, Mode::object);
  EXPECT_EQ(a.include_dirs, (std::vector<std::string>{".", "inc"}));
  // -MF's value is a file name, not an input (nvcc's help shows no value for it).
  const Command md = parse({"-c", "k.cu", "-MD", "-MF", "k.d", "-MT", "k.o"});
  EXPECT_EQ(md.uncacheable, "");
  EXPECT_EQ(md.depfile, "k.d");
  // Values are keyed: another -D is another command.
  EXPECT_NE(parse({"-c", "k.cu", "-DX=2"}).canonical, parse({"-c", "k.cu", "-DX=1"}).canonical);
}

TEST(NvccCommandTest, OutputsTakeNvccsDefaultNamesAndEachModeIsKnown) {
  EXPECT_EQ(parse({"-c", "src/k.cu"}).output, "k.o");
  EXPECT_EQ(parse({"-cubin", "src/k.cu"}).output, "k.cubin");
  EXPECT_EQ(parse({"-ptx", "k.cu"}).output, "k.ptx");
  EXPECT_EQ(parse({"--fatbin", "k.cu"}).output, "k.fatbin");
  EXPECT_EQ(parse({"-dc", "k.cu"}).mode, Mode::object);
  EXPECT_EQ(parse({"-dlto", "-ltoir", "k.cu", "-o", "k.ltoir"}).mode, Mode::ltoir);
  EXPECT_EQ(parse({"-optix-ir", "k.cu", "-o", "k.optixir"}).mode, Mode::optix_ir);
  EXPECT_EQ(parse({"-optix-ir", "k.cu", "-o", "k.optixir"}).uncacheable, "");
  EXPECT_NE(parse({"-dlto", "-ltoir", "k.cu"}).uncacheable, "") << "no -o and no default name known";
  EXPECT_EQ(parse({"-x", "cu", "-c", "k.cpp"}).uncacheable, "");
}

TEST(NvccCommandTest, WhatCannotBeCachedSaysWhy) {
  EXPECT_EQ(parse({"k.cu", "-o", "app"}).uncacheable,
            "no compile step (-c, -cubin, -ptx, -fatbin): linking or another step");
  EXPECT_EQ(parse({"-c", "a.cu", "b.cu"}).uncacheable, "2 input files");
  EXPECT_EQ(parse({"-c", "-cubin", "a.cu"}).uncacheable, "more than one output kind");
  EXPECT_EQ(parse({"-E", "a.cu"}).uncacheable, "--preprocess makes no single cacheable output");
  EXPECT_EQ(parse({"-c", "a.cpp"}).uncacheable, "input 'a.cpp' is not CUDA source (.cu)");
  EXPECT_EQ(parse({"-c", "a.cu", "--bogus"}).uncacheable, "unknown option '--bogus'");
  EXPECT_EQ(parse({"-c", "a.cu", "-o"}).uncacheable, "option '-o' without its value");
  EXPECT_EQ(parse({"-c", "a.cu", "-MD"}).uncacheable, "-MD without -MF");
  EXPECT_EQ(parse({"-c", "a.cu", "-MMD", "-MF", "a.d"}).uncacheable,
            "--generate-nonsystem-dependencies-with-compile writes or omits files outside the output");
  EXPECT_EQ(parse({"-c", "a.cu", "-keep"}).uncacheable, "--keep writes or omits files outside the output");
  EXPECT_EQ(parse({"-c", "a.cu", "--options-file", "missing.txt"}).uncacheable,
            "options file 'missing.txt' cannot be read");
  EXPECT_EQ(parse({"-c", "a.cu", "-G=1"}).uncacheable, "option '-G=1' given a value it does not take");
  // Forwarded to the host compiler as flags: nvcc takes them, so may the key.
  const Command fwd = parse({"-forward-unknown-to-host-compiler", "-fPIC", "-c", "a.cu"});
  EXPECT_EQ(fwd.uncacheable, "");
  EXPECT_NE(std::find(fwd.canonical.begin(), fwd.canonical.end(), "-fPIC"), fwd.canonical.end());
}

TEST(NvccCommandTest, OptionsFilesAreKeyedByWhatTheyHold) {
  const Command inline_args = parse({"-c", "k.cu", "-DA=1", "-I", "my dir"});
  const Command from_file = parse({"-c", "k.cu", "--options-file", "o.txt"}, {{"o.txt", "-DA=1\n -I \"my dir\"\n"}});
  ASSERT_EQ(from_file.uncacheable, "");
  EXPECT_EQ(from_file.canonical, inline_args.canonical);
  EXPECT_EQ(from_file.include_dirs, (std::vector<std::string>{".", "my dir"}));
  const Command other = parse({"-c", "k.cu", "-optf", "o.txt"}, {{"o.txt", "-DA=2"}});
  EXPECT_NE(other.canonical, from_file.canonical);
  // A file that names itself ends.
  EXPECT_EQ(parse({"-c", "k.cu", "-optf", "self"}, {{"self", "-optf self"}}).uncacheable,
            "options files nested too deeply");
  EXPECT_EQ(split_options_file("a 'b c' \"d\\\"e\" f\\ g"), (std::vector<std::string>{"a", "b c", "d\"e", "f g"}));
}

TEST(NvccCommandTest, DependencyFilesNameEveryPrerequisiteOnce) {
  auto deps = parse_depfile("k.o : k.cu \\\n    /usr/include/a\\ b.h \\\n    inc/p.h inc/p.h\n\ninc/p.h:\n");
  ASSERT_TRUE(deps.ok());
  EXPECT_EQ(*deps, (std::vector<std::string>{"k.cu", "/usr/include/a b.h", "inc/p.h"}));
  auto crlf = parse_depfile("k.o: k.cu \\\r\n a$$b.h\r\n");
  ASSERT_TRUE(crlf.ok());
  EXPECT_EQ(*crlf, (std::vector<std::string>{"k.cu", "a$b.h"}));
  EXPECT_FALSE(parse_depfile("no rule here\n").ok());
  EXPECT_FALSE(parse_depfile("").ok());
}

}  // namespace
}  // namespace progcache::nvcc
