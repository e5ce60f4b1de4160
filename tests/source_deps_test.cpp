// Every file the compiler can read is in the key. Each test changes what the
// compiler would read (a header beside the source, a nested header, a
// pre-include, a symbolic link's target, a shadowing header created later,
// the program name) and asserts that the cached result equals a fresh
// compile of the same program now (cache off), so a stale hit fails the
// test whatever the implementation. Needs NVRTC; skips without it.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "testing/raw_nvrtc.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using testing::write_all;

bool have_nvrtc(std::string* why) {
  auto info = compiler_info();
  if (!info.ok()) *why = info.status().message();
  return info.ok() && !info->nvrtc_path.empty();
}

// Runs the test body with the working directory changed, restoring it after.
class CwdGuard {
 public:
  explicit CwdGuard(const std::string& dir) : m_old(fs::current_path()) { fs::current_path(dir); }
  ~CwdGuard() { fs::current_path(m_old); }

 private:
  fs::path m_old;
};

class SourceDepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!have_nvrtc(&why)) GTEST_SKIP() << "no NVRTC: " << why;
    auto s = FileStore::open({.root = m_tmp.sub("cache")});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    m_store = std::move(*s);
    m_opts.cache = m_store.get();
    m_opts.state_dir = m_tmp.sub("cache");
    fs::create_directories(m_tmp.sub("src"));
    fs::create_directories(m_tmp.sub("inc"));
  }

  // A kernel that stores V, the value its headers define, so the PTX tells
  // which header version the compiler read.
  Program program(const std::string& includes, const std::string& name) const {
    Program p;
    p.code = includes + "\n__global__ void k(int* x) { x[0] = V; }\n";
    p.options = {"-arch=compute_80"};
    p.name = name;
    return p;
  }

  // Three -I directories each holding v.h, in search order: locked (2222),
  // unread (3333) and good (1111); a program including <v.h> through them.
  Program three_places() {
    for (const char* d : {"locked", "unread", "good"}) fs::create_directories(m_tmp.sub(d));
    write_all(m_tmp.sub("locked/v.h"), "#define V 2222\n");
    write_all(m_tmp.sub("unread/v.h"), "#define V 3333\n");
    write_all(m_tmp.sub("good/v.h"), "#define V 1111\n");
    Program p = program("#include <v.h>", m_tmp.sub("src/k.cu"));
    for (const char* d : {"locked", "unread", "good"}) p.options.push_back("-I" + m_tmp.sub(d));
    return p;
  }

  // Compiles through the cache and without it; asserts equal PTX. Returns
  // whether the cached route hit.
  bool compile_matches_fresh(const Program& p) {
    auto cached = compile(p, TargetType::ptx, m_opts);
    auto fresh = compile(p, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_opts.state_dir});
    EXPECT_TRUE(cached.ok()) << cached.status().to_string();
    EXPECT_TRUE(fresh.ok()) << fresh.status().to_string();
    if (!cached.ok() || !fresh.ok()) return false;
    EXPECT_EQ(cached->code.str(), fresh->code.str()) << "a cached result differs from a fresh compile (stale hit)";
    return cached->from_cache;
  }

  testing::TempDir m_tmp;
  std::unique_ptr<FileStore> m_store;
  CompileOptions m_opts;
};

TEST_F(SourceDepsTest, QuotedHeaderBesideTheSourceEditIsSeen) {
  write_all(m_tmp.sub("src/val.h"), "#define V 1\n");
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p)) << "unchanged headers must hit";
  write_all(m_tmp.sub("src/val.h"), "#define V 2\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "edited header served from the cache";
}

TEST_F(SourceDepsTest, IncludesSpelledWithCommentsDigraphsAndSplicesAreSeen) {
  // Each spelling the preprocessor accepts for one #include: comments
  // before, inside and after the '#', the '%:' digraph (also split by a
  // splice), a line splice, a block comment spanning lines. Each header
  // edit must be a miss.
  const std::vector<std::pair<std::string, std::string>> spellings = {
      {"comment_before", "/**/#include \"val_a.h\""},
      {"comment_inside", "#/**/include \"val_b.h\""},
      {"digraph", "%:include \"val_c.h\""},
      {"splice", "#inc\\\nlude \"val_d.h\""},
      {"multiline_comment", "/* a comment\n   over lines */ #include \"val_e.h\""},
      {"line_comment_after", "#include \"val_f.h\" // trailing /* not a comment start"},
      // No '#' anywhere, and the digraph split by a splice: the scan must
      // not be skipped as if there were no directive.
      {"spliced_digraph", "%\\\n:include \"val_g.h\""},
  };
  char which = 'a';
  for (const auto& [label, include] : spellings) {
    const std::string header = std::string("src/val_") + which++ + ".h";
    write_all(m_tmp.sub(header), "#define V 1\n");
    const Program p = program(include, m_tmp.sub("src/" + label + ".cu"));
    EXPECT_FALSE(compile_matches_fresh(p)) << label;
    EXPECT_TRUE(compile_matches_fresh(p)) << label << ": unchanged headers must hit";
    write_all(m_tmp.sub(header), "#define V 2\n");
    EXPECT_FALSE(compile_matches_fresh(p)) << label << ": an edited header was served from the cache";
  }
}

TEST_F(SourceDepsTest, IncludeLookalikesInsideLiteralsAndCommentsAreNotIncludes) {
  // Text that only looks like an include (in a string, a raw string, a
  // comment, after a digit separator) neither breaks the scan nor stops
  // the real include below it from being seen. Nor does text a skipped
  // group reads otherwise: there __has_include("a\" /* ") is a string
  // holding "/*", not a header name followed by a comment.
  const std::pair<std::string, std::string> cases[] = {
      {"lookalikes",
       "__device__ int lookalikes() {\n"
       "  const char* s = \"/* not a comment\";\n"
       "  const char* r = R\"x(\n#include \"absent_raw.h\"\n)x\";\n"
       "  // #include \"absent_comment.h\"\n"
       "  const int n = 1'000'000; const char q = '\\'';\n"
       "  return s[0] + r[0] + n + q;\n"
       "}\n"
       "#include \"real.h\"\n"},
      {"skipped",
       "#if 0\n__has_include(\"a\\\" /* \")\n#endif\n#include \"real.h\" // */\n"
       "__device__ int skipped() { return V; }\n"},
  };
  for (const auto& [name, code] : cases) {
    write_all(m_tmp.sub("src/real.h"), "#define V 1\n");
    const Program p = program(code, m_tmp.sub("src/" + name + ".cu"));
    EXPECT_FALSE(compile_matches_fresh(p)) << name;
    EXPECT_TRUE(compile_matches_fresh(p)) << name;
    write_all(m_tmp.sub("src/real.h"), "#define V 2\n");
    EXPECT_FALSE(compile_matches_fresh(p)) << name << ": the include after the lookalikes was missed";
  }
}

TEST_F(SourceDepsTest, QuotedHeaderThroughTheWorkingDirectory) {
  // A program name without a directory: NVRTC looks in the working directory.
  write_all(m_tmp.sub("src/val.h"), "#define V 3\n");
  CwdGuard cwd(m_tmp.sub("src"));
  const Program p = program("#include \"val.h\"", "k.cu");
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  write_all(m_tmp.sub("src/val.h"), "#define V 4\n");
  EXPECT_FALSE(compile_matches_fresh(p));
  // The same text in another project with another val.h is another key.
  fs::create_directories(m_tmp.sub("other"));
  write_all(m_tmp.sub("other/val.h"), "#define V 5\n");
  CwdGuard other(m_tmp.sub("other"));
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, NestedHeaderEditIsSeen) {
  write_all(m_tmp.sub("src/val.h"), "#include \"sub/deep.h\"\n");
  fs::create_directories(m_tmp.sub("src/sub"));
  write_all(m_tmp.sub("src/sub/deep.h"), "#define V 6\n");
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  write_all(m_tmp.sub("src/sub/deep.h"), "#define V 7\n");
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, PreIncludeOutsideTheIncludePathEditIsSeen) {
  fs::create_directories(m_tmp.sub("elsewhere"));
  write_all(m_tmp.sub("elsewhere/pre.h"), "#define V 8\n");
  write_all(m_tmp.sub("inc/unused.h"), "\n");
  Program p = program("", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  p.options.push_back("-include");
  p.options.push_back(m_tmp.sub("elsewhere/pre.h"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  write_all(m_tmp.sub("elsewhere/pre.h"), "#define V 9\n");
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, SymlinkedHeaderInAnIncludeDirectoryFollowsItsTarget) {
  fs::create_directories(m_tmp.sub("real"));
  write_all(m_tmp.sub("real/val.h"), "#define V 10\n");
  fs::create_symlink(m_tmp.sub("real/val.h"), m_tmp.sub("inc/val.h"));
  Program p = program("#include <val.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  // Same size, so only the target's content (or its stat) tells them apart.
  write_all(m_tmp.sub("real/val.h"), "#define V 11\n");
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, SymlinkedIncludeDirectoryFollowsItsTarget) {
  fs::create_directories(m_tmp.sub("real/deep"));
  write_all(m_tmp.sub("real/deep/val.h"), "#define V 12\n");
  fs::create_directory_symlink(m_tmp.sub("real/deep"), m_tmp.sub("inc/deep"));
  Program p = program("#include <deep/val.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  EXPECT_FALSE(compile_matches_fresh(p));
  write_all(m_tmp.sub("real/deep/val.h"), "#define V 13\n");
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, HeaderCreatedEarlierInTheSearchPathShadowsTheOldOne) {
  write_all(m_tmp.sub("inc/val.h"), "#define V 14\n");
  Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  // The source's directory comes before -I: a val.h created there wins.
  write_all(m_tmp.sub("src/val.h"), "#define V 15\n");
  EXPECT_FALSE(compile_matches_fresh(p));
  // And removing it again brings back the first result, from the cache.
  fs::remove(m_tmp.sub("src/val.h"));
  EXPECT_TRUE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, HeaderInASecondIncludeDirectoryShadowedByTheFirst) {
  fs::create_directories(m_tmp.sub("inc2"));
  write_all(m_tmp.sub("inc2/val.h"), "#define V 16\n");
  Program p = program("#include <val.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  p.options.push_back("-I" + m_tmp.sub("inc2"));
  EXPECT_FALSE(compile_matches_fresh(p));
  write_all(m_tmp.sub("inc/val.h"), "#define V 17\n");
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, ProgramNameIsInTheKey) {
  // __FILE__ is the program name: two names, two outputs, two keys.
  Program a;
  a.code = "__global__ void k(char* x) { const char* f = __FILE__; for (int i = 0; f[i]; ++i) x[i] = f[i]; }\n";
  a.options = {"-arch=compute_80"};
  a.name = "kernel-a";
  Program b = a;
  b.name = "kernel-b";
  EXPECT_FALSE(compile_matches_fresh(a));
  EXPECT_FALSE(compile_matches_fresh(b)) << "a program of another name was served another's output";
  auto ka = program_key(a, TargetType::ptx, m_opts);
  auto kb = program_key(b, TargetType::ptx, m_opts);
  ASSERT_TRUE(ka.ok() && kb.ok());
  EXPECT_NE(*ka, *kb);
}

TEST_F(SourceDepsTest, ProgramKeyEqualsTheKeyCompileUses) {
  write_all(m_tmp.sub("src/val.h"), "#define V 18\n");
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  auto r = compile(p, TargetType::ptx, m_opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto k = program_key(p, TargetType::ptx, m_opts);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, r->key);
  write_all(m_tmp.sub("src/val.h"), "#define V 19\n");
  EXPECT_NE(*program_key(p, TargetType::ptx, m_opts), r->key);
}

// A computed include outside every -I directory can name any file: no key
// can say what the compiler read. The program is compiled all the same,
// uncached, with the cache on and off, to what NVRTC itself makes of it.
TEST_F(SourceDepsTest, ComputedIncludeOutsideTheIncludePathCompilesUncached) {
  write_all(m_tmp.sub("src/val.h"), "#define V 20\n");
  const Program p = program("#define HEADER \"val.h\"\n#include HEADER", m_tmp.sub("src/k.cu"));
  const auto raw = testing::raw_nvrtc_ptx(p.code, p.name, p.options);
  ASSERT_TRUE(raw && raw->ok) << (raw ? raw->log : "no NVRTC");
  const auto before = compile_stats().uncacheable;
  for (Store* cache : {static_cast<Store*>(m_store.get()), static_cast<Store*>(nullptr)}) {
    auto r = compile(p, TargetType::ptx, CompileOptions{.cache = cache, .state_dir = m_opts.state_dir});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->code.str(), raw->ptx) << "not what NVRTC compiles";
    EXPECT_FALSE(r->from_cache);
    EXPECT_NE(r->uncacheable.find("-I"), std::string::npos) << r->uncacheable;
    EXPECT_EQ(r->key, Key{});
  }
  EXPECT_EQ(compile_stats().uncacheable, before + 2);
  EXPECT_EQ(m_store->stats().entries, 0u);
  // No key can be made for it either: make_program_cache_key says why.
  auto k = program_key(p, TargetType::ptx, m_opts);
  EXPECT_EQ(k.status().code(), Code::invalid_argument);
}

TEST_F(SourceDepsTest, ComputedIncludeInsideAnIncludeDirectoryIsCoveredByItsFingerprint) {
  write_all(m_tmp.sub("inc/val.h"), "#define V 21\n");
  write_all(m_tmp.sub("inc/pick.h"), "#define HEADER <val.h>\n#include HEADER\n");
  Program p = program("#include <pick.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  EXPECT_FALSE(compile_matches_fresh(p));
  write_all(m_tmp.sub("inc/val.h"), "#define V 22\n");
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, VanishedHeaderIsAMissAndACompileErrorNeverAStaleHit) {
  write_all(m_tmp.sub("src/val.h"), "#define V 23\n");
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  fs::remove(m_tmp.sub("src/val.h"));
  auto r = compile(p, TargetType::ptx, m_opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::compile_error);
}

TEST_F(SourceDepsTest, AFifoWhereAHeaderCouldBeDoesNotHang) {
  ASSERT_EQ(::mkfifo(m_tmp.sub("src/val.h").c_str(), 0600), 0);
  write_all(m_tmp.sub("inc/val.h"), "#define V 24\n");
  Program p = program("#if 0\n#include \"val.h\"\n#endif\n#include <val.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  EXPECT_FALSE(compile_matches_fresh(p));
}

TEST_F(SourceDepsTest, ScanMemoNeverServesAnEditedHeader) {
  // Headers unchanged for two seconds are remembered by their stat (the scan
  // memo); an edit of the same size must still be seen.
  write_all(m_tmp.sub("src/val.h"), "#define V 25\n");
  write_all(m_tmp.sub("src/other.h"), "#define W 1\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const Program p = program("#include \"val.h\"\n#include \"other.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(fs::exists(m_tmp.sub("cache/deps-memo.json")));
  EXPECT_TRUE(compile_matches_fresh(p));
  write_all(m_tmp.sub("src/val.h"), "#define V 26\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "the scan memo served an edited header";
}

// The manifest (what a scan consulted, re-checked by stat on the next
// lookup) is written only when everything it records has been unchanged for
// two seconds, so these scenarios are set up first, left to settle once, and
// then each is compiled (a manifest is written), hit (the manifest is
// used), changed, and compiled again: the result must equal a fresh compile.
TEST_F(SourceDepsTest, TheManifestNeverServesAStaleHit) {
  struct Scenario {
    std::string label;
    Program program;
    std::function<void()> change;
  };
  std::vector<Scenario> scenarios;
  const auto dir = [&](const std::string& s, const std::string& rel) { return m_tmp.sub(s + "/" + rel); };

  // 1. A header beside the source, edited to the same size.
  fs::create_directories(dir("m1", "src"));
  write_all(dir("m1", "src/val.h"), "#define V 31\n");
  scenarios.push_back({"edited header", program("#include \"val.h\"", dir("m1", "src/k.cu")),
                       [&] { write_all(dir("m1", "src/val.h"), "#define V 32\n"); }});
  // 2. A header created earlier in the search path shadows the one used.
  fs::create_directories(dir("m2", "src"));
  fs::create_directories(dir("m2", "inc"));
  write_all(dir("m2", "inc/val.h"), "#define V 33\n");
  Program p2 = program("#include \"val.h\"", dir("m2", "src/k.cu"));
  p2.options.push_back("-I" + dir("m2", "inc"));
  scenarios.push_back({"shadowing header", p2, [&] { write_all(dir("m2", "src/val.h"), "#define V 34\n"); }});
  // 3. A shadowing header in a directory that did not exist.
  fs::create_directories(dir("m3", "src"));
  fs::create_directories(dir("m3", "inc/sub"));
  write_all(dir("m3", "inc/sub/val.h"), "#define V 35\n");
  Program p3 = program("#include \"sub/val.h\"", dir("m3", "src/k.cu"));
  p3.options.push_back("-I" + dir("m3", "inc"));
  scenarios.push_back({"shadowing header in a new directory", p3, [&] {
                         fs::create_directories(dir("m3", "src/sub"));
                         write_all(dir("m3", "src/sub/val.h"), "#define V 36\n");
                       }});
  // 4. A symbolic link re-pointed at another header of the same size.
  fs::create_directories(dir("m4", "src"));
  fs::create_directories(dir("m4", "real"));
  write_all(dir("m4", "real/a.h"), "#define V 37\n");
  write_all(dir("m4", "real/b.h"), "#define V 38\n");
  fs::create_symlink(dir("m4", "real/a.h"), dir("m4", "src/val.h"));
  scenarios.push_back({"re-pointed link", program("#include \"val.h\"", dir("m4", "src/k.cu")), [&] {
                         fs::remove(dir("m4", "src/val.h"));
                         fs::create_symlink(dir("m4", "real/b.h"), dir("m4", "src/val.h"));
                       }});
  // 5. A computed include fingerprints its -I directory whole: a file added
  //    deep inside it changes the key.
  fs::create_directories(dir("m5", "src"));
  fs::create_directories(dir("m5", "inc/deep/er"));
  write_all(dir("m5", "inc/val.h"), "#define V 39\n");
  write_all(dir("m5", "inc/pick.h"), "#define HEADER <val.h>\n#include HEADER\n");
  write_all(dir("m5", "inc/deep/er/other.h"), "\n");
  Program p5 = program("#include <pick.h>", dir("m5", "src/k.cu"));
  p5.options.push_back("-I" + dir("m5", "inc"));
  scenarios.push_back(
      {"file added in a fingerprinted tree", p5, [&] { write_all(dir("m5", "inc/deep/er/new.h"), "\n"); }});
  // 6. A header through the working directory, the same program text run
  //    from another directory with another val.h.
  fs::create_directories(dir("m6", "a"));
  fs::create_directories(dir("m6", "b"));
  write_all(dir("m6", "a/val.h"), "#define V 40\n");
  write_all(dir("m6", "b/val.h"), "#define V 41\n");

  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const auto manifests = [&] {
    std::size_t n = 0;
    if (fs::exists(m_tmp.sub("cache/deps"))) {
      for ([[maybe_unused]] const auto& e : fs::directory_iterator(m_tmp.sub("cache/deps"))) ++n;
    }
    return n;
  };
  for (auto& sc : scenarios) {
    const std::size_t before = manifests();
    EXPECT_FALSE(compile_matches_fresh(sc.program)) << sc.label;
    EXPECT_GT(manifests(), before) << sc.label << ": no manifest written";
    EXPECT_TRUE(compile_matches_fresh(sc.program)) << sc.label << ": unchanged headers must hit";
    sc.change();
    EXPECT_FALSE(compile_matches_fresh(sc.program)) << sc.label << ": the manifest served a stale hit";
  }
  {
    CwdGuard in_a(dir("m6", "a"));
    const Program p = program("#include \"val.h\"", "k.cu");
    EXPECT_FALSE(compile_matches_fresh(p));
    EXPECT_TRUE(compile_matches_fresh(p));
    CwdGuard in_b(dir("m6", "b"));
    EXPECT_FALSE(compile_matches_fresh(p)) << "a manifest made in another directory was used";
  }
  // Damaged manifests are ignored: the scan runs and the answer is right.
  ASSERT_GT(manifests(), 0u);
  for (const auto& e : fs::directory_iterator(m_tmp.sub("cache/deps"))) {
    std::string bytes = testing::read_all(e.path().string());
    bytes[bytes.size() / 2] ^= 0x5a;
    write_all(e.path().string(), bytes);
  }
  // (Hit or miss depends on timing: a file changed less than two seconds
  // before a scan is fingerprinted by content too. The answer must be right.)
  for (auto& sc : scenarios) compile_matches_fresh(sc.program);
}

TEST_F(SourceDepsTest, ADanglingLinkOnTheSearchPathIsNeverTrustedToStayEmpty) {
  // A dangling link can come to lead somewhere without any directory the
  // manifest records changing: such a program is scanned on every lookup.
  fs::create_directories(m_tmp.sub("d/src"));
  fs::create_directories(m_tmp.sub("d/base/sub"));
  fs::create_directories(m_tmp.sub("d/elsewhere"));
  write_all(m_tmp.sub("d/base/v.h"), "#define V 51\n");
  write_all(m_tmp.sub("d/base/sub/w.h"), "#define W 1\n");
  fs::create_directory_symlink(m_tmp.sub("d/elsewhere/real"), m_tmp.sub("d/inc"));     // dangling
  fs::create_directory_symlink(m_tmp.sub("d/elsewhere/sub"), m_tmp.sub("d/src/sub"));  // dangling
  Program p = program("#include <v.h>\n#include \"sub/w.h\"", m_tmp.sub("d/src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("d/inc"));
  p.options.push_back("-I" + m_tmp.sub("d/base"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  fs::create_directories(m_tmp.sub("d/elsewhere/real"));
  write_all(m_tmp.sub("d/elsewhere/real/v.h"), "#define V 52\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "a header behind a link that was dangling was missed";
  fs::create_directories(m_tmp.sub("d/elsewhere/sub"));
  write_all(m_tmp.sub("d/elsewhere/sub/w.h"), "#define W 2\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "a quoted header behind a link that was dangling was missed";
}

TEST_F(SourceDepsTest, IncludeDirectoriesAreComparedByWhereTheyLead) {
  // "i1/sub/../y" with i1/sub a link to far/x is far/y, not inside i1: it
  // must be fingerprinted on its own.
  fs::create_directories(m_tmp.sub("r/far/x"));
  fs::create_directories(m_tmp.sub("r/far/y"));
  fs::create_directories(m_tmp.sub("r/i1"));
  write_all(m_tmp.sub("r/far/y/v.h"), "#define V 53\n");
  fs::create_directory_symlink(m_tmp.sub("r/far/x"), m_tmp.sub("r/i1/sub"));
  write_all(m_tmp.sub("r/i1/a.h"), "#define H <v.h>\n#include H\n");
  Program p = program("#include <a.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("r/i1"));
  p.options.push_back("-I" + m_tmp.sub("r/i1/sub/../y"));
  EXPECT_FALSE(compile_matches_fresh(p));
  write_all(m_tmp.sub("r/far/y/v.h"), "#define V 54\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "an include directory reached through a link was not fingerprinted";
  // A computed include in a file reached the same way is outside every -I
  // directory, and refused.
  fs::create_directories(m_tmp.sub("r/far/z"));
  write_all(m_tmp.sub("r/far/z/b.h"), "#define H \"w.h\"\n#include H\n");
  write_all(m_tmp.sub("r/far/z/w.h"), "#define V 55\n");
  Program q = program("#include \"" + m_tmp.sub("r/i1/sub/../z/b.h") + "\"", m_tmp.sub("src/q.cu"));
  q.options.push_back("-I" + m_tmp.sub("r/i1"));
  auto uncached = compile(q, TargetType::ptx, m_opts);
  ASSERT_TRUE(uncached.ok()) << uncached.status().to_string();
  EXPECT_FALSE(uncached->uncacheable.empty()) << "a computed include outside every -I directory was keyed";
  // And "./a.h" is inside "-I .".
  CwdGuard cwd(m_tmp.sub("r/i1"));
  Program dot = program("#include \"a.h\"", "k.cu");
  dot.options.push_back("-I.");
  dot.options.push_back("-I" + m_tmp.sub("r/far/y"));
  EXPECT_TRUE(compile(dot, TargetType::ptx, m_opts).ok());
}

TEST_F(SourceDepsTest, IncludesNamedThroughTrigraphsAndHasIncludeAliasesAreSeen) {
  write_all(m_tmp.sub("src/v.h"), "#define V 56\n");
  Program p = program("?\?=include \"v.h\"", m_tmp.sub("src/k.cu"));  // the trigraph for '#'
  p.options.push_back("-std=c++14");                                  // NVRTC replaces trigraphs here
  EXPECT_FALSE(compile_matches_fresh(p));
  write_all(m_tmp.sub("src/v.h"), "#define V 57\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "an include spelled with a trigraph was missed";
  // __has_include through a macro cannot be followed outside -I: compiled
  // uncached.
  const Program alias =
      program("#define HI __has_include\n#if HI(\"v.h\")\n#endif\n#define V 1", m_tmp.sub("src/alias.cu"));
  auto r = compile(alias, TargetType::ptx, m_opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->uncacheable.empty());
  EXPECT_EQ(m_store->stats().entries, 2u) << "only the two keyed compiles are stored";
}

TEST_F(SourceDepsTest, AComputedIncludeOfAMacroNamingAPathOutsideTheIncludePathIsSeen) {
  // The -I fingerprint covers what a computed include can reach inside -I;
  // a macro whose body is a header name is also looked for as an include,
  // so a path leading out of -I (relative or absolute) is seen.
  fs::create_directories(m_tmp.sub("outside"));
  write_all(m_tmp.sub("outside/v.h"), "#define V 61\n");
  write_all(m_tmp.sub("outside/w.h"), "#define W 1\n");
  write_all(m_tmp.sub("inc/a.h"),
            "#define H \"../outside/v.h\"\n#include H\n#define HW <" + m_tmp.sub("outside/w.h") + ">\n#include HW\n");
  Program p = program("#include <a.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  EXPECT_FALSE(compile_matches_fresh(p));
  write_all(m_tmp.sub("outside/v.h"), "#define V 62\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "a header named by a macro, outside -I, was missed";
  write_all(m_tmp.sub("outside/w.h"), "#define W 2\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "a header named by a macro with an absolute path was missed";
}

TEST_F(SourceDepsTest, APtxasOptionsFileWithoutADigestCompilesUncached) {
  write_all(m_tmp.sub("src/opts.txt"), "-O0\n");
  Program p = program("#define V 58", m_tmp.sub("src/k.cu"));
  p.options = {"-arch=sm_80", "-Xptxas=--options-file=" + m_tmp.sub("src/opts.txt")};
  auto r = compile(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->uncacheable.find("options from a file"), std::string::npos) << r->uncacheable;
  EXPECT_EQ(m_store->stats().entries, 0u);
  EXPECT_EQ(program_key(p, TargetType::cubin, m_opts).status().code(), Code::invalid_argument);
}

TEST_F(SourceDepsTest, DebugInformationKeysTheWorkingDirectory) {
  // -G and -lineinfo write the working directory into the object code.
  fs::create_directories(m_tmp.sub("cw1"));
  fs::create_directories(m_tmp.sub("cw2"));
  Program p = program("#define V 59", "k.cu");
  p.options.push_back("-lineinfo");
  std::string k1, k2;
  {
    CwdGuard in1(m_tmp.sub("cw1"));
    EXPECT_FALSE(compile_matches_fresh(p));
    k1 = program_key(p, TargetType::ptx, m_opts)->hex();
  }
  {
    CwdGuard in2(m_tmp.sub("cw2"));
    EXPECT_FALSE(compile_matches_fresh(p)) << "debug information of another directory was served";
    k2 = program_key(p, TargetType::ptx, m_opts)->hex();
  }
  EXPECT_NE(k1, k2);
  // Without debug information the directory is not in the key.
  Program plain = program("#define V 59", "k.cu");
  std::string p1, p2;
  {
    CwdGuard in1(m_tmp.sub("cw1"));
    p1 = program_key(plain, TargetType::ptx, m_opts)->hex();
  }
  {
    CwdGuard in2(m_tmp.sub("cw2"));
    p2 = program_key(plain, TargetType::ptx, m_opts)->hex();
  }
  EXPECT_EQ(p1, p2);
}

TEST_F(SourceDepsTest, FingerprintedTreesTolerateDanglingLinksAndMissingDirectories) {
  write_all(m_tmp.sub("inc/m.h"), "#define V 60\n");
  write_all(m_tmp.sub("inc/c.h"), "#define H <m.h>\n#include H\n");
  fs::create_symlink(m_tmp.sub("nowhere"), m_tmp.sub("inc/zz-dangling"));
  Program p = program("#include <c.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  p.options.push_back("-I" + m_tmp.sub("not-there"));  // NVRTC skips it
  // Settled, so the tree's fingerprint is by stat alone and the second
  // lookup hits however slowly it runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  fs::create_directories(m_tmp.sub("not-there"));
  write_all(m_tmp.sub("not-there/extra.h"), "\n");
  EXPECT_FALSE(compile_matches_fresh(p)) << "a directory created on the include path was not seen";
}

// A file's device number, as stat gives it.
std::uint64_t device_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_dev;
}

std::string this_boot() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(in, s);
  return s;
}

// The scan memo vouches for a header's digest by the identity it kept,
// which is not the device number as stat gives it (for a file system whose
// times come from an image it is the mount's unique ID: the next image
// mounted at that place may be given the same device number, with the
// same inodes and times), and only in this boot. A digest planted under
// the kept identity is believed (which shows the memo is read); planted
// under the device number, or under another boot, it is not.
TEST_F(SourceDepsTest, AKeptDigestHoldsOnlyForItsMountAndItsBoot) {
  write_all(m_tmp.sub("src/val.h"), "#define V 51\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  const std::string memo_file = m_tmp.sub("cache/deps-memo.json");
  const auto memo = nlohmann::json::parse(testing::read_all(memo_file));
  ASSERT_EQ(memo.value("epoch", ""), "boot " + this_boot());
  const std::string key = fs::path(m_tmp.sub("src/val.h")).lexically_normal().string();
  ASSERT_TRUE(memo["files"].contains(key)) << memo.dump();
  const std::uint64_t kept = memo["files"][key]["stamp"][0].get<std::uint64_t>();
  const std::uint64_t device = device_of(m_tmp.sub("src/val.h"));
  EXPECT_NE(kept, device) << "the memo keeps the device number as stat gives it";
  struct Case {
    const char* label;
    std::uint64_t dev;
    std::string epoch;
    bool believed;
  };
  const std::vector<Case> cases = {Case{"the kept identity", kept, "boot " + this_boot(), true},
                                   Case{"the device number", device, "boot " + this_boot(), false},
                                   Case{"another boot", kept, "boot 00000000-0000-0000-0000-000000000000", false}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    auto doc = memo;
    // A digest of its own per case: a believed one is a miss (a result
    // stored under one planted digest would serve the next).
    doc["files"][key]["sha256"] = digest_hex(sha256("#define V " + std::to_string(60 + i) + "\n"));
    doc["files"][key]["stamp"][0] = c.dev;
    doc["epoch"] = c.epoch;
    const std::string state = m_tmp.sub(std::string("state-") + std::to_string(c.dev) + c.epoch.substr(5, 4));
    fs::create_directories(state);
    write_all(state + "/deps-memo.json", doc.dump());
    CompileOptions o = m_opts;
    o.state_dir = state;
    auto r = compile(p, TargetType::ptx, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // Believed, the planted digest makes another key: a miss. Not
    // believed, the header is read again: the stored result's key, a hit.
    EXPECT_EQ(r->from_cache, !c.believed)
        << "a digest kept under " << c.label << (c.believed ? " was not used" : " was used");
  }
}

// A manifest of the scan: its parts, as deps_manifest.cpp writes them.
struct ManifestParts {
  std::string epoch, digest;
  std::vector<std::size_t> dev_offsets;  // of each identity's device field
  std::size_t digest_offset = 0;
};
std::optional<ManifestParts> parse_manifest(const std::string& m) {
  ManifestParts out;
  std::size_t at = 8;
  auto u32 = [&](std::uint32_t& v) {
    if (at + 4 > m.size()) return false;
    std::memcpy(&v, m.data() + at, 4);
    at += 4;
    return true;
  };
  auto str = [&](std::string& v) {
    std::uint32_t n = 0;
    if (!u32(n) || at + n > m.size()) return false;
    v = m.substr(at, n);
    at += n;
    return true;
  };
  std::uint32_t files = 0, dirs = 0;
  if (!str(out.epoch)) return std::nullopt;
  out.digest_offset = at + 4;
  if (!str(out.digest) || !u32(files)) return std::nullopt;
  for (std::uint32_t i = 0; i < files; ++i) {
    std::string a, b, c;
    if (!str(a) || !str(b) || !str(c)) return std::nullopt;
  }
  if (!u32(dirs)) return std::nullopt;
  for (std::uint32_t d = 0; d < dirs; ++d) {
    std::string dir;
    std::uint32_t n = 0;
    if (!str(dir) || !u32(n)) return std::nullopt;
    for (std::uint32_t i = 0; i < n; ++i) {
      std::string name;
      if (!str(name) || at + 1 + 40 + 4 > m.size()) return std::nullopt;
      if (m[at] != 0) out.dev_offsets.push_back(at + 1);
      at += 1 + 40 + 4;
    }
  }
  if (at + 8 != m.size()) return std::nullopt;
  return out;
}

std::string resealed(std::string m) {
  m.resize(m.size() - 8);
  const std::uint64_t sum = xxh3_64(m);
  m.append(reinterpret_cast<const char*>(&sum), 8);
  return m;
}

// The manifest vouches for the scan's answer by identities that are not
// the device numbers as stat gives them, taken in this boot. A manifest whose answer is planted (another
// digest) is believed under its own identities, which shows it is used;
// with the device numbers, or another boot, in their place, it is not: the
// scan runs and finds the true answer.
TEST_F(SourceDepsTest, AManifestHoldsOnlyForItsMountsAndItsBoot) {
  write_all(m_tmp.sub("src/val.h"), "#define V 53\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  EXPECT_TRUE(compile_matches_fresh(p));
  std::vector<fs::path> written;
  for (const auto& e : fs::directory_iterator(m_tmp.sub("cache/deps"))) written.push_back(e.path());
  ASSERT_EQ(written.size(), 1u);
  const std::string original = testing::read_all(written[0].string());
  const auto parts = parse_manifest(original);
  ASSERT_TRUE(parts.has_value());
  ASSERT_EQ(parts->epoch, "boot " + this_boot());
  ASSERT_FALSE(parts->dev_offsets.empty());
  const std::uint64_t device = device_of(m_tmp.sub("src/val.h"));
  std::uint64_t first = 0;  // every record here is of the test's own directory
  std::memcpy(&first, original.data() + parts->dev_offsets[0], 8);
  EXPECT_NE(first, device) << "the manifest keeps the device number as stat gives it";
  struct Case {
    const char* label;
    std::function<void(std::string&)> change;
    bool believed;
  };
  const std::vector<Case> cases = {
      {"its own identities", [](std::string&) {}, true},
      {"device numbers",
       [&](std::string& m) {
         // Every identity with its mount's device number, as stat gives it.
         for (std::size_t off : parts->dev_offsets) {
           std::uint64_t v = 0;
           std::memcpy(&v, m.data() + off, 8);
           const std::uint64_t as_stat = v == first ? device : v & ~(std::uint64_t{1} << 63);
           std::memcpy(m.data() + off, &as_stat, 8);
         }
       },
       false},
      {"another boot",
       [&](std::string& m) {
         const std::size_t at = m.find(parts->epoch);
         m[at + parts->epoch.size() - 1] = m[at + parts->epoch.size() - 1] == '0' ? '1' : '0';
       },
       false},
  };
  // Each case plants an answer of its own: a believed one is a miss (a
  // result stored under one planted answer would serve the next).
  std::string spare = "0123456789abcdef";
  spare.erase(spare.find(original[parts->digest_offset]), 1);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    auto m = original;
    m[parts->digest_offset] = spare[i];
    c.change(m);
    write_all(written[0].string(), resealed(m));
    auto r = compile(p, TargetType::ptx, m_opts);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->from_cache, !c.believed)
        << "a manifest under " << c.label << (c.believed ? " was not used" : " was used");
  }
}

// The case the identities name mounts for, as it happens: two file
// system images built alike, differing in one byte of one header, mounted
// in turn at one place through one loop device, so that the header has
// the same device number, inode, size and times under both. The second
// image's compile must be its own (the manifest and the memo of the first
// must not vouch for it). In a child, in a mount namespace of its own;
// skips, saying why, where loop devices, mounting or mke2fs are not at hand.
TEST_F(SourceDepsTest, AnImageMountedWhereAnotherWasIsNeverServedTheOthersResult) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: loop devices and mounts";
  if (std::system("command -v mke2fs >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mke2fs (e2fsprogs)";
  fs::create_directories(m_tmp.sub("tree/inc"));
  write_all(m_tmp.sub("tree/inc/v.h"), "#define V 71\n");
  const std::string a = m_tmp.sub("a.img"), b = m_tmp.sub("b.img"), mnt = m_tmp.sub("mnt");
  fs::create_directories(mnt);
  const std::string mk = "mke2fs -q -F -t ext2 -d '" + m_tmp.sub("tree") + "' '" + a + "' 2M >/dev/null 2>&1";
  if (std::system(mk.c_str()) != 0) GTEST_SKIP() << "mke2fs could not make an image";
  std::string image = testing::read_all(a);
  const auto at = image.find("#define V 71");
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(image.find("#define V 71", at + 1), std::string::npos);
  image[at + 11] = '2';  // the same file system, but the header's byte
  write_all(b, image);
  Program p = program("#include <v.h>", m_tmp.sub("k.cu"));
  p.options.push_back("-I" + mnt + "/inc");
  // Settled (the images hold the times the tree had), so that the memo
  // and the manifest are written.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(120);
    auto say = [&](int code, const std::string& what) {
      [[maybe_unused]] const auto n = ::write(fds[1], what.data(), what.size());
      ::_exit(code);
    };
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      say(77, std::string("no mount namespace: ") + std::strerror(errno));
    }
    const int ctl = ::open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    const int n = ctl < 0 ? -1 : ::ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) say(77, std::string("no free loop device: ") + std::strerror(errno));
    const std::string loop = "/dev/loop" + std::to_string(n);
    int lfd = -1;
    auto attach = [&](const std::string& img) {
      lfd = ::open(loop.c_str(), O_RDWR | O_CLOEXEC);
      const int ifd = lfd < 0 ? -1 : ::open(img.c_str(), O_RDWR | O_CLOEXEC);
      // A loop device just cleared may still be busy for a moment.
      bool set = false;
      for (int i = 0; ifd >= 0 && i < 100 && !(set = ::ioctl(lfd, LOOP_SET_FD, ifd) == 0) && errno == EBUSY; ++i) {
        ::usleep(20000);
      }
      const bool ok = set && ::mount(loop.c_str(), mnt.c_str(), "ext2", MS_RDONLY, nullptr) == 0;
      if (ifd >= 0) ::close(ifd);
      return ok;
    };
    auto detach = [&] {
      for (int i = 0; i < 100 && ::umount(mnt.c_str()) != 0 && errno == EBUSY; ++i) ::usleep(20000);
      for (int i = 0; lfd >= 0 && i < 100 && ::ioctl(lfd, LOOP_CLR_FD) != 0; ++i) ::usleep(20000);
      if (lfd >= 0) ::close(lfd);
      lfd = -1;
    };
    if (!attach(a)) {
      detach();
      say(77, "cannot mount an image through " + loop + ": " + std::strerror(errno));
    }
    struct stat first {};
    ::stat((mnt + "/inc/v.h").c_str(), &first);
    auto cached = compile(p, TargetType::ptx, m_opts);
    auto again = compile(p, TargetType::ptx, m_opts);
    if (!cached.ok() || !again.ok() || !again->from_cache || !fs::exists(m_tmp.sub("cache/deps"))) {
      detach();
      say(2, "the first image's program was not stored and served");
    }
    detach();
    if (!attach(b)) {
      detach();
      say(77, "cannot mount the second image through " + loop + ": " + std::strerror(errno));
    }
    struct stat second {};
    ::stat((mnt + "/inc/v.h").c_str(), &second);
    if (second.st_dev != first.st_dev || second.st_ino != first.st_ino || second.st_size != first.st_size ||
        second.st_mtim.tv_nsec != first.st_mtim.tv_nsec || second.st_mtim.tv_sec != first.st_mtim.tv_sec ||
        second.st_ctim.tv_sec != first.st_ctim.tv_sec || second.st_ctim.tv_nsec != first.st_ctim.tv_nsec) {
      detach();
      say(77, "the two images' headers differ in their stat: the case does not arise here");
    }
    auto served = compile(p, TargetType::ptx, m_opts);
    auto fresh = compile(p, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_opts.state_dir});
    detach();
    if (!served.ok() || !fresh.ok()) say(2, "a compile of the second image failed");
    if (served->code.str() != fresh->code.str()) say(1, "the second image was served the first image's result");
    say(0, "");
  }
  ::close(fds[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit (signal " << WTERMSIG(status) << ")";
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << said;
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
}

// Where statx is refused (a seccomp filter of an older container runtime
// answers EPERM or another errno, an old kernel ENOSYS), the scan takes
// stat's answer: the compile and the hit are as anywhere else. The same
// filter refuses faccessat and faccessat2, which the scan must not rely on
// to tell whether a header can be read.
TEST_F(SourceDepsTest, AFilterThatRefusesStatxCostsNothing) {
  write_all(m_tmp.sub("src/val.h"), "#define V 81\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  for (const int refusal : {EPERM, ENOSYS, EACCES}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(120);
      // faccessat and faccessat2 too (older runtimes refuse the second):
      // whether a header can be read is never asked of them.
      struct sock_filter f[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_statx, 3, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_faccessat, 2, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_faccessat2, 1, 0),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(refusal) & SECCOMP_RET_DATA)),
      };
      struct sock_fprog prog = {static_cast<unsigned short>(sizeof f / sizeof f[0]), f};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        ::_exit(77);
      }
      // A state directory of its own: identities of stat's form.
      CompileOptions o = m_opts;
      o.state_dir = m_tmp.sub("state-" + std::to_string(refusal));
      auto first = compile(p, TargetType::ptx, o);
      auto second = compile(p, TargetType::ptx, o);
      auto fresh = compile(p, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = o.state_dir});
      const bool ok = first.ok() && second.ok() && fresh.ok() && second->from_cache &&
                      second->code.str() == fresh->code.str() && fs::exists(o.state_dir + "/deps-memo.json");
      // An edit is seen (the header's content is keyed, not taken for
      // unreadable), then the header is as it was for the next errno.
      write_all(m_tmp.sub("src/val.h"), "#define V 82\n");
      auto edited = compile(p, TargetType::ptx, o);
      auto edited_fresh = compile(p, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = o.state_dir});
      const bool seen = edited.ok() && edited_fresh.ok() && edited->code.str() == edited_fresh->code.str() &&
                        edited->code.str().find("82") != std::string::npos;
      ::_exit(!ok ? 1 : !seen ? 2 : 0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot install a seccomp filter here";
    EXPECT_NE(WEXITSTATUS(status), 2) << "with faccessat refused (errno " << refusal
                                      << "), an edited header was served stale";
    EXPECT_NE(WEXITSTATUS(status), 1) << "with statx refused (errno " << refusal
                                      << "), a compile failed, missed where it should hit, or differed";
    EXPECT_EQ(WEXITSTATUS(status), 0);
    write_all(m_tmp.sub("src/val.h"), "#define V 81\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  }
}

// Identities name mounts, and every mount namespace (a container, a
// sandbox) has mounts of its own: two namespaces sharing one cache root
// each keep a manifest of their own, so neither rewrites the other's (each
// then scanned again on every call, alternating).
TEST_F(SourceDepsTest, MountNamespacesSharingARootKeepTheirOwnManifests) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a mount namespace";
  write_all(m_tmp.sub("src/val.h"), "#define V 91\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  EXPECT_FALSE(compile_matches_fresh(p));
  const auto manifests = [&] {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(m_tmp.sub("cache/deps"))) {
      out[e.path().filename().string()] = testing::read_all(e.path().string());
    }
    return out;
  };
  const auto before = manifests();
  ASSERT_EQ(before.size(), 1u);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(120);
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    auto r = compile(p, TargetType::ptx, m_opts);
    ::_exit(r.ok() && r->from_cache ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "unshare(CLONE_NEWNS) refused";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the other namespace's lookup did not hit";
  const auto after = manifests();
  EXPECT_EQ(after.size(), 2u) << "the other namespace wrote no manifest of its own";
  for (const auto& [name, bytes] : before) {
    ASSERT_TRUE(after.contains(name));
    EXPECT_EQ(after.at(name), bytes) << "the other namespace rewrote this one's manifest";
  }
  EXPECT_TRUE(compile_matches_fresh(p));
  EXPECT_EQ(manifests(), after) << "this namespace scanned again after the other's lookup";
}

// Runs `body` in a child process as an ordinary user (as nobody when the
// test runs as root, which every permission lets through) and returns its
// exit code: 0 passed, 77 could not become that user, anything else failed
// (the child prints why).
int as_ordinary_user(const std::string& tree, const std::function<int()>& body) {
  const bool root = ::geteuid() == 0;
  if (root) {
    for (const auto& e : fs::recursive_directory_iterator(tree)) {
      if (::lchown(e.path().c_str(), 65534, 65534) != 0) return 77;
    }
    if (::chown(tree.c_str(), 65534, 65534) != 0) return 77;
  }
  const pid_t pid = ::fork();
  if (pid < 0) return 77;
  if (pid == 0) {
    ::alarm(120);
    if (root && (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
                 ::setresuid(65534, 65534, 65534) != 0)) {
      ::_exit(77);
    }
    ::_exit(body());
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// What the process may not reach (a directory on the search path it may not
// search, a header it may not read), NVRTC skips, going on to the next
// directory; so must the scan. Before, such a place failed every compile,
// the cache off too. The compiler's own answer is the oracle: the PTX names
// the value of the header NVRTC took. Opening the place up is a miss, and
// the result again equals a fresh compile.
TEST_F(SourceDepsTest, WhatTheProcessCannotReachIsSkippedAsNvrtcSkipsIt) {
  Program p = three_places();
  // A header naming the next through a macro: every -I directory is
  // fingerprinted whole, the closed one too.
  fs::create_directories(m_tmp.sub("comp"));
  write_all(m_tmp.sub("comp/comp.h"), "#define NEXT <w.h>\n#include NEXT\n");
  write_all(m_tmp.sub("locked/w.h"), "#define V 6666\n");
  write_all(m_tmp.sub("good/w.h"), "#define V 5555\n");
  Program tree = program("#include <comp.h>", m_tmp.sub("src/t.cu"));
  for (const char* d : {"locked", "unread", "good", "comp"}) tree.options.push_back("-I" + m_tmp.sub(d));
  const int code = as_ordinary_user(m_tmp.path(), [&] {
    // The manifest is written only for places settled for two seconds: let
    // it be, so that its check of the locked directory is what decides.
    ::chmod(m_tmp.sub("locked").c_str(), 0);
    ::chmod(m_tmp.sub("unread/v.h").c_str(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    int failures = 0;
    const auto one = [&](const Program& prog, const char* what, const char* value, bool hit) {
      auto cached = compile(prog, TargetType::ptx, m_opts);
      auto fresh = compile(prog, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_opts.state_dir});
      if (!cached.ok() || !fresh.ok()) {
        std::fprintf(stderr, "%s: %s / %s\n", what, cached.status().to_string().c_str(),
                     fresh.status().to_string().c_str());
        ++failures;
        return;
      }
      if (fresh->code.str().find(value) == std::string::npos) {
        std::fprintf(stderr, "%s: NVRTC did not take the header defining %s\n", what, value);
        ++failures;
      }
      if (cached->code.str() != fresh->code.str()) {
        std::fprintf(stderr, "%s: the cached result differs from a fresh compile\n", what);
        ++failures;
      }
      if (cached->from_cache != hit) {
        std::fprintf(stderr, "%s: %s where a %s was due\n", what, cached->from_cache ? "a hit" : "a miss",
                     hit ? "hit" : "miss");
        ++failures;
      }
    };
    // `tree`'s fingerprints name each file's ctime: every mode change is a miss.
    const auto step = [&](const std::string& what, const char* value, bool hit, const char* tree_value, bool tree_hit) {
      one(p, what.c_str(), value, hit);
      one(tree, (what + ", through a macro").c_str(), tree_value, tree_hit);
    };
    step("closed directory and unreadable header skipped", "1111", false, "5555", false);
    step("the same again", "1111", true, "5555", true);
    ::chmod(m_tmp.sub("locked").c_str(), 0755);
    step("the directory opened", "2222", false, "6666", false);
    ::chmod(m_tmp.sub("locked").c_str(), 0);
    ::chmod(m_tmp.sub("unread/v.h").c_str(), 0644);
    step("the header made readable", "3333", false, "5555", false);
    ::chmod(m_tmp.sub("unread/v.h").c_str(), 0);
    step("both closed again", "1111", true, "5555", false);
    ::chmod(m_tmp.sub("locked").c_str(), 0755);
    return failures == 0 ? 0 : 1;
  });
  if (code == 77) GTEST_SKIP() << "could not run as an ordinary user";
  EXPECT_EQ(code, 0) << "see the child's lines above";
}

// A directory of a fingerprinted tree that may be searched but not listed
// (0711 to anyone but its owner; 0111 here, the test's user owning it): the fingerprint cannot say what it holds, so no
// key can be made, yet NVRTC reads the header in it by name. The compile goes ahead uncached, with the cache on and
// off, to NVRTC's own PTX.
TEST_F(SourceDepsTest, AnUnlistableDirectoryOfAFingerprintedTreeCompilesUncached) {
  fs::create_directories(m_tmp.sub("inc/sub"));
  write_all(m_tmp.sub("inc/sub/v.h"), "#define V 4444\n");
  write_all(m_tmp.sub("inc/pick.h"), "#define NEXT <sub/v.h>\n#include NEXT\n");
  Program p = program("#include <pick.h>", m_tmp.sub("src/k.cu"));
  p.options.push_back("-I" + m_tmp.sub("inc"));
  const int code = as_ordinary_user(m_tmp.path(), [&] {
    ::chmod(m_tmp.sub("inc/sub").c_str(), 0111);
    const auto raw = testing::raw_nvrtc_ptx(p.code, p.name, p.options);
    if (!raw || !raw->ok || raw->ptx.find("4444") == std::string::npos) {
      std::fprintf(stderr, "NVRTC itself did not compile it: %s\n", raw ? raw->log.c_str() : "no NVRTC");
      return 1;
    }
    int failures = 0;
    for (Store* cache : {static_cast<Store*>(m_store.get()), static_cast<Store*>(nullptr)}) {
      auto r = compile(p, TargetType::ptx, CompileOptions{.cache = cache, .state_dir = m_opts.state_dir});
      if (!r.ok()) {
        std::fprintf(stderr, "cache %s: %s\n", cache ? "on" : "off", r.status().to_string().c_str());
        ++failures;
        continue;
      }
      if (r->code.str() != raw->ptx) {
        std::fprintf(stderr, "cache %s: not NVRTC's PTX\n", cache ? "on" : "off");
        ++failures;
      }
      if (r->uncacheable.empty()) {
        std::fprintf(stderr, "cache %s: keyed what the scan could not list\n", cache ? "on" : "off");
        ++failures;
      }
    }
    return failures == 0 ? 0 : 1;
  });
  if (code == 77) GTEST_SKIP() << "could not run as an ordinary user";
  EXPECT_EQ(code, 0) << "see the child's lines above";
  EXPECT_EQ(m_store->stats().entries, 0u);
}

// What a scan found depends on who looked: a user who may not search a
// directory, or read a header, that another user of the same root may is
// never given the other's answer (a kept digest of a header it may not
// read), and the other is never given its answer (a manifest recording the
// directory it may not search as empty). Each key equals the one a scan of
// that user's own from an empty state directory gives.
TEST_F(SourceDepsTest, AScansRecordsHoldOnlyForTheCredentialsTheyWereTakenWith) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a second user";
  Program p = three_places();
  ::chmod(m_tmp.sub("locked").c_str(), 0700);  // root's: nobody may not search it
  ::chmod(m_tmp.sub("unread/v.h").c_str(), 0600);
  // Through a function-like macro: the -I directories are fingerprinted
  // whole, where only unread/w.h's readability differs between the users.
  fs::create_directories(m_tmp.sub("comp"));
  write_all(m_tmp.sub("comp/comp.h"), "#define HDR(n) <n.h>\n#include HDR(w)\n");
  write_all(m_tmp.sub("unread/w.h"), "#define V 7777\n");
  write_all(m_tmp.sub("good/w.h"), "#define V 5555\n");
  ::chmod(m_tmp.sub("unread/w.h").c_str(), 0600);
  Program tree = program("#include <comp.h>", m_tmp.sub("src/t.cu"));
  for (const char* d : {"comp", "unread", "good"}) tree.options.push_back("-I" + m_tmp.sub(d));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  CompileOptions shared{.cache = nullptr, .state_dir = m_opts.state_dir};
  auto root_key = program_key(p, TargetType::ptx, shared);
  ASSERT_TRUE(root_key.ok()) << root_key.status().to_string();
  ASSERT_TRUE(fs::exists(m_tmp.sub("cache/deps-memo.json")));
  ASSERT_FALSE(fs::is_empty(m_tmp.sub("cache/deps"))) << "no manifest was written";
  // Everything readable by the other user but the two places above.
  ASSERT_EQ(std::system(("chmod -R a+rwX " + m_tmp.sub("cache") + " " + m_tmp.sub("src") + " " + m_tmp.sub("good") +
                         " " + m_tmp.sub("comp") + " && chmod a+rx " + m_tmp.path() + " " + m_tmp.sub("unread"))
                            .c_str()),
            0);
  fs::create_directories(m_tmp.sub("own-state"));
  ::chmod(m_tmp.sub("own-state").c_str(), 0777);
  // Settled again after the mode changes, so that the other user's scan
  // writes a manifest of its own. The tree's key is taken after them: its
  // lines name every file's ctime.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto root_tree_key = program_key(tree, TargetType::ptx, shared);
  ASSERT_TRUE(root_tree_key.ok()) << root_tree_key.status().to_string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(120);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(77);
    }
    auto through_shared = program_key(p, TargetType::ptx, shared);
    auto own = program_key(p, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_tmp.sub("own-state")});
    if (!through_shared.ok() || !own.ok()) {
      std::fprintf(stderr, "%s / %s\n", through_shared.status().to_string().c_str(), own.status().to_string().c_str());
      ::_exit(2);
    }
    if (*through_shared == *root_key) ::_exit(3);
    if (*through_shared != *own) ::_exit(4);
    auto tree_shared = program_key(tree, TargetType::ptx, shared);
    auto tree_own =
        program_key(tree, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_tmp.sub("own-state")});
    if (!tree_shared.ok() || !tree_own.ok()) ::_exit(2);
    if (*tree_shared == *root_tree_key) ::_exit(5);
    ::_exit(*tree_shared == *tree_own ? 0 : 6);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "could not become another user";
  EXPECT_NE(WEXITSTATUS(status), 2) << "a scan as the other user failed";
  EXPECT_NE(WEXITSTATUS(status), 3) << "the other user was given root's answer (a manifest it cannot vouch for)";
  EXPECT_NE(WEXITSTATUS(status), 5) << "a fingerprinted tree holding a header only root may read gave both users "
                                       "one key (and so one compiled result)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the other user's key differs from its own scan's";
  // The other user's scan left its records in the shared state directory:
  // root, who may search the directory, still gets its own answer.
  auto again = program_key(p, TargetType::ptx, shared);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(*again, *root_key) << "root was given the other user's answer (its manifest)";
  EXPECT_EQ(std::distance(fs::directory_iterator(m_tmp.sub("cache/deps")), fs::directory_iterator()), 4)
      << "the two users do not each have a manifest of their own";
}

// User 0 inside a user namespace (`unshare -U -r`), with every capability
// there, is an ordinary user to files outside it: a directory only the real
// root may search stays closed to it. Its records must not be believed by
// the real root, whose user and group IDs and capabilities read the same.
TEST_F(SourceDepsTest, AUserNamespacesRootIsNotTakenForRoot) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a directory only root may search";
  fs::create_directories(m_tmp.sub("locked"));
  fs::create_directories(m_tmp.sub("good"));
  write_all(m_tmp.sub("locked/v.h"), "#define V 2222\n");
  write_all(m_tmp.sub("good/v.h"), "#define V 1111\n");
  ::chmod(m_tmp.sub("locked").c_str(), 0700);
  ASSERT_EQ(std::system(("chmod -R a+rwX " + m_tmp.sub("cache") + " " + m_tmp.sub("src") + " " + m_tmp.sub("good") +
                         " && chmod a+rx " + m_tmp.path())
                            .c_str()),
            0);
  fs::create_directories(m_tmp.sub("own-state"));
  Program p = program("#include <v.h>", m_tmp.sub("src/k.cu"));
  for (const char* d : {"locked", "good"}) p.options.push_back("-I" + m_tmp.sub(d));
  // A fingerprinted tree holding a header only root may read: the
  // namespace's capabilities do not reach a file whose owner it does not
  // map, so its key must differ from root's.
  fs::create_directories(m_tmp.sub("comp"));
  fs::create_directories(m_tmp.sub("private"));
  write_all(m_tmp.sub("comp/comp.h"), "#define HDR(n) <n.h>\n#include HDR(w)\n");
  write_all(m_tmp.sub("private/w.h"), "#define V 7777\n");
  write_all(m_tmp.sub("good/w.h"), "#define V 5555\n");
  ASSERT_EQ(std::system(("chmod -R a+rX " + m_tmp.sub("comp") + " " + m_tmp.sub("good") + " && chmod 0755 " +
                         m_tmp.sub("private") + " && chmod 0600 " + m_tmp.sub("private/w.h"))
                            .c_str()),
            0);
  Program tree = program("#include <comp.h>", m_tmp.sub("src/t.cu"));
  for (const char* d : {"comp", "private", "good"}) tree.options.push_back("-I" + m_tmp.sub(d));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto root_tree_key =
      program_key(tree, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_tmp.sub("root-state")});
  ASSERT_TRUE(root_tree_key.ok()) << root_tree_key.status().to_string();
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct mine[2]{};
  ASSERT_EQ(::syscall(SYS_capget, &header, mine), 0);
  const CompileOptions shared{.cache = nullptr, .state_dir = m_opts.state_dir};
  const auto in_child = [](const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(120);
      ::_exit(body());
    }
    int status = 0;
    return pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  const auto write_file = [](const char* path, const std::string& text) {
    const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    const bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (fd >= 0) ::close(fd);
    return ok;
  };
  // Nobody, as user 0 of a namespace of its own, with root's capabilities
  // there and no supplementary groups, scans through the shared state.
  const int ns = in_child([&] {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0 ||
        // A changed user leaves the process undumpable, its /proc files
        // root's: the maps below could not be written.
        ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 || ::unshare(CLONE_NEWUSER) != 0 ||
        !write_file("/proc/self/setgroups", "deny") || !write_file("/proc/self/uid_map", "0 65534 1") ||
        !write_file("/proc/self/gid_map", "0 65534 1")) {
      return 77;
    }
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    if (::syscall(SYS_capget, &h, caps) != 0) return 77;
    for (int i = 0; i < 2; ++i) caps[i].effective = mine[i].effective & caps[i].permitted;
    if (::syscall(SYS_capset, &h, caps) != 0 || ::geteuid() != 0 || ::getegid() != 0) return 77;
    auto tree_key = program_key(tree, TargetType::ptx, shared);
    if (!program_key(p, TargetType::ptx, shared).ok() || !tree_key.ok()) return 1;
    return *tree_key == *root_tree_key ? 3 : 0;
  });
  if (ns == 77) GTEST_SKIP() << "no user namespace here";
  ASSERT_NE(ns, 3) << "a tree holding a header only root may read gave the namespace's root root's key";
  ASSERT_EQ(ns, 0) << "the namespace's scan failed";
  ASSERT_FALSE(fs::is_empty(m_tmp.sub("cache/deps"))) << "the namespace's scan wrote no manifest";
  // The real root, without supplementary groups either: its own answer.
  const int real = in_child([&] {
    if (::setgroups(0, nullptr) != 0) return 77;
    auto through_shared = program_key(p, TargetType::ptx, shared);
    auto own = program_key(p, TargetType::ptx, CompileOptions{.cache = nullptr, .state_dir = m_tmp.sub("own-state")});
    if (!through_shared.ok() || !own.ok()) return 1;
    return *through_shared == *own ? 0 : 2;
  });
  if (real == 77) GTEST_SKIP() << "cannot drop the supplementary groups";
  EXPECT_NE(real, 1) << "root's scan failed";
  EXPECT_EQ(real, 0) << "root was given the namespace's answer (the directory it may search taken for closed)";
}

// Where who asks cannot be told (no /proc: no user namespace, no ID maps),
// nothing is recorded for other processes: the scan runs every time, one
// program keeps its key and an edit changes it.
TEST_F(SourceDepsTest, WithoutProcNoManifestIsKept) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: a mount namespace";
  write_all(m_tmp.sub("src/val.h"), "#define V 93\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  const CompileOptions o{.cache = nullptr, .state_dir = m_tmp.sub("state")};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(120);
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("none", "/proc", "tmpfs", 0, nullptr) != 0) {
      ::_exit(77);
    }
    auto k = program_key(p, TargetType::ptx, o);
    auto again = program_key(p, TargetType::ptx, o);
    write_all(m_tmp.sub("src/val.h"), "#define V 94\n");
    auto edited = program_key(p, TargetType::ptx, o);
    if (!k.ok() || !again.ok() || !edited.ok()) ::_exit(1);
    if (*k != *again || *edited == *k) ::_exit(2);
    ::_exit(fs::exists(m_tmp.sub("state/deps")) && !fs::is_empty(m_tmp.sub("state/deps")) ? 3 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot hide /proc here";
  EXPECT_NE(WEXITSTATUS(status), 1) << "the scan failed without /proc";
  EXPECT_NE(WEXITSTATUS(status), 2) << "without /proc, an unchanged program changed key or an edit was not seen";
  EXPECT_NE(WEXITSTATUS(status), 3) << "a manifest was kept though who asks could not be told";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(SourceDepsTest, DamagedScanMemoIsIgnored) {
  write_all(m_tmp.sub("src/val.h"), "#define V 27\n");
  const Program p = program("#include \"val.h\"", m_tmp.sub("src/k.cu"));
  for (const char* junk : {"not json", R"({"version":1,"files":{"x":{"stamp":"a","sha256":5,"includes":{}}}})",
                           R"({"version":1,"files":[1,2]})", R"({"version":"1"})"}) {
    // A fresh state directory each time: the memo is loaded once per directory.
    const std::string state = m_tmp.sub(std::string("state-") + std::to_string(std::hash<std::string>{}(junk)));
    fs::create_directories(state);
    write_all(state + "/deps-memo.json", junk);
    CompileOptions o = m_opts;
    o.state_dir = state;
    auto r = compile(p, TargetType::ptx, o);
    ASSERT_TRUE(r.ok()) << junk << ": " << r.status().to_string();
  }
}

}  // namespace
}  // namespace progcache
