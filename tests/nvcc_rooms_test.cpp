// The nvcc launcher's rooms in process, without nvcc: relocation under a
// base directory (src/nvcc/relocation.h), the search places
// (src/nvcc/places.h), the command's key (src/nvcc/manifest_key.h) and the
// search-path variables (src/nvcc/environment.h). tests/nvcc_launcher_test.cpp
// drives the same code end to end through the CLI and the real nvcc.
#include <gtest/gtest.h>
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): setenv and unsetenv are POSIX's
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "compile/include_lexer.h"
#include "nvcc/environment.h"
#include "nvcc/manifest_key.h"
#include "nvcc/places.h"
#include "nvcc/relocation.h"
#include "testing/test_util.h"

namespace nv = progcache::nvcc;
namespace dt = progcache::detail;
namespace pt = progcache::testing;

namespace {

// Sets a variable for one scope, and puts back what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedVariable() {
    if (m_old) {
      ::setenv(m_name.c_str(), m_old->c_str(), 1);
    } else {
      ::unsetenv(m_name.c_str());
    }
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  std::string m_name;
  std::optional<std::string> m_old;
};

nv::Relocation checkout(const std::string& name) {
  return nv::Relocation{"/ck", "/ck/" + name + "/build"};
}

nv::Command object_of(const std::string& source) {
  nv::Command cmd;
  cmd.mode = nv::Mode::object;
  cmd.input = source;
  cmd.output = "k.o";
  return cmd;
}

}  // namespace

TEST(NvccRoomsTest, ARelocatedPathIsSpelledFromTheWorkingDirectoryAndFoundAgainInAnotherCheckout) {
  const auto one = checkout("one");
  const auto m = one.move("/ck/one/src/k.cu");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->head, "../src/k.cu");
  EXPECT_EQ(one.relative("/ck/one/src/k.cu"), one.relative("/ck/one/src/k.cu"));
  // The same spelling, from the second checkout's working directory,
  // reaches the second checkout's file.
  EXPECT_EQ(checkout("two").absolute(m->head), "/ck/two/src/k.cu");
  // A path climbing after its head keeps the climb as written, and is
  // keyed apart from the path the climb reaches.
  const auto climbed = one.move("/ck/one/build/../inc");
  ASSERT_TRUE(climbed.has_value());
  EXPECT_EQ(climbed->tail, "../inc");
  EXPECT_NE(climbed->keyed(), one.relative("/ck/one/inc"));
  // Outside the base, relative, with a "//" or a character a depfile
  // escapes: not relocated.
  EXPECT_FALSE(one.move("/usr/include/x.h"));
  EXPECT_FALSE(one.move("src/k.cu"));
  EXPECT_FALSE(one.move("/ck/one//k.cu"));
  EXPECT_FALSE(one.move("/ck/one/a b.h"));
  EXPECT_TRUE(one.move("/ck/one/a b.h", /*any_character=*/true));
}

TEST(NvccRoomsTest, AnIncludeListIsRelocatedWholeOrNotAtAll) {
  const auto one = checkout("one");
  EXPECT_EQ(nv::relocated_word(one, "--include-path=/ck/one/a,/ck/one/b"), "--include-path=../a,../b");
  // A list mixing a relocated path and another would reach the key of
  // another mix.
  EXPECT_FALSE(nv::relocated_word(one, "--include-path=/ck/one/a,/opt/b"));
  EXPECT_FALSE(nv::relocated_word(one, "--define-macro=P=/ck/one/a"));
  EXPECT_EQ(nv::relocated_word(one, "/ck/one/src/k.cu"), "../src/k.cu");
}

TEST(NvccRoomsTest, ADependencyFileIsWrittenForTheCheckoutServed) {
  const auto one = checkout("one");
  const std::string text = "k.o: /ck/one/src/k.cu \\\n /ck/one/build/../inc/a.h /usr/include/stdio.h\n";
  const auto tmpl = nv::depfile_template(one, text);
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(tmpl->find("/ck/one"), std::string::npos);
  EXPECT_EQ(nv::render_depfile(one, *tmpl), text);
  EXPECT_EQ(nv::render_depfile(checkout("two"), *tmpl),
            "k.o: /ck/two/src/k.cu \\\n /ck/two/build/../inc/a.h /usr/include/stdio.h\n");
  // A path under the base that is not a whole word (an escaped space
  // before it) cannot be relocated: the result is not shared.
  EXPECT_FALSE(nv::depfile_template(one, "k.o: x\\ /ck/one/a.h\n"));
}

TEST(NvccRoomsTest, ATextNamesAPlaceByAStringOrAnAnonymousNamespaceNotByALineMarker) {
  EXPECT_FALSE(nv::text_names_place("# 1 \"/ck/one/src/k.cu\"\nint x;\n", "/ck"));
  EXPECT_TRUE(nv::text_names_place("const char* p = \"/ck/one/src/k.cu\";\n", "/ck"));
  EXPECT_TRUE(nv::text_names_place("auto f = __builtin_FILE();\n", "/ck"));
  EXPECT_TRUE(nv::text_names_place("namespace\n# 3 \"k.cu\"\n[[deprecated]] {\nint x;\n}\n", "/ck"));
  EXPECT_TRUE(nv::text_names_place("inline namespace <% int y; %>\n", "/ck"));
  EXPECT_FALSE(nv::text_names_place("namespace n { int x; }\n", "/ck"));
}

TEST(NvccRoomsTest, AManifestRecordUnderTheBaseMovesOrIsNotRelocated) {
  const auto one = checkout("one");
  nv::ManifestRecord m;
  m.files.push_back({"/ck/one/src/k.cu", {}, false, "sum"});
  m.files.push_back({"/usr/local/cuda/include/cuda_runtime.h", {}, false, "sum"});
  m.absent.push_back({"/ck/one/inc/k.h", {"/ck/one/inc", {1, 2, 3, 4, 5}}});
  const auto r = nv::relocated_record(one, m);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->files[0].path, "../src/k.cu");
  EXPECT_EQ(r->files[1].path, "/usr/local/cuda/include/cuda_runtime.h");
  EXPECT_EQ(r->absent[0].path, "../inc/k.h");
  // Another checkout's directories are other directories: no watch.
  EXPECT_TRUE(r->absent[0].watch.path.empty());
  // A path naming the base that cannot be moved leaves the record unshared.
  m.absent.push_back({"/ck/one//x.h", {}});
  EXPECT_FALSE(nv::relocated_record(one, m));
}

TEST(NvccRoomsTest, AnEmptyEntryOfASearchPathVariableIsTheWorkingDirectory) {
  const ScopedVariable v("CPATH", "/a::b:");
  EXPECT_EQ(nv::env_dirs("CPATH"), (std::vector<std::string>{"/a", ".", "b", "."}));
  const ScopedVariable none("CPATH", nullptr);
  EXPECT_TRUE(nv::env_dirs("CPATH").empty());
}

TEST(NvccRoomsTest, EveryPlaceBeforeTheOneThatHoldsAHeaderMustStayAbsent) {
  pt::TempDir t;
  ASSERT_EQ(::mkdir(t.sub("i1").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(t.sub("i2").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(t.sub("src").c_str(), 0700), 0);
  pt::write_all(t.sub("i2/a.h"), "int a;\n");
  pt::write_all(t.sub("src/k.cu"), "#include <a.h>\n#include \"b.h\"\n");
  EXPECT_EQ(nv::search_places("a.h", std::nullopt, {"/x", "y"}), (std::vector<std::string>{"/x/a.h", "y/a.h"}));
  EXPECT_EQ(nv::search_places("/abs.h", std::string("/q"), {"/x"}), (std::vector<std::string>{"/abs.h"}));

  nv::Places places({t.sub("i1"), t.sub("i2")}, {t.sub("src/k.cu"), t.sub("i2/a.h")}, {});
  const auto text = dt::read_regular(t.sub("src/k.cu"));
  ASSERT_TRUE(text.ok());
  ASSERT_FALSE(places.probe_file(t.sub("src/k.cu"), dt::directives(*text)));
  const auto absent = places.absent();
  auto has = [&](const std::string& p) { return std::find(absent.begin(), absent.end(), p) != absent.end(); };
  EXPECT_TRUE(has(t.sub("i1/a.h")));   // before the one that holds it
  EXPECT_FALSE(has(t.sub("i2/a.h")));  // the one that holds it
  // A quoted name found nowhere: beside its includer, then every directory.
  EXPECT_TRUE(has(t.sub("src/b.h")));
  EXPECT_TRUE(has(t.sub("i1/b.h")));
  EXPECT_TRUE(has(t.sub("i2/b.h")));
  EXPECT_FALSE(places.refused());
}

TEST(NvccRoomsTest, APrecompiledHeaderWhereTheHostCompilerLooksKeepsTheRecordFromBeingStored) {
  pt::TempDir t;
  nv::Places places({t.path()}, {}, {});
  places.no_precompiled(t.sub("stdc-predef.h"));
  EXPECT_FALSE(places.refused());
  const auto absent = places.absent();
  EXPECT_NE(std::find(absent.begin(), absent.end(), t.sub("stdc-predef.h.gch")), absent.end());
  pt::write_all(t.sub("x.h.gch"), "gpch");
  places.no_precompiled(t.sub("x.h"));
  ASSERT_TRUE(places.refused().has_value());
  EXPECT_NE(places.refused()->find("x.h.gch"), std::string::npos);
}

TEST(NvccRoomsTest, TheCommandKeySeesWhatDecidesTheCompileAndNotHowPathIsSpelled) {
  const ScopedVariable no_script("NVCC_CCBIN", nullptr);
  const std::vector<std::string> variables = {"NVCC_APPEND_FLAGS", "PATH"};
  const nv::Command cmd = object_of("/src/k.cu");
  const auto base = nv::manifest_key("/no/nvcc", cmd, variables);
  EXPECT_EQ(nv::manifest_key("/no/nvcc", cmd, variables), base);
  {
    // PATH with an empty directory appended finds the same programs.
    const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "/usr/bin:/bin";
    const ScopedVariable v("PATH", (path + ":" + pt::TempDir().path()).c_str());
    EXPECT_EQ(nv::manifest_key("/no/nvcc", cmd, variables), base);
  }
  {
    const ScopedVariable v("NVCC_APPEND_FLAGS", "-DX=1");
    EXPECT_NE(nv::manifest_key("/no/nvcc", cmd, variables), base);
  }
  {
    // Set to nothing is not unset.
    const ScopedVariable v("NVCC_APPEND_FLAGS", "");
    EXPECT_NE(nv::manifest_key("/no/nvcc", cmd, variables), base);
  }
  nv::Command other = cmd;
  other.input = "/src/other.cu";
  EXPECT_NE(nv::manifest_key("/no/nvcc", other, variables), base);
  nv::Command ptx = cmd;
  ptx.mode = nv::Mode::ptx;
  EXPECT_NE(nv::manifest_key("/no/nvcc", ptx, variables), base);
  // Relocated: its own domain, and one key for two checkouts.
  const auto one = checkout("one");
  const auto two = checkout("two");
  const nv::Command in_one = object_of("/ck/one/src/k.cu");
  const nv::Command in_two = object_of("/ck/two/src/k.cu");
  EXPECT_NE(nv::manifest_key("/no/nvcc", in_one, variables, &one), nv::manifest_key("/no/nvcc", in_one, variables));
  EXPECT_EQ(nv::manifest_key("/no/nvcc", in_one, variables, &one),
            nv::manifest_key("/no/nvcc", in_two, variables, &two));
}
