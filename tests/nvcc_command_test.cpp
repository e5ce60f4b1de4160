// The nvcc launcher's reading of nvcc's command line (src/nvcc): what is
// cacheable, where outputs go, one canonical spelling per option, and the
// dependency files nvcc writes.
#include "nvcc/nvcc_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "compile/depfile.h"

namespace progcache::nvcc {
namespace {

Command parse(const std::vector<std::string>& args, const std::map<std::string, std::string>& files = {},
              const EnvFlags& env = {}) {
  return parse_command(
      args,
      [&](const std::string& p) -> Result<std::string> {
        auto it = files.find(p);
        if (it == files.end()) return not_found("no file " + p);
        return it->second;
      },
      env);
}

std::vector<std::string> paths_read(const Command& c) {
  std::vector<std::string> out;
  for (const auto& f : c.read_files) out.push_back(f.path);
  return out;
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
  EXPECT_EQ(a.include_dirs, (std::vector<std::string>{"inc"}));
  // -MF's value is a file name, not an input (nvcc's help shows no value for it).
  const Command md = parse({"-c", "k.cu", "-MD", "-MF", "k.d", "-MT", "k.o"});
  EXPECT_EQ(md.uncacheable, "");
  EXPECT_EQ(md.depfile, "k.d");
  // Values are keyed: another -D is another command.
  EXPECT_NE(parse({"-c", "k.cu", "-DX=2"}).canonical, parse({"-c", "k.cu", "-DX=1"}).canonical);
}

TEST(NvccCommandTest, TheOutputsNameIsKeyedOnlyWhereWhatIsWrittenNamesIt) {
  auto keyed_has = [](const Command& c, const std::string& w) {
    const auto ws = keyed_words(c);
    return std::find(ws.begin(), ws.end(), w) != ws.end();
  };
  const Command plain = parse({"-c", "k.cu", "-o", "a.o", "-MD", "-MF", "a.d", "-MT", "t.o"});
  EXPECT_FALSE(plain.place_in_output);
  EXPECT_FALSE(keyed_has(plain, "--output-file=a.o"));
  EXPECT_FALSE(keyed_has(plain, "--dependency-output=a.d"));
  EXPECT_TRUE(keyed_has(plain, "--dependency-target-name=t.o"));
  EXPECT_EQ(keyed_words(plain), keyed_words(parse({"-c", "k.cu", "-o", "b.o", "-MD", "-MF", "b.d", "-MT", "t.o"})));
  // Without -MT the dependency file's target is the -o name.
  EXPECT_TRUE(keyed_has(parse({"-c", "k.cu", "-o", "a.o", "-MD", "-MF", "a.d"}), "--output-file=a.o"));
  // Debug information names the place: every spelling, every tool.
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"-g"},
                                                {"-G"},
                                                {"--device-debug"},
                                                {"-Xcompiler", "-ggdb"},
                                                {"-Xptxas", "-g"},
                                                {"-Xnvlink", "--debug"}}) {
    std::vector<std::string> args = {"-c", "k.cu", "-o", "a.o"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Command c = parse(args);
    EXPECT_TRUE(c.uncacheable.empty()) << extra.back() << ": " << c.uncacheable;
    EXPECT_TRUE(c.place_in_output) << extra.back();
    EXPECT_TRUE(keyed_has(c, "--output-file=a.o")) << extra.back();
  }
  EXPECT_FALSE(parse({"-c", "k.cu", "-Xcompiler", "-g0"}).place_in_output);
  // Device line information names files by the path they were reached by:
  // the launcher keys the place when one is relative.
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"-lineinfo"},
                                                {"-src-in-ptx"},
                                                {"--generate-line-info"},
                                                {"-Xptxas", "-lineinfo"},
                                                {"-Xptxas", "--generate-line-info"}}) {
    std::vector<std::string> args = {"-c", "k.cu", "-o", "a.o"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Command c = parse(args);
    EXPECT_TRUE(c.line_info) << extra.back();
    EXPECT_FALSE(c.place_in_output) << extra.back();
    EXPECT_FALSE(keyed_has(c, "--output-file=a.o")) << extra.back();
  }
  // -objtemp names nvcc's temporary files after the output.
  EXPECT_TRUE(parse({"-c", "k.cu", "-o", "a.o", "-objtemp"}).place_in_output);
}

TEST(NvccCommandTest, AToolWordAShellWouldSplitOrExpandIsRefused) {
  // nvcc hands -X values to the tools through a shell: "-O2 -g" reaches
  // gcc as two words (one of them -g), "$HOME" as the directory.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-c", "k.cu", "-Xcompiler", "-O2 -g"},
                                               {"-c", "k.cu", "-Xcompiler", "-O2 -include x.h"},
                                               {"-c", "k.cu", "-Xcompiler", "-DHOME=$HOME"},
                                               {"-c", "k.cu", "-Xcompiler", "-DX='1'"},
                                               {"-c", "k.cu", "-Xptxas", "-v -O0"},
                                               {"-c", "k.cu", "-Xptxas", "-O`echo 0`"}}) {
    const Command c = parse(args);
    EXPECT_NE(c.uncacheable.find("holds characters a shell reads"), std::string::npos)
        << args.back() << ": " << c.uncacheable;
  }
  EXPECT_TRUE(parse({"-c", "k.cu", "-Xcompiler", "-O2,-fPIC,-Wall", "-Xptxas", "-v,-O3"}).uncacheable.empty());
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

TEST(NvccCommandTest, ADeviceLinkTakesItsInputsLibrariesAndOutputAndRefusesWhatItCannotFollow) {
  const Command c = parse({"-arch=sm_90", "-dlink", "a.o", "lib/b.a", "-o", "link.o", "-L", "libs", "-ldev,rt"});
  EXPECT_EQ(c.uncacheable, "");
  EXPECT_EQ(c.mode, Mode::device_link);
  EXPECT_EQ(c.inputs, (std::vector<std::string>{"a.o", "lib/b.a"}));
  EXPECT_EQ(c.input, "a.o");
  EXPECT_EQ(c.output, "link.o");
  EXPECT_EQ(c.libraries, (std::vector<std::string>{"dev", "rt"}));
  EXPECT_EQ(c.library_dirs, (std::vector<std::string>{"libs"}));
  // Inputs in order, last; the output's name is not keyed.
  const auto keyed = keyed_words(c);
  EXPECT_EQ(keyed.back(), "lib/b.a");
  EXPECT_EQ(std::count(keyed.begin(), keyed.end(), "a.o"), 1);
  EXPECT_EQ(std::count(c.canonical.begin(), c.canonical.end(), "--output-file=link.o"), 1);
  EXPECT_EQ(std::count(keyed.begin(), keyed.end(), "--output-file=link.o"), 0);
  // Line information is the inputs' own: where the link runs is not keyed for it.
  EXPECT_FALSE(parse({"-lineinfo", "-dlink", "a.o", "-o", "l.o"}).line_info);
  EXPECT_TRUE(parse({"-G", "-dlink", "a.o", "-o", "l.o"}).place_in_output);
  EXPECT_EQ(parse({"-dlink", "a.o"}).uncacheable, "a device link without -o");
  EXPECT_EQ(parse({"-dlink", "-o", "l.o"}).uncacheable, "a device link without inputs");
  EXPECT_EQ(parse({"-dlink", "a.cu", "-o", "l.o"}).uncacheable,
            "device link input 'a.cu' is not an object or an archive");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-l:libx.a"}).uncacheable, "library ':libx.a' is not a name");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-Xnvlink", "-Lelsewhere"}).uncacheable,
            "nvlink word '-Lelsewhere' names a library: its search is not followed");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-Xnvlink", "-optf=nv.opt"}, {{"nv.opt", "-Llib -ldev"}}).uncacheable,
            "nvlink word '-Llib' names a library: its search is not followed");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-Xnvlink", "@nv.rsp"}, {{"nv.rsp", "-ldev"}}).uncacheable,
            "nvlink word '-ldev' names a library: its search is not followed");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-Xnvlink", "--time=t.csv"}).uncacheable,
            "nvlink word '--time=t.csv' reads or writes a file outside the output");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-Xlinker", "-v"}).uncacheable, "linker words in a device link");
  EXPECT_EQ(parse({"-dlink", "a.o", "-o", "l.o", "-MD", "-MF", "l.d"}).uncacheable,
            "a dependency file from a device link");
  EXPECT_EQ(parse({"-dlink", "-c", "a.o", "-o", "l.o"}).uncacheable, "more than one output kind");
}

TEST(NvccCommandTest, WhatCannotBeCachedSaysWhy) {
  EXPECT_EQ(parse({"k.cu", "-o", "app"}).uncacheable,
            "no compile step (-c, -cubin, -ptx, -fatbin, -dlink): linking or another step");
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
  const Command inline_args = parse({"-c", "k.cu", "-DA=1", "-I", "mydir", "-isystem", "sys"});
  const Command from_file =
      parse({"-c", "k.cu", "--options-file", "o.txt"}, {{"o.txt", "-DA=1\n -I mydir\t-isystem sys\n"}});
  ASSERT_EQ(from_file.uncacheable, "");
  EXPECT_EQ(from_file.canonical, inline_args.canonical);
  EXPECT_EQ(from_file.include_dirs, (std::vector<std::string>{"mydir"}));
  EXPECT_EQ(from_file.system_dirs, (std::vector<std::string>{"sys"}));
  // nvcc takes a quote as part of a word (-DC='1' defines C as '1', where a
  // shell would strip the quotes): a file holding one is refused.
  EXPECT_EQ(parse({"-c", "k.cu", "-optf", "q.txt"}, {{"q.txt", "-DC='1'"}}).uncacheable,
            "options file 'q.txt' holds a quote or a backslash: how nvcc splits it is not known");
  EXPECT_EQ(parse({"-c", "k.cu", "-optf", "q.txt"}, {{"q.txt", "-DC=a\\ b"}}).uncacheable,
            "options file 'q.txt' holds a quote or a backslash: how nvcc splits it is not known");
  EXPECT_EQ(parse({"-cubin", "k.cu", "-Xptxas", "-optf,p.opt"}, {{"p.opt", "\"-O0\""}}).uncacheable,
            "ptxas options file 'p.opt' holds a quote or a backslash: how it is split is not known");
  const Command other = parse({"-c", "k.cu", "-optf", "o.txt"}, {{"o.txt", "-DA=2"}});
  EXPECT_NE(other.canonical, from_file.canonical);
  // A file that names itself ends.
  EXPECT_EQ(parse({"-c", "k.cu", "-optf", "self"}, {{"self", "-optf self"}}).uncacheable,
            "options files nested too deeply");
  EXPECT_EQ(split_options_file("a 'b c' \"d\\\"e\" f\\ g"), (std::vector<std::string>{"a", "b c", "d\"e", "f g"}));
}

TEST(NvccCommandTest, FilesTheSubToolsReadByNameAreKeyedByContent) {
  // A host compiler response file: its contents are keyed, and its words
  // are the host compiler's (a -include inside is followed too).
  const std::vector<std::string> args = {"-c", "k.cu", "-Xcompiler", "@flags.rsp"};
  const Command a = parse(args, {{"flags.rsp", "-O2 -include pre.h"}, {"pre.h", "#define A 1"}});
  ASSERT_EQ(a.uncacheable, "");
  EXPECT_EQ(paths_read(a), (std::vector<std::string>{"flags.rsp", "pre.h"}));
  const Command edited = parse(args, {{"flags.rsp", "-O3 -include pre.h"}, {"pre.h", "#define A 1"}});
  EXPECT_NE(edited.read_files[0].sha256, a.read_files[0].sha256);
  EXPECT_EQ(parse(args, {}).uncacheable, "host compiler response file 'flags.rsp' cannot be read");
  // -include and -imacros in every spelling, over several -Xcompiler words.
  for (const auto& xs : std::vector<std::vector<std::string>>{{"-Xcompiler", "-include,pre.h"},
                                                              {"-Xcompiler", "-include", "-Xcompiler", "pre.h"},
                                                              {"--compiler-options=-includepre.h"},
                                                              {"-Xcompiler=--imacros=pre.h"}}) {
    std::vector<std::string> cmd = {"-c", "k.cu"};
    cmd.insert(cmd.end(), xs.begin(), xs.end());
    const Command c = parse(cmd, {{"pre.h", "#define A 1"}});
    EXPECT_EQ(c.uncacheable, "") << xs.back();
    EXPECT_EQ(paths_read(c), (std::vector<std::string>{"pre.h"})) << xs.back();
    EXPECT_EQ(parse(cmd).uncacheable, "host compiler file 'pre.h' is not a readable file in the working directory");
  }
  // Host compiler words that may read a file the key cannot see are refused.
  for (const char* w : {"-B/opt/gcc", "-specs=my.specs", "-fprofile-use=prof", "-fplugin=p.so", "-Xpreprocessor",
                        "-isystem/opt/inc", "-gsplit-dwarf", "-fsanitize-ignorelist=l.txt", "stray.c"}) {
    EXPECT_EQ(parse({"-c", "k.cu", "-Xcompiler", w}).uncacheable,
              "host compiler word '" + std::string(w) + "' may read files the key cannot see")
        << w;
  }
  // A comma splits -Xcompiler's value, not a response file's words.
  EXPECT_EQ(parse({"-c", "k.cu", "-Xcompiler", "@r"}, {{"r", "-Wp,-include,x.h"}}).uncacheable,
            "host compiler word '-Wp,-include,x.h' may read files the key cannot see");
  // ... also when forwarded as unknown options.
  EXPECT_NE(parse({"-forward-unknown-to-host-compiler", "-fprofile-use=prof", "-c", "k.cu"}).uncacheable, "");
  // Common flags stay cacheable.
  EXPECT_EQ(parse({"-c", "k.cu", "-Xcompiler=-fPIC,-Wall,-O2,-fvisibility=hidden,-fopenmp,-DX=1"}).uncacheable, "");
  // ptxas's options files (ptxas reads no @file), and @files of the others.
  const Command p =
      parse({"-cubin", "k.cu", "-Xptxas", "--options-file,p.opt", "-Xcudafe", "@c.rsp", "-Xnvlink", "-optf=n.opt"},
            {{"p.opt", "-O0 -optf nested.opt"}, {"nested.opt", "-v"}, {"c.rsp", ""}, {"n.opt", ""}});
  ASSERT_EQ(p.uncacheable, "");
  EXPECT_EQ(paths_read(p), (std::vector<std::string>{"c.rsp", "n.opt", "p.opt", "nested.opt"}));
  EXPECT_EQ(parse({"-cubin", "k.cu", "-Xptxas", "-optf,gone.opt"}).uncacheable,
            "ptxas options file 'gone.opt' cannot be read");
  EXPECT_EQ(parse({"-cubin", "k.cu", "-Xptxas", "-o,elsewhere.cubin"}).uncacheable,
            "ptxas option '-o' writes a file outside the output");
  // nvcc's own options files are listed too.
  EXPECT_EQ(paths_read(parse({"-c", "k.cu", "-optf", "o.txt"}, {{"o.txt", "-DA=1"}})),
            (std::vector<std::string>{"o.txt"}));
  EXPECT_EQ(parse({"-c", "k.cu", "-ldir", "mylibdevice"}).uncacheable,
            "--libdevice-directory writes or omits files outside the output");
}

TEST(NvccCommandTest, NvccsFlagVariablesAreReadAsOptions) {
  // NVCC_PREPEND_FLAGS and NVCC_APPEND_FLAGS act as words before and after
  // the command line's: their options files, -ccbin, -o and -X values count.
  const Command c = parse({"-c", "k.cu"}, {{"o.txt", "-DA=1"}, {"f.rsp", "-O2"}},
                          {.prepend = "-optf o.txt  -ccbin /opt/g++", .append = "-Xcompiler @f.rsp	-o out.o"});
  ASSERT_EQ(c.uncacheable, "");
  EXPECT_EQ(c.ccbin, "/opt/g++");
  EXPECT_EQ(c.output, "out.o");
  EXPECT_EQ(paths_read(c), (std::vector<std::string>{"o.txt", "f.rsp"}));
  EXPECT_NE(std::find(c.canonical.begin(), c.canonical.end(), "--define-macro=A=1"), c.canonical.end());
  EXPECT_EQ(parse({"-c", "k.cu"}, {}, {.append = "-Xcompiler -fprofile-use=p"}).uncacheable,
            "host compiler word '-fprofile-use=p' may read files the key cannot see");
  EXPECT_EQ(parse({"-c", "k.cu"}, {}, {.prepend = "-DX=\"a b\""}).uncacheable,
            "NVCC_PREPEND_FLAGS holds a quote or a backslash: how nvcc splits it is not known");
  EXPECT_EQ(parse({"-c", "k.cu"}, {}, {.append = "-optf missing.txt"}).uncacheable,
            "options file 'missing.txt' cannot be read");
  EXPECT_EQ(parse({"-c", "k.cu"}, {}, {.append = "-E"}).uncacheable, "--preprocess makes no single cacheable output");
  EXPECT_EQ(*split_env_flags(" a\tb\n c "), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(NvccCommandTest, WhatTheMachineDecidesIsRefused) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-arch=native", "-cubin", "k.cu"},
           {"--gpu-architecture", "native", "-cubin", "k.cu"},
           {"-gencode", "arch=compute_90,code=native", "-c", "k.cu"},
       }) {
    EXPECT_NE(parse(args).uncacheable.find("depends on the GPUs of the machine"), std::string::npos) << args[0];
  }
  EXPECT_EQ(parse({"-arch=all", "-cubin", "k.cu"}).uncacheable, "");  // the toolkit decides: keyed
  EXPECT_EQ(parse({"-arch=sm_90", "-c", "k.cu", "-Xcompiler", "-march=native"}).uncacheable,
            "host compiler word '-march=native' depends on the machine's CPU");
}

TEST(NvccCommandTest, PtxasAndCudafeFlagVariablesAreTheirToolsWords) {
  const Command c = parse({"-cubin", "k.cu"}, {{"p.opt", "-O0"}}, {.ptxas = "-optf p.opt", .cudafe = ""});
  ASSERT_EQ(c.uncacheable, "");
  EXPECT_EQ(paths_read(c), (std::vector<std::string>{"p.opt"}));
  EXPECT_EQ(parse({"-cubin", "k.cu"}, {}, {.ptxas = "-o elsewhere.cubin"}).uncacheable,
            "ptxas option '-o' writes a file outside the output");
  EXPECT_EQ(parse({"-cubin", "k.cu"}, {}, {.cudafe = "'x'"}).uncacheable,
            "CUDAFE_FLAGS holds a quote or a backslash: how nvcc splits it is not known");
}

TEST(NvccCommandTest, AProfileNamesTheVariablesItAssignsAndReads) {
  const ProfileVariables v = profile_variables(
      "\nTOP              = $(_HERE_)/..\nNVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n"
      "INCLUDES        +=  \"-I$(TOP)/$(_TARGET_DIR_)/include\" $(_SPACE_)\nLIBRARIES =+ $(_SPACE_) x\n"
      "PTXAS_FLAGS     +=\nSELF = $(SELF) more\n");
  EXPECT_EQ(v.names, (std::vector<std::string>{"TOP", "_HERE_", "NVVMIR_LIBRARY_DIR", "INCLUDES", "_TARGET_DIR_",
                                               "_SPACE_", "LIBRARIES", "PTXAS_FLAGS", "SELF"}));
  EXPECT_EQ(v.replaced, (std::vector<std::string>{"TOP", "NVVMIR_LIBRARY_DIR"}));
}

TEST(NvccCommandTest, AStepNvccRunsWithItsOutputSentToFilesIsReadWithoutThem) {
  // nvcc --threads N prints each step with the redirections it runs it with.
  auto d = parse_dryrun(
      "#$ gcc -E -x c++ \"-I/a b\" -D'X=1>0' \"t.cu\" -o \"/tmp/t.ii\"  > /tmp/s_stdout 2>/tmp/s_stderr\n");
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->preprocess.size(), 1U);
  EXPECT_EQ(d->preprocess[0], (std::vector<std::string>{"gcc", "-E", "-x", "c++", "-I/a b", "-DX=1>0", "t.cu"}));
  // Anything else after a '>' a shell acts on, or a file it would expand: not read.
  EXPECT_FALSE(parse_dryrun("#$ gcc -E t.cu -o t.ii > f | tee g\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ gcc -E t.cu -o t.ii > *.txt\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ gcc -E -DX=2>f t.cu -o t.ii\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ gcc -E t.cu -o t.ii >\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ gcc -E - -o t.ii < t.cu\n").ok()) << "its input from a file";
}

TEST(NvccCommandTest, DependencyFilesNameEveryPrerequisiteOnce) {
  auto deps = detail::parse_depfile("k.o : k.cu \\\n    /usr/include/a\\ b.h \\\n    inc/p.h inc/p.h\n\ninc/p.h:\n");
  ASSERT_TRUE(deps.ok());
  EXPECT_EQ(*deps, (std::vector<std::string>{"k.cu", "/usr/include/a b.h", "inc/p.h"}));
  auto crlf = detail::parse_depfile("k.o: k.cu \\\r\n a$$b.h\r\n");
  ASSERT_TRUE(crlf.ok());
  EXPECT_EQ(*crlf, (std::vector<std::string>{"k.cu", "a$b.h"}));
  EXPECT_FALSE(detail::parse_depfile("no rule here\n").ok());
  EXPECT_FALSE(detail::parse_depfile("").ok());
}

TEST(NvccCommandTest, EveryOptionOfNvccsHelpIsInTheTable) {
  // An option missing from the table is read as a shorter one with a value
  // (-time=t.csv was -t with "ime=t.csv"), and its rule never applies.
  const char* home = std::getenv("CUDA_HOME");
  const std::string nvcc = std::string(home != nullptr && *home != '\0' ? home : "/usr/local/cuda") + "/bin/nvcc";
  if (::access(nvcc.c_str(), X_OK) != 0) GTEST_SKIP() << "no nvcc to ask for its options";
  FILE* p = ::popen((nvcc + " --help 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string help;
  char buf[4096];
  for (std::size_t n = 0; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) help.append(buf, n);
  ::pclose(p);
  std::size_t checked = 0;
  for (std::size_t pos = 0; (pos = help.find("\n--", pos)) != std::string::npos; ++pos) {
    const std::size_t start = pos + 3;
    const std::size_t end = help.find_first_of(" \n", start);
    const std::string name = help.substr(start, end - start);
    const Command c = parse({"--" + name, "-c", "k.cu"});
    EXPECT_EQ(c.uncacheable.find("unknown"), std::string::npos) << "--" << name << ": " << c.uncacheable;
    ++checked;
  }
  EXPECT_GT(checked, 100U);
  EXPECT_NE(parse({"-time=t.csv", "-c", "k.cu"}).uncacheable, "");
  EXPECT_NE(parse({"-fdevice-time-trace=t.json", "-c", "k.cu"}).uncacheable, "");
  EXPECT_NE(parse({"--time", "t.csv", "-c", "k.cu"}).uncacheable, "");
}

TEST(NvccCommandTest, AToolWordThatIsNotAnOptionIsRefused) {
  // ptxas takes a bare word as another input to compile into the output.
  EXPECT_NE(parse({"-Xptxas", "extra.ptx", "-cubin", "k.cu"}).uncacheable.find("not an option"), std::string::npos);
  EXPECT_NE(parse({"-Xnvlink", "lib.o", "-c", "k.cu"}).uncacheable, "");
  // Options, and a value given apart as a number, are words as before.
  EXPECT_EQ(parse({"-Xptxas", "-O3,-v", "-cubin", "k.cu"}).uncacheable, "");
  EXPECT_EQ(parse({"-Xptxas", "-maxrregcount", "-Xptxas", "32", "-cubin", "k.cu"}).uncacheable, "");
}

}  // namespace
TEST(NvccCommandTest, ADryRunGivesThePreprocessingStepsAndTheToolsVariables) {
  // As nvcc 13.0 prints `--dryrun -arch=sm_90 -c a.cu -MD -MF a.d` (cut).
  const std::string text =
      "#$ _SPACE_= \n"
      "#$ PATH=/usr/local/cuda/bin/../nvvm/bin:/usr/local/cuda/bin:/usr/bin\n"
      "#$ INCLUDES=\"-I/usr/local/cuda/bin/../targets/x86_64-linux/include\"  \n"
      "#$ SYSTEM_INCLUDES=\"-isystem\" \"/usr/local/cuda/bin/../targets/x86_64-linux/include/cccl\"  \n"
      "#$ gcc -D__CUDA_ARCH__=900 -D__CUDA_ARCH_LIST__=900 -E -x c++  -DCUDA_DOUBLE_MATH_FUNCTIONS "
      "\"-I/usr/local/cuda/include\"   \"-isystem\" \"/usr/local/cuda/include/cccl\" -include \"cuda_runtime.h\" "
      "-m64 \"a.cu\" -o \"/tmp/tmpxft_000069c8_00000000-7_a.cpp1.ii\" \n"
      "#$ gcc -D__CUDA_ARCH_LIST__=900 -E -x c++ -D__CUDACC__ -MD -MF \"a.d\" -MT a.o -include \"cuda_runtime.h\" "
      "-m64 \"a.cu\" -o \"/tmp/tmpxft_000069c8_00000000-5_a.cpp4.ii\" \n"
      "#$ gcc -E -M -x c++ \"a.cu\" -o \"a.d\"\n"
      "#$ -- Filter Dependencies -- > a.d\n"
      "#$ \"$CICC_PATH/cicc\" --c++17 -arch compute_90 \"/tmp/tmpxft_000069c8_00000000-7_a.cpp1.ii\" -o x.ptx\n"
      "#$ ptxas -arch=sm_90 -m64 \"x.ptx\" -o \"x.cubin\" \n";
  auto d = parse_dryrun(text);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->preprocess.size(), 2U);
  const std::vector<std::string> device = {"gcc",
                                           "-D__CUDA_ARCH__=900",
                                           "-D__CUDA_ARCH_LIST__=900",
                                           "-E",
                                           "-x",
                                           "c++",
                                           "-DCUDA_DOUBLE_MATH_FUNCTIONS",
                                           "-I/usr/local/cuda/include",
                                           "-isystem",
                                           "/usr/local/cuda/include/cccl",
                                           "-include",
                                           "cuda_runtime.h",
                                           "-m64",
                                           "a.cu"};
  EXPECT_EQ(d->preprocess[0], device);
  // The host step less its dependency options; the -M step is no text.
  const auto& host = d->preprocess[1];
  for (const char* gone : {"-MD", "-MF", "a.d", "-MT", "a.o", "-o"}) {
    EXPECT_EQ(std::find(host.begin(), host.end(), gone), host.end()) << gone;
  }
  const std::vector<std::pair<std::string, std::string>> env = {
      {"_SPACE_", ""},
      {"PATH", "/usr/local/cuda/bin/../nvvm/bin:/usr/local/cuda/bin:/usr/bin"},
      {"INCLUDES", "-I/usr/local/cuda/bin/../targets/x86_64-linux/include"}};
  EXPECT_EQ(d->env, env);
  // What a shell would expand, or no step at all: not read.
  EXPECT_FALSE(parse_dryrun("#$ gcc -E -DX=$HOME a.cu -o x.ii\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ gcc -E -DX=\"`id`\" a.cu -o x.ii\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ gcc -E a.cu\n").ok()) << "a step without -o";
  EXPECT_FALSE(parse_dryrun("#$ PATH=/usr/bin\n#$ ptxas x.ptx -o x.cubin\n").ok());
  EXPECT_FALSE(parse_dryrun("#$ PATH=$HOME/bin\n#$ gcc -E a.cu -o x.ii\n").ok());
}

}  // namespace progcache::nvcc
