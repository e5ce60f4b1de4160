// Runs the real `progcache` binary in a temp directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "progcache/file_store.h"
#include "testing/test_util.h"
#ifdef PROGCACHE_WITH_REDIS
#include "testing/redis_cluster.h"
#include "testing/redis_server.h"
#endif
#ifdef PROGCACHE_WITH_HTTP
#include "testing/nginx_server.h"
#endif

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
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

class CliTest : public ::testing::Test {
 protected:
  // Runs progcache with `args`, PROGCACHE_DIR set to the test's cache, and
  // any `env` assignments ("NAME=value") prepended.
  CliRun run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
             const std::string& cwd = "") {
    // `timeout`: a hang fails the test (exit 124) instead of stalling the suite.
    std::string cmd =
        (cwd.empty() ? "" : "cd " + quote(cwd) + " && ") +
        "timeout 120 env -u PROGCACHE_MAX_SIZE -u PROGCACHE_MAX_ENTRIES -u PROGCACHE_DISABLE XDG_CONFIG_HOME=" +
        quote(m_tmp.sub("xdg")) + " PROGCACHE_DIR=" + quote(cache());
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

TEST_F(CliTest, OutputIsNeverRenamedOverADeviceOrALink) {
  const std::string payload = testing::make_payload(5000, 7);
  ASSERT_EQ(run({"put", "k", file("in.bin", payload)}).code, 0);
  // A device is written in place, never renamed over. The test makes its
  // own null device (as root) rather than risk the machine's /dev/null.
  const std::string dev = m_tmp.sub("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0) {
    auto dn = run({"get", "k", "-o", dev});
    EXPECT_EQ(dn.code, 0) << dn.err;
    struct stat st {};
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced by a regular file";
  }
  // A symbolic link is followed: the link stays, its target gets the bytes.
  file("real.bin", "old");
  fs::create_symlink(m_tmp.sub("real.bin"), m_tmp.sub("link.bin"));
  auto ln = run({"get", "k", "-o", m_tmp.sub("link.bin")});
  EXPECT_EQ(ln.code, 0) << ln.err;
  EXPECT_TRUE(fs::is_symlink(m_tmp.sub("link.bin")));
  EXPECT_EQ(testing::read_all(m_tmp.sub("real.bin")), payload);
  // "-" is standard output.
  auto out = run({"get", "k", "-o", "-"});
  EXPECT_EQ(out.code, 0);
  EXPECT_EQ(out.out, payload);
  // A missing output directory is one clear error, before any work.
  auto missing = run({"get", "k", "-o", m_tmp.sub("no/such/dir/x.bin")});
  EXPECT_EQ(missing.code, 3);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;
  auto dir = run({"get", "k", "-o", m_tmp.path()});
  EXPECT_EQ(dir.code, 3);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
}

// `export` streams its bundle, and follows the same rules as every other
// output: a link is followed, a FIFO or a device is written in place.
TEST_F(CliTest, ExportWritesWhereAskedAndOnlyThere) {
  ASSERT_EQ(run({"put", "k", file("in.bin", testing::make_payload(20000, 5))}).code, 0);
  auto piped = run({"export", "-o", "-"});
  ASSERT_EQ(piped.code, 0) << piped.err;
  const std::string bundle = piped.out;
  ASSERT_GT(bundle.size(), 20000u);

  // A symbolic link: its target gets the bundle, the link stays a link.
  file("real.pcb", "old");
  fs::create_symlink(m_tmp.sub("real.pcb"), m_tmp.sub("link.pcb"));
  auto ln = run({"export", "-o", m_tmp.sub("link.pcb")});
  EXPECT_EQ(ln.code, 0) << ln.err;
  EXPECT_TRUE(fs::is_symlink(m_tmp.sub("link.pcb")));
  EXPECT_EQ(testing::read_all(m_tmp.sub("real.pcb")), bundle);

  // A FIFO: the reader gets the bundle, the FIFO stays a FIFO.
  const std::string fifo = m_tmp.sub("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = testing::read_all(fifo); });
  auto fr = run({"export", "-o", fifo});
  // Should the command never have opened the FIFO, the reader still waits
  // in its open: a writer that opens and closes lets it finish.
  if (const int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK); unblock >= 0) ::close(unblock);
  reader.join();
  EXPECT_EQ(fr.code, 0) << fr.err;
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a regular file";
  EXPECT_EQ(received, bundle);

  // A character device is written in place. As root the test makes its own
  // null device (a regression must not cost the machine its /dev/null); as
  // anyone else /dev/null itself, which only root could replace.
  std::string dev = "/dev/null";
  if (::geteuid() == 0) {
    dev = m_tmp.sub("null");
    ASSERT_EQ(::mknod(dev.c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
  }
  auto dn = run({"export", "-o", dev});
  EXPECT_EQ(dn.code, 0) << dn.err;
  ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << dev << " is no longer a character device";
  // Nothing left beside any of them.
  for (const auto& f : fs::directory_iterator(m_tmp.path())) {
    EXPECT_EQ(f.path().filename().string().find(".tmp."), std::string::npos) << f.path();
    EXPECT_EQ(f.path().filename().string().find(".progcache-out."), std::string::npos) << f.path();
  }
}

TEST_F(CliTest, OutputModesFollowTheUmaskAndAnExistingFileKeepsItsOwn) {
  ASSERT_EQ(run({"put", "mode-key", file("in.bin", "payload")}).code, 0);
  const mode_t old_mask = ::umask(077);  // inherited by the CLI
  auto fresh = run({"get", "mode-key", "-o", m_tmp.sub("new.bin")});
  ::umask(old_mask);
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  struct stat st {};
  ASSERT_EQ(::stat(m_tmp.sub("new.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "a new output ignored the umask";
  // An existing file is replaced with its own mode, never widened.
  file("existing.bin", "old");
  ::chmod(m_tmp.sub("existing.bin").c_str(), 0640);
  ASSERT_EQ(run({"get", "mode-key", "-o", m_tmp.sub("existing.bin")}).code, 0);
  ASSERT_EQ(::stat(m_tmp.sub("existing.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(testing::read_all(m_tmp.sub("existing.bin")), "payload");
}

TEST_F(CliTest, AWritableOutputInADirectoryThatIsNotIsWrittenInPlace) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes any directory: needs an ordinary user";
  ASSERT_EQ(run({"put", "inplace-key", file("in.bin", "payload")}).code, 0);
  fs::create_directories(m_tmp.sub("locked"));
  file("locked/out.bin", "old");
  ::chmod(m_tmp.sub("locked").c_str(), 0500);
  auto r = run({"get", "inplace-key", "-o", m_tmp.sub("locked/out.bin")});
  ::chmod(m_tmp.sub("locked").c_str(), 0700);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("locked/out.bin")), "payload");
}

TEST_F(CliTest, PutRefusesUnreadableInputAndStoresNothing) {
  // Reading /proc/self/mem at offset 0 fails with EIO: the input error is an
  // error, never a shorter (here empty) value stored with exit 0.
  auto eio = run({"put", "k", "/proc/self/mem"});
  EXPECT_EQ(eio.code, 3) << eio.err;
  EXPECT_NE(eio.err.find("error reading"), std::string::npos) << eio.err;
  auto dir = run({"put", "k", m_tmp.path()});
  EXPECT_EQ(dir.code, 3);
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
  EXPECT_EQ(run({"get", "k", "-o", m_tmp.sub("x")}).code, 1) << "something was stored";
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
  // The state of the filesystem is an error (3), never a usage error (2):
  // a root that is a file, a root that is a symlink loop.
  auto file_root = run({"--dir", file("plain-file", "x"), "stats"});
  EXPECT_EQ(file_root.code, 3) << file_root.err;
  EXPECT_NE(file_root.err.find("not a directory"), std::string::npos) << file_root.err;
  fs::create_directory_symlink(m_tmp.sub("loop"), m_tmp.sub("loop"));
  auto loop_root = run({"--dir", m_tmp.sub("loop"), "stats"});
  EXPECT_EQ(loop_root.code, 3) << loop_root.err;
  // A size that cannot be meant is a usage error, and nothing is pruned.
  ASSERT_EQ(run({"put", "keep-me", file("in.bin", "kept")}).code, 0);
  auto tiny = run({"prune", "--max-size", "0.4"});
  EXPECT_EQ(tiny.code, 2) << tiny.err;
  EXPECT_EQ(run({"get", "keep-me"}).out, "kept");
}

TEST_F(CliTest, ASettingAPersonCouldMisreadIsRefusedWhereverItIsSet) {
  ASSERT_EQ(run({"put", "keep-me", file("in.bin", "kept")}).code, 0);
  // A size without a unit (ccache reads 5 as 5 GB) and prune's 0 (no cap
  // everywhere else): usage errors, and nothing is pruned.
  for (const char* size : {"10", "1.5", "0", "5 ", " 5", "5\t"}) {
    auto r = run({"prune", "--max-size", size});
    EXPECT_EQ(r.code, 2) << size << ": " << r.err;
    EXPECT_NE(r.err.find(std::string(size) == "0" ? "would remove every entry" : "has no unit"), std::string::npos)
        << r.err;
  }
  EXPECT_EQ(run({"get", "keep-me"}).out, "kept");
  auto bare = run({"stats"}, {"PROGCACHE_MAX_SIZE=5"});
  EXPECT_EQ(bare.code, 2) << bare.err;
  EXPECT_NE(bare.err.find("PROGCACHE_MAX_SIZE '5' has no unit"), std::string::npos) << bare.err;
  EXPECT_EQ(run({"stats"}, {"PROGCACHE_MAX_SIZE=5 "}).code, 2) << "a space is no unit";
  for (const char* fine : {"PROGCACHE_MAX_SIZE=0", "PROGCACHE_MAX_SIZE=5000B", "PROGCACHE_MAX_SIZE=5G"}) {
    EXPECT_EQ(run({"stats"}, {fine}).code, 0) << fine;
  }
  // A yes/no switch set to another word is refused, not read as no: a
  // mistyped read-only switch would write where it was meant to only read.
  for (const char* typo : {"PROGCACHE_READONLY=ture", "PROGCACHE_DISABLE=maybe", "PROGCACHE_READONLY=2"}) {
    auto r = run({"put", "k2", file("in2.bin", "v")}, {typo});
    EXPECT_EQ(r.code, 2) << typo << ": " << r.err;
    EXPECT_NE(r.err.find("is not yes or no"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::string(typo).substr(0, std::string(typo).find('='))), std::string::npos) << r.err;
  }
  EXPECT_EQ(run({"get", "k2"}).code, 1) << "a refused setting stored nothing";
  // Spaces around a word, any case, and set-but-empty are what they say.
  auto ro = run({"config"}, {"PROGCACHE_READONLY= Yes "});
  EXPECT_NE(ro.out.find("PROGCACHE_READONLY = yes  (environment)"), std::string::npos) << ro.out;
  EXPECT_EQ(run({"put", "k4", file("in4.bin", "v")}, {"PROGCACHE_DISABLE="}).code, 0);
  EXPECT_EQ(run({"get", "k4"}).out, "v");
  // Turned off by a settings file: the message names the file, not a
  // variable nobody set.
  fs::create_directories(m_tmp.sub("xdg/progcache"));
  const std::string user = file("xdg/progcache/progcache.conf", "disable = yes\n");
  ::chmod(user.c_str(), 0600);
  auto off = run({"put", "k5", file("in5.bin", "v")});
  EXPECT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.err.find("disable = yes in " + user + ":1; nothing stored"), std::string::npos) << off.err;
  EXPECT_EQ(off.err.find("PROGCACHE_DISABLE"), std::string::npos) << off.err;
}

TEST_F(CliTest, AMessageQuotingANameCannotForgeALineOrDriveTheTerminal) {
  // A name holding a line break, ESC and a C1 control (U+009B, which a
  // UTF-8 terminal reads as ESC [): each shown as '?'.
  const std::string name = m_tmp.sub(
      "no-such\nprogcache: stored OK\x1b[2J\xc2\x9b"
      "2J");
  auto r = run({"put", "k", name});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("\xc2\x9b"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such?progcache: stored OK?[2J?2J"), std::string::npos) << r.err;
}

TEST_F(CliTest, AGroupSharedRootIsUsableWithPrivacyAsTheDefault) {
  fs::create_directories(m_tmp.sub("team"));
  ::chmod(m_tmp.sub("team").c_str(), 02770);
  auto refused = run({"--dir", m_tmp.sub("team"), "put", "k", file("v", "shared")});
  EXPECT_EQ(refused.code, 3);
  EXPECT_NE(refused.err.find("writable by group or others"), std::string::npos) << refused.err;
  auto put = run({"--dir", m_tmp.sub("team"), "put", "k", file("v2", "shared")}, {"PROGCACHE_SHARING=group"});
  ASSERT_EQ(put.code, 0) << put.err;
  auto get = run({"--dir", m_tmp.sub("team"), "get", "k"}, {"PROGCACHE_SHARING=group"});
  EXPECT_EQ(get.out, "shared");
  auto config = run({"config"}, {"PROGCACHE_SHARING=group"});
  EXPECT_NE(config.out.find("PROGCACHE_SHARING"), std::string::npos) << config.out;
  EXPECT_EQ(run({"stats"}, {"PROGCACHE_SHARING=world"}).code, 2);
}

TEST_F(CliTest, LsLongJsonAndStats) {
  ASSERT_EQ(run({"put", "a", file("a", "AAAA")}).code, 0);
  ASSERT_EQ(run({"put", "b", file("b", "BB")}).code, 0);
  auto ls = run({"ls"});
  ASSERT_EQ(ls.code, 0);
  EXPECT_NE(ls.out.find(key_from_user("a").hex()), std::string::npos);
  EXPECT_NE(ls.out.find(key_from_user("b").hex()), std::string::npos);
  auto ls_long = run({"ls", "--long"});
  EXPECT_NE(ls_long.out.find('Z'), std::string::npos);  // timestamps
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

// An integration's framework.json beside its store (progcache.jax writes
// JAX's thresholds there) is shown by stats, bounded and printable; anything
// else there shows nothing and fails nothing.
TEST_F(CliTest, StatsShowAFrameworksNotesBesideItsStoreAndNothingOfADamagedFile) {
  const std::string jax_root = cache() + "/jax";
  auto jax = FileStore::open({.root = jax_root});
  ASSERT_TRUE(jax.ok()) << jax.status().to_string();
  const Key k = KeyBuilder("cli-test").add_string("jax", "step").finish();
  ASSERT_TRUE((*jax)->put_bytes(k, Bytes::copy_of(std::string(3000, 'x'))).ok());
  jax->reset();
  const std::string notes = jax_root + "/framework.json";
  testing::write_all(notes, R"({"framework": "jax", "notes": ["JAX writes a program only when\u001b[2J it took 1 s",)"
                            R"( 7, "second"]})");
  auto text = run({"stats"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("jax store"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  JAX writes a program only when?[2J it took 1 s\n  second\n"), std::string::npos)
      << "notes shown, control characters as '?', a note that is not text left out:\n"
      << text.out;
  auto j = nlohmann::json::parse(run({"stats", "--json"}).out);
  ASSERT_EQ(j["companions"].size(), 1u) << j.dump();
  EXPECT_EQ(j["companions"][0]["framework_notes"].size(), 2u) << j.dump();
  for (const std::string& bad : {std::string("{not json"), std::string(R"({"notes": "one"})"),
                                 R"({"notes": [")" + std::string(8000, 'n') + R"("]})"}) {
    testing::write_all(notes, bad);
    auto shown = run({"stats"});
    EXPECT_EQ(shown.code, 0) << shown.err;
    EXPECT_EQ(shown.out.find("  nnn"), std::string::npos) << shown.out;
    auto js = nlohmann::json::parse(run({"stats", "--json"}).out);
    EXPECT_TRUE(js["companions"][0]["framework_notes"].empty()) << bad;
  }
}

TEST_F(CliTest, StatsShowTheHitRateBytesAndTimesInEveryFormatAndZeroClearsThem) {
  // Asking makes nothing: no directory, zeros, and --zero makes none either.
  EXPECT_EQ(run({"stats", "--zero"}).code, 0);
  EXPECT_FALSE(fs::exists(cache()));
  const std::string a(5000, 'a'), b(7000, 'b');
  ASSERT_EQ(run({"put", "a", file("a", a)}).code, 0);
  ASSERT_EQ(run({"put", "b", file("b", b)}).code, 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(run({"get", "a", "-o", m_tmp.sub("o")}).code, 0);
  EXPECT_EQ(run({"get", "none", "-o", m_tmp.sub("o")}).code, 1);
  const std::uint64_t on_disk = testing::entry_bytes_on_disk(cache());
  const std::uint64_t a_file = fs::file_size(cache() + "/v1/" + key_from_user("a").hex().substr(0, 2) + "/" +
                                             key_from_user("a").hex().substr(2));

  auto j = nlohmann::json::parse(run({"stats", "--format", "json"}).out);
  EXPECT_EQ(j["hits"], 3);
  EXPECT_EQ(j["misses"], 1);
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 0.75);
  EXPECT_EQ(j["bytes_written"], on_disk) << "bytes written are the entry files on disk";
  EXPECT_EQ(j["bytes_read"], 3 * a_file);
  EXPECT_EQ(j["get_samples"], 4) << "each run's one lookup is its thread's first, and timed";
  EXPECT_GE(j["get_p99_ns"].get<std::uint64_t>(), j["get_p50_ns"].get<std::uint64_t>());
  EXPECT_GT(j["get_p50_ns"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["put_samples"], 2);

  auto text = run({"stats"});
  EXPECT_NE(text.out.find("hit rate          75.0 %"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("nvcc launcher"), std::string::npos) << "a launcher that never ran shown:\n" << text.out;
  auto prom = run({"stats", "--format", "prometheus"});
  EXPECT_EQ(prom.code, 0);
  EXPECT_NE(prom.out.find("# TYPE progcache_hits_total counter\nprogcache_hits_total{store=\"programs\"} 3\n"),
            std::string::npos)
      << prom.out;
  EXPECT_NE(prom.out.find("progcache_bytes_read_total{store=\"programs\"} " + std::to_string(3 * a_file) + "\n"),
            std::string::npos);
  EXPECT_NE(prom.out.find("progcache_hit_rate{store=\"programs\"} 0.75\n"), std::string::npos);
  EXPECT_NE(prom.out.find("# TYPE progcache_get_p50_seconds gauge"), std::string::npos);
  auto bad = run({"stats", "--format", "yaml"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("yaml"), std::string::npos) << bad.err;

  ASSERT_EQ(run({"stats", "-z"}).code, 0);
  auto zeroed = nlohmann::json::parse(run({"stats", "--json"}).out);
  EXPECT_EQ(zeroed["hits"], 0);
  EXPECT_EQ(zeroed["misses"], 0);
  EXPECT_EQ(zeroed["bytes_read"], 0);
  EXPECT_EQ(zeroed["get_samples"], 0);
  EXPECT_EQ(zeroed["entries"], 2) << "zeroing removed entries";
  EXPECT_EQ(zeroed["bytes_stored"], on_disk);
  EXPECT_EQ(testing::entry_bytes_on_disk(cache()), on_disk);
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
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(run({"put", "k" + std::to_string(i), file("f", std::string(1000, 'x'))}).code, 0);
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

// ---- export / import

// The entry files under a root, by path relative to it (temp files and the
// accounting left out): what a root holds, byte for byte.
std::map<std::string, std::string> entry_files(const std::string& root) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root)) return out;
  for (const auto& f : fs::recursive_directory_iterator(root)) {
    if (!f.is_regular_file()) continue;
    const std::string rel = fs::relative(f.path(), root).string();
    const std::string name = f.path().filename().string();
    const bool in_entries = rel.find("/v1/") != std::string::npos || rel.rfind("v1/", 0) == 0;
    if (name.size() != 62 || !in_entries) continue;
    out[rel] = testing::read_all(f.path().string());
  }
  return out;
}

TEST_F(CliTest, ABundleShowsAProgressBarOnATerminalAndNoneOtherwise) {
  if (std::system("command -v script > /dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1) to give the run a terminal";
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(run({"put", "k" + std::to_string(i), file("in" + std::to_string(i), std::string(2000 + i, 'x'))}).code,
              0);
  }
  // script(1) runs the command on a pseudo-terminal and copies what it
  // wrote there, progress bar included, to its own output.
  // The terminal is 40 columns wide (stty), and every progress line drawn
  // fits it (its content at each width: tests/progress_test.cpp).
  auto on_tty = [&](const std::string& args, const std::string& log) {
    const std::string cmd = "cd " + quote(m_tmp.path()) + " && PROGCACHE_DIR=" + quote(cache()) +
                            " timeout 120 script -qec " +
                            quote("stty cols 40 rows 20; exec " + std::string(PROGCACHE_CLI_PATH) + " " + args) +
                            " /dev/null > " + quote(m_tmp.sub(log)) + " 2>&1 < /dev/null";
    return std::system(cmd.c_str());
  };
  auto widest = [](const std::string& shown) {  // of the progress lines (with a '%')
    std::size_t w = 0, start = 0;
    for (std::size_t i = 0; i <= shown.size(); ++i) {
      if (i == shown.size() || shown[i] == '\r' || shown[i] == '\n') {
        std::string segment = shown.substr(start, i - start);
        for (auto at = segment.find("\x1b[K"); at != std::string::npos; at = segment.find("\x1b[K")) {
          segment.erase(at, 3);  // erase-to-end-of-line takes no column
        }
        if (segment.find('%') != std::string::npos) w = std::max(w, segment.size());
        start = i + 1;
      }
    }
    return w;
  };
  ASSERT_EQ(on_tty("export -o " + m_tmp.sub("t.pcb"), "export.log"), 0);
  const std::string shown = testing::read_all(m_tmp.sub("export.log"));
  EXPECT_NE(shown.find("export  ["), std::string::npos) << shown;
  EXPECT_LE(widest(shown), 39U) << shown;
  ASSERT_TRUE(fs::exists(m_tmp.sub("t.pcb")));
  auto quiet = run({"export", "-o", m_tmp.sub("q.pcb")});
  ASSERT_EQ(quiet.code, 0);
  EXPECT_EQ(quiet.err.find('['), std::string::npos) << "a progress bar where no terminal is: " << quiet.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("t.pcb")).size(), testing::read_all(m_tmp.sub("q.pcb")).size());
  ASSERT_EQ(on_tty("--dir " + m_tmp.sub("other") + " import " + m_tmp.sub("t.pcb"), "import.log"), 0);
  const std::string imported = testing::read_all(m_tmp.sub("import.log"));
  EXPECT_NE(imported.find("import  ["), std::string::npos) << imported;
  EXPECT_LE(widest(imported), 39U) << imported;
  EXPECT_NE(imported.find("imported 20 entries"), std::string::npos) << imported;
  // A message printed part-way (an entry damaged since it was listed) takes
  // the progress line off first: it starts a line of its own, and the line
  // is drawn again after it.
  for (const auto& e : fs::recursive_directory_iterator(cache() + "/v1")) {
    if (e.is_regular_file() && e.path().parent_path().filename().string().size() == 2) {
      fs::resize_file(e.path(), 10);
      break;
    }
  }
  ASSERT_EQ(on_tty("export -o " + m_tmp.sub("d.pcb"), "damaged.log"), 0);
  const std::string damaged = testing::read_all(m_tmp.sub("damaged.log"));
  const std::size_t at = damaged.find("progcache: export: left out");
  ASSERT_NE(at, std::string::npos) << damaged;
  EXPECT_NE(damaged.find("export  ["), std::string::npos) << damaged;
  EXPECT_TRUE(at == 0 || damaged[at - 1] == '\n' || damaged.compare(at - 4, 4, "\r\x1b[K") == 0)
      << "the message follows a progress line: " << damaged;
}

TEST_F(CliTest, ExportAndImportCarryEveryStoreToAnotherRootByteForByte) {
  ASSERT_EQ(run({"put", "a", file("a", std::string(5000, 'a'))}).code, 0);
  ASSERT_EQ(run({"put", "b", file("b", "bee")}).code, 0);
  {
    auto triton = FileStore::open({.root = cache() + "/triton"});
    ASSERT_TRUE(triton.ok()) << triton.status().to_string();
    ASSERT_TRUE((*triton)
                    ->put(KeyBuilder("cli-test").add_string("group", "add").finish(),
                          Entry(R"({"kind":"triton-group","name":"add_kernel"})",
                                {{"add_kernel.cubin", Bytes::copy_of(std::string(300, 'c'))}}))
                    .ok());
    // Created two days ago: outside --since 1d.
    const std::int64_t two_days_ago =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count() -
        std::int64_t{2} * 86400 * 1000000000;
    ASSERT_TRUE((*triton)
                    ->put(KeyBuilder("cli-test").add_string("group", "old").finish(),
                          Entry(R"({"kind":"triton-group","name":"old_kernel"})",
                                {{"old.cubin", Bytes::copy_of(std::string(200, 'o'))}}, two_days_ago))
                    .ok());
  }
  const std::string bundle = m_tmp.sub("warm.pcb");
  auto exp = run({"export", "-o", bundle});
  ASSERT_EQ(exp.code, 0) << exp.err;
  EXPECT_NE(exp.err.find("exported 4 entries"), std::string::npos) << exp.err;
  // One file, nothing else left beside it.
  std::size_t beside = 0;
  for ([[maybe_unused]] const auto& f : fs::directory_iterator(m_tmp.path()))
    beside += f.path().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(beside, 0u);

  const std::string other = m_tmp.sub("other");
  auto imp = run({"--dir", other, "import", bundle});
  ASSERT_EQ(imp.code, 0) << imp.err;
  EXPECT_NE(imp.out.find("imported 4 entries"), std::string::npos) << imp.out;
  // Every entry file of every store, byte for byte, in the same place.
  const auto source_files = entry_files(cache());
  ASSERT_EQ(source_files.size(), 4u);
  EXPECT_EQ(entry_files(other), source_files);
  ASSERT_EQ(run({"--dir", other, "get", "a", "-o", m_tmp.sub("a.out")}).code, 0);
  EXPECT_EQ(testing::read_all(m_tmp.sub("a.out")), std::string(5000, 'a'));
  // The importing root counts what it took, as a put would.
  EXPECT_EQ(nlohmann::json::parse(run({"--dir", other, "stats", "--json"}).out)["entries"], 2);
  // Again: nothing new.
  auto again = run({"--dir", other, "import", bundle});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("imported 0 entries (0 B), 4 already present, 0 refused"), std::string::npos) << again.out;

  // Selections: by program name, by age.
  auto named = run({"export", "--name", "add_*", "-o", m_tmp.sub("named.pcb")});
  ASSERT_EQ(named.code, 0) << named.err;
  EXPECT_NE(named.err.find("exported 1 entries"), std::string::npos) << named.err;
  auto recent = run({"export", "--since", "1d", "-o", m_tmp.sub("recent.pcb")});
  ASSERT_EQ(recent.code, 0) << recent.err;
  EXPECT_NE(recent.err.find("exported 3 entries"), std::string::npos) << recent.err;
  EXPECT_EQ(run({"export", "--since", "30", "-o", m_tmp.sub("x.pcb")}).code, 2);  // no unit
  // To standard output: the same bundle as to a file. (Compared with a
  // fresh one: entries go least recently used first, and this test's own
  // reads of the entry files above were uses to the kernel's atime.)
  ASSERT_EQ(run({"export", "-o", m_tmp.sub("again.pcb")}).code, 0);
  auto piped = run({"export", "-o", "-"});
  ASSERT_EQ(piped.code, 0) << piped.err;
  EXPECT_EQ(piped.out, testing::read_all(m_tmp.sub("again.pcb")));
  // An output directory that does not exist: nothing written.
  EXPECT_EQ(run({"export", "-o", m_tmp.sub("no/such/dir/b.pcb")}).code, 3);
}

TEST_F(CliTest, ImportRefusesWhatFailsVerificationAndTheStoreKeepsNothingOfIt) {
  for (const char* k : {"one", "two", "three"}) {
    ASSERT_EQ(run({"put", k, file(k, std::string(4000, k[0]) + k)}).code, 0);
  }
  const std::string bundle = m_tmp.sub("b.pcb");
  ASSERT_EQ(run({"export", "-o", bundle}).code, 0);
  const std::string good = testing::read_all(bundle);
  const auto target_keys = [&](const std::string& root) {
    std::set<std::string> keys;
    auto ls = run({"--dir", root, "ls"});
    std::istringstream in(ls.out);
    for (std::string line; std::getline(in, line);) keys.insert(line);
    return keys;
  };

  // One entry damaged inside: refused, the others imported, the bundle's
  // digest reported as not matching.
  std::string damaged = good;
  const auto at = damaged.find(std::string(4000, 't') + "two");
  ASSERT_NE(at, std::string::npos);
  damaged[at + 100] ^= 0x01;
  const std::string root1 = m_tmp.sub("r1");
  auto d = run({"--dir", root1, "import", file("damaged.pcb", damaged)});
  EXPECT_EQ(d.code, 3) << d.out << d.err;
  EXPECT_NE(d.out.find("imported 2 entries"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("1 refused"), std::string::npos) << d.out;
  EXPECT_NE(d.err.find("digest does not match"), std::string::npos) << d.err;
  EXPECT_EQ(target_keys(root1), (std::set<std::string>{key_from_user("one").hex(), key_from_user("three").hex()}));

  // Cut short inside the last entry: what came whole before it is imported,
  // the cut entry is not, and the error says so.
  const std::string root2 = m_tmp.sub("r2");
  std::size_t cut_at = 0;
  for (const char* k : {"one", "two", "three"}) {
    const auto at_k = good.find(std::string(4000, k[0]) + k);
    ASSERT_NE(at_k, std::string::npos);
    cut_at = std::max(cut_at, at_k + 50);  // inside the entry that comes last
  }
  auto t = run({"--dir", root2, "import", file("cut.pcb", good.substr(0, cut_at))});
  EXPECT_EQ(t.code, 3);
  EXPECT_NE(t.err.find("cut short"), std::string::npos) << t.err;
  EXPECT_NE(t.out.find("imported 2 entries"), std::string::npos) << t.out;
  EXPECT_EQ(target_keys(root2).size(), 2u);
  EXPECT_EQ(entry_files(root2).size(), 2u) << "a half-written entry was left in the store";

  // A newer format, or not a bundle at all: nothing imported, no root made.
  std::string newer = good;
  newer[8] = 2;
  const std::string root3 = m_tmp.sub("r3");
  auto n = run({"--dir", root3, "import", file("newer.pcb", newer)});
  EXPECT_EQ(n.code, 3);
  EXPECT_NE(n.err.find("version 2 is newer than this progcache reads"), std::string::npos) << n.err;
  EXPECT_NE(n.out.find("imported 0 entries"), std::string::npos) << n.out;
  auto junk = run({"--dir", root3, "import", file("junk.pcb", "this is not a bundle at all")});
  EXPECT_EQ(junk.code, 3);
  EXPECT_NE(junk.err.find("not a progcache bundle"), std::string::npos) << junk.err;
  EXPECT_FALSE(fs::exists(root3));
  EXPECT_EQ(run({"--dir", root3, "import", m_tmp.sub("missing.pcb")}).code, 3);
  EXPECT_FALSE(fs::exists(root3));
}

TEST_F(CliTest, SignedEntriesStaySignedThroughABundleAndAnotherKeysAreRefused) {
  const auto ci_key = testing::make_ed25519_key();
  const auto rogue = testing::make_ed25519_key();
  const std::string sign = "PROGCACHE_SIGNING_KEY_FILE=" + file("ci.pem", ci_key.private_pem);
  const std::string trust_ci = "PROGCACHE_TRUSTED_KEYS_FILE=" + file("ci.pub.pem", ci_key.public_pem);
  const std::string trust_rogue = "PROGCACHE_TRUSTED_KEYS_FILE=" + file("rogue.pub.pem", rogue.public_pem);
  ASSERT_EQ(run({"put", "k1", file("v1", "signed one")}, {sign}).code, 0);
  ASSERT_EQ(run({"put", "k2", file("v2", "signed two")}, {sign}).code, 0);
  const std::string bundle = m_tmp.sub("signed.pcb");
  ASSERT_EQ(run({"export", "-o", bundle}, {sign}).code, 0);

  // Readers that trust another key take none of it.
  const std::string wrong = m_tmp.sub("wrong");
  auto refused = run({"--dir", wrong, "import", bundle}, {trust_rogue});
  EXPECT_EQ(refused.code, 3);
  EXPECT_NE(refused.out.find("imported 0 entries (0 B), 0 already present, 2 refused"), std::string::npos)
      << refused.out;
  EXPECT_TRUE(entry_files(wrong).empty());
  // Readers that trust CI's key take it, signature and all: the entry files
  // are CI's own bytes, and a reader holding only the public key reads them.
  const std::string laptop = m_tmp.sub("laptop");
  auto ok = run({"--dir", laptop, "import", bundle}, {trust_ci});
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_EQ(entry_files(laptop), entry_files(cache()));
  ASSERT_EQ(run({"--dir", laptop, "get", "k1", "-o", m_tmp.sub("o")}, {trust_ci}).code, 0);
  EXPECT_EQ(testing::read_all(m_tmp.sub("o")), "signed one");
  // Unsigned entries into a root that requires signatures: refused too.
  ASSERT_EQ(run({"--dir", m_tmp.sub("plain"), "put", "u", file("u", "unsigned")}).code, 0);
  ASSERT_EQ(run({"--dir", m_tmp.sub("plain"), "export", "-o", m_tmp.sub("plain.pcb")}).code, 0);
  auto unsigned_in = run({"--dir", laptop, "import", m_tmp.sub("plain.pcb")}, {trust_ci});
  EXPECT_EQ(unsigned_in.code, 3);
  EXPECT_NE(unsigned_in.out.find("1 refused"), std::string::npos) << unsigned_in.out;
}

TEST_F(CliTest, AnImportHoldsTheImportingRootsCap) {
  for (int i = 0; i < 20; ++i) {
    const std::string k = "e" + std::to_string(i);
    ASSERT_EQ(run({"put", k, file(k, std::string(10000, static_cast<char>('a' + i)))}).code, 0);
  }
  const std::string bundle = m_tmp.sub("b.pcb");
  ASSERT_EQ(run({"export", "-o", bundle}).code, 0);
  const std::string small = m_tmp.sub("small");
  auto imp = run({"--dir", small, "import", bundle}, {"PROGCACHE_MAX_SIZE=64K"});
  ASSERT_EQ(imp.code, 0) << imp.err;
  std::uint64_t on_disk = 0;
  for (const auto& [path, bytes] : entry_files(small)) on_disk += bytes.size();
  EXPECT_GT(on_disk, 0u);
  EXPECT_LE(on_disk, 64u * 1024) << "entries on disk exceed the cap after an import";
}

TEST_F(CliTest, AnImportThatOverflowsTheCapKeepsTheMostRecentlyUsedAndSaysSo) {
  // 20 entries, each used at a known time: rank[i] is entry i's place in the
  // order of use (0 least recent), unrelated to the order of the keys.
  constexpr int k_entries = 20;
  std::vector<int> rank(k_entries);
  for (int i = 0; i < k_entries; ++i) rank[i] = (i * 7) % k_entries;
  for (int i = 0; i < k_entries; ++i) {
    const std::string k = "e" + std::to_string(i);
    ASSERT_EQ(run({"put", k, file(k, testing::make_payload(10000, static_cast<unsigned>(i)))}).code, 0);
  }
  {
    auto source = FileStore::open({.root = cache()});
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    const std::time_t base = std::time(nullptr) - 3600;
    for (int i = 0; i < k_entries; ++i) {
      const std::string path = (*source)->entry_path(key_from_user("e" + std::to_string(i)));
      // The modification time too: no older than the access time, so a
      // relatime mount does not bump the access time when export reads it.
      const std::time_t used = base + static_cast<std::time_t>(rank[i]) * 60;
      const timespec times[2] = {{used, 0}, {used, 0}};
      ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
      testing::forget_recorded_use(path);
    }
  }
  const std::string bundle = m_tmp.sub("b.pcb");
  ASSERT_EQ(run({"export", "-o", bundle}).code, 0);
  const std::string small = m_tmp.sub("small");
  auto imp = run({"--dir", small, "import", bundle}, {"PROGCACHE_MAX_SIZE=64K"});
  ASSERT_EQ(imp.code, 0) << imp.err;
  // Survivors: the most recently used, every one of them.
  auto store = FileStore::open({.root = small});
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  int kept = 0;
  int lowest_kept_rank = k_entries;
  int highest_evicted_rank = -1;
  for (int i = 0; i < k_entries; ++i) {
    const bool there = fs::exists((*store)->entry_path(key_from_user("e" + std::to_string(i))));
    kept += there ? 1 : 0;
    if (there) lowest_kept_rank = std::min(lowest_kept_rank, rank[i]);
    if (!there) highest_evicted_rank = std::max(highest_evicted_rank, rank[i]);
  }
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, k_entries);
  EXPECT_LT(highest_evicted_rank, lowest_kept_rank) << "an entry used more recently was evicted before one used less";
  EXPECT_EQ(lowest_kept_rank, k_entries - kept);
  // The report says what the cap did.
  EXPECT_NE(imp.out.find("imported 20 entries"), std::string::npos) << imp.out;
  EXPECT_NE(imp.out.find("kept " + std::to_string(kept) + " of the 20 imported (" + std::to_string(k_entries - kept) +
                         " evicted"),
            std::string::npos)
      << imp.out;
}

TEST_F(CliTest, CompanionStoresAreSeenByEveryAdminCommand) {
  // KernelCache's store inside the root, as Python makes it, beside the
  // root's own entries.
  const std::string kernels_root = cache() + "/kernels";
  const Key kernel_key = KeyBuilder("cli-test").add_string("kernel", "gemm").finish();
  auto put_kernel = [&] {
    auto kernels = FileStore::open({.root = kernels_root});
    ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
    ASSERT_TRUE((*kernels)->put_bytes(kernel_key, Bytes::copy_of(std::string(2000, 'k'))).ok());
  };
  auto kernel_entries = [&] {
    auto kernels = FileStore::open({.root = kernels_root});
    return kernels.ok() ? *(*kernels)->count() : 999;
  };
  put_kernel();
  ASSERT_EQ(run({"put", "prog", file("p", "program bytes")}).code, 0);

  auto ls = nlohmann::json::parse(run({"ls", "--json"}).out);
  ASSERT_EQ(ls.size(), 2u) << ls.dump();
  int in_kernels = 0;
  for (const auto& e : ls) in_kernels += e["store"] == "kernels" && e["key"] == kernel_key.hex() ? 1 : 0;
  EXPECT_EQ(in_kernels, 1) << ls.dump();

  auto st = nlohmann::json::parse(run({"stats", "--json"}).out);
  ASSERT_EQ(st["companions"].size(), 1u) << st.dump();
  EXPECT_EQ(st["companions"][0]["name"], "kernels");
  EXPECT_EQ(st["companions"][0]["entries"], 1);
  EXPECT_EQ(st["entries"], 1);  // the root's own count is its own

  // A damaged kernel entry is found and repaired like any other.
  auto kernels = FileStore::open({.root = kernels_root});
  ASSERT_TRUE(kernels.ok());
  const std::string path = (*kernels)->entry_path(kernel_key);
  kernels->reset();
  std::string bytes = testing::read_all(path);
  bytes[bytes.size() / 2] ^= 0x40;
  testing::write_all(path, bytes);
  auto verify = run({"verify"});
  EXPECT_EQ(verify.code, 3) << verify.out;  // damage left: an error, as for the root's own
  EXPECT_NE(verify.out.find("kernels: checked 1, ok 0, damaged 1"), std::string::npos) << verify.out;
  EXPECT_EQ(run({"verify", "--repair"}).code, 0);
  EXPECT_EQ(kernel_entries(), 0u);

  put_kernel();
  auto prune = run({"prune", "--max-size", "1K"});
  ASSERT_EQ(prune.code, 0) << prune.err;
  // The root's entry and the kernel: one prune for the root's stores.
  EXPECT_NE(prune.out.find("removed 2 entries"), std::string::npos) << prune.out;
  EXPECT_NE(prune.out.find("remain in 2 stores"), std::string::npos) << prune.out;
  EXPECT_EQ(kernel_entries(), 0u);

  put_kernel();
  ASSERT_EQ(run({"clear"}).code, 0);
  EXPECT_EQ(kernel_entries(), 0u);
  // A companion store is visited where it exists, never made by looking.
  EXPECT_FALSE(fs::exists(cache() + "/pyptx"));
  // One that cannot be opened (here: group-writable under private sharing)
  // is skipped with a warning; the root's own store is served as ever.
  fs::create_directories(cache() + "/pyptx/v1");
  fs::permissions(cache() + "/pyptx", fs::perms::owner_all | fs::perms::group_all);
  auto stats = run({"stats"});
  EXPECT_EQ(stats.code, 0) << stats.err;
  EXPECT_NE(stats.err.find("skipping the pyptx store"), std::string::npos) << stats.err;
}

TEST_F(CliTest, ConfigListsEveryVariableTheLibraryReadsWithItsSource) {
  const std::string pw_file = file("pw", "password-from-the-file\n");
  auto js = nlohmann::json::parse(run({"config", "--json"}, {"PROGCACHE_NVRTC=/opt/cuda/lib64/libnvrtc.so.13",
                                                             "PROGCACHE_REMOTE_PASSWORD=password-from-the-env",
                                                             "PROGCACHE_REMOTE_PASSWORD_FILE=" + pw_file})
                                      .out);
  std::map<std::string, std::pair<std::string, std::string>> rows;
  for (const auto& s : js) rows[s["name"]] = {s["value"], s["source"]};
  for (const char* name : {"PROGCACHE_DIR",
                           "PROGCACHE_MAX_SIZE",
                           "PROGCACHE_MAX_ENTRIES",
                           "PROGCACHE_DISABLE",
                           "PROGCACHE_DURABILITY",
                           "PROGCACHE_LOCK_TIMEOUT",
                           "PROGCACHE_BASE_DIR",
                           "PROGCACHE_SHARING",
                           "PROGCACHE_REMOTE",
                           "PROGCACHE_REMOTE_PASSWORD_FILE",
                           "PROGCACHE_REMOTE_PASSWORD",
                           "PROGCACHE_READONLY",
                           "PROGCACHE_HMAC_KEY_FILE",
                           "PROGCACHE_NVRTC",
                           "PROGCACHE_NVJITLINK",
                           "PROGCACHE_LIBNVVM",
                           "PROGCACHE_LIBCUDA",
                           "PROGCACHE_COMPRESSION",
                           "PROGCACHE_REMOTE_COMPRESSION",
                           "PROGCACHE_SIGNING_KEY_FILE",
                           "PROGCACHE_TRUSTED_KEYS_FILE",
                           "PROGCACHE_TRITON_WARM_START",
                           "PROGCACHE_TILELANG",
                           "PROGCACHE_TORCH"}) {
    EXPECT_EQ(rows.count(name), 1u) << name << " is not listed";
  }
  EXPECT_EQ(rows.size(), 24u);
  EXPECT_EQ(rows["PROGCACHE_LOCK_TIMEOUT"], std::make_pair(std::string("600 s"), std::string("default")));
  // The Python switches are listed too (read by the interpreter's start hook).
  EXPECT_EQ(rows["PROGCACHE_TORCH"], std::make_pair(std::string("no"), std::string("default")));
  // Triton's memo is on by default where progcache's manager is Triton's
  // (python/autoload/_progcache_autoload.py decides the same way).
  auto triton_rows = [&](std::vector<std::string> env) {
    std::map<std::string, std::string> out;
    for (const auto& s : nlohmann::json::parse(run({"config", "--json"}, std::move(env)).out)) {
      out[s["name"]] = s["value"];
    }
    return out["PROGCACHE_TRITON_WARM_START"];
  };
  EXPECT_EQ(triton_rows({}), "no");
  EXPECT_EQ(triton_rows({"TRITON_CACHE_MANAGER= progcache.triton:CacheManager "}),
            "yes (TRITON_CACHE_MANAGER names progcache's manager)");
  EXPECT_EQ(triton_rows({"TRITON_CACHE_MANAGER=progcache.triton:CacheManager", "PROGCACHE_TRITON_WARM_START=0"}), "no");
  EXPECT_EQ(triton_rows({"TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager"}), "no");
  // Compression: off on disk, zstd level 1 on the wire, unless set.
  EXPECT_EQ(
      rows["PROGCACHE_COMPRESSION"],
      std::make_pair(std::string("off (the nvcc, Triton and torch stores: zstd level 1)"), std::string("default")));
  EXPECT_EQ(rows["PROGCACHE_REMOTE_COMPRESSION"], std::make_pair(std::string("zstd level 1"), std::string("default")));
  auto set = run({"config"}, {"PROGCACHE_COMPRESSION=3", "PROGCACHE_REMOTE_COMPRESSION=off"});
  EXPECT_NE(set.out.find("PROGCACHE_COMPRESSION = zstd level 3  (environment)"), std::string::npos) << set.out;
  EXPECT_NE(set.out.find("PROGCACHE_REMOTE_COMPRESSION = off  (environment)"), std::string::npos) << set.out;
  for (const char* bad :
       {"PROGCACHE_COMPRESSION=20", "PROGCACHE_COMPRESSION=fast", "PROGCACHE_REMOTE_COMPRESSION=-1"}) {
    auto r = run({"config"}, {bad});
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos) << r.err;
  }
  // A library override is shown with where it came from; unset, what is searched.
  EXPECT_EQ(rows["PROGCACHE_NVRTC"],
            std::make_pair(std::string("/opt/cuda/lib64/libnvrtc.so.13"), std::string("environment")));
  EXPECT_NE(rows["PROGCACHE_LIBCUDA"].first.find("searched"), std::string::npos);
  EXPECT_EQ(rows["PROGCACHE_LIBCUDA"].second, "default");
  // Of two password sources the file wins, and the listing says so; neither
  // password is shown.
  EXPECT_NE(rows["PROGCACHE_REMOTE_PASSWORD"].first.find("ignored"), std::string::npos);
  EXPECT_EQ(js.dump().find("password-from-the"), std::string::npos) << js.dump();
}

TEST_F(CliTest, ABaseDirectoryIsAnAbsolutePlainDirectoryOrSaidToBeNone) {
  // Shown as set, a trailing slash dropped.
  auto ok = run({"config"}, {"PROGCACHE_BASE_DIR=/home/me/"});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("PROGCACHE_BASE_DIR = /home/me  (environment)"), std::string::npos) << ok.out;
  // Relative, "/", spelled with "..", or holding a space or a comma: said
  // by name, and the command fails as for any bad setting.
  for (const char* bad : {"home/me", "/", "/home/me/../you", "/home/a b", "/home/a,b"}) {
    auto r = run({"config"}, {std::string("PROGCACHE_BASE_DIR=") + bad});
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find("PROGCACHE_BASE_DIR"), std::string::npos) << bad << ": " << r.err;
  }
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

TEST_F(CliTest, ConventionsACcacheUserExpects) {
  // An unknown subcommand names itself (and the known ones).
  auto bogus = run({"bogus"});
  EXPECT_EQ(bogus.code, 2);
  EXPECT_NE(bogus.err.find("unknown subcommand 'bogus'"), std::string::npos) << bogus.err;
  EXPECT_NE(bogus.err.find("compile"), std::string::npos) << bogus.err;
  // A duration without a unit is a usage error, as in ccache; with one it works.
  auto unitless = run({"prune", "--older-than", "30"});
  EXPECT_EQ(unitless.code, 2);
  EXPECT_NE(unitless.err.find("needs a unit"), std::string::npos) << unitless.err;
  // A bad --arch names itself before any compiler runs.
  auto arch = run({"compile", file("k.cu", "extern \"C\" __global__ void k() {}"), "--arch", "banana"});
  EXPECT_EQ(arch.code, 2);
  EXPECT_NE(arch.err.find("'banana'"), std::string::npos) << arch.err;
  // Looking at a cache directory that does not exist makes nothing.
  ASSERT_FALSE(std::filesystem::exists(cache()));
  auto ls = run({"ls", "--long"});
  EXPECT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(run({"get", "k", "-o", m_tmp.sub("o")}).code, 1);
  auto stats = run({"stats", "--json"});
  EXPECT_EQ(stats.code, 0) << stats.err;
  EXPECT_EQ(nlohmann::json::parse(stats.out)["exists"], false);
  EXPECT_EQ(run({"verify"}).code, 0);
  EXPECT_EQ(run({"prune", "--older-than", "30d"}).code, 0);
  EXPECT_EQ(run({"clear"}).code, 0);
  EXPECT_FALSE(std::filesystem::exists(cache())) << "a command that only looks made the cache directory";
  // ls --long: a header, human sizes, the store of each entry.
  ASSERT_EQ(run({"put", "k", file("v", std::string(3000, 'x'))}).code, 0);
  auto long_ls = run({"ls", "--long"});
  EXPECT_EQ(long_ls.out.rfind("KEY ", 0), 0u) << long_ls.out;
  EXPECT_NE(long_ls.out.find("SIZE"), std::string::npos);
  EXPECT_NE(long_ls.out.find(" KiB"), std::string::npos) << long_ls.out;
  EXPECT_NE(long_ls.out.find("programs"), std::string::npos) << long_ls.out;
  // --version says what this build has.
  auto version = run({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_NE(version.out.find("remote tiers:"), std::string::npos) << version.out;
  EXPECT_NE(version.out.find("signing: HMAC-SHA256, Ed25519"), std::string::npos) << version.out;
}

// ---- ccache's flags: -s, -z, -C, -M, -V, -p

TEST_F(CliTest, CcacheShowStatsIsStats) {
  ASSERT_EQ(run({"put", "k", file("v", std::string(3000, 'x'))}).code, 0);
  ASSERT_EQ(run({"get", "k", "-o", m_tmp.sub("o")}).code, 0);
  auto s = run({"-s"});
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out, run({"stats"}).out);
  EXPECT_NE(s.out.find("hit rate          100.0 %"), std::string::npos) << s.out;
  EXPECT_EQ(run({"--show-stats"}).out, s.out);
  // The words after the flag are the command's.
  auto js = run({"-s", "--json"});
  ASSERT_EQ(js.code, 0) << js.err;
  EXPECT_EQ(nlohmann::json::parse(js.out)["hits"], 1);
  // Global options before the flag name the root.
  const std::string other = m_tmp.sub("other");
  auto elsewhere = run({"--dir", other, "-s"});
  EXPECT_EQ(elsewhere.code, 0) << elsewhere.err;
  EXPECT_NE(elsewhere.out.find(other + " (does not exist yet)"), std::string::npos) << elsewhere.out;
}

TEST_F(CliTest, CcacheZeroStatsZeroesWhatStatsShows) {
  ASSERT_EQ(run({"put", "k", file("v", std::string(3000, 'x'))}).code, 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(run({"get", "k", "-o", m_tmp.sub("o")}).code, 0);
  EXPECT_EQ(run({"get", "absent", "-o", m_tmp.sub("o")}).code, 1);
  ASSERT_EQ(nlohmann::json::parse(run({"stats", "--json"}).out)["hits"], 2);
  auto z = run({"-z"});
  EXPECT_EQ(z.code, 0) << z.err;
  EXPECT_EQ(z.out, "statistics zeroed\n");
  auto after = nlohmann::json::parse(run({"stats", "--json"}).out);
  EXPECT_EQ(after["hits"], 0);
  EXPECT_EQ(after["misses"], 0);
  EXPECT_EQ(after["puts"], 0);
  EXPECT_EQ(after["entries"], 1) << "zeroing the statistics removed an entry";
  EXPECT_NE(run({"stats"}).out.find("hit rate          -\n"), std::string::npos);
  // Together, in ccache's order: shown, then zeroed.
  ASSERT_EQ(run({"get", "k", "-o", m_tmp.sub("o")}).code, 0);
  auto sz = run({"-sz"});
  EXPECT_EQ(sz.code, 0) << sz.err;
  EXPECT_NE(sz.out.find("hit rate          100.0 %"), std::string::npos) << sz.out;
  EXPECT_NE(sz.out.find("statistics zeroed\n"), std::string::npos) << sz.out;
  EXPECT_LT(sz.out.find("hit rate"), sz.out.find("statistics zeroed"));
  EXPECT_EQ(nlohmann::json::parse(run({"stats", "--json"}).out)["hits"], 0);
  EXPECT_EQ(run({"--zero-stats"}).code, 0);
}

TEST_F(CliTest, CcacheClearEmptiesTheStoreOnDisk) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(run({"put", "k" + std::to_string(i), file("v", std::string(2000, 'x'))}).code, 0);
  }
  ASSERT_GT(testing::entry_bytes_on_disk(cache()), 0u);
  auto c = run({"-C"});
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(testing::entry_bytes_on_disk(cache()), 0u) << "entry files are left on disk";
  EXPECT_EQ(run({"ls"}).out, "");
  EXPECT_EQ(run({"get", "k0", "-o", m_tmp.sub("o")}).code, 1);
  ASSERT_EQ(run({"put", "k", file("v", "again")}).code, 0);
  EXPECT_EQ(run({"--clear"}).code, 0);
  EXPECT_EQ(testing::entry_bytes_on_disk(cache()), 0u);
}

TEST_F(CliTest, CcacheMaxSizeSetsTheRootsCapInItsSettingsFile) {
  const std::string conf = cache() + "/progcache.conf";
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"-M", "8K"}, {"-M8K"}, {"--max-size", "8K"}, {"--max-size=8K"}}) {
    auto m = run(args);
    EXPECT_EQ(m.code, 0) << args[0] << ": " << m.err;
    EXPECT_EQ(m.out, "max_size = 8.0 KiB  (written to " + conf + ")\n") << args[0];
    EXPECT_EQ(testing::read_all(conf), "max_size = 8K\n");
  }
  // Every program that opens the root now keeps it under the cap: what is
  // on disk, with no variable set.
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(run({"put", "k" + std::to_string(i), file("v", testing::make_payload(3000, i))}).code, 0);
  }
  EXPECT_LE(testing::entry_bytes_on_disk(cache()), 8U * 1024);
  EXPECT_EQ(run({"get", "k7", "-o", m_tmp.sub("o")}).code, 0) << "the newest entry was evicted";
  auto shown = run({"config"});
  EXPECT_NE(shown.out.find("PROGCACHE_MAX_SIZE = 8.0 KiB  (" + conf + ":1)"), std::string::npos) << shown.out;
  // The environment still wins, and -M says so.
  auto env = run({"-M", "1G"}, {"PROGCACHE_MAX_SIZE=2G"});
  EXPECT_EQ(env.code, 0) << env.err;
  EXPECT_NE(env.err.find("PROGCACHE_MAX_SIZE is set in this environment, which wins over the file"), std::string::npos)
      << env.err;
  // --dir names the root whose file is written.
  const std::string other = m_tmp.sub("other");
  ASSERT_EQ(run({"--dir", other, "-M", "2G"}).code, 0);
  EXPECT_EQ(testing::read_all(other + "/progcache.conf"), "max_size = 2G\n");
  // A size without a unit (ccache reads -M 5 as 5 GB), a bad one, none: a
  // usage error naming it, and the file unchanged.
  auto bare = run({"-M", "5"});
  EXPECT_EQ(bare.code, 2);
  EXPECT_NE(bare.err.find("max_size '5' has no unit: write B, K, M, G or T (e.g. 5G)"), std::string::npos) << bare.err;
  auto bad = run({"-M", "10Q"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("10Q"), std::string::npos) << bad.err;
  auto none = run({"-M"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("-M needs a SIZE"), std::string::npos) << none.err;
  EXPECT_EQ(testing::read_all(conf), "max_size = 1G\n");
  // -M 0 is no cap, as in ccache.
  ASSERT_EQ(run({"-M", "0"}).code, 0);
  EXPECT_NE(run({"config"}).out.find("PROGCACHE_MAX_SIZE = unlimited  (" + conf + ":1)"), std::string::npos);
}

TEST_F(CliTest, OneCapBoundsEveryStoreOfTheRoot) {
  // A companion store (as Python's KernelCache makes) holds five old
  // entries; the root's cap is then set to 40 KiB and the CLI puts five new
  // ones: the two stores together stay under the cap, the old ones go first.
  const std::string kernels_root = cache() + "/kernels";
  {
    auto kernels = FileStore::open({.root = kernels_root, .max_size_bytes = std::nullopt});
    ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
    for (int i = 0; i < 5; ++i) {
      const Key k = testing::make_key(500 + i);
      ASSERT_TRUE((*kernels)->put(k, testing::make_entry(testing::make_payload(10000, i))).ok());
      struct timespec old[2] = {{1000000000 + i, 0}, {1000000000 + i, 0}};
      ASSERT_EQ(::utimensat(AT_FDCWD, (*kernels)->entry_path(k).c_str(), old, AT_SYMLINK_NOFOLLOW), 0);
      testing::forget_recorded_use((*kernels)->entry_path(k));
    }
  }
  ASSERT_EQ(run({"-M", "40K"}).code, 0);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(run({"put", "new" + std::to_string(i), file("v", testing::make_payload(10000, 10 + i))}).code, 0);
  }
  EXPECT_LE(testing::entry_bytes_on_disk(cache()) + testing::entry_bytes_on_disk(kernels_root), 40U * 1024);
  EXPECT_EQ(testing::entry_files_on_disk(kernels_root), 0U) << "old entries outlived new ones";
  EXPECT_EQ(run({"get", "new4", "-o", m_tmp.sub("o")}).code, 0);
  // prune --max-size bounds both together too.
  auto prune = run({"prune", "--max-size", "15K"});
  ASSERT_EQ(prune.code, 0) << prune.err;
  EXPECT_LE(testing::entry_bytes_on_disk(cache()) + testing::entry_bytes_on_disk(kernels_root), 15U * 1024);
}

TEST_F(CliTest, ConfigSetWritesTheUsersFileAndEveryCommandReadsIt) {
  const std::string user = m_tmp.sub("xdg/progcache/progcache.conf");
  const std::string root = m_tmp.sub("from-file");
  // dir cannot come from a file while PROGCACHE_DIR is set (run() sets it):
  // an empty variable is an unset one.
  auto set = run({"config", "set", "dir", root});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_EQ(set.out, "dir = " + root + "  (written to " + user + ")\n");
  EXPECT_EQ(testing::read_all(user), "dir = " + root + "\n");
  auto put = run({"put", "k", file("v", "from the file's root")}, {"PROGCACHE_DIR="});
  ASSERT_EQ(put.code, 0) << put.err;
  EXPECT_EQ(testing::entry_files_on_disk(root), 1U);
  EXPECT_EQ(testing::entry_files_on_disk(cache()), 0U);
  // Settings that are not the file's to hold, or unknown: usage errors.
  for (const auto& args : std::vector<std::vector<std::string>>{{"config", "set", "torch", "1"},
                                                                {"config", "set", "remote_password", "pw"},
                                                                {"config", "set", "max_sise", "1G"},
                                                                {"config", "set", "remote", "redis://h:1", "--root"},
                                                                {"config", "set", "compression", "99"}}) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args[2] << ": " << r.err;
  }
  ASSERT_EQ(run({"config", "unset", "dir"}).code, 0);
  EXPECT_EQ(testing::read_all(user), "");
}

TEST_F(CliTest, ABadSettingsFileIsAUsageErrorNamingItsLine) {
  fs::create_directories(m_tmp.sub("xdg/progcache"));
  const std::string user = file("xdg/progcache/progcache.conf", "max_size = 2G\ncompresion = 3\n");
  for (const auto& args : std::vector<std::vector<std::string>>{{"stats"}, {"config"}, {"put", "k", user}}) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_EQ(r.err, "progcache: " + user + ":2: unknown setting 'compresion' (progcache config lists every setting)\n")
        << args[0];
  }
  EXPECT_EQ(testing::entry_files_on_disk(cache()), 0U);
  // config set repairs a bad value (the file's other lines kept); the
  // other commands then read the file again.
  testing::write_all(user, "readonly = yes\nmax_size = 5\n");
  EXPECT_EQ(run({"stats"}).code, 2);
  auto repair = run({"config", "set", "max_size", "5G", "--user"});
  EXPECT_EQ(repair.code, 0) << repair.err;
  EXPECT_EQ(testing::read_all(user), "readonly = yes\nmax_size = 5G\n");
  EXPECT_EQ(run({"stats"}).code, 0);
  // Control characters a file holds never reach the terminal.
  testing::write_all(user, "max_size = 5G\x1b[2J\n");
  auto escaped = run({"config"});
  EXPECT_EQ(escaped.code, 2);
  EXPECT_EQ(escaped.err.find('\x1b'), std::string::npos) << escaped.err;
  // An empty --dir would be the working directory: refused.
  EXPECT_EQ(run({"--dir", "", "-M", "1G"}).code, 2);
  testing::write_all(user, "max_size = 2G\n");
  ::chmod(user.c_str(), 0666);
  auto open = run({"config"});
  EXPECT_EQ(open.code, 2);
  EXPECT_NE(open.err.find("'" + user + "' is writable by other users (mode 0666): not read; make it private"),
            std::string::npos)
      << open.err;
}

TEST_F(CliTest, CcacheVersionAndShowConfig) {
  auto v = run({"-V"});
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_EQ(v.out.rfind("progcache ", 0), 0u) << v.out;
  EXPECT_EQ(v.out, run({"--version"}).out);
  auto p = run({"-p"}, {"PROGCACHE_MAX_SIZE=3G"});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, run({"config"}, {"PROGCACHE_MAX_SIZE=3G"}).out);
  EXPECT_NE(p.out.find("PROGCACHE_MAX_SIZE = 3.0 GiB  (environment)"), std::string::npos) << p.out;
  EXPECT_EQ(run({"--show-config"}).code, 0);
  // An unknown letter among ccache's is a usage error naming it.
  auto bad = run({"-sq"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("'-q'"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out, "") << "a flag before the bad one ran";
  for (const char* other : {"-q", "--recompress"}) {
    auto unknown = run({other});
    EXPECT_EQ(unknown.code, 2);
    EXPECT_NE(unknown.err.find("unknown option '" + std::string(other) + "'"), std::string::npos) << unknown.err;
    EXPECT_NE(unknown.err.find("-s, -z, -C, -M, -V and -p"), std::string::npos) << unknown.err;
  }
  // ccache's options whose job a progcache command does name that command.
  for (const auto& [ccache, command] :
       std::vector<std::pair<std::string, std::string>>{{"-c", "progcache prune"},
                                                        {"--cleanup", "progcache prune"},
                                                        {"-o", "progcache config set"},
                                                        {"--evict-older-than=1d", "progcache prune --older-than"},
                                                        {"-k", "progcache config"},
                                                        {"-x", "progcache stats"}}) {
    auto r = run({ccache});
    EXPECT_EQ(r.code, 2) << ccache;
    EXPECT_NE(r.err.find("'" + command), std::string::npos) << ccache << ": " << r.err;
  }
}

// Messages are the user's words: the library's code names ("invalid_argument",
// "data_loss") decide the exit code and are never printed.
TEST_F(CliTest, ErrorMessagesCarryNoStatusCodeNames) {
  ASSERT_EQ(run({"put", "k", file("v", "value")}).code, 0);
  const std::vector<std::pair<CliRun, int>> runs = {
      {run({"get", std::string(63, 'a') + "z"}), 2},
      {run({"prune", "--max-size", "10Q"}), 2},
      {run({"stats"}, {"PROGCACHE_MAX_SIZE=10Q"}), 2},
      {run({"put", "k", m_tmp.sub("does-not-exist")}), 3},
      {run({"--dir", file("plain-file", "x"), "stats"}), 3},
      {run({"import", file("junk.pcb", "this is not a bundle at all")}), 3},
  };
  for (const auto& [r, code] : runs) {
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(r.err.rfind("progcache: ", 0), 0u) << r.err;
    for (const char* name :
         {"invalid_argument", "not_found", "data_loss", "unavailable", "deadline_exceeded", "permission_denied",
          "resource_exhausted", "compile_error", "internal:", "failed_precondition"}) {
      EXPECT_EQ(r.err.find(name), std::string::npos) << r.err;
    }
  }
}

TEST_F(CliTest, SigningKeyNeverAppearsInErrors) {
  const std::string short_key = file("short.key", "tiny-secret");
  auto r = run({"stats"}, {"PROGCACHE_HMAC_KEY_FILE=" + short_key});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("shorter than 16 bytes"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("tiny-secret"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("tiny-secret"), std::string::npos);
  const std::string good_key = file("good.key", "a-long-enough-signing-secret-0123");
  ASSERT_EQ(run({"put", "k", file("v", "value")}, {"PROGCACHE_HMAC_KEY_FILE=" + good_key}).code, 0);
  auto signed_get = run({"get", "k", "-o", m_tmp.sub("o")}, {"PROGCACHE_HMAC_KEY_FILE=" + good_key});
  EXPECT_EQ(signed_get.code, 0);
  auto ls = run({"ls", "--long"}, {"PROGCACHE_HMAC_KEY_FILE=" + good_key});
  auto stats = run({"stats"}, {"PROGCACHE_HMAC_KEY_FILE=" + good_key});
  for (const auto& text : {ls.out, ls.err, stats.out, stats.err, signed_get.err}) {
    EXPECT_EQ(text.find("a-long-enough-signing-secret"), std::string::npos);
  }
}

TEST_F(CliTest, DisableMakesGetMissAndPutStoreNothing) {
  ASSERT_EQ(run({"put", "k", file("a", "A")}).code, 0);
  EXPECT_EQ(run({"get", "k", "-o", m_tmp.sub("o")}, {"PROGCACHE_DISABLE=1"}).code, 1);
  EXPECT_EQ(run({"put", "j", file("b", "B")}, {"PROGCACHE_DISABLE=yes"}).code, 0);
  EXPECT_EQ(run({"get", "j", "-o", m_tmp.sub("o")}).code, 1);
}

// A disabled cache is never opened: not even a root that could not be (a
// file), and a bad key or output is refused before any directory is made.
TEST_F(CliTest, DisabledOrRefusedCommandsNeverTouchTheCacheRoot) {
  const std::string root = file("not-a-dir", "a file where the root should be");
  EXPECT_EQ(run({"--dir", root, "get", "k", "-o", m_tmp.sub("o")}, {"PROGCACHE_DISABLE=1"}).code, 1);
  EXPECT_EQ(run({"--dir", root, "put", "k", file("a", "A")}, {"PROGCACHE_DISABLE=1"}).code, 0);
  EXPECT_EQ(testing::read_all(root), "a file where the root should be");
  const std::string fresh = m_tmp.sub("fresh-root");
  auto bad_key = run({"--dir", fresh, "get", std::string(64, 'z')});
  EXPECT_EQ(bad_key.code, 2) << bad_key.err;
  auto bad_out = run({"--dir", fresh, "get", "k", "-o", m_tmp.sub("no/such/dir/o")});
  EXPECT_EQ(bad_out.code, 3) << bad_out.err;
  struct stat st {};
  EXPECT_NE(::stat(fresh.c_str(), &st), 0) << "a refused command created the cache root";
}

// Under a cap that holds two entries, `put a; put b; get a; put c` evicts b,
// the entry read least recently, though every step lies within a minute.
TEST_F(CliTest, UnderACapTheEntryReadLeastRecentlyGoesFirst) {
  const std::string payload = file("p", testing::make_payload(2000, 1));
  ASSERT_EQ(run({"--dir", m_tmp.sub("probe"), "put", "a", payload}).code, 0);
  auto probe = FileStore::open({.root = m_tmp.sub("probe")});
  ASSERT_TRUE(probe.ok());
  const auto entry = std::filesystem::file_size((*probe)->entry_path(key_from_user("a")));
  const std::string cap = "PROGCACHE_MAX_SIZE=" + std::to_string(entry * 5 / 2) + "B";
  for (const auto& step : std::vector<std::vector<std::string>>{
           {"put", "a", payload}, {"put", "b", payload}, {"get", "a", "-o", m_tmp.sub("o")}, {"put", "c", payload}}) {
    ASSERT_EQ(run(step, {cap}).code, 0) << step[0] << " " << step[1];
  }
  EXPECT_EQ(run({"get", "a", "-o", m_tmp.sub("o")}, {cap}).code, 0) << "a, read after b was written, was evicted";
  EXPECT_NE(run({"get", "b", "-o", m_tmp.sub("o")}, {cap}).code, 0);
  EXPECT_EQ(run({"get", "c", "-o", m_tmp.sub("o")}, {cap}).code, 0);
  EXPECT_EQ(testing::entry_files_on_disk(cache()), 2u);
}

TEST_F(CliTest, EntryCapFromEnvironmentIsEnforced) {
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(run({"put", "k" + std::to_string(i), file("f", "x")}, {"PROGCACHE_MAX_ENTRIES=5"}).code, 0);
  }
  auto st = nlohmann::json::parse(run({"stats", "--json"}, {"PROGCACHE_MAX_ENTRIES=5"}).out);
  EXPECT_LE(st["entries"].get<int>(), 5);
  EXPECT_EQ(st["max_entries"], 5);
  // On disk, not only in the accounting.
  EXPECT_LE(testing::entry_files_on_disk(cache()), 5u);
  EXPECT_EQ(st["entries"].get<std::size_t>(), testing::entry_files_on_disk(cache()));
}

#ifdef PROGCACHE_WITH_REDIS
TEST_F(CliTest, TwoCacheDirectoriesShareEntriesThroughRemote) {
  if (testing::RedisServer::binary().empty()) GTEST_SKIP() << "redis-server not installed";
  testing::RedisServer server({"--requirepass", "cli-secret-pw"});
  ASSERT_TRUE(server.running());
  const std::string url = "redis://:cli-secret-pw@127.0.0.1:" + std::to_string(server.port());
  ASSERT_EQ(run({"--remote", url, "put", "shared-key", file("v", "from machine one")}).code, 0);
  // Another machine: another cache directory, the same Redis.
  auto get =
      run({"--dir", m_tmp.sub("machine2"), "get", "shared-key", "-o", m_tmp.sub("o")}, {"PROGCACHE_REMOTE=" + url});
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("o")), "from machine one");
  // Backfilled into machine 2's disk: a hit without the remote now.
  EXPECT_EQ(run({"--dir", m_tmp.sub("machine2"), "get", "shared-key", "-o", m_tmp.sub("o2")}).code, 0);
  // Both lookups were served, the first by the remote tier: two hits in
  // machine 2's statistics, no miss (the disk's look before the remote's
  // answer is not the lookup's outcome).
  auto served = nlohmann::json::parse(run({"--dir", m_tmp.sub("machine2"), "stats", "--json"}).out);
  EXPECT_EQ(served["root"]["hits"], 2) << served.dump();
  EXPECT_EQ(served["root"]["misses"], 0) << served.dump();
  auto stats = run({"stats", "--json"}, {"PROGCACHE_REMOTE=" + url});
  ASSERT_EQ(stats.code, 0);
  auto js = nlohmann::json::parse(stats.out);
  EXPECT_EQ(js["remote"][0]["entries"], 1);
  // Prometheus carries the remote tier too, its URL as shown elsewhere.
  auto prom = run({"stats", "--format", "prometheus"}, {"PROGCACHE_REMOTE=" + url});
  ASSERT_EQ(prom.code, 0) << prom.err;
  const std::string shown_url = js["remote"][0]["url"].get<std::string>();
  EXPECT_NE(prom.out.find("progcache_remote_up{url=\"" + shown_url + "\",tier=\"0\"} 1\n"), std::string::npos)
      << prom.out;
  EXPECT_NE(prom.out.find("progcache_remote_entries{url=\"" + shown_url + "\",tier=\"0\"} 1\n"), std::string::npos)
      << prom.out;
  // A URL holding a quote and a backslash is escaped as the format says.
  auto odd = run({"stats", "--format", "prometheus"}, {"PROGCACHE_REMOTE=redis://a\"b\\c:1/0"});
  EXPECT_NE(odd.out.find("progcache_remote_up{url=\"redis://a\\\"b\\\\c:1"), std::string::npos) << odd.out;
  auto config = run({"config", "--remote", url});
  for (const auto& text : {stats.out, stats.err, config.out, config.err, get.err, prom.out}) {
    EXPECT_EQ(text.find("cli-secret-pw"), std::string::npos) << text;
  }
  EXPECT_NE(config.out.find(":***@127.0.0.1"), std::string::npos) << config.out;
  // Read-only consumers never write.
  ASSERT_EQ(run({"--dir", m_tmp.sub("machine3"), "put", "ro-key", file("w", "x")},
                {"PROGCACHE_REMOTE=" + url, "PROGCACHE_READONLY=1"})
                .code,
            0);
  EXPECT_EQ(server.command({"AUTH", "cli-secret-pw"}), "OK");
  // A dead remote: local tiers go on; a malformed URL is a usage error.
  server.kill();
  auto down = run({"--dir", m_tmp.sub("machine4"), "put", "k", file("z", "local")}, {"PROGCACHE_REMOTE=" + url});
  EXPECT_EQ(down.code, 0) << down.err;
  EXPECT_EQ(run({"--dir", m_tmp.sub("machine4"), "get", "k", "-o", m_tmp.sub("o3")}, {"PROGCACHE_REMOTE=" + url}).code,
            0);
  auto bad = run({"stats"}, {"PROGCACHE_REMOTE=redis://user:pw-in-bad-url@host:notaport"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err.find("pw-in-bad-url"), std::string::npos) << bad.err;
}

TEST_F(CliTest, RemotePasswordFromAFileAndWarningsForCommandLinesAndRefusals) {
  if (testing::RedisServer::binary().empty()) GTEST_SKIP() << "redis-server not installed";
  testing::RedisServer server({"--requirepass", "filed-secret"});
  ASSERT_TRUE(server.running());
  const std::string bare = "redis://127.0.0.1:" + std::to_string(server.port());
  const std::string pw_file = file("remote-password", "filed-secret\n");
  // The password from a file: nothing secret on the command line or in the
  // environment, no warning, and the remote is written.
  auto put = run({"--remote", bare, "put", "filed-key", file("v", "via the file")},
                 {"PROGCACHE_REMOTE_PASSWORD_FILE=" + pw_file});
  ASSERT_EQ(put.code, 0) << put.err;
  EXPECT_EQ(put.err.find("warning"), std::string::npos) << put.err;
  EXPECT_EQ(server.command({"DBSIZE"}).find("ERR"), std::string::npos);
  auto config = run({"config"}, {"PROGCACHE_REMOTE_PASSWORD_FILE=" + pw_file, "PROGCACHE_REMOTE=" + bare});
  EXPECT_NE(config.out.find("PROGCACHE_REMOTE_PASSWORD_FILE"), std::string::npos) << config.out;
  EXPECT_EQ(config.out.find("filed-secret"), std::string::npos) << config.out;
  // Read back on another machine through the file too.
  auto get = run({"--dir", m_tmp.sub("machine2"), "--remote", bare, "get", "filed-key"},
                 {"PROGCACHE_REMOTE_PASSWORD_FILE=" + pw_file});
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(get.out, "via the file");
  // A password on the command line works, with a warning that names the
  // risk and never the password.
  const std::string with_pw = "redis://:filed-secret@127.0.0.1:" + std::to_string(server.port());
  auto visible = run({"--remote", with_pw, "get", "filed-key"});
  EXPECT_EQ(visible.code, 0) << visible.err;
  EXPECT_NE(visible.err.find("visible to every local user"), std::string::npos) << visible.err;
  EXPECT_EQ(visible.err.find("filed-secret"), std::string::npos) << visible.err;
  // No password, or a wrong one: the local tiers still serve, and the user
  // is told that authentication failed.
  for (const std::string& url : {bare, "redis://:wrong-one@127.0.0.1:" + std::to_string(server.port())}) {
    auto refused = run({"--dir", m_tmp.sub("machine3"), "get", "filed-key"}, {"PROGCACHE_REMOTE=" + url});
    EXPECT_EQ(refused.code, 1) << refused.err;  // a miss: the remote could not be asked
    EXPECT_NE(refused.err.find("authentication failed"), std::string::npos) << refused.err;
    EXPECT_EQ(refused.err.find("wrong-one"), std::string::npos) << refused.err;
  }
}
#endif

#ifdef PROGCACHE_WITH_REDIS
TEST_F(CliTest, TwoCacheDirectoriesShareEntriesThroughARedisCluster) {
  if (!testing::RedisCluster::missing().empty()) GTEST_SKIP() << testing::RedisCluster::missing();
  testing::RedisCluster cluster;
  ASSERT_TRUE(cluster.ready());
  // PROGCACHE_REMOTE separates URLs by ',', and the cluster's seeds too.
  const std::vector<std::string> env = {"PROGCACHE_REMOTE=" + cluster.url("prefix=cli:", 3)};
  for (int i = 0; i < 20; ++i) {
    auto put = run({"put", "key-" + std::to_string(i), file("v", "value " + std::to_string(i))}, env);
    ASSERT_EQ(put.code, 0) << put.err;
  }
  for (int i = 0; i < 20; ++i) {
    auto get = run({"--dir", m_tmp.sub("machine2"), "get", "key-" + std::to_string(i), "-o", m_tmp.sub("o")}, env);
    ASSERT_EQ(get.code, 0) << get.err;
    EXPECT_EQ(testing::read_all(m_tmp.sub("o")), "value " + std::to_string(i));
  }
  auto stats = run({"stats", "--json"}, env);
  ASSERT_EQ(stats.code, 0) << stats.err;
  auto js = nlohmann::json::parse(stats.out);
  EXPECT_EQ(js["remote"][0]["reachable"], true) << stats.out;
  EXPECT_EQ(js["remote"][0]["entries"], 20) << stats.out;
  auto config = run({"config"}, env);
  EXPECT_NE(config.out.find(cluster.url("", 3)), std::string::npos) << config.out;
  // A seed that is not host:port is a usage error at start-up.
  auto bad = run({"stats"}, {"PROGCACHE_REMOTE=" + cluster.url("", 1) + ",127.0.0.1:notaport"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("port must be 1-65535"), std::string::npos) << bad.err;
}
#endif

#ifdef PROGCACHE_WITH_HTTP
TEST_F(CliTest, CiSignsWithEd25519AndALaptopReadsWithThePublicKeyAndNeverWrites) {
  if (testing::NginxServer::binary().empty()) GTEST_SKIP() << "nginx not installed (Debian: nginx-light)";
  testing::NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  const auto ci_key = testing::make_ed25519_key();
  const std::string priv = file("ci.pem", ci_key.private_pem);
  const std::string pub = file("ci.pub.pem", ci_key.public_pem);
  const std::string remote = "PROGCACHE_REMOTE=" + server.url("cache/progcache");
  auto put = run({"--dir", m_tmp.sub("ci"), "put", "kernel", file("v", "built by CI")},
                 {remote, "PROGCACHE_SIGNING_KEY_FILE=" + priv});
  ASSERT_EQ(put.code, 0) << put.err;
  const std::vector<std::string> laptop = {remote, "PROGCACHE_TRUSTED_KEYS_FILE=" + pub};
  auto get = run({"--dir", m_tmp.sub("laptop"), "get", "kernel", "-o", m_tmp.sub("o")}, laptop);
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("o")), "built by CI");
  // The laptop cannot sign, so it never writes the shared tier.
  ASSERT_EQ(run({"--dir", m_tmp.sub("laptop"), "put", "mine", file("w", "laptop's")}, laptop).code, 0);
  EXPECT_EQ(run({"--dir", m_tmp.sub("ci2"), "get", "mine", "-o", m_tmp.sub("o2")}, laptop).code, 1);
  // An entry signed by another key is refused.
  const auto rogue = testing::make_ed25519_key();
  ASSERT_EQ(run({"--dir", m_tmp.sub("rogue"), "put", "kernel2", file("r", "rogue")},
                {remote, "PROGCACHE_SIGNING_KEY_FILE=" + file("rogue.pem", rogue.private_pem)})
                .code,
            0);
  EXPECT_EQ(run({"--dir", m_tmp.sub("laptop2"), "get", "kernel2", "-o", m_tmp.sub("o3")}, laptop).code, 1);
  // On the server: CI's entry and the rogue's, nothing of the laptop's.
  std::size_t on_server = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(server.file("cache", "progcache/ac"))) {
    ++on_server;
  }
  EXPECT_EQ(on_server, 2u);
  // config names the keys by fingerprint and shows no private key; a key
  // file that is not a key, or HMAC beside Ed25519, is a usage error.
  auto config = run({"config"}, {"PROGCACHE_SIGNING_KEY_FILE=" + priv});
  ASSERT_EQ(config.code, 0) << config.err;
  EXPECT_NE(config.out.find("Ed25519 key "), std::string::npos) << config.out;
  EXPECT_EQ(config.out.find("PRIVATE KEY"), std::string::npos) << config.out;
  auto bad = run({"stats"}, {"PROGCACHE_TRUSTED_KEYS_FILE=" + file("junk.pem", "not a key")});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("PROGCACHE_TRUSTED_KEYS_FILE"), std::string::npos) << bad.err;
  auto mixed = run({"stats"}, {"PROGCACHE_SIGNING_KEY_FILE=" + priv,
                               "PROGCACHE_HMAC_KEY_FILE=" + file("hmac.key", "0123456789abcdef0123")});
  EXPECT_EQ(mixed.code, 2);
}

TEST_F(CliTest, TwoCacheDirectoriesShareEntriesThroughAnHttpCacheServer) {
  if (testing::NginxServer::binary().empty()) GTEST_SKIP() << "nginx not installed (Debian: nginx-light)";
  testing::NginxServer server;
  ASSERT_TRUE(server.running()) << server.log();
  const std::string url = "http://ci@127.0.0.1:" + std::to_string(server.port()) + "/auth/progcache";
  const std::string pw_file = file("http-password", testing::NginxServer::basic_password() + "\n");
  const std::vector<std::string> env = {"PROGCACHE_REMOTE=" + url, "PROGCACHE_REMOTE_PASSWORD_FILE=" + pw_file};
  auto put = run({"put", "shared-key", file("v", "from machine one")}, env);
  ASSERT_EQ(put.code, 0) << put.err;
  auto get = run({"--dir", m_tmp.sub("machine2"), "get", "shared-key", "-o", m_tmp.sub("o")}, env);
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("o")), "from machine one");
  auto stats = run({"stats", "--json"}, env);
  ASSERT_EQ(stats.code, 0) << stats.err;
  auto js = nlohmann::json::parse(stats.out);
  EXPECT_EQ(js["remote"][0]["reachable"], true) << stats.out;
  EXPECT_TRUE(js["remote"][0]["entries"].is_null());
  auto text = run({"stats"}, env);
  EXPECT_NE(text.out.find("reachable (the server does not list its entries)"), std::string::npos) << text.out;
  // Without the password: refused, and the local tiers go on.
  auto refused =
      run({"--dir", m_tmp.sub("machine3"), "get", "shared-key", "-o", m_tmp.sub("o3")}, {"PROGCACHE_REMOTE=" + url});
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.err.find("HTTP 401"), std::string::npos) << refused.err;
  // A password in the URL is a usage error, never echoed.
  auto bad = run({"stats"}, {"PROGCACHE_REMOTE=http://ci:pw-in-http-url@127.0.0.1:1/x"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err.find("pw-in-http-url"), std::string::npos) << bad.err;
  for (const auto& t : {put.err, get.err, stats.out, text.out, refused.err}) {
    EXPECT_EQ(t.find(testing::NginxServer::basic_password()), std::string::npos) << t;
  }
}
#endif

// ------------------------------------------------------------ compile

bool have_nvrtc() {
  for (const char* p : {"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12"}) {
    if (fs::exists(p)) return true;
  }
  const char* home = std::getenv("CUDA_HOME");
  return home != nullptr && fs::exists(std::string(home) + "/lib64");
}

constexpr const char* k_kernel = R"(template <typename T>
__global__ void scale(T* x, T s, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= s; }
)";

TEST_F(CliTest, CompileSeesAnEditedHeaderBesideTheSourceFromAnyDirectory) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  fs::create_directories(m_tmp.sub("proj"));
  fs::create_directories(m_tmp.sub("elsewhere"));
  file("proj/k.cu", "#include \"val.h\"\n__global__ void k(int* x) { x[0] = V; }\n");
  auto compile_to = [&](const std::string& out, const std::string& cwd, const std::string& src,
                        const std::vector<std::string>& env = {}) {
    auto r = run({"compile", src, "--arch", "sm_80", "--json", "-o", m_tmp.sub(out)}, env, m_tmp.sub(cwd));
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out)[0] : nlohmann::json();
  };
  file("proj/val.h", "#define V 1\n");
  EXPECT_EQ(compile_to("a.cubin", "proj", "k.cu")["hit"], false);
  EXPECT_EQ(compile_to("a2.cubin", "proj", "k.cu")["hit"], true);
  file("proj/val.h", "#define V 2\n");  // the edit a user makes
  EXPECT_EQ(compile_to("b.cubin", "proj", "k.cu")["hit"], false) << "an edited header was served stale";
  compile_to("fresh.cubin", "proj", "k.cu", {"PROGCACHE_DISABLE=1"});
  EXPECT_EQ(testing::read_all(m_tmp.sub("b.cubin")), testing::read_all(m_tmp.sub("fresh.cubin")));
  EXPECT_NE(testing::read_all(m_tmp.sub("a.cubin")), testing::read_all(m_tmp.sub("b.cubin")));
  // From another directory, val.h is still found beside the source, as
  // nvcc finds it, and the result equals a fresh compile there.
  auto other = compile_to("c.cubin", "elsewhere", "../proj/k.cu");
  EXPECT_EQ(other["input"], "../proj/k.cu");
  compile_to("fresh2.cubin", "elsewhere", "../proj/k.cu", {"PROGCACHE_DISABLE=1"});
  EXPECT_EQ(testing::read_all(m_tmp.sub("c.cubin")), testing::read_all(m_tmp.sub("fresh2.cubin")));
  // -o - puts the program on standard output; a missing output directory
  // fails before any compile.
  auto to_stdout = run({"compile", "k.cu", "--arch", "sm_80", "-o", "-"}, {}, m_tmp.sub("proj"));
  EXPECT_EQ(to_stdout.code, 0) << to_stdout.err;
  EXPECT_EQ(to_stdout.out, testing::read_all(m_tmp.sub("b.cubin")));
  file("proj/new.cu", "__global__ void n() {}\n");
  const auto entries_before = nlohmann::json::parse(run({"stats", "--json"}).out)["entries"];
  auto nodir = run({"compile", "new.cu", "--arch", "sm_80", "-o", m_tmp.sub("nowhere/x.cubin")}, {}, m_tmp.sub("proj"));
  EXPECT_EQ(nodir.code, 3);
  EXPECT_NE(nodir.err.find("does not exist"), std::string::npos) << nodir.err;
  EXPECT_EQ(nlohmann::json::parse(run({"stats", "--json"}).out)["entries"], entries_before) << "it compiled anyway";
  // The printed key is the whole key, usable with `get`.
  auto human = run({"compile", "k.cu", "--arch", "sm_80"}, {}, m_tmp.sub("proj"));
  ASSERT_EQ(human.code, 0) << human.err;
  const std::string key = compile_to("d.cubin", "proj", "k.cu")["key"];
  EXPECT_NE(human.out.find(key), std::string::npos) << human.out;
  EXPECT_EQ(run({"get", key, "-o", m_tmp.sub("e.cubin")}).code, 0);
  EXPECT_EQ(testing::read_all(m_tmp.sub("e.cubin")), testing::read_all(m_tmp.sub("b.cubin")));
}

// What the cache cannot key still compiles, with the cache on and off: an
// include named through a macro, outside any -I directory. Before, both
// exited 2 where NVRTC compiles it.
TEST_F(CliTest, AProgramThatCannotBeKeyedCompilesUncachedWithTheCacheOnAndOff) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  fs::create_directories(m_tmp.sub("proj"));
  file("proj/val.h", "#define V 41\n");
  file("proj/k.cu", "#define HEADER \"val.h\"\n#include HEADER\n__global__ void k(int* x) { x[0] = V; }\n");
  std::vector<std::string> outputs;
  for (const std::vector<std::string>& env : {std::vector<std::string>{}, {"PROGCACHE_DISABLE=1"}}) {
    const std::string out = m_tmp.sub("k" + std::to_string(outputs.size()) + ".cubin");
    auto r = run({"compile", "k.cu", "--arch", "sm_80", "--json", "-o", out}, env, m_tmp.sub("proj"));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out)[0];
    EXPECT_TRUE(j["key"].is_null()) << r.out;
    EXPECT_EQ(j["hit"], false);
    EXPECT_NE(j["uncacheable"].get<std::string>().find("macro"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("not cached"), std::string::npos) << r.err;
    outputs.push_back(testing::read_all(out));
    EXPECT_EQ(outputs.back().substr(0, 4),
              "\x7f"
              "ELF");
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(testing::entry_files_on_disk(cache()), 0u);
  auto human = run({"compile", "k.cu", "--arch", "sm_80", "-o", m_tmp.sub("h.cubin")}, {}, m_tmp.sub("proj"));
  EXPECT_EQ(human.code, 0) << human.err;
  EXPECT_NE(human.out.find("(not cached)"), std::string::npos) << human.out;
}

TEST_F(CliTest, PlantedMemosAreNeverAHangAndARefusedRootIsNotReadAtAll) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  const std::string src = file("plain.cu", "__global__ void plain(int* x) { x[0] = 7; }\n");
  ASSERT_EQ(run({"compile", src, "--arch", "sm_80", "-o", m_tmp.sub("a.cubin")}).code, 0);
  // Every compiler-identity memo becomes a FIFO: a reader that blocks on
  // it hangs the compile (the harness's timeout would say 124).
  std::vector<std::string> memos;
  for (const auto& e : fs::directory_iterator(cache() + "/compilers")) memos.push_back(e.path().string());
  ASSERT_FALSE(memos.empty());
  for (const auto& m : memos) {
    fs::remove(m);
    ASSERT_EQ(::mkfifo(m.c_str(), 0600), 0);
  }
  auto second =
      run({"compile", file("other.cu", "__global__ void other() {}\n"), "--arch", "sm_80", "-o", m_tmp.sub("b.cubin")});
  EXPECT_EQ(second.code, 0) << second.err;
  // A refused root (open to others): the compile goes on without the cache
  // and reads nothing from that directory: not its memos, not its locks.
  fs::remove_all(cache() + "/locks");
  fs::permissions(cache(), fs::perms::all);
  auto refused = run({"compile", src, "--arch", "sm_80", "-o", m_tmp.sub("c.cubin")});
  EXPECT_EQ(refused.code, 0) << refused.err;
  EXPECT_NE(refused.err.find("compiling without the cache"), std::string::npos) << refused.err;
  EXPECT_EQ(testing::read_all(m_tmp.sub("c.cubin")), testing::read_all(m_tmp.sub("a.cubin")));
  EXPECT_FALSE(fs::exists(cache() + "/locks")) << "lock files were made in a refused root";
}

TEST_F(CliTest, LsLongShowsEachEntrysKindAndProgramName) {
  // A kernel group as progcache.triton stores it, in its companion store,
  // and an entry planted with a name that would drive the terminal.
  const std::string triton_root = cache() + "/triton";
  auto triton = FileStore::open({.root = triton_root});
  ASSERT_TRUE(triton.ok()) << triton.status().to_string();
  const Key group = KeyBuilder("cli-test").add_string("group", "add").finish();
  const Key planted = KeyBuilder("cli-test").add_string("group", "planted").finish();
  ASSERT_TRUE((*triton)
                  ->put(group, Entry(R"({"kind":"group","name":"add_kernel.json"})",
                                     {{"add_kernel.cubin", Bytes::copy_of(std::string(100, 'c'))}}))
                  .ok());
  ASSERT_TRUE((*triton)->put(planted, Entry(R"({"kind":"x","name":"evil\u001b[2Jname"})", {})).ok());
  // Metadata past the listing's first read (4 KiB) is read as far as it goes.
  const Key big = KeyBuilder("cli-test").add_string("group", "big").finish();
  ASSERT_TRUE(
      (*triton)
          ->put(big, Entry(R"({"pad":")" + std::string(10000, 'p') + R"(","kind":"group","name":"big_kernel.json"})",
                           {{"big.cubin", Bytes::copy_of(std::string(100, 'c'))}}))
          .ok());
  triton->reset();
  // The nvcc launcher's and pyptx's entries, as they store them.
  auto nvcc = FileStore::open({.root = cache() + "/nvcc"});
  ASSERT_TRUE(nvcc.ok());
  const Key nvcc_key = KeyBuilder("cli-test").add_string("nvcc", "k").finish();
  ASSERT_TRUE(
      (*nvcc)->put(nvcc_key, Entry(R"({"kind":"nvcc-cubin","name":"k.cu"})", {{"out", Bytes::copy_of("c")}})).ok());
  nvcc->reset();
  auto pyptx = FileStore::open({.root = cache() + "/pyptx"});
  ASSERT_TRUE(pyptx.ok());
  const Key pyptx_key = KeyBuilder("cli-test").add_string("pyptx", "f").finish();
  ASSERT_TRUE(
      (*pyptx)
          ->put(pyptx_key, Entry(R"({"fn_id":"matmul","arch":"sm_90","metadata":{}})", {{"c", Bytes::copy_of("c")}}))
          .ok());
  pyptx->reset();
  ASSERT_EQ(run({"put", "bare", file("p", "program bytes")}).code, 0);
  std::string compiled;
  if (have_nvrtc()) {
    compiled = file("scale.cu", k_kernel);
    ASSERT_EQ(run({"compile", compiled, "--arch", "sm_80", "-o", m_tmp.sub("scale.cubin")}).code, 0);
  }

  auto ls = run({"ls", "--long"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out.rfind("KEY ", 0), 0u) << ls.out;
  EXPECT_NE(ls.out.find("KIND"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("NAME"), std::string::npos) << ls.out;
  auto line_of = [&](const Key& k) {
    const auto at = ls.out.find(k.hex());
    return at == std::string::npos ? std::string() : ls.out.substr(at, ls.out.find('\n', at) - at);
  };
  // Each in words a person recognises: a Triton kernel by its function,
  // an nvcc output by its kind and source, a pyptx cubin by function and
  // architecture.
  const std::string group_line = line_of(group);
  EXPECT_NE(group_line.find("triton kernel"), std::string::npos) << ls.out;
  EXPECT_EQ(group_line.substr(group_line.size() - 11), " add_kernel") << group_line;
  EXPECT_NE(line_of(nvcc_key).find("nvcc cubin"), std::string::npos) << ls.out;
  EXPECT_NE(line_of(nvcc_key).find(" k.cu"), std::string::npos) << ls.out;
  EXPECT_NE(line_of(pyptx_key).find("pyptx cubin"), std::string::npos) << ls.out;
  EXPECT_NE(line_of(pyptx_key).find("matmul (sm_90)"), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find('\x1b'), std::string::npos) << "a stored name reached the terminal unescaped";
  EXPECT_NE(line_of(planted).find("evil?[2Jname"), std::string::npos) << ls.out;
  EXPECT_NE(line_of(big).find("big_kernel"), std::string::npos) << ls.out;
  // An entry without metadata (put of raw bytes, cuda.core's caches) is
  // "bytes", with no name.
  const std::string bare_line = line_of(key_from_user("bare"));
  ASSERT_FALSE(bare_line.empty()) << ls.out;
  EXPECT_EQ(bare_line.substr(bare_line.size() - 2), " -") << bare_line;
  EXPECT_NE(bare_line.find("bytes"), std::string::npos) << bare_line;

  auto js = nlohmann::json::parse(run({"ls", "--json"}).out);
  int checked = 0;
  for (const auto& e : js) {
    if (e["key"] == group.hex()) {
      EXPECT_EQ(e["kind"], "triton kernel");
      EXPECT_EQ(e["name"], "add_kernel");
      EXPECT_EQ(e["store"], "triton");
      ++checked;
    } else if (e["key"] == key_from_user("bare").hex()) {
      EXPECT_EQ(e["kind"], "bytes") << e.dump();
      EXPECT_TRUE(e["name"].is_null()) << e.dump();
      ++checked;
    } else if (!compiled.empty() && e["store"] == "programs") {
      // A compiled program: its kind is the target, its name the source.
      EXPECT_EQ(e["kind"], "cubin") << e.dump();
      EXPECT_EQ(e["name"], compiled) << e.dump();
      ++checked;
    }
  }
  EXPECT_EQ(checked, compiled.empty() ? 2 : 3) << js.dump(2);
}

TEST_F(CliTest, CompileColdThenWarmWithJsonAndSymbolMapping) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  const std::string src = file("scale.cu", k_kernel);
  const std::vector<std::string> args = {"compile",
                                         src,
                                         "--arch",
                                         "sm_80",
                                         "-std=c++17",
                                         "-DUNUSED=1",
                                         "--name-expr",
                                         "scale<float>",
                                         "--json",
                                         "-o",
                                         m_tmp.sub("scale.cubin")};
  auto cold = run(args);
  ASSERT_EQ(cold.code, 0) << cold.err;
  auto cj = nlohmann::json::parse(cold.out);
  ASSERT_EQ(cj.size(), 1u);
  EXPECT_EQ(cj[0]["hit"], false);
  EXPECT_EQ(cj[0]["symbols"]["scale<float>"], "_Z5scaleIfEvPT_S0_i");
  const std::string cubin = testing::read_all(m_tmp.sub("scale.cubin"));
  EXPECT_EQ(cubin.substr(0, 4),
            "\x7f"
            "ELF");
  fs::remove(m_tmp.sub("scale.cubin"));
  // The warm run must not load NVRTC at all: the dynamic loader reports
  // every library it opens when LD_DEBUG=libs.
  auto warm = run(args, {"LD_DEBUG=libs"});
  ASSERT_EQ(warm.code, 0) << warm.err;
  EXPECT_EQ(warm.err.find("libnvrtc"), std::string::npos) << "a warm hit loaded NVRTC";
  auto wj = nlohmann::json::parse(warm.out);
  EXPECT_EQ(wj[0]["hit"], true);
  EXPECT_EQ(wj[0]["key"], cj[0]["key"]);
  EXPECT_EQ(wj[0]["symbols"], cj[0]["symbols"]);
  EXPECT_EQ(testing::read_all(m_tmp.sub("scale.cubin")), cubin);
  // The raw artifact is one command away.
  ASSERT_EQ(run({"get", cj[0]["key"].get<std::string>(), "-o", m_tmp.sub("raw.cubin")}).code, 0);
  EXPECT_EQ(testing::read_all(m_tmp.sub("raw.cubin")), cubin);
  // -arch=sm_80 and --arch sm_80 and -arch sm_80 are one key.
  auto alt =
      run({"compile", src, "-arch", "sm_80", "-std=c++17", "-DUNUSED=1", "--name-expr", "scale<float>", "--json"});
  ASSERT_EQ(alt.code, 0) << alt.err;
  EXPECT_EQ(nlohmann::json::parse(alt.out)[0]["hit"], true);
}

TEST_F(CliTest, ExplainSaysHitOrMissAndNamesWhatChangedWithCompilesArguments) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  fs::create_directories(m_tmp.sub("proj/inc"));
  file("proj/k.cu", "#include \"val.h\"\n__global__ void k(int* x) { x[0] = V; }\n");
  file("proj/inc/val.h", "#define V 1\n");
  const std::vector<std::string> args{"k.cu", "--arch", "sm_80", "-Iinc"};
  auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return run(head, {}, m_tmp.sub("proj"));
  };
  // Asking makes nothing: no cache directory yet, a miss, none created.
  auto none = with({"explain"}, args);
  EXPECT_EQ(none.code, 1) << none.err;
  EXPECT_NE(none.out.find("miss"), std::string::npos) << none.out;
  EXPECT_FALSE(fs::exists(cache())) << "explain created the cache directory";

  ASSERT_EQ(with({"compile"}, args).code, 0);
  auto hit = with({"explain"}, args);
  EXPECT_EQ(hit.code, 0) << hit.out << hit.err;
  EXPECT_NE(hit.out.find("hit"), std::string::npos) << hit.out;

  file("proj/inc/val.h", "#define V 2\n");
  auto edited = with({"explain", "-DEXTRA"}, args);
  EXPECT_EQ(edited.code, 1) << edited.err;
  EXPECT_NE(edited.out.find("file edited  inc/val.h"), std::string::npos) << edited.out;
  EXPECT_NE(edited.out.find("option added  --define-macro=EXTRA"), std::string::npos) << edited.out;
  auto as_json = with({"explain", "--json", "-DEXTRA"}, args);
  EXPECT_EQ(as_json.code, 1) << as_json.err;
  const auto j = nlohmann::json::parse(as_json.out);
  EXPECT_EQ(j["outcome"], "miss");
  ASSERT_EQ(j["differences"].size(), 2u) << as_json.out;
  EXPECT_EQ(j["record"]["options"][0], "--gpu-architecture=sm_80");
  // compile agrees: a miss, and the first entry is still the nearest.
  auto compiled = with({"compile", "--json", "-DEXTRA"}, args);
  EXPECT_EQ(nlohmann::json::parse(compiled.out)[0]["hit"], false);
  EXPECT_EQ(nlohmann::json::parse(compiled.out)[0]["key"], j["key"]);

  // A key alone: the entry's program and record; an unknown key exit 1; a
  // damaged entry exit 3.
  const std::string key = j["nearest"];
  auto by_key = run({"explain", key});
  EXPECT_EQ(by_key.code, 0) << by_key.err;
  EXPECT_NE(by_key.out.find("'k.cu', cubin"), std::string::npos) << by_key.out;
  EXPECT_NE(by_key.out.find("--include-path=inc"), std::string::npos) << by_key.out;
  auto unknown = run({"explain", std::string(64, 'a')});
  EXPECT_EQ(unknown.code, 1);
  const std::string path = cache() + "/v1/" + key.substr(0, 2) + "/" + key.substr(2);
  std::string bytes = testing::read_all(path);
  ASSERT_FALSE(bytes.empty());
  bytes[bytes.size() / 2] ^= 0x20;
  testing::write_all(path, bytes);
  auto damaged = run({"explain", key});
  EXPECT_EQ(damaged.code, 3) << damaged.out;
  EXPECT_NE(damaged.out.find("damaged"), std::string::npos) << damaged.out;
  // Usage errors name themselves.
  EXPECT_EQ(run({"explain"}).code, 2);
  EXPECT_EQ(with({"explain", "--arch", "sm_x"}, {"k.cu"}).code, 2);
}

TEST_F(CliTest, ACompileErrorShowsTheNameEscapedAndTheLogInLines) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  // A name holding ESC, a line break and a C1 control given to compile, with a syntax error: the message's
  // first line shows the name escaped; no ESC or C1 control anywhere, the
  // compiler's log (which quotes the name) included.
  const std::string bad = file(
      "a\x1b[2Jb\nprogcache: forged\xc2\x9b"
      "31mZ.cu",
      "__global__ void k() { int x = ; }\n");
  auto c = run({"compile", "--arch", "sm_90", bad});
  EXPECT_EQ(c.code, 3) << c.err;
  EXPECT_EQ(c.err.find('\x1b'), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("\xc2\x9b"), std::string::npos) << c.err;
  const std::string first = c.err.substr(0, c.err.find('\n'));
  EXPECT_NE(first.find("a?[2Jb?progcache: forged?31mZ.cu: NVRTC failed to compile"), std::string::npos) << c.err;
}

TEST_F(CliTest, CompileBadInputsFailClearlyAndStoreNothing) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  auto syntax = run({"compile", file("bad.cu", "__global__ void k( { }"), "--arch", "sm_80"});
  EXPECT_EQ(syntax.code, 3);
  EXPECT_NE(syntax.err.find("error"), std::string::npos);
  EXPECT_NE(syntax.err.find("bad.cu"), std::string::npos);
  // The compiler's log as it laid it out: a line per diagnostic, the source
  // line quoted under it (not one line with '?' for each line break).
  EXPECT_NE(syntax.err.find("\n  __global__ void k( { }\n"), std::string::npos) << syntax.err;
  EXPECT_EQ(syntax.err.find('?'), std::string::npos) << syntax.err;
  auto arch = run({"compile", file("ok.cu", k_kernel), "--arch", "sm_1"});
  EXPECT_NE(arch.code, 0);
  auto option = run({"compile", file("ok2.cu", k_kernel), "--arch", "sm_80", "--no-such-nvrtc-option"});
  EXPECT_NE(option.code, 0);
  EXPECT_NE(option.err.find("no-such-nvrtc-option"), std::string::npos) << option.err;
  auto missing = run({"compile", m_tmp.sub("absent.cu"), "--arch", "sm_80"});
  EXPECT_EQ(missing.code, 3);
  EXPECT_NE(missing.err.find("absent.cu"), std::string::npos);
  auto nvvm = run({"compile", file("ir.nvvm", "; ModuleID = 'x'\n"), "--arch", "sm_80"});
  EXPECT_EQ(nvvm.code, 2) << nvvm.err;
  EXPECT_NE(nvvm.err.find("NVVM IR"), std::string::npos) << nvvm.err;
  auto no_arch = run({"compile", file("ok3.cu", k_kernel)});
  EXPECT_EQ(no_arch.code, 2);
  auto nolib =
      run({"compile", file("ok4.cu", k_kernel), "--arch", "sm_80"}, {"PROGCACHE_NVRTC=/nonexistent/libnvrtc.so"});
  EXPECT_EQ(nolib.code, 3);
  EXPECT_NE(nolib.err.find("/nonexistent/libnvrtc.so"), std::string::npos) << nolib.err;
  // A source that cannot be read whole is an error, never a shorter
  // program compiled and stored: a directory, and a read that fails (EIO).
  fs::create_directories(m_tmp.sub("dir.cu"));
  auto dir = run({"compile", m_tmp.sub("dir.cu"), "--arch", "sm_80"});
  EXPECT_EQ(dir.code, 3) << dir.err;
  EXPECT_NE(dir.err.find("is a directory"), std::string::npos) << dir.err;
  fs::create_symlink("/proc/self/mem", m_tmp.sub("mem.cu"));
  auto eio = run({"compile", m_tmp.sub("mem.cu"), "--arch", "sm_80"});
  EXPECT_EQ(eio.code, 3) << eio.err;
  EXPECT_NE(eio.err.find("error reading"), std::string::npos) << eio.err;
  auto st = nlohmann::json::parse(run({"stats", "--json"}).out);
  EXPECT_EQ(st["entries"], 0);
}

TEST_F(CliTest, CompileLinksAnLtoIrPair) {
  if (!have_nvrtc()) GTEST_SKIP() << "no CUDA toolkit (NVRTC) on this machine";
  const std::string a = file("a.cu", "extern \"C\" __device__ float f(float x) { return x + 1; }");
  const std::string b = file("b.cu",
                             "extern \"C\" __device__ float f(float);\n"
                             "extern \"C\" __global__ void k(float* x) { x[0] = f(x[0]); }");
  auto r = run({"compile", b, a, "--link", "--arch", "sm_80", "-rdc=true", "-o", m_tmp.sub("linked.cubin"), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);  // two LTO-IR compiles and the link
  EXPECT_EQ(testing::read_all(m_tmp.sub("linked.cubin")).substr(0, 4),
            "\x7f"
            "ELF");
  auto warm = nlohmann::json::parse(run({"compile", b, a, "--link", "--arch", "sm_80", "-rdc=true", "--json"}).out);
  for (const auto& e : warm) EXPECT_EQ(e["hit"], true);
}

}  // namespace
}  // namespace progcache
