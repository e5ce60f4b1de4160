// explain(): the verdict equals what compile() then does (hit or miss), and
// on a miss each input that changed since the nearest stored entry of the
// same program is named: options, code, name expressions, target, in-memory
// headers, and files on disk by path (edited, added, shadowed, removed).
// Nothing is counted. Needs NVRTC; skips without it.
#include "progcache/explain.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using testing::write_all;

class ExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto info = compiler_info();
    if (!info.ok() || info->nvrtc_path.empty()) GTEST_SKIP() << "no NVRTC: " << info.status().message();
    auto s = FileStore::open({.root = m_tmp.sub("cache")});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    m_store = std::move(*s);
    m_opts.cache = m_store.get();
    m_opts.state_dir = m_tmp.sub("cache");
    fs::create_directories(m_tmp.sub("src"));
    fs::create_directories(m_tmp.sub("inc"));
    write_all(m_tmp.sub("inc/val.h"), "#define V 1\n");
  }

  // A kernel that reads val.h through -I, and opt.h and new.h where they exist.
  Program base() const {
    Program p;
    p.code =
        "#if __has_include(\"opt.h\")\n#include \"opt.h\"\n#endif\n"
        "#if __has_include(\"new.h\")\n#include \"new.h\"\n#endif\n"
        "#include \"val.h\"\n__global__ void k(int* x) { x[0] = V; }\n";
    p.options = {"-arch=compute_80", "-I" + m_tmp.sub("inc")};
    p.name = m_tmp.sub("src/k.cu");
    return p;
  }

  Key compiled(const Program& p, TargetType t = TargetType::ptx) {
    auto r = compile(p, t, m_opts);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->key : Key{};
  }

  Explanation explained(const Program& p, TargetType t = TargetType::ptx) {
    auto e = explain(p, t, *m_store, m_opts);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? *e : Explanation{};
  }

  // A miss against `nearest`, with exactly one difference, as named; and
  // compile() agrees that it misses.
  void expect_one_difference(const Program& p, const Key& nearest, const std::string& component,
                             const std::string& change, const std::string& subject, TargetType t = TargetType::ptx) {
    const Explanation e = explained(p, t);
    EXPECT_EQ(e.outcome, Explanation::Outcome::miss);
    ASSERT_TRUE(e.nearest.has_value());
    EXPECT_EQ(*e.nearest, nearest);
    ASSERT_EQ(e.differences.size(), 1u) << listed(e);
    EXPECT_EQ(e.differences[0].component, component);
    EXPECT_EQ(e.differences[0].change, change);
    EXPECT_EQ(e.differences[0].subject, subject);
    auto key = program_key(p, t, m_opts);
    ASSERT_TRUE(key.ok());
    EXPECT_EQ(e.key, *key) << "explain keyed the program otherwise than compile does";
  }

  static std::string listed(const Explanation& e) {
    std::string out;
    for (const auto& d : e.differences) out += d.component + " " + d.change + " " + d.subject + "\n";
    return out;
  }

  testing::TempDir m_tmp;
  std::unique_ptr<FileStore> m_store;
  CompileOptions m_opts;
};

TEST_F(ExplainTest, TheVerdictIsWhatCompileThenDoesAndNothingIsCounted) {
  const Program p = base();
  const Explanation before = explained(p);
  EXPECT_EQ(before.outcome, Explanation::Outcome::miss);
  EXPECT_EQ(before.same_name, 0u);
  EXPECT_FALSE(before.nearest.has_value());
  const Key key = compiled(p);
  EXPECT_EQ(before.key, key);
  const StoreStats stats = m_store->stats();
  const Explanation after = explained(p);
  EXPECT_EQ(after.outcome, Explanation::Outcome::hit);
  EXPECT_EQ(after.key, key);
  EXPECT_EQ(m_store->stats().hits, stats.hits) << "explain counted a hit";
  EXPECT_EQ(m_store->stats().misses, stats.misses);
  auto again = compile(p, TargetType::ptx, m_opts);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache) << "explain said hit; compile missed";
}

TEST_F(ExplainTest, EachChangedInputIsNamedAgainstTheNearestEntry) {
  const Program p = base();
  const Key stored = compiled(p);

  Program arch = p;
  arch.options[0] = "-arch=compute_86";
  expect_one_difference(arch, stored, "option", "changed", "--gpu-architecture");

  Program define = p;
  define.options.push_back("-DEXTRA=1");
  expect_one_difference(define, stored, "option", "added", "--define-macro=EXTRA=1");

  Program code = p;
  code.code += "// edited\n";
  expect_one_difference(code, stored, "code", "changed", "");

  Program names = p;
  names.name_expressions = {"k"};
  expect_one_difference(names, stored, "name expression", "added", "k");

  Program header = p;
  header.headers = {{"extra.h", "#define W 2\n"}};
  expect_one_difference(header, stored, "header", "added", "extra.h");

  expect_one_difference(p, stored, "target", "changed", "", TargetType::ltoir);

  // And compile() misses on each, as explain said.
  auto r = compile(define, TargetType::ptx, m_opts);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->from_cache);
}

TEST_F(ExplainTest, HeaderFilesAreNamedByPathEditedRemovedAddedAndShadowed) {
  write_all(m_tmp.sub("inc/opt.h"), "#define O 1\n");
  const Program p = base();
  const Key stored = compiled(p);
  const std::string val = m_tmp.sub("inc/val.h");

  write_all(val, "#define V 2\n");
  expect_one_difference(p, stored, "file", "edited", val);
  write_all(val, "#define V 1\n");  // the same bytes again: a hit
  EXPECT_EQ(explained(p).outcome, Explanation::Outcome::hit);

  fs::remove(m_tmp.sub("inc/opt.h"));
  expect_one_difference(p, stored, "file", "removed", m_tmp.sub("inc/opt.h"));
  write_all(m_tmp.sub("inc/opt.h"), "#define O 1\n");

  write_all(m_tmp.sub("inc/new.h"), "#define N 1\n");
  expect_one_difference(p, stored, "file", "added", m_tmp.sub("inc/new.h"));
  fs::remove(m_tmp.sub("inc/new.h"));

  // The source's directory is searched before -I: a val.h made there hides
  // the one the entry was compiled with.
  write_all(m_tmp.sub("src/val.h"), "#define V 3\n");
  const Explanation shadowed = explained(p);
  ASSERT_EQ(shadowed.differences.size(), 1u) << listed(shadowed);
  EXPECT_EQ(shadowed.differences[0].change, "shadowed");
  EXPECT_EQ(shadowed.differences[0].subject, m_tmp.sub("src/val.h"));
  EXPECT_EQ(shadowed.differences[0].before, val);
  auto r = compile(p, TargetType::ptx, m_opts);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->from_cache);
}

TEST_F(ExplainTest, ALookupAnsweredByTheScanManifestStillNamesEachFile) {
  // Files settled for two seconds are checked by stat through the scan's
  // manifest, which must carry each file's digest and operand as a scan does.
  write_all(m_tmp.sub("inc/opt.h"), "#define O 1\n");
  const Program p = base();
  const Key stored = compiled(p);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  // The target is not in the manifest's key: the second lookup is answered
  // from the manifest the first one wrote.
  expect_one_difference(p, stored, "target", "changed", "", TargetType::ltoir);
  ASSERT_TRUE(fs::exists(m_tmp.sub("cache/deps"))) << "no manifest was written: the test tests nothing";
  expect_one_difference(p, stored, "target", "changed", "", TargetType::ltoir);
  write_all(m_tmp.sub("src/opt.h"), "#define O 2\n");
  const Explanation e = explained(p);
  ASSERT_EQ(e.differences.size(), 1u) << listed(e);
  EXPECT_EQ(e.differences[0].change, "shadowed");
  EXPECT_EQ(e.differences[0].before, m_tmp.sub("inc/opt.h"));
}

TEST_F(ExplainTest, TheNearestOfSeveralEntriesIsTheOneWithFewestDifferences) {
  Program a = base();
  compiled(a);
  Program b = base();
  b.options.push_back("-DA=1");
  const Key with_a = compiled(b);
  Program c = base();
  c.options[0] = "-arch=compute_86";
  c.options.push_back("-DB=1");
  compiled(c);

  Program now = base();
  now.options.push_back("-DA=2");
  const Explanation e = explained(now);
  EXPECT_EQ(e.same_name, 3u);
  ASSERT_TRUE(e.nearest.has_value());
  EXPECT_EQ(*e.nearest, with_a);
  ASSERT_EQ(e.differences.size(), 1u);
  EXPECT_EQ(e.differences[0].change, "changed");
  EXPECT_EQ(e.differences[0].subject, "--define-macro=A");
  EXPECT_EQ(e.differences[0].before, "--define-macro=A=1");
  EXPECT_EQ(e.differences[0].after, "--define-macro=A=2");
}

TEST_F(ExplainTest, ADamagedEntryIsReportedAsDamaged) {
  const Program p = base();
  const Key key = compiled(p);
  const std::string path = m_store->entry_path(key);
  std::string bytes = testing::read_all(path);
  bytes[bytes.size() / 2] ^= 0x20;
  write_all(path, bytes);
  const Explanation e = explained(p);
  EXPECT_EQ(e.outcome, Explanation::Outcome::damaged);
  EXPECT_FALSE(e.detail.empty());
  auto k = explain_key(key, *m_store);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->outcome, Explanation::Outcome::damaged);
  // A lookup then drops it and compiles: explain told the truth.
  auto r = compile(p, TargetType::ptx, m_opts);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->from_cache);
}

TEST_F(ExplainTest, EntriesWithoutARecordAreCountedNotCompared) {
  const Program p = base();
  const nlohmann::json meta{{"kind", "ptx"}, {"name", p.name}, {"log", ""}};
  ASSERT_TRUE(m_store->put(key_from_user("by hand"), Entry(meta.dump(), {{"ptx", Bytes::copy_of("//")}})).ok());
  const Explanation e = explained(p);
  EXPECT_EQ(e.outcome, Explanation::Outcome::miss);
  EXPECT_EQ(e.same_name, 1u);
  EXPECT_EQ(e.without_record, 1u);
  EXPECT_FALSE(e.nearest.has_value());
}

TEST_F(ExplainTest, ExplainingAKeyGivesTheEntrysProgramAndRecord) {
  const Program p = base();
  const Key key = compiled(p);
  auto e = explain_key(key, *m_store);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->outcome, Explanation::Outcome::hit);
  EXPECT_EQ(e->program_name, p.name);
  EXPECT_EQ(e->target, "ptx");
  const auto record = nlohmann::json::parse(e->record);
  EXPECT_EQ(record["options"][0], "--gpu-architecture=compute_80");
  ASSERT_EQ(record["files"].size(), 1u);
  EXPECT_EQ(record["files"][0][0], m_tmp.sub("inc/val.h"));
  EXPECT_EQ(record["files"][0][2], "val.h");
  auto unknown = explain_key(key_from_user("never stored"), *m_store);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->outcome, Explanation::Outcome::miss);
}

}  // namespace
}  // namespace progcache
