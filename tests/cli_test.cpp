// Runs the real `progcache` binary in a temp directory.
#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

class CliTest : public ::testing::Test {
 protected:
  // Runs progcache with `args`, PROGCACHE_DIR set to the test's cache, and
  // any `env` assignments ("NAME=value") prepended.
  CliRun run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::string cmd = "env -u PROGCACHE_MAX_SIZE -u PROGCACHE_MAX_ENTRIES -u PROGCACHE_DISABLE PROGCACHE_DIR=" +
                      quote(cache());
    for (const auto& e : env) cmd += " " + quote(e);
    cmd += " " + quote(PROGCACHE_CLI_PATH);
    for (const auto& a : args) cmd += " " + quote(a);
    cmd += " > " + quote(m_tmp.sub("stdout")) + " 2> " + quote(m_tmp.sub("stderr")) + " < /dev/null";
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = testing::read_all(m_tmp.sub("stdout"));
    r.err = testing::read_all(m_tmp.sub("stderr"));
    return r;
  }
  std::string cache() const { return m_tmp.sub("cache"); }
  std::string file(const std::string& name, const std::string& content) {
    testing::write_all(m_tmp.sub(name), content);
    return m_tmp.sub(name);
  }
  testing::TempDir m_tmp;
};

TEST_F(CliTest, PutGetRoundTripWritesRawArtifactBytes) {
  const std::string payload = testing::make_payload(70000, 3);
  auto put = run({"put", "my-kernel", file("in.bin", payload)});
  ASSERT_EQ(put.code, 0) << put.err;
  const std::string key = put.out.substr(0, 64);
  EXPECT_EQ(key, key_from_user("my-kernel").hex());
  auto get = run({"get", "my-kernel", "-o", m_tmp.sub("out.bin")});
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("out.bin")), payload);
  auto by_hex = run({"get", key, "-o", m_tmp.sub("out2.bin")});
  ASSERT_EQ(by_hex.code, 0) << by_hex.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("out2.bin")), payload);
  auto to_stdout = run({"get", key});
  ASSERT_EQ(to_stdout.code, 0);
  EXPECT_EQ(to_stdout.out, payload);
}

TEST_F(CliTest, MissAndRemoveExitCodes) {
  auto miss = run({"get", "absent", "-o", m_tmp.sub("x")});
  EXPECT_EQ(miss.code, 1);
  EXPECT_NE(miss.err.find("miss"), std::string::npos);
  EXPECT_FALSE(fs::exists(m_tmp.sub("x")));
  ASSERT_EQ(run({"put", "k", file("a", "A")}).code, 0);
  EXPECT_EQ(run({"rm", "k"}).code, 0);
  EXPECT_EQ(run({"rm", "k"}).code, 1);
  EXPECT_EQ(run({"get", "k"}).code, 1);  // an evicted / removed key is a miss
}

TEST_F(CliTest, UsageErrorsExitTwoWithOneLine) {
  auto bad_hex = run({"get", std::string(63, 'a') + "z"});
  EXPECT_EQ(bad_hex.code, 2);
  EXPECT_NE(bad_hex.err.find("hex"), std::string::npos) << bad_hex.err;
  auto bad_size = run({"prune", "--max-size", "10Q"});
  EXPECT_EQ(bad_size.code, 2);
  EXPECT_NE(bad_size.err.find("10Q"), std::string::npos) << bad_size.err;
  auto bad_age = run({"prune", "--older-than", "soon"});
  EXPECT_EQ(bad_age.code, 2);
  EXPECT_EQ(run({}).code, 2);
  EXPECT_EQ(run({"frobnicate"}).code, 2);
  auto env_size = run({"stats"}, {"PROGCACHE_MAX_SIZE=10Q"});
  EXPECT_EQ(env_size.code, 2);
  EXPECT_NE(env_size.err.find("PROGCACHE_MAX_SIZE"), std::string::npos) << env_size.err;
  EXPECT_EQ(run({"--help"}).code, 0);
}

TEST_F(CliTest, ErrorsExitThree) {
  auto missing = run({"put", "k", m_tmp.sub("does-not-exist")});
  EXPECT_EQ(missing.code, 3);
  EXPECT_NE(missing.err.find("does-not-exist"), std::string::npos) << missing.err;
  fs::create_directories(m_tmp.sub("open"));
  fs::permissions(m_tmp.sub("open"), fs::perms::all);
  auto unsafe = run({"--dir", m_tmp.sub("open"), "ls"});
  EXPECT_EQ(unsafe.code, 3);
  EXPECT_NE(unsafe.err.find("writable by group or others"), std::string::npos) << unsafe.err;
  EXPECT_EQ(std::count(unsafe.err.begin(), unsafe.err.end(), '\n'), 1);
}

TEST_F(CliTest, LsLongJsonAndStats) {
  ASSERT_EQ(run({"put", "a", file("a", "AAAA")}).code, 0);
  ASSERT_EQ(run({"put", "b", file("b", "BB")}).code, 0);
  auto ls = run({"ls"});
  ASSERT_EQ(ls.code, 0);
  EXPECT_NE(ls.out.find(key_from_user("a").hex()), std::string::npos);
  EXPECT_NE(ls.out.find(key_from_user("b").hex()), std::string::npos);
  auto ls_long = run({"ls", "--long"});
  EXPECT_NE(ls_long.out.find("Z"), std::string::npos);  // timestamps
  auto js = nlohmann::json::parse(run({"ls", "--json"}).out);
  ASSERT_EQ(js.size(), 2u);
  EXPECT_EQ(js[0]["key"].get<std::string>().size(), 64u);
  ASSERT_EQ(run({"get", "a", "-o", m_tmp.sub("o")}).code, 0);
  run({"get", "nothing", "-o", m_tmp.sub("o")});
  auto st = nlohmann::json::parse(run({"stats", "--json"}).out);
  EXPECT_EQ(st["entries"], 2);
  EXPECT_EQ(st["hits"], 1);
  EXPECT_EQ(st["misses"], 1);
  EXPECT_EQ(st["puts"], 2);
  EXPECT_EQ(run({"stats"}).code, 0);
}

TEST_F(CliTest, VerifyFindsDamageAndRepairRemovesIt) {
  ASSERT_EQ(run({"put", "good", file("g", std::string(3000, 'g'))}).code, 0);
  ASSERT_EQ(run({"put", "bad", file("b", std::string(3000, 'b'))}).code, 0);
  const std::string hex = key_from_user("bad").hex();
  const std::string path = cache() + "/v1/" + hex.substr(0, 2) + "/" + hex.substr(2);
  std::string bytes = testing::read_all(path);
  bytes[1500] ^= 4;
  testing::write_all(path, bytes);
  auto v = run({"verify"});
  EXPECT_EQ(v.code, 3);
  EXPECT_NE(v.out.find("checksum mismatch"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find(path), std::string::npos) << v.out;
  auto r = run({"verify", "--repair"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(removed)"), std::string::npos);
  EXPECT_EQ(run({"verify"}).code, 0);
  EXPECT_EQ(run({"get", "good", "-o", m_tmp.sub("o")}).code, 0);
}

TEST_F(CliTest, PruneAndClear) {
  for (int i = 0; i < 6; ++i) ASSERT_EQ(run({"put", "k" + std::to_string(i), file("f", std::string(1000, 'x'))}).code, 0);
  auto p = run({"prune", "--max-size", "3K"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("removed"), std::string::npos);
  auto st = nlohmann::json::parse(run({"stats", "--json"}).out);
  EXPECT_LE(st["bytes_stored"].get<std::uint64_t>(), 3072u);
  EXPECT_GE(st["entries"].get<int>(), 1);
  ASSERT_EQ(run({"clear"}).code, 0);
  EXPECT_EQ(nlohmann::json::parse(run({"stats", "--json"}).out)["entries"], 0);
  EXPECT_EQ(run({"ls"}).out, "");
}

TEST_F(CliTest, ConfigShowsEachSettingWithItsSourceAndNoSecret) {
  const std::string key_file = file("hmac.key", "super-secret-signing-key-material");
  auto c = run({"config"}, {"PROGCACHE_MAX_SIZE=2G", "PROGCACHE_HMAC_KEY_FILE=" + key_file});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("PROGCACHE_DIR = " + cache() + "  (environment)"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("PROGCACHE_MAX_SIZE = 2.0 GiB  (environment)"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("PROGCACHE_MAX_ENTRIES = unlimited  (default)"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("super-secret"), std::string::npos);
  auto js = nlohmann::json::parse(run({"config", "--json", "--dir", m_tmp.sub("other")}).out);
  bool found = false;
  for (const auto& s : js) {
    if (s["name"] == "PROGCACHE_DIR") {
      EXPECT_EQ(s["value"], m_tmp.sub("other"));
      EXPECT_EQ(s["source"], "command line (--dir)");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(CliTest, DisableMakesGetMissAndPutStoreNothing) {
  ASSERT_EQ(run({"put", "k", file("a", "A")}).code, 0);
  EXPECT_EQ(run({"get", "k", "-o", m_tmp.sub("o")}, {"PROGCACHE_DISABLE=1"}).code, 1);
  EXPECT_EQ(run({"put", "j", file("b", "B")}, {"PROGCACHE_DISABLE=yes"}).code, 0);
  EXPECT_EQ(run({"get", "j", "-o", m_tmp.sub("o")}).code, 1);
}

TEST_F(CliTest, EntryCapFromEnvironmentIsEnforced) {
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(run({"put", "k" + std::to_string(i), file("f", "x")}, {"PROGCACHE_MAX_ENTRIES=5"}).code, 0);
  }
  auto st = nlohmann::json::parse(run({"stats", "--json"}, {"PROGCACHE_MAX_ENTRIES=5"}).out);
  EXPECT_LE(st["entries"].get<int>(), 5);
  EXPECT_EQ(st["max_entries"], 5);
}

}  // namespace
}  // namespace progcache
