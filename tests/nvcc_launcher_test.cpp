// `progcache nvcc ...` against the real nvcc: what a hit writes is what nvcc
// writes, what changes an output is compiled again, and nvcc's failures and
// the commands the launcher does not cache are nvcc's own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "nvcc/counters.h"
#include "progcache/file_store.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;

struct Ran {
  int code = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string cuda_bin() {
  const char* home = std::getenv("CUDA_HOME");
  const std::string dir = std::string(home != nullptr && *home != '\0' ? home : "/usr/local/cuda") + "/bin";
  return ::access((dir + "/nvcc").c_str(), X_OK) == 0 ? dir : "";
}

// Binary outputs compared without printing them.
bool same(const std::string& a, const std::string& b) {
  return a == b;
}

// nvcc names a temporary file in each object (tmpxft_<pid>_...): two plain
// nvcc runs of one command differ in those eight hex digits and nowhere else.
std::string mask_temp_names(std::string obj) {
  for (auto pos = obj.find("tmpxft_"); pos != std::string::npos; pos = obj.find("tmpxft_", pos + 1)) {
    for (std::size_t i = pos + 7; i < pos + 15 && i < obj.size(); ++i) obj[i] = 'x';
  }
  return obj;
}

class NvccLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_bin = cuda_bin();
    if (m_bin.empty()) GTEST_SKIP() << "nvcc not found (CUDA_HOME or /usr/local/cuda): the launcher needs one";
    fs::create_directories(m_tmp.sub("work/inc"));
    fs::create_directories(m_tmp.sub("work/inc0"));
    fs::create_directories(m_tmp.sub("bin"));
    write("inc/params.h", "#define SCALE 2.0f\n");
    write("k.cu",
          "#include \"params.h\"\n"
          "__global__ void scale(float* x, int n) {\n"
          "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  if (i < n) x[i] *= SCALE;\n"
          "}\n");
    // An nvcc that notes each run, so a test sees whether nvcc ran at all.
    testing::write_all(m_tmp.sub("bin/nvcc"), "#!/bin/sh\necho run >> " + quote(m_tmp.sub("nvcc-runs")) + "\nexec " +
                                                  quote(m_bin + "/nvcc") + " \"$@\"\n");
    fs::permissions(m_tmp.sub("bin/nvcc"), fs::perms::owner_all);
  }

  void write(const std::string& rel, const std::string& text) { testing::write_all(m_tmp.sub("work/" + rel), text); }
  std::string read(const std::string& rel) { return testing::read_all(m_tmp.sub("work/" + rel)); }
  bool exists(const std::string& rel) { return fs::exists(m_tmp.sub("work/" + rel)); }

  // Runs a shell command in work/ with the test's cache and nvcc on PATH.
  Ran sh(const std::string& command, const std::string& env = "") {
    const std::string cmd = "cd " + quote(m_tmp.sub("work")) +
                            " && timeout 300 env -u PROGCACHE_DISABLE XDG_CONFIG_HOME=" + quote(m_tmp.sub("xdg")) +
                            " PROGCACHE_DIR=" + quote(m_tmp.sub("cache")) +
                            " PATH=" + quote(m_bin + ":/usr/local/bin:/usr/bin:/bin") + " " + env + " " + command +
                            " > ../stdout 2> ../stderr < /dev/null";
    const int status = std::system(cmd.c_str());
    Ran r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = testing::read_all(m_tmp.sub("stdout"));
    r.err = testing::read_all(m_tmp.sub("stderr"));
    return r;
  }
  // progcache as the launcher of the noting nvcc.
  Ran launch(const std::string& args, const std::string& env = "") {
    return sh(quote(PROGCACHE_CLI_PATH) + " " + quote(m_tmp.sub("bin/nvcc")) + " " + args, env);
  }
  Ran plain(const std::string& args) { return sh(quote(m_bin + "/nvcc") + " " + args); }
  // A command that must not hang: run under a watchdog that kills it, so a
  // hang fails the test instead of stalling the suite. The watchdog is far
  // longer than any compile: it measures nothing.
  Ran watched(const std::string& command, const std::string& env = "") {
    const Ran r = sh("timeout -s KILL 120 sh -c " + quote(command), env);
    EXPECT_NE(r.code, 137) << "killed by the watchdog: it hung (" << command << ")";
    return r;
  }
  std::string cli() { return quote(PROGCACHE_CLI_PATH); }
  std::string noting_nvcc() { return quote(m_tmp.sub("bin/nvcc")); }
  // How many times the noting nvcc has run since the last call.
  int nvcc_runs() {
    const std::string log = m_tmp.sub("nvcc-runs");
    const std::string text = fs::exists(log) ? testing::read_all(log) : "";
    fs::remove(log);
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  }
  nlohmann::json launcher_stats(const std::string& env = "") {
    const Ran r = sh(quote(PROGCACHE_CLI_PATH) + " stats --json", env);
    EXPECT_EQ(r.code, 0) << r.err;
    return nlohmann::json::parse(r.out)["nvcc_launcher"];
  }
  std::size_t stored_entries() { return testing::entry_files_on_disk(m_tmp.sub("cache/nvcc")); }

  testing::TempDir m_tmp;
  std::string m_bin;
};

TEST_F(NvccLauncherTest, EveryOutputKindIsServedAsPlainNvccWritesItAndAHitRunsNoNvcc) {
  struct Kind {
    std::string flag, file;
  };
  for (const Kind& k : {Kind{"-cubin", "k.cubin"}, Kind{"-ptx", "k.ptx"}, Kind{"-fatbin", "k.fatbin"},
                        Kind{"-c", "k.o"}, Kind{"-dlto -dc", "k_lto.o"}, Kind{"-dlto -ltoir", "k.ltoir"}}) {
    SCOPED_TRACE(k.flag);
    const std::string args = "-arch=sm_90 -I inc " + k.flag + " k.cu -o " + k.file;
    ASSERT_EQ(plain(args).code, 0);
    const std::string expected = read(k.file);
    fs::remove(m_tmp.sub("work/" + k.file));
    // Cold: nvcc runs once; its output is what plain nvcc writes.
    const Ran cold = sh(quote(PROGCACHE_CLI_PATH) + " nvcc " + args);
    ASSERT_EQ(cold.code, 0) << cold.err;
    const std::string compiled = read(k.file);
    fs::remove(m_tmp.sub("work/" + k.file));
    // Warm: the file comes back from the cache, byte for byte.
    const Ran warm = sh(quote(PROGCACHE_CLI_PATH) + " nvcc " + args);
    ASSERT_EQ(warm.code, 0) << warm.err;
    ASSERT_TRUE(exists(k.file));
    EXPECT_TRUE(same(read(k.file), compiled));
    if (k.file.ends_with(".o")) {
      EXPECT_TRUE(same(mask_temp_names(read(k.file)), mask_temp_names(expected)));
    } else {
      EXPECT_TRUE(same(read(k.file), expected)) << "the cached " << k.file << " differs from plain nvcc's";
    }
  }
  const auto stats = launcher_stats();
  EXPECT_EQ(stats.value("hits", 0), 6);
  EXPECT_EQ(stats.value("misses", 0), 6);
  // Through the noting nvcc: a hit does not run it.
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o w.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  fs::remove(m_tmp.sub("work/w.cubin"));
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o w.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "a warm hit ran nvcc";
  EXPECT_TRUE(exists("w.cubin"));
}

// The bytes of the launcher's entries on disk.
std::uintmax_t entry_bytes(const std::string& store) {
  std::uintmax_t total = 0;
  if (!fs::exists(store)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(store)) {
    if (e.is_regular_file() && e.path().filename().string().size() == 62) total += e.file_size();
  }
  return total;
}

TEST_F(NvccLauncherTest, TheStoreIsCompressedUnlessSaidOtherwiseAndServesTheSameBytes) {
  const std::string args = "-arch=sm_90 -I inc -c k.cu -o k.o";
  ASSERT_EQ(sh(cli() + " nvcc " + args, "PROGCACHE_COMPRESSION=off").code, 0);
  const std::string compiled = read("k.o");
  const std::uintmax_t as_is = entry_bytes(m_tmp.sub("cache/nvcc"));
  ASSERT_GT(as_is, 0u);
  ASSERT_EQ(sh(cli() + " clear").code, 0);
  ASSERT_EQ(entry_bytes(m_tmp.sub("cache/nvcc")), 0u);
  // No level set: zstd level 1, as ccache does.
  ASSERT_EQ(sh(cli() + " nvcc " + args).code, 0);
  const std::string again = read("k.o");
  const std::uintmax_t packed = entry_bytes(m_tmp.sub("cache/nvcc"));
  EXPECT_LT(packed * 2, as_is) << packed << " bytes compressed against " << as_is;
  fs::remove(m_tmp.sub("work/k.o"));
  ASSERT_EQ(sh(cli() + " nvcc " + args).code, 0);
  EXPECT_EQ(launcher_stats().value("hits", 0), 1);
  EXPECT_TRUE(same(read("k.o"), again));
  EXPECT_TRUE(same(mask_temp_names(read("k.o")), mask_temp_names(compiled)));
  // A level set is the level used. (Not byte for byte the first store: a
  // manifest recorded once the directories have settled holds their watches.)
  ASSERT_EQ(sh(cli() + " clear").code, 0);
  ASSERT_EQ(sh(cli() + " nvcc " + args, "PROGCACHE_COMPRESSION=off").code, 0);
  EXPECT_GT(entry_bytes(m_tmp.sub("cache/nvcc")), packed * 2);
}

TEST_F(NvccLauncherTest, AnEditedHeaderADefineAShadowingHeaderAndAnotherHostCompilerAreCompiledAgain) {
  const std::string args = "-arch=sm_90 -I inc0 -I inc -cubin k.cu -o k.cubin";
  auto expect_as_plain = [&](const std::string& extra) {
    const std::string served = read("k.cubin");
    ASSERT_EQ(plain(args + " " + extra + " -o plain.cubin").code, 0);
    EXPECT_TRUE(same(served, read("plain.cubin"))) << "the launcher's output is not what nvcc makes of the files now";
  };
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  const std::string first = read("k.cubin");
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 0);

  write("inc/params.h", "#define SCALE 3.0f\n");  // same size: the stat may differ in times alone
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "an edited header was served from the cache";
  EXPECT_FALSE(same(read("k.cubin"), first));
  expect_as_plain("");

  write("inc/params.h", "#define SCALE 2.0f\n");  // back: the first entry serves again
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 0);
  EXPECT_TRUE(same(read("k.cubin"), first));

  ASSERT_EQ(launch(args + " -DEXTRA=1").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a -D change was served from the cache";

  // A host compiler elsewhere (a wrapper: same compiler, another program).
  testing::write_all(m_tmp.sub("bin/g++"), "#!/bin/sh\nexec /usr/bin/g++ \"$@\"\n");
  fs::permissions(m_tmp.sub("bin/g++"), fs::perms::owner_all);
  ASSERT_EQ(launch(args + " -ccbin " + quote(m_tmp.sub("bin/g++"))).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "another -ccbin was served from the cache";

  // The same command with another g++ first on PATH (the host compiler nvcc
  // runs when no -ccbin names one): compiled again, by that compiler.
  fs::create_directories(m_tmp.sub("hostbin"));
  for (const char* cc : {"gcc", "g++"}) {
    testing::write_all(
        m_tmp.sub(std::string("hostbin/") + cc),
        "#!/bin/sh\necho run >> " + quote(m_tmp.sub("host-runs")) + "\nexec /usr/bin/" + cc + " \"$@\"\n");
    fs::permissions(m_tmp.sub(std::string("hostbin/") + cc), fs::perms::owner_all);
  }
  const std::string host_path = "PATH=" + quote(m_tmp.sub("hostbin") + ":" + m_bin + ":/usr/local/bin:/usr/bin:/bin");
  ASSERT_EQ(launch(args, host_path).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "another host compiler on PATH was served from the cache";
  EXPECT_TRUE(fs::exists(m_tmp.sub("host-runs"))) << "nvcc did not run the g++ first on PATH";
  ASSERT_EQ(launch(args, host_path).code, 0);
  EXPECT_EQ(nvcc_runs(), 0);

  // A header made in a directory searched first now decides the output.
  write("inc0/params.h", "#define SCALE 5.0f\n");
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a header shadowing the one compiled was not noticed";
  EXPECT_FALSE(same(read("k.cubin"), first));
  expect_as_plain("");
}

TEST_F(NvccLauncherTest, NvccsFailuresAreItsOwnAndStoreNothing) {
  write("bad.cu", "__global__ void k() { this is not cuda }\n");
  const Ran plain_bad = plain("-arch=sm_90 -cubin bad.cu -o bad.cubin");
  const Ran bad = launch("-arch=sm_90 -cubin bad.cu -o bad.cubin");
  EXPECT_NE(plain_bad.code, 0);
  EXPECT_EQ(bad.code, plain_bad.code);
  EXPECT_EQ(bad.err, plain_bad.err);
  EXPECT_EQ(bad.out, plain_bad.out);

  const Ran plain_unknown = plain("-arch=sm_90 --no-such-option -cubin k.cu -o k.cubin");
  const Ran unknown = launch("-arch=sm_90 --no-such-option -cubin k.cu -o k.cubin");
  EXPECT_NE(plain_unknown.code, 0);
  EXPECT_EQ(unknown.code, plain_unknown.code);
  EXPECT_EQ(unknown.err, plain_unknown.err);

  const Ran plain_nodir = plain("-arch=sm_90 -I inc -cubin k.cu -o nodir/k.cubin");
  const Ran nodir = launch("-arch=sm_90 -I inc -cubin k.cu -o nodir/k.cubin");
  EXPECT_NE(plain_nodir.code, 0);
  EXPECT_EQ(nodir.code, plain_nodir.code);
  EXPECT_EQ(stored_entries(), 0U) << "a failed compile stored something";

  // An output directory gone after the entry was stored: nvcc's answer too.
  fs::create_directories(m_tmp.sub("work/out"));
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o out/k.cubin").code, 0);
  fs::remove_all(m_tmp.sub("work/out"));
  nvcc_runs();
  const Ran gone = launch("-arch=sm_90 -I inc -cubin k.cu -o out/k.cubin");
  EXPECT_EQ(gone.code, plain_nodir.code);
  EXPECT_EQ(nvcc_runs(), 1);

  // progcache's own options cannot come first: said, and nothing runs.
  const Ran misplaced = sh(quote(PROGCACHE_CLI_PATH) + " --dir " + quote(m_tmp.sub("cache")) + " nvcc -c k.cu");
  EXPECT_EQ(misplaced.code, 2);
  EXPECT_NE(misplaced.err.find("'nvcc' must be the first word"), std::string::npos) << misplaced.err;

  const Ran missing = sh(quote(PROGCACHE_CLI_PATH) + " " + quote(m_tmp.sub("bin/no-nvcc")) + " -c k.cu");
  EXPECT_EQ(missing.code, 127);
  EXPECT_NE(missing.err.find("no-nvcc: command not found"), std::string::npos) << missing.err;
  const auto stats = launcher_stats();
  EXPECT_GE(stats.value("compile_failed", 0), 2);
  EXPECT_EQ(stats["uncacheable"].value("unknown option '...'", 0), 1) << stats.dump();
}

TEST_F(NvccLauncherTest, ADependencyFileAndPtxasReportsAreReplayedOnAHit) {
  const std::string args = "-arch=sm_90 -I inc -c k.cu -o k.o -MD -MF k.d -MT k.o -Xptxas -v";
  const Ran cold = launch(args);
  ASSERT_EQ(cold.code, 0) << cold.err;
  EXPECT_NE(cold.err.find("ptxas info"), std::string::npos) << cold.err;
  const std::string depfile = read("k.d");
  EXPECT_NE(depfile.find("inc/params.h"), std::string::npos) << depfile;
  fs::remove(m_tmp.sub("work/k.d"));
  fs::remove(m_tmp.sub("work/k.o"));
  nvcc_runs();
  const Ran warm = launch(args);
  ASSERT_EQ(warm.code, 0) << warm.err;
  EXPECT_EQ(nvcc_runs(), 0);
  EXPECT_EQ(warm.err, cold.err) << "ptxas's report was not replayed";
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(read("k.d"), depfile);
  EXPECT_TRUE(exists("k.o"));
}

TEST_F(NvccLauncherTest, TheRootsHeadlineCountsEachLauncherLookupOnceAndZeroClearsTheLaunchersCounters) {
  // One miss, then two hits, and one lookup of the root's own store: the
  // root's headline is 2 hits and 2 misses in text, JSON and Prometheus
  // alike (a launcher lookup reads a manifest and a result from its store:
  // its own count stands for both).
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin").code, 0);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  const Ran miss = sh(cli() + " get no-such-key -o " + quote(m_tmp.sub("o")));
  EXPECT_EQ(miss.code, 1);
  const Ran js = sh(cli() + " stats --json");
  ASSERT_EQ(js.code, 0) << js.err;
  const auto root = nlohmann::json::parse(js.out)["root"];
  EXPECT_EQ(root["hits"], 2) << root.dump();
  EXPECT_EQ(root["misses"], 2) << root.dump();
  EXPECT_EQ(root["hit_rate"], 0.5);
  const Ran text = sh(cli() + " stats");
  EXPECT_NE(text.out.find("all lookups       2 hits, 2 misses: hit rate 50.0 %"), std::string::npos) << text.out;
  // One rate for the launcher's lookups: its store's reads (a manifest, then
  // a result, per lookup) are shown as reads, with no rate of their own.
  const std::string nvcc_store = text.out.substr(text.out.find("nvcc store"));
  EXPECT_EQ(nvcc_store.find("hit rate"), std::string::npos) << text.out;
  EXPECT_NE(nvcc_store.find("\nreads             "), std::string::npos) << text.out;
  EXPECT_NE(nvcc_store.find("\nnvcc launcher\n  hits            2\n"), std::string::npos) << text.out;
  const Ran prom = sh(cli() + " stats --format prometheus");
  EXPECT_NE(prom.out.find("\nprogcache_root_hits_total 2\n"), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("\nprogcache_root_misses_total 2\n"), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("\nprogcache_nvcc_launcher_hits_total 2\n"), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("\nprogcache_nvcc_launcher_misses_total 1\n"), std::string::npos) << prom.out;
  // stats -z zeroes everything, the launcher's counters included.
  ASSERT_EQ(sh(cli() + " stats -z").code, 0);
  const auto zeroed = nlohmann::json::parse(sh(cli() + " stats --json").out);
  EXPECT_EQ(zeroed["root"]["hits"], 0) << zeroed.dump();
  EXPECT_EQ(zeroed["root"]["misses"], 0);
  // No lookups: no rate (null in JSON, NaN in Prometheus), not a rate of 0;
  // and the launcher's every counter, at zero, in JSON as in the text.
  EXPECT_TRUE(zeroed["root"]["hit_rate"].is_null()) << zeroed.dump();
  EXPECT_TRUE(zeroed["hit_rate"].is_null()) << zeroed.dump();
  for (const auto& info : progcache::nvcc::k_counters) {
    EXPECT_EQ(zeroed["nvcc_launcher"].value(std::string(info.name), -1), 0) << info.name << zeroed.dump();
  }
  const Ran zeroed_prom = sh(cli() + " stats --format prometheus");
  EXPECT_NE(zeroed_prom.out.find("\nprogcache_root_hit_rate NaN\n"), std::string::npos) << zeroed_prom.out;
  EXPECT_NE(zeroed_prom.out.find("\nprogcache_hit_rate{store=\"programs\"} NaN\n"), std::string::npos);
  EXPECT_NE(zeroed_prom.out.find("\nprogcache_root_max_size_bytes "), std::string::npos) << zeroed_prom.out;
  EXPECT_NE(zeroed_prom.out.find("\nprogcache_nvcc_launcher_waited_total 0\n"), std::string::npos);
  EXPECT_EQ(launcher_stats().value("hits", 0), 0);
  // And counting starts again from zero.
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin").code, 0);
  EXPECT_EQ(launcher_stats().value("hits", 0), 1);
  if (::geteuid() == 0) {
    // A counters file of another user (made so by chown): neither counted
    // nor zeroed, so not reported either.
    ASSERT_EQ(::chown(m_tmp.sub("cache/nvcc/launcher-stats.json").c_str(), 65534, 65534), 0);
    EXPECT_EQ(launcher_stats()["hits"], 0);
    const auto shown = nlohmann::json::parse(sh(cli() + " stats --json").out);
    EXPECT_EQ(shown["root"]["hits"], 0) << shown.dump();
  }
}

TEST_F(NvccLauncherTest, ASettingsFileThatCannotBeUsedIsSaidAndTheBuildGoesOnWithTheDefaults) {
  // A typo in the user's file: the CLI refuses it (exit 2), the launcher
  // never fails a build for it: it says so, and caches with the defaults.
  fs::create_directories(m_tmp.sub("xdg/progcache"));
  const std::string conf = m_tmp.sub("xdg/progcache/progcache.conf");
  testing::write_all(conf, "max_size = 5\n");
  const Ran cold = launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin");
  ASSERT_EQ(cold.code, 0) << cold.err;
  EXPECT_NE(cold.err.find("progcache: warning: " + conf + ":1: max_size '5' has no unit"), std::string::npos)
      << cold.err;
  EXPECT_NE(cold.err.find("the file is ignored"), std::string::npos) << cold.err;
  EXPECT_GE(stored_entries(), 1U);
  const std::string compiled = read("k.cubin");
  fs::remove(m_tmp.sub("work/k.cubin"));
  const Ran warm = launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin");
  ASSERT_EQ(warm.code, 0) << warm.err;
  EXPECT_EQ(nvcc_runs(), 1) << "not served from the cache the defaults name";
  EXPECT_EQ(read("k.cubin"), compiled);
}

TEST_F(NvccLauncherTest, CommandsItDoesNotCacheRunNvccUnchangedAndAreCountedByReason) {
  const Ran plain_pre = plain("-E -I inc k.cu");
  const Ran pre = launch("-E -I inc k.cu");
  ASSERT_EQ(pre.code, 0) << pre.err;
  EXPECT_TRUE(same(mask_temp_names(pre.out), mask_temp_names(plain_pre.out)));
  write("two.cu", "__global__ void two() {}\n");
  EXPECT_EQ(launch("-arch=sm_90 -c k.cu two.cu -I inc").code, 0);
  EXPECT_EQ(launch("-arch=sm_90 -c k.cu -I inc -keep -o kept.o").code, 0);
  EXPECT_EQ(nvcc_runs(), 3);
  EXPECT_EQ(stored_entries(), 0U);
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("--preprocess makes no single cacheable output", 0), 1) << u.dump();
  EXPECT_EQ(u.value("2 input files", 0), 1) << u.dump();
  EXPECT_EQ(u.value("--keep writes or omits files outside the output", 0), 1) << u.dump();
  // With the cache off, the launcher is nvcc.
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o off.cubin", "PROGCACHE_DISABLE=1").code, 0);
  EXPECT_EQ(stored_entries(), 0U);
  EXPECT_EQ(nvcc_runs(), 1);
  // A cache that cannot be opened (its root is a file) costs the compile, never the build.
  write("not-a-dir", "x");
  const Ran unopenable =
      launch("-arch=sm_90 -I inc -cubin k.cu -o u.cubin", "PROGCACHE_DIR=" + quote(m_tmp.sub("work/not-a-dir")));
  EXPECT_EQ(unopenable.code, 0) << unopenable.err;
  EXPECT_EQ(nvcc_runs(), 1);
  EXPECT_TRUE(exists("u.cubin"));
}

TEST_F(NvccLauncherTest, AHeaderEditedWhileNvccRunsIsNeverServedForTheEditedHeader) {
  // An nvcc that compiles, then edits the header it read: what it made is
  // of the old header, so it must not be stored under the new one.
  testing::write_all(m_tmp.sub("bin/nvcc-edits"),
                     "#!/bin/sh\n" + quote(m_bin + "/nvcc") +
                         " \"$@\" || exit $?\nsleep 0.05\nprintf '#define SCALE 7.0f\\n' > " +
                         quote(m_tmp.sub("work/inc/params.h")) + "\n");
  fs::permissions(m_tmp.sub("bin/nvcc-edits"), fs::perms::owner_all);
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(sh(quote(PROGCACHE_CLI_PATH) + " " + quote(m_tmp.sub("bin/nvcc-edits")) + " " + args).code, 0);
  EXPECT_EQ(stored_entries(), 0U);
  EXPECT_EQ(launcher_stats()["not_stored"].value("an input changed while nvcc ran", 0), 1);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  const std::string served = read("k.cubin");
  ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
  EXPECT_TRUE(same(served, read("plain.cubin")));
}

TEST_F(NvccLauncherTest, AHeaderRemovedWhileNvccRunsLeavesNvccsResultAndStoresNothing) {
  testing::write_all(m_tmp.sub("bin/nvcc-removes"), "#!/bin/sh\n" + quote(m_bin + "/nvcc") + " \"$@\" || exit $?\nrm " +
                                                        quote(m_tmp.sub("work/inc/params.h")) + "\n");
  fs::permissions(m_tmp.sub("bin/nvcc-removes"), fs::perms::owner_all);
  const Ran r =
      sh(quote(PROGCACHE_CLI_PATH) + " " + quote(m_tmp.sub("bin/nvcc-removes")) + " -arch=sm_90 -I inc -cubin k.cu");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(exists("k.cubin"));
  EXPECT_EQ(stored_entries(), 0U);
  EXPECT_EQ(launcher_stats()["not_stored"].value("an input vanished", 0), 1);
}

TEST_F(NvccLauncherTest, ADamagedEntryIsAMissAndNvccCompilesAgain) {
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(launch(args).code, 0);
  const std::string good = read("k.cubin");
  ASSERT_GE(stored_entries(), 2U);
  for (const auto& e : fs::recursive_directory_iterator(m_tmp.sub("cache/nvcc"))) {
    if (!e.is_regular_file() || e.path().filename().string().size() != 62) continue;  // entry files only
    std::string bytes = testing::read_all(e.path().string());
    bytes[bytes.size() / 2] ^= 0x5a;
    testing::write_all(e.path().string(), bytes);
  }
  nvcc_runs();
  fs::remove(m_tmp.sub("work/k.cubin"));
  const Ran r = launch(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nvcc_runs(), 1);
  EXPECT_TRUE(same(read("k.cubin"), good));
}

TEST_F(NvccLauncherTest, AnOutputThatIsNotARegularFileIsNvccsAloneAndNothingHangs) {
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu";
  ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
  const std::string expected = read("plain.cubin");

  // -o naming a FIFO that a reader drains: nvcc writes it and returns; so
  // must the launcher, with nvcc's bytes in the reader's hands.
  ASSERT_EQ(::mkfifo(m_tmp.sub("work/out.fifo").c_str(), 0600), 0);
  Ran r = watched("cat out.fifo > fifo.cubin & " + cli() + " " + noting_nvcc() + " " + args +
                  " -o out.fifo; s=$?; wait; exit $s");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(same(read("fifo.cubin"), expected));
  EXPECT_EQ(nvcc_runs(), 1);

  // -o /dev/stdout into a pipe (a symbolic link to the pipe). (With -ptx,
  // nvcc 13.0 itself does not return here; with -cubin it does.)
  r = watched(cli() + " " + noting_nvcc() + " " + args + " -o /dev/stdout | cat > piped.cubin");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(same(read("piped.cubin"), expected));

  // A symbolic link at the output: nvcc writes through it, nothing is stored
  // or served through it.
  fs::create_symlink("target.cubin", m_tmp.sub("work/link.cubin"));
  for (int i = 0; i < 2; ++i) {
    r = watched(cli() + " " + noting_nvcc() + " " + args + " -o link.cubin");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(same(read("target.cubin"), expected));
    EXPECT_TRUE(fs::is_symlink(m_tmp.sub("work/link.cubin")));
  }
  EXPECT_EQ(nvcc_runs(), 3);
  EXPECT_EQ(stored_entries(), 0U);
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("output '...' is not a regular file", 0), 4) << u.dump();

  // An nvcc that leaves a FIFO (or a symbolic link) where its output or
  // dependency file was: the launcher reads nothing back from it, stores
  // nothing, and returns nvcc's status.
  struct Swap {
    std::string name, file, extra, then;
  };
  for (const Swap& w : {Swap{"fifo output", "k.cubin", "", "rm -f k.cubin && mkfifo k.cubin"},
                        Swap{"fifo depfile", "k.d", "-MD -MF k.d", "rm -f k.d && mkfifo k.d"},
                        Swap{"symlink output", "k.cubin", "", "mv k.cubin real.cubin && ln -s real.cubin k.cubin"}}) {
    SCOPED_TRACE(w.name);
    testing::write_all(m_tmp.sub("bin/nvcc-swaps"),
                       "#!/bin/sh\n" + quote(m_bin + "/nvcc") + " \"$@\" || exit $?\n" + w.then + "\n");
    fs::permissions(m_tmp.sub("bin/nvcc-swaps"), fs::perms::owner_all);
    fs::remove(m_tmp.sub("work/" + w.file));
    fs::remove(m_tmp.sub("work/real.cubin"));
    r = watched(cli() + " " + quote(m_tmp.sub("bin/nvcc-swaps")) + " " + args + " -o k.cubin " + w.extra);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(stored_entries(), 0U);
    fs::remove(m_tmp.sub("work/" + w.file));
  }
  const auto n = launcher_stats()["not_stored"];
  EXPECT_EQ(n.value("the output cannot be read back as a regular file", 0), 2) << n.dump();
  EXPECT_EQ(n.value("no dependency list from nvcc", 0), 1) << n.dump();
}

TEST_F(NvccLauncherTest, APlantedCountersFileOrAHeldLockNeverHangsABuild) {
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(plain("-arch=sm_90 -I inc -cubin k.cu -o plain.cubin").code, 0);
  const std::string expected = read("plain.cubin");

  // A group-shared root where a member made the counters file a FIFO: every
  // build of every member would wait on it.
  const std::string group_root = m_tmp.sub("group");
  fs::create_directories(group_root + "/nvcc");
  ::chmod(group_root.c_str(), 02770);
  ::chmod((group_root + "/nvcc").c_str(), 02770);
  ASSERT_EQ(::mkfifo((group_root + "/nvcc/launcher-stats.json").c_str(), 0660), 0);
  const std::string group_env = "PROGCACHE_SHARING=group PROGCACHE_DIR=" + quote(group_root);
  for (int i = 0; i < 2; ++i) {
    fs::remove(m_tmp.sub("work/k.cubin"));
    const Ran r = watched(cli() + " " + noting_nvcc() + " " + args, group_env);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(same(read("k.cubin"), expected));
  }
  EXPECT_EQ(nvcc_runs(), 1) << "the second build was not served";
  EXPECT_EQ(watched(cli() + " stats --json", group_env).code, 0);

  // A root the store refuses (writable by others): nothing in it is
  // counted or read, nvcc runs; a FIFO there is never opened.
  const std::string refused = m_tmp.sub("refused");
  fs::create_directories(refused + "/nvcc");
  ::chmod(refused.c_str(), 0777);
  ASSERT_EQ(::mkfifo((refused + "/nvcc/launcher-stats.json").c_str(), 0600), 0);
  for (const std::string& cmd : {std::string("-E -I inc k.cu"), args}) {
    const Ran r = watched(cli() + " " + noting_nvcc() + " " + cmd, "PROGCACHE_DIR=" + quote(refused));
    EXPECT_EQ(r.code, 0) << r.err;
  }
  EXPECT_EQ(nvcc_runs(), 2);
  EXPECT_TRUE(fs::is_fifo(refused + "/nvcc/launcher-stats.json"));

  // The counters file locked by a process that does not let go: the build
  // goes on (that count is lost).
  ASSERT_EQ(launch(args).code, 0);  // makes the private root and its counters
  const std::string stats_path = m_tmp.sub("cache/nvcc/launcher-stats.json");
  const int fd = ::open(stats_path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  fs::remove(m_tmp.sub("work/k.cubin"));
  const Ran held = watched(cli() + " " + noting_nvcc() + " " + args);
  EXPECT_EQ(held.code, 0) << held.err;
  EXPECT_TRUE(same(read("k.cubin"), expected));
  ::close(fd);
}

TEST_F(NvccLauncherTest, IdenticalCommandsStartedTogetherCompileOnceAndTheOthersAreServed) {
  ASSERT_EQ(plain("-arch=sm_90 -I inc -cubin k.cu -o plain.cubin").code, 0);
  const std::string expected = read("plain.cubin");
  // The noting nvcc, made slow by a variable the key does not hold: a
  // second command starts while the first one's nvcc runs.
  fs::create_directories(m_tmp.sub("bin/slow"));
  testing::write_all(m_tmp.sub("bin/slow/nvcc"), "#!/bin/sh\necho run >> " + quote(m_tmp.sub("nvcc-runs")) +
                                                     "\nsleep ${NVCC_SLEEP:-0}\nexec " + quote(m_bin + "/nvcc") +
                                                     " \"$@\"\n");
  fs::permissions(m_tmp.sub("bin/slow/nvcc"), fs::perms::owner_all);
  const std::string slow = cli() + " " + quote(m_tmp.sub("bin/slow/nvcc")) + " -arch=sm_90 -I inc -cubin k.cu -o ";
  // Two build directories' commands (other -o names, one key): the second
  // waits for the first and is served what it stored.
  const Ran two = watched("NVCC_SLEEP=3 " + slow + "a.cubin & sleep 1; " + slow + "b.cubin; wait");
  EXPECT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(nvcc_runs(), 1) << "the second command compiled too";
  EXPECT_TRUE(same(read("a.cubin"), expected));
  EXPECT_TRUE(same(read("b.cubin"), expected));
  auto stats = launcher_stats();
  EXPECT_EQ(stats["waited"], 1);
  EXPECT_EQ(stats["hits"], 1);
  EXPECT_EQ(stats["misses"], 1);

  // The wait is bounded: a first compile that takes longer than
  // PROGCACHE_LOCK_TIMEOUT (a hung nvcc) does not hold the second back,
  // which compiles itself and is done first.
  write("inc/params.h", "#define SCALE 3.0f\n");
  ASSERT_EQ(plain("-arch=sm_90 -I inc -cubin k.cu -o plain3.cubin").code, 0);
  fs::remove(m_tmp.sub("work/a.cubin"));
  const std::string hung = "29." + std::to_string(::getpid());  // found again by pkill
  const Ran bounded =
      watched("NVCC_SLEEP=" + hung + " " + slow + "a.cubin & sleep 1; PROGCACHE_LOCK_TIMEOUT=1 " + slow +
              "b.cubin; test -e a.cubin && echo the-first-was-done-first; pkill -f 'sleep " + hung + "'; wait");
  EXPECT_EQ(bounded.out.find("the-first-was-done-first"), std::string::npos);
  EXPECT_TRUE(same(read("b.cubin"), read("plain3.cubin")));
  EXPECT_EQ(launcher_stats()["waited"], 2);

  // A setting that is not a number of seconds: said, and nvcc runs.
  const Ran bad = launch("-arch=sm_90 -I inc -cubin k.cu -o c.cubin", "PROGCACHE_LOCK_TIMEOUT=soon");
  EXPECT_EQ(bad.code, 0) << bad.err;
  EXPECT_NE(bad.err.find("PROGCACHE_LOCK_TIMEOUT"), std::string::npos) << bad.err;
  EXPECT_TRUE(same(read("c.cubin"), read("plain3.cubin")));
}

TEST_F(NvccLauncherTest, ASearchDirectoryGoneSinceTheStoreIsNotServedAround) {
  // The host compiler warns of a search directory that is not there
  // (-Wmissing-include-dirs): a hit must print that too, so the key holds
  // whether each one is a directory. (The toolkit's nvcc: through a
  // wrapper, the launcher's own dependency list makes nvcc print a device
  // output's warnings twice.)
  fs::create_directories(m_tmp.sub("work/extra"));
  const std::string args = "-arch=sm_90 -I inc -I extra -Xcompiler -Wmissing-include-dirs -cubin k.cu -o k.cubin";
  const auto real = [&] { return sh(cli() + " " + quote(m_bin + "/nvcc") + " " + args); };
  const auto misses = [&] { return launcher_stats().value("misses", 0); };
  int stored_after = -1;
  for (int i = 0; i < 4 && stored_after < 0; ++i) {
    const int before = i == 0 ? 0 : misses();
    ASSERT_EQ(real().code, 0);
    if (i > 0 && misses() == before) stored_after = i;
  }
  ASSERT_GE(stored_after, 0) << "never stored";
  fs::remove(m_tmp.sub("work/extra"));
  const int before = misses();
  const Ran served = real();
  EXPECT_EQ(misses(), before + 1) << "served though a search directory is gone";
  const Ran expected = plain(args);
  EXPECT_NE(expected.err.find("extra"), std::string::npos) << expected.err;
  EXPECT_EQ(served.err, expected.err);
}

TEST_F(NvccLauncherTest, ExplainSaysWhetherALauncherCommandWouldBeServedAndWhyNotAndRunsNothing) {
  const std::string args = "-arch=sm_90 -I inc0 -I inc -cubin k.cu -o k.cubin";
  const auto explain = [&] { return sh(cli() + " explain " + noting_nvcc() + " " + args); };
  // Asking makes nothing: no root, no output, no nvcc run.
  Ran r = explain();
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("k.cu: miss"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(m_tmp.sub("cache")));
  EXPECT_FALSE(exists("k.cubin"));
  EXPECT_EQ(nvcc_runs(), 0);

  ASSERT_EQ(launch(args).code, 0);
  ASSERT_EQ(nvcc_runs(), 1);
  fs::remove(m_tmp.sub("work/k.cubin"));
  // The nvcc store's own statistics (lookups, bytes read, timings) and its
  // files: asking changes none of them.
  const auto store_stats = [&] {
    const nlohmann::json st = nlohmann::json::parse(sh(cli() + " stats --json").out);
    for (const auto& c : st["companions"]) {
      if (c["name"] == "nvcc") return c;
    }
    return nlohmann::json();
  };
  const auto store_files = [&] {
    std::vector<std::pair<std::string, std::string>> files;
    for (const auto& f : fs::recursive_directory_iterator(m_tmp.sub("cache/nvcc"))) {
      if (f.is_regular_file()) files.emplace_back(f.path().string(), testing::read_all(f.path().string()));
    }
    std::sort(files.begin(), files.end());
    return files;
  };
  const nlohmann::json before = store_stats();
  const auto files_before = store_files();
  r = explain();
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("k.cu: hit"), std::string::npos) << r.out;
  EXPECT_EQ(store_stats(), before) << "explain changed the store's statistics";
  EXPECT_GT(before.value("misses", 0), 0);
  EXPECT_TRUE(store_files() == files_before) << "explain changed a file of the store";
  // An output whose directory is gone: nvcc would fail, so no hit is said.
  r = sh(cli() + " explain " + noting_nvcc() + " -arch=sm_90 -I inc0 -I inc -cubin k.cu -o gone/k.cubin");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  EXPECT_FALSE(exists("k.cubin")) << "explain wrote the output";
  EXPECT_EQ(launcher_stats().value("hits", 0), 0) << "explain counted a hit";
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "explain said hit, the build compiled";

  // An edit, and a header made earlier in the search: each named, and the
  // build compiles as explain said it would.
  for (const auto& [header, said] :
       {std::pair{"inc/params.h", "result 1 of 1: edited  inc/params.h"},
        std::pair{"inc0/params.h", "result 1 of 2: created earlier in the search  inc0/params.h"}}) {
    write(header, "#define SCALE 3.0f\n");
    r = explain();
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find(said), std::string::npos) << r.out;
    ASSERT_EQ(launch(args).code, 0);
    EXPECT_EQ(nvcc_runs(), 1) << header;
  }

  // Other options: never stored; a command the launcher does not cache: why.
  r = sh(cli() + " explain " + noting_nvcc() + " -arch=sm_80 -I inc -cubin k.cu -o k.cubin");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("never stored"), std::string::npos) << r.out;
  r = sh(cli() + " explain " + noting_nvcc() + " -E -I inc k.cu");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("not cached: --preprocess"), std::string::npos) << r.out;
  EXPECT_EQ(nvcc_runs(), 0);
  EXPECT_EQ(launcher_stats().value("uncacheable", nlohmann::json::object()).size(), 0U) << "explain counted";

  // Directories the store would not trust: a shard others may write is a
  // miss, a version directory replaced by a link is no cache at all.
  std::vector<std::string> shards;
  for (const auto& d : fs::directory_iterator(m_tmp.sub("cache/nvcc/v1"))) {
    if (d.is_directory()) shards.push_back(d.path().string());
  }
  ASSERT_FALSE(shards.empty());
  for (const auto& d : shards) ::chmod(d.c_str(), 0777);
  r = explain();
  EXPECT_EQ(r.code, 1) << r.out;
  for (const auto& d : shards) ::chmod(d.c_str(), 0700);
  EXPECT_EQ(explain().code, 0);
  fs::rename(m_tmp.sub("cache/nvcc/v1"), m_tmp.sub("cache/nvcc/v1-moved"));
  fs::create_directory_symlink(m_tmp.sub("cache/nvcc/v1-moved"), m_tmp.sub("cache/nvcc/v1"));
  r = explain();
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.err.find("not a directory the store trusts"), std::string::npos) << r.err;
  fs::remove(m_tmp.sub("cache/nvcc/v1"));
  fs::rename(m_tmp.sub("cache/nvcc/v1-moved"), m_tmp.sub("cache/nvcc/v1"));

  // A damaged entry is said to be damaged, and left for a build to drop.
  std::vector<std::string> entries;
  for (const auto& f : fs::recursive_directory_iterator(m_tmp.sub("cache/nvcc/v1"))) {
    if (f.is_regular_file() && f.path().filename().string().size() == 62) entries.push_back(f.path().string());
  }
  ASSERT_FALSE(entries.empty());
  for (const auto& e : entries) {
    std::string bytes = testing::read_all(e);
    bytes[bytes.size() - 3] ^= 0x5a;
    testing::write_all(e, bytes);
  }
  const auto damaged = store_files();
  r = explain();
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("damaged"), std::string::npos) << r.out;
  EXPECT_TRUE(store_files() == damaged) << "explain dropped or changed a damaged entry";
}

TEST_F(NvccLauncherTest, FilesTheToolsReadByNameAreKeyedSoAnEditIsCompiledAgain) {
  write("h.cu", "__global__ void scale(float* x) { x[0] *= HOST_SCALE; }\n");
  auto check = [&](const std::string& args, const std::string& file, const std::string& edit_from,
                   const std::string& edit_to, const std::string& env = "") {
    SCOPED_TRACE(args + " " + env);
    ASSERT_EQ(launch(args, env).code, 0);
    ASSERT_EQ(launch(args, env).code, 0);
    EXPECT_EQ(nvcc_runs(), 1) << "not served the second time";
    std::string text = read(file);
    ASSERT_NE(text.find(edit_from), std::string::npos);
    text.replace(text.find(edit_from), edit_from.size(), edit_to);
    write(file, text);
    const Ran r = launch(args, env);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nvcc_runs(), 1) << "an edited " << file << " was served from the cache";
    const std::string served = read("h.cubin");
    ASSERT_EQ(sh(quote(m_bin + "/nvcc") + " " + args + " -o plain.cubin", env).code, 0);
    EXPECT_TRUE(same(served, read("plain.cubin"))) << "the launcher's output is not what nvcc makes of " << file;
  };
  // A response file for the host compiler (which also preprocesses for the device).
  write("flags.rsp", "-DHOST_SCALE=2.0f\n");
  check("-arch=sm_90 -cubin h.cu -o h.cubin -Xcompiler @flags.rsp", "flags.rsp", "2.0f", "3.0f");
  // ... named in NVCC_APPEND_FLAGS.
  write("env.rsp", "-DHOST_SCALE=4.0f\n");
  check("-arch=sm_90 -cubin h.cu -o h.cubin", "env.rsp", "4.0f", "5.0f", "NVCC_APPEND_FLAGS='-Xcompiler @env.rsp'");
  // ptxas's options file, nested.
  write("p.opt", "-optf nested.opt\n");
  write("nested.opt", "-O3\n");
  check("-arch=sm_90 -cubin h.cu -o h.cubin -DHOST_SCALE=2.0f -Xptxas --options-file,p.opt", "nested.opt", "-O3",
        "-O0");
  // What cannot be keyed runs nvcc, counted.
  ASSERT_EQ(launch("-arch=sm_90 -cubin h.cu -o h.cubin -DHOST_SCALE=2.0f -Xcompiler -fprofile-use=none").code, 0);
  EXPECT_NE(launch("-arch=sm_90 -cubin h.cu -o h.cubin -Xcompiler -include,gone.h -DHOST_SCALE=1").code, 0);
  EXPECT_EQ(nvcc_runs(), 2);
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("host compiler word '...' may read files the key cannot see", 0), 1) << u.dump();
  EXPECT_EQ(u.value("host compiler file '...' is not a readable file in the working directory", 0), 1) << u.dump();
}

// One uid, two roles: a member of the group that shares the root plants an
// object entry (written here with the store's own API, as any member may);
// another member's build must not link it. Simulated as one user, since the
// rule is about the configuration (a group-shared root without signing).
TEST_F(NvccLauncherTest, ObjectsAreNeitherServedNorStoredInAGroupRootWithoutSignedEntries) {
  const std::string args = "-arch=sm_90 -I inc -c k.cu -o k.o";
  write("evil.cu", "__global__ void evil(float* x) { x[0] = 42.0f; }\n");
  ASSERT_EQ(plain("-arch=sm_90 -c evil.cu -o evil.o").code, 0);
  const std::string evil = read("evil.o");
  ASSERT_EQ(plain(args + " -o plain.o").code, 0);
  const std::string expected = mask_temp_names(read("plain.o"));

  // The root, private at first: an honest entry, then the planted object.
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  FileStoreOptions o;
  o.root = m_tmp.sub("cache/nvcc");
  auto store = FileStore::open(o);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  auto listed = (*store)->list();
  ASSERT_TRUE(listed.ok());
  int planted = 0;
  for (const auto& info : *listed) {
    auto e = (*store)->get(info.key);
    ASSERT_TRUE(e.ok() && e->has_value());
    if ((*e)->find("output") == nullptr) continue;
    std::vector<Artifact> artifacts;
    for (const auto& a : (*e)->artifacts()) {
      artifacts.push_back({a.name, a.name == "output" ? Bytes::copy_of(evil) : a.data});
    }
    ASSERT_TRUE((*store)->put(info.key, Entry((*e)->metadata(), std::move(artifacts))).ok());
    ++planted;
  }
  ASSERT_EQ(planted, 1);
  store->reset();
  // Private, it is the user's own store: the planted entry is served (what
  // makes the check below mean something).
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 0);
  EXPECT_TRUE(same(read("k.o"), evil));

  // Shared with a group, unsigned: nvcc compiles, the entry is not linked.
  const std::string group_env = "PROGCACHE_SHARING=group";
  ::chmod(m_tmp.sub("cache").c_str(), 02770);
  for (int i = 0; i < 2; ++i) {
    const Ran r = launch(args, group_env);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nvcc_runs(), 1) << "an object was served from a group-shared root without signed entries";
    EXPECT_TRUE(same(mask_temp_names(read("k.o")), expected));
  }
  const auto u = launcher_stats(group_env)["uncacheable"];
  EXPECT_EQ(u.value("host code (an object) in a group-shared root needs signed entries (PROGCACHE_HMAC_KEY_FILE)", 0),
            2)
      << u.dump();
  // Device code keeps the store's usual rules there.
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin", group_env).code, 0);
  ASSERT_EQ(launch("-arch=sm_90 -I inc -cubin k.cu -o k.cubin", group_env).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);

  // Signed: the unsigned planted entry is refused, nvcc's object is stored
  // signed and served.
  testing::write_all(m_tmp.sub("hmac.key"), "0123456789abcdef0123456789abcdef\n");
  ::chmod(m_tmp.sub("hmac.key").c_str(), 0600);
  const std::string signed_env = group_env + " PROGCACHE_HMAC_KEY_FILE=" + quote(m_tmp.sub("hmac.key"));
  ASSERT_EQ(launch(args, signed_env).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  EXPECT_TRUE(same(mask_temp_names(read("k.o")), expected));
  const std::string compiled = read("k.o");
  fs::remove(m_tmp.sub("work/k.o"));
  ASSERT_EQ(launch(args, signed_env).code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "a signed object was not served";
  EXPECT_TRUE(same(read("k.o"), compiled));
}

TEST_F(NvccLauncherTest, ALinkNamedNvccFirstOnPathIsTheLauncherAndRunsTheRealNvcc) {
  // ccache's masquerade: a directory first on PATH holding nvcc -> progcache.
  fs::create_directories(m_tmp.sub("masq"));
  fs::create_symlink(PROGCACHE_CLI_PATH, m_tmp.sub("masq/nvcc"));
  const std::string path = "PATH=" + quote(m_tmp.sub("masq") + ":" + m_tmp.sub("bin") + ":/usr/bin:/bin");
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(plain(args).code, 0);
  const std::string expected = read("k.cubin");
  fs::remove(m_tmp.sub("work/k.cubin"));
  // By name on PATH, and by the link's full path: the noting nvcc after it runs.
  const Ran cold = sh("nvcc " + args, path);
  ASSERT_EQ(cold.code, 0) << cold.err;
  EXPECT_EQ(nvcc_runs(), 1);
  EXPECT_TRUE(same(read("k.cubin"), expected));
  fs::remove(m_tmp.sub("work/k.cubin"));
  const Ran warm = sh(quote(m_tmp.sub("masq/nvcc")) + " " + args, path);
  ASSERT_EQ(warm.code, 0) << warm.err;
  EXPECT_EQ(nvcc_runs(), 0) << "a warm hit ran nvcc";
  EXPECT_TRUE(same(read("k.cubin"), expected));
  EXPECT_EQ(launcher_stats().value("hits", 0), 1);
  // With no other nvcc on PATH it says so, and never runs itself.
  if (fs::exists("/usr/bin/nvcc") || fs::exists("/bin/nvcc")) return;
  const Ran alone = sh("nvcc " + args, "PATH=" + quote(m_tmp.sub("masq") + ":/usr/bin:/bin"));
  EXPECT_EQ(alone.code, 127);
  EXPECT_NE(alone.err.find("nvcc: command not found"), std::string::npos) << alone.err;
}

// The oracle for the rules below: after one change made after a store, the
// launcher's output is what plain nvcc makes of the same command now.
class NvccLauncherOracleTest : public NvccLauncherTest {
 protected:
  // Stores `args` (under `env`), makes `change`, then runs it again under
  // `env_after`: nvcc must run, and the served file equal plain nvcc's.
  void expect_compiled_again(const std::string& args, const std::string& out, const std::string& env,
                             const std::function<void()>& change, const std::string& env_after) {
    // A file written within the clock tick before a compile is not stored
    // from it (it may have changed while nvcc ran): a later run stores it.
    ASSERT_EQ(launch(args, env).code, 0);
    nvcc_runs();
    int runs = 1;
    for (int i = 0; i < 3 && runs != 0; ++i) {
      ASSERT_EQ(launch(args, env).code, 0);
      runs = nvcc_runs();
    }
    EXPECT_EQ(runs, 0) << "never served: " << launcher_stats(env).dump();
    change();
    const Ran r = launch(args, env_after);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(nvcc_runs(), 1) << "served from the cache after the change";
    const std::string served = read(out);
    ASSERT_EQ(sh(quote(m_bin + "/nvcc") + " " + args + " -o plain.out", env_after).code, 0);
    EXPECT_TRUE(same(served, read("plain.out"))) << "the launcher's output is not what nvcc makes of it now";
  }
};

TEST_F(NvccLauncherOracleTest, ArchNativeIsDecidedByTheMachineAndRunsNvccUncached) {
  const std::string args = "-arch=native -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(launch(args).code, 0);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 2);
  EXPECT_EQ(stored_entries(), 0U);
  const std::string served = read("k.cubin");
  ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
  EXPECT_TRUE(same(served, read("plain.cubin")));
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("--gpu-architecture '...' depends on the GPUs of the machine", 0), 2) << u.dump();
}

TEST_F(NvccLauncherOracleTest, VariablesNvccAndItsProfileReadAreKeyedOrRefused) {
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  // nvcc.profile appends PTXAS_FLAGS to what ptxas gets.
  expect_compiled_again(
      args, "k.cubin", "", [] {}, "PTXAS_FLAGS=-O0");
  // INCLUDES adds include directories nvcc searches: refused, nvcc's own.
  write("inc0/params.h", "#define SCALE 9.0f\n");
  const Ran r = launch(args, "INCLUDES=-Iinc0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nvcc_runs(), 1);
  const std::string served = read("k.cubin");
  ASSERT_EQ(sh(quote(m_bin + "/nvcc") + " " + args + " -o plain.out", "INCLUDES=-Iinc0").code, 0);
  EXPECT_TRUE(same(served, read("plain.out")));
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("variable '...' set: nvcc reads it, and what it names is not keyed", 0), 1) << u.dump();
}

TEST_F(NvccLauncherOracleTest, AHeaderMadeEarlierInTheSearchThroughTheEnvironmentIsCompiledAgain) {
  const std::string args = "-arch=sm_90 -cubin k.cu -o k.cubin";
  // CPATH: searched after -I, before -isystem; an empty entry is '.'.
  expect_compiled_again(
      args, "k.cubin", "CPATH=inc0:inc", [&] { write("inc0/params.h", "#define SCALE 5.0f\n"); }, "CPATH=inc0:inc");
  fs::remove(m_tmp.sub("work/inc0/params.h"));
  // A directory given in NVCC_PREPEND_FLAGS, another reached through a link.
  fs::create_directories(m_tmp.sub("work/inc1"));
  fs::create_symlink("inc1", m_tmp.sub("work/alias1"));
  expect_compiled_again(
      args + " -I alias1 -I inc", "k.cubin", "NVCC_PREPEND_FLAGS='-I inc0'",
      [&] { write("inc0/params.h", "#define SCALE 6.0f\n"); }, "NVCC_PREPEND_FLAGS='-I inc0'");
  fs::remove(m_tmp.sub("work/inc0/params.h"));
  expect_compiled_again(
      "-arch=sm_90 -I alias1 -isystem inc -cubin k.cu -o k.cubin", "k.cubin", "",
      [&] { write("inc1/params.h", "#define SCALE 7.0f\n"); }, "");
  // Directories given to the host compiler directly are refused.
  ASSERT_EQ(launch(args + " -I inc -Xcompiler -Iinc0").code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("host compiler word '...' may read files the key cannot see", 0), 1) << u.dump();
}

TEST_F(NvccLauncherOracleTest, AHeaderAProbeOrAnIncludeDidNotFindIsCompiledAgainWhenMade) {
  write("h.cu",
        "#include \"params.h\"\n"
        "#if __has_include(<tuning.h>)\n#include <tuning.h>\n#endif\n"
        "#ifndef TUNE\n#define TUNE 1.0f\n#endif\n"
        "__global__ void scale(float* x) { x[0] *= SCALE * TUNE; }\n");
  const std::string args = "-arch=sm_90 -I inc0 -I inc -cubin h.cu -o h.cubin";
  // __has_include: a header made where it would now be found.
  expect_compiled_again(
      args, "h.cubin", "", [&] { write("inc/tuning.h", "#define TUNE 3.0f\n"); }, "");
  // A quoted include from a header, in that header's own directory.
  write("inc/params.h",
        "#if __has_include(\"local.h\")\n#include \"local.h\"\n#endif\n#ifndef SCALE\n"
        "#define SCALE 2.0f\n#endif\n");
  expect_compiled_again(
      args, "h.cubin", "", [&] { write("inc/local.h", "#define SCALE 4.0f\n"); }, "");
  // nvcc's own -include cuda_runtime.h looks in the working directory first.
  ASSERT_EQ(launch(args).code, 0);
  nvcc_runs();
  write("cuda_runtime.h", "#error made here\n");
  const Ran served = launch(args);
  EXPECT_EQ(nvcc_runs(), 1);
  EXPECT_EQ(served.code, plain(args + " -o plain.out").code);
  EXPECT_NE(served.code, 0);
}

TEST_F(NvccLauncherOracleTest, AHeaderMadeWhereASettledDirectoryWatchedTheSearchIsCompiledAgain) {
  // A place a result needs empty is watched by the deepest directory on its
  // path that exists, once that directory's last change is older than the
  // recent-change window (compile/empty_places.h): a lookup looks at the
  // directory, not at each place. The directories are left to settle
  // first; the outputs go elsewhere.
  fs::create_directories(m_tmp.sub("work/inc0"));
  fs::create_directories(m_tmp.sub("work/inc2"));
  fs::create_directories(m_tmp.sub("work/out"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  // A header made in a directory that held none.
  expect_compiled_again(
      "-arch=sm_90 -I inc0 -I inc -cubin k.cu -o out/k.cubin", "out/k.cubin", "",
      [&] { write("inc0/params.h", "#define SCALE 5.0f\n"); }, "");
  // A header made below a directory that did not exist, in a settled one.
  expect_compiled_again(
      "-arch=sm_90 -I inc2/later -I inc -cubin k.cu -o out/k2.cubin", "out/k2.cubin", "",
      [&] {
        fs::create_directories(m_tmp.sub("work/inc2/later"));
        write("inc2/later/params.h", "#define SCALE 6.0f\n");
      },
      "");
}

TEST_F(NvccLauncherOracleTest, TwoHeaderVersionsSwitchedBackAndForthAreEachServedAsNvccWritesThem) {
  // A branch switch (or a generated header) alternating between two texts:
  // after one compile of each, every switch is served, and each served
  // cubin is the one nvcc makes of that text.
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  const std::vector<std::string> versions = {"#define SCALE 2.0f\n", "#define SCALE 3.0f\n"};
  std::vector<std::string> plain_cubins;
  for (const auto& v : versions) {
    write("inc/params.h", v);
    ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
    plain_cubins.push_back(read("plain.cubin"));
    // Stored once its header is past the clock tick of its writing.
    for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(args).code, 0);
  }
  nvcc_runs();
  for (int round = 0; round < 4; ++round) {
    const std::size_t i = round % 2;
    write("inc/params.h", versions[i]);
    ASSERT_EQ(launch(args).code, 0);
    EXPECT_EQ(nvcc_runs(), 0) << "switch " << round << " compiled again";
    EXPECT_TRUE(same(read("k.cubin"), plain_cubins[i])) << "switch " << round << " served another version's cubin";
  }
}

// The preprocessed text (the toolkit's own nvcc: a wrapper's --dryrun is
// the wrapper's). Whether nvcc compiled is told by the launcher's counters:
// a compile is a miss.
class NvccLauncherTextTest : public NvccLauncherOracleTest {
 protected:
  Ran real(const std::string& args, const std::string& env = "") {
    return sh(cli() + " " + quote(m_bin + "/nvcc") + " " + args, env);
  }
  std::uint64_t counter(const char* name) {
    const auto j = launcher_stats();  // null before the launcher's first run
    return j.is_object() ? j.value(name, std::uint64_t{0}) : 0;
  }
  // Runs `args` until it is a hit (a file written in the tick before a
  // compile is not stored from it); false if it never is.
  bool stored(const std::string& args, const std::string& env = "") {
    for (int i = 0; i < 4; ++i) {
      const std::uint64_t hits = counter("hits");
      if (real(args, env).code != 0) return false;
      if (counter("hits") == hits + 1) return true;
    }
    return false;
  }
};

TEST_F(NvccLauncherTextTest, ACommentEditIsServedByThePreprocessedTextAndARealEditIsCompiled) {
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  write("inc/params.h", "// version one\n#define SCALE 2.0f\n");
  ASSERT_TRUE(stored(args));
  // A comment edit: nvcc does not compile, and the cubin is what it makes now.
  write("inc/params.h", "// version two, with another comment\n#define SCALE 2.0f\n");
  std::uint64_t misses = counter("misses");
  ASSERT_EQ(real(args).code, 0);
  EXPECT_EQ(counter("misses"), misses) << "a comment edit compiled again";
  EXPECT_EQ(counter("preprocessed_hits"), 1U);
  ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("k.cubin"), read("plain.cubin")));
  // Recorded in the manifest: the next run is a direct hit.
  ASSERT_EQ(real(args).code, 0);
  EXPECT_EQ(counter("misses"), misses);
  EXPECT_EQ(counter("preprocessed_hits"), 1U) << "the comment edit was not recorded";
  // A real edit is compiled, and served as nvcc makes it.
  write("inc/params.h", "// version two, with another comment\n#define SCALE 5.0f\n");
  ASSERT_EQ(real(args).code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "a real edit was served from the cache";
  ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("k.cubin"), read("plain.cubin")));

  // An object, with comments added to the source's own lines.
  const std::string object = "-arch=sm_90 -I inc -c k.cu -o k.o";
  ASSERT_TRUE(stored(object));
  write("k.cu",
        "#include \"params.h\"  // the scale\n"
        "__global__ void scale(float* x, int n) {\n"
        "  const int i = blockIdx.x * blockDim.x + threadIdx.x;  /* the index */\n"
        "  if (i < n) x[i] *= SCALE;\n"
        "}\n");
  misses = counter("misses");
  ASSERT_EQ(real(object).code, 0);
  EXPECT_EQ(counter("misses"), misses) << "a comment edit of the source compiled again";
  ASSERT_EQ(plain(object + " -o plain.o").code, 0);
  EXPECT_TRUE(same(mask_temp_names(read("k.o")), mask_temp_names(read("plain.o"))));
}

TEST_F(NvccLauncherTextTest, WithThreadsACommentEditIsStillServedByTheText) {
  // nvcc --threads N prints its steps with redirections of their output
  // (a real project's Makefile passes --threads=0): the text is still read.
  for (const std::string threads : {"--threads 2", "--threads=0", "-t 2"}) {
    write("inc/params.h", "// one " + threads + "\n#define SCALE 2.0f\n");
    const std::string args =
        "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 " + threads + " -I inc -c k.cu -o k.o";
    ASSERT_TRUE(stored(args)) << threads;
    write("inc/params.h", "// two, another comment " + threads + "\n#define SCALE 2.0f\n");
    const std::uint64_t misses = counter("misses");
    const std::uint64_t text_hits = counter("preprocessed_hits");
    ASSERT_EQ(real(args).code, 0);
    EXPECT_EQ(counter("misses"), misses) << threads << ": a comment edit compiled again";
    EXPECT_EQ(counter("preprocessed_hits"), text_hits + 1) << threads;
    ASSERT_EQ(plain(args + " -o plain.o").code, 0);
    EXPECT_TRUE(same(mask_temp_names(read("k.o")), mask_temp_names(read("plain.o")))) << threads;
  }
}

TEST_F(NvccLauncherTextTest, AnEditOnlyTheHostTextOrOneArchitecturesTextSeesIsCompiled) {
  // nvcc preprocesses a source once for its host code and once per device
  // architecture, and each text holds what the others drop: code under
  // #ifndef __CUDA_ARCH__ only the host's, code under one architecture's
  // value only that one's. The text key holds every step's text. (A key
  // of one `nvcc -E` text, as ccache's preprocessor mode keeps, serves the
  // old object after the host-only edit: docs/nvcc.md.)
  const std::string args = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -c k.cu -o k.o";
  auto source = [](const std::string& comment, int host, int arch80) {
    return "// " + comment +
           "\n"
           "__global__ void k(int* p) {\n"
           "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 800\n"
           "  *p = " +
           std::to_string(arch80) +
           ";\n"
           "#else\n"
           "  *p = 7;\n"
           "#endif\n"
           "}\n"
           "#ifndef __CUDA_ARCH__\n"
           "int host_value() { return " +
           std::to_string(host) + "; }\n#endif\n";
  };
  write("k.cu", source("one", 1, 1));
  ASSERT_TRUE(stored(args));
  // The text key is tried for this command: a comment edit is served by it.
  write("k.cu", source("two", 1, 1));
  std::uint64_t misses = counter("misses");
  const std::uint64_t by_text = counter("preprocessed_hits");
  ASSERT_EQ(real(args).code, 0);
  EXPECT_EQ(counter("misses"), misses);
  EXPECT_EQ(counter("preprocessed_hits"), by_text + 1);
  struct Edit {
    int host, arch80;
    const char* what;
  };
  for (const Edit& e : {Edit{2, 1, "the host-only code"}, Edit{2, 2, "the sm_80-only code"}}) {
    write("k.cu", source("two", e.host, e.arch80));
    misses = counter("misses");
    ASSERT_EQ(real(args).code, 0);
    EXPECT_EQ(counter("misses"), misses + 1) << "an edit of " << e.what << " was served from the cache";
    ASSERT_EQ(plain(args + " -o plain.o").code, 0);
    EXPECT_TRUE(same(mask_temp_names(read("k.o")), mask_temp_names(read("plain.o")))) << e.what;
  }
}

TEST_F(NvccLauncherTextTest, WhatTheTextCannotVouchForIsCompiled) {
  // A result that printed: served by its text only when what it printed
  // names no file that changed (a diagnostic quotes lines of the files it
  // names). ptxas's report names none: served, and it prints what nvcc
  // prints now.
  const std::string verbose = "-arch=sm_90 -I inc -Xptxas -v -cubin k.cu -o k.cubin";
  ASSERT_TRUE(stored(verbose));
  write("inc/params.h", "// edited\n#define SCALE 2.0f\n");
  std::uint64_t misses = counter("misses");
  const Ran replayed = real(verbose);
  ASSERT_EQ(replayed.code, 0);
  EXPECT_EQ(counter("misses"), misses) << "a report that names no edited file was compiled again";
  const Ran plain_verbose = plain("-arch=sm_90 -I inc -Xptxas -v -cubin k.cu -o plain.cubin");
  EXPECT_FALSE(plain_verbose.err.empty());
  // ptxas reports its own compile time: the one figure that is not the text's.
  const auto untimed = [](std::string text) {
    return std::regex_replace(text, std::regex("Compile time = [0-9.]+ ms"), "Compile time = ? ms");
  };
  EXPECT_EQ(untimed(replayed.err), untimed(plain_verbose.err));
  EXPECT_TRUE(same(read("k.cubin"), read("plain.cubin")));
  // A warning in the header that is then edited (a comment): compiled, and
  // the warning is nvcc's own of now.
  const std::string warned = "-arch=sm_90 -I inc -cubin k.cu -o warned.cubin";
  write("inc/params.h",
        "// one\n__device__ inline float two() { int unused; return 2.0f; }  // first\n#define SCALE two()\n");
  ASSERT_TRUE(stored(warned));
  write("inc/params.h",
        "// two\n__device__ inline float two() { int unused; return 2.0f; }  // second\n#define SCALE two()\n");
  misses = counter("misses");
  const Ran compiled = real(warned);
  ASSERT_EQ(compiled.code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "a warning naming the edited header was served by the text";
  EXPECT_NE(compiled.err.find("params.h"), std::string::npos) << compiled.err;
  EXPECT_EQ(compiled.err, plain("-arch=sm_90 -I inc -cubin k.cu -o plain.cubin").err);
  write("inc/params.h", "#define SCALE 2.0f\n");
  // A preprocessing step that fails where the compile succeeds (a host
  // compiler wrapper that refuses the launcher's own files): nvcc compiles,
  // as without the launcher.
  testing::write_all(m_tmp.sub("bin/g++"),
                     "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in *progcache-nvcc-*.ii) exit 3;; esac; done\n"
                     "exec /usr/bin/g++ \"$@\"\n");
  fs::permissions(m_tmp.sub("bin/g++"), fs::perms::owner_all);
  // (An object: its files come from nvcc's own dependency output, so it
  // is stored; device code alone takes them from the failing steps, and a
  // compile with no list of files is not stored.)
  const std::string wrapped_args = "-arch=sm_90 -I inc -ccbin " + quote(m_tmp.sub("bin/g++")) + " -c k.cu -o ";
  const std::string wrapped = wrapped_args + "w.o";
  ASSERT_TRUE(stored(wrapped));
  write("inc/params.h", "// edited again\n#define SCALE 2.0f\n");
  misses = counter("misses");
  const Ran w = real(wrapped);
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_EQ(counter("misses"), misses + 1);
  ASSERT_EQ(plain(wrapped_args + "plain.o").code, 0);
  EXPECT_TRUE(same(mask_temp_names(read("w.o")), mask_temp_names(read("plain.o"))));
  misses = counter("misses");
  const Ran wc = real("-arch=sm_90 -I inc -ccbin " + quote(m_tmp.sub("bin/g++")) + " -cubin k.cu -o w.cubin");
  ASSERT_EQ(wc.code, 0) << wc.err;
  EXPECT_EQ(counter("misses"), misses + 1);
  ASSERT_EQ(plain("-arch=sm_90 -I inc -cubin k.cu -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("w.cubin"), read("plain.cubin")));
  // Through a wrapper script (bin/nvcc notes its runs), only the direct key:
  // the wrapper is never run with --dryrun.
  const std::string through = "-arch=sm_90 -I inc -cubin k.cu -o t.cubin";
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(through).code, 0);
  nvcc_runs();
  write("inc/params.h", "// and again\n#define SCALE 2.0f\n");
  ASSERT_EQ(launch(through).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
}

TEST_F(NvccLauncherTextTest, SourceInPtxAndFilesALineDirectiveNamesAreNeverServedStale) {
  // -src-in-ptx copies the source's lines, comments and all, into the PTX:
  // a comment edit changes the output, so the text cannot vouch for it.
  const std::string src_args = "-arch=sm_90 -lineinfo -src-in-ptx -ptx " + quote(m_tmp.sub("work/k.cu")) + " -o k.ptx";
  const auto plain_ptx = [&](const std::string& args) {
    const Ran p = sh("PROGCACHE_DISABLE=1 " + cli() + " " + quote(m_bin + "/nvcc") + " " + args + " -o plain.ptx");
    EXPECT_EQ(p.code, 0) << p.err;
    return read("plain.ptx");
  };
  const std::string src_plain_args = "-arch=sm_90 -lineinfo -src-in-ptx -ptx " + quote(m_tmp.sub("work/k.cu"));
  write("k.cu", "#include \"params.h\"\n__global__ void scale(float* x) {\n  x[0] *= SCALE;  // note one\n}\n");
  ASSERT_TRUE(stored("-I inc " + src_args));
  write("k.cu", "#include \"params.h\"\n__global__ void scale(float* x) {\n  x[0] *= SCALE;  // note two\n}\n");
  ASSERT_EQ(real("-I inc " + src_args).code, 0);
  EXPECT_EQ(read("k.ptx"), plain_ptx("-I inc " + src_plain_args));
  EXPECT_NE(read("k.ptx").find("note two"), std::string::npos);

  // A #line naming a file the dependency list does not hold: with
  // -src-in-ptx that file is copied in, and a warning quotes it. Neither
  // is stored, so an edit of that file is never served stale.
  write(
      "inc/gen.h",
      "#line 2 \"gen.tmpl\"\nstatic inline int hostfn(int a, unsigned u) {\n  if (a < u) return 1;\n  return a;\n}\n");
  // gcc finds the named file from the working directory, and quotes its line 3.
  write("gen.tmpl", "first line\nsecond line\n  if (a < u) return 1; // template v1\n");
  write(
      "w.cu",
      "#include \"gen.h\"\n__global__ void kern(float* p) { p[0] = 1.0f; }\nint f(int b) { return hostfn(b, 3u); }\n");
  const std::string warn_args = "-I inc -Xcompiler -Wall -c w.cu -o w.o";
  const Ran first = real(warn_args);
  ASSERT_EQ(first.code, 0) << first.err;
  ASSERT_NE(first.err.find("template v1"), std::string::npos) << first.err;
  write("gen.tmpl", "first line\nsecond line\n  if (a < u) return 1; // template v2, reworded\n");
  const Ran second = real(warn_args);
  ASSERT_EQ(second.code, 0);
  EXPECT_NE(second.err.find("template v2"), std::string::npos) << "a stale warning was replayed: " << second.err;
  write("t.cu", "__global__ void kern(float* p) {\n#line 2 \"tmpl.cu\"\n  p[0] = 1.0f;\n}\n");
  write("tmpl.cu", "first line\n  p[0] = 1.0f; // template v1\n");
  const std::string ptx_args = "-arch=sm_90 -lineinfo -src-in-ptx -ptx t.cu -o t.ptx";
  ASSERT_EQ(real(ptx_args).code, 0);
  write("tmpl.cu", "first line\n  p[0] = 1.0f; // template v2\n");
  ASSERT_EQ(real(ptx_args).code, 0);
  EXPECT_NE(read("t.ptx").find("template v2"), std::string::npos) << "a stale PTX was served";
  EXPECT_EQ(read("t.ptx"), plain_ptx("-arch=sm_90 -lineinfo -src-in-ptx -ptx t.cu"));

  // Line markers the preprocessor reads in every spelling (a digraph, a
  // comment after the '#', a backslash-newline, after a raw string holding
  // a quote and "/*"), naming a file that is not there yet: made later, its
  // line is copied in, and nvcc's dependency list never names it.
  int n = 0;
  for (const std::string& marker :
       std::vector<std::string>{"%: 7 \"o.txt\"", "#/**/ 7 \"o.txt\"", "#\\\n 7 \"o.txt\"", "/* c */ # 7 \"o.txt\"",
                                "static const char raw[] = R\"x(\" /* )x\";\n# 7 \"o.txt\"",
                                // a number with digit separators, then the character literal '/*'
                                "#if 0\n1'2'/*'\n#endif\n# 7 \"o.txt\" // */",
                                // a header name holding "/*"
                                "#if __has_include(<nothere/*x>)\n#endif\n# 7 \"o.txt\" // */",
                                // a NUL after the '#' (gcc takes it for white space)
                                std::string("#\0 7 \"o.txt\"", 12),
                                // what the lexer reads as a header name and gcc, in a #define,
                                // as tokens and a comment: the preprocessor's own output names
                                // the file
                                "#define H __has_include(\\\n<a//>) /*\n# 7 \"o.txt\" // */"}) {
    const std::string name = "m" + std::to_string(n++) + ".cu";
    fs::remove(m_tmp.sub("work/o.txt"));
    write(name, marker + "\n__global__ void k(int* p) { *p = 1; }\n");
    const std::string args = "-arch=sm_90 -lineinfo -src-in-ptx -ptx " + name + " -o m.ptx";
    ASSERT_EQ(real(args).code, 0);
    write("o.txt", "// 1\n// 2\n// 3\n// 4\n// 5\n// 6\n// the seventh line, made later\n");
    ASSERT_EQ(real(args).code, 0);
    EXPECT_NE(read("m.ptx").find("made later"), std::string::npos) << "a stale PTX was served for: " << marker;
    EXPECT_EQ(read("m.ptx"), plain_ptx("-arch=sm_90 -lineinfo -src-in-ptx -ptx " + name)) << marker;
  }
  // A __has_include after such a line is probed too: the header, created
  // later, is compiled in.
  write("c.cu",
        "#if 0\n1'2'/*'\n#endif\n#if __has_include(\"probe.h\") // */\n#define V 2\n#else\n#define V 1\n#endif\n"
        "__global__ void k(int* p) { *p = V; }\n");
  ASSERT_TRUE(stored("-arch=sm_90 -cubin c.cu -o c.cubin"));
  write("probe.h", "\n");
  ASSERT_EQ(real("-arch=sm_90 -cubin c.cu -o c.cubin").code, 0);
  ASSERT_EQ(plain("-arch=sm_90 -cubin c.cu -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("c.cubin"), read("plain.cubin"))) << "a probe hidden by a digit separator was not recorded";
}

TEST_F(NvccLauncherTextTest, WhatNvccPrintsIsPrintedOnceAsPlainNvccPrintsIt) {
  // A -MD given to nvcc for device code alone adds a preprocessor run that
  // prints the source's warnings again: the launcher adds none there, on a
  // miss or a hit.
  write("k.cu",
        "#warning from the source\n#include \"params.h\"\n__global__ void scale(float* x) { x[0] *= SCALE; }\n");
  for (const std::string mode : {"ptx", "cubin", "fatbin"}) {
    const std::string args = "-arch=sm_90 -I inc -" + mode + " k.cu -o ";
    const Ran p = plain(args + "plain." + mode);
    ASSERT_EQ(p.code, 0) << p.err;
    ASSERT_NE(p.err.find("from the source"), std::string::npos) << p.err;
    const std::uint64_t hits = counter("hits");
    const Ran miss = real(args + "k." + mode);
    EXPECT_EQ(miss.err, p.err) << mode;
    const Ran hit = real(args + "k." + mode);
    EXPECT_EQ(hit.err, p.err) << mode;
    EXPECT_EQ(counter("hits"), hits + 1) << mode << ": not stored";
    EXPECT_TRUE(same(read("k." + mode), read("plain." + mode))) << mode;
  }
}

TEST_F(NvccLauncherTextTest, AnImportSkippedForAFileOnlyHasIncludeFoundIsCompiledWhenThatFileChanges) {
  // gcc skips an #import'ed file where a file found before it, read or not
  // (here one __has_include found), has its size, time and text: neither is
  // read, neither is listed. A touch of either (or an edit of the same
  // size) makes gcc read the import: compiled, never the old output served.
  write("k.cu",
        "#if __has_include(\"a.h\")\n#endif\n#import \"b.h\"\n#ifndef V\n#define V 7.0f\n#endif\n"
        "__global__ void k(float* x) { x[0] = V; }\n");
  const std::string header = "#define V 2.0f /* of a size no other file has */\n";
  const std::string args = "-arch=sm_90 -Xcompiler -Wno-deprecated -cubin k.cu -o k.cubin";
  for (const std::string& edit : {std::string("touch"), std::string("edit")}) {
    write("a.h", header);
    write("b.h", header);
    ASSERT_EQ(std::system(("touch -d '2020-01-01 00:00:00' " + quote(m_tmp.sub("work/a.h")) + " " +
                           quote(m_tmp.sub("work/b.h")))
                              .c_str()),
              0);
    ASSERT_TRUE(stored(args)) << edit;
    if (edit == "touch") {
      ASSERT_EQ(std::system(("touch " + quote(m_tmp.sub("work/a.h"))).c_str()), 0);
    } else {
      write("a.h", "#define V 3.0f /* of a size no other file has */\n");
      ASSERT_EQ(std::system(("touch -d '2020-01-01 00:00:00' " + quote(m_tmp.sub("work/a.h"))).c_str()), 0);
    }
    ASSERT_EQ(real(args).code, 0);
    ASSERT_EQ(plain("-arch=sm_90 -Xcompiler -Wno-deprecated -cubin k.cu -o plain.cubin").code, 0);
    EXPECT_TRUE(same(read("k.cubin"), read("plain.cubin"))) << edit << ": the import skipped at the store was served";
  }
}

TEST_F(NvccLauncherTextTest, ADirectoryWhereTheSearchLooksIsPassedOverAsGccPassesItOver) {
  // A directory named as the header, first on the search: gcc passes over
  // it and searches on. A header made later further along is found and
  // compiled in, never the old output served; the directory made a file
  // is found first.
  write("k.cu",
        "#if __has_include(\"opt.h\")\n#define V 8.0f\n#else\n#define V 1.0f\n#endif\n"
        "__global__ void k(float* x) { x[0] = V; }\n");
  fs::create_directories(m_tmp.sub("work/opt.h"));
  fs::create_directories(m_tmp.sub("work/inc"));
  fs::create_directories(m_tmp.sub("work/out"));
  const std::string args = "-arch=sm_90 -I inc -ptx k.cu -o ";
  // Served by the manifest (the text, run again, decides for itself).
  const auto direct_hits = [&] { return counter("hits") - counter("preprocessed_hits"); };
  ASSERT_TRUE(stored(args + "out/k.ptx"));
  write("inc/opt.h", "/* any */\n");
  std::uint64_t direct = direct_hits();
  ASSERT_EQ(real(args + "out/k.ptx").code, 0);
  EXPECT_EQ(direct_hits(), direct) << "a header made after a directory the search passed over";
  ASSERT_EQ(plain(args + "out/plain.ptx").code, 0);
  EXPECT_TRUE(same(read("out/k.ptx"), read("out/plain.ptx")));
  fs::remove(m_tmp.sub("work/inc/opt.h"));
  ASSERT_TRUE(stored(args + "out/k.ptx"));
  fs::remove(m_tmp.sub("work/opt.h"));
  write("opt.h", "/* now a file */\n");
  direct = direct_hits();
  ASSERT_EQ(real(args + "out/k.ptx").code, 0);
  EXPECT_EQ(direct_hits(), direct) << "served with the directory made a file";
  ASSERT_EQ(plain(args + "out/plain.ptx").code, 0);
  EXPECT_TRUE(same(read("out/k.ptx"), read("out/plain.ptx")));
}

TEST_F(NvccLauncherTextTest, WhatOnlyTheCompileSeesIsKeyedOrRefused) {
  // A directive that prints and leaves nothing in the text (#warning): the
  // text is not used, and the warning is nvcc's to print.
  write("w.cu", "#include \"params.h\"\n// a comment line\n__global__ void k(float* x) { x[0] *= SCALE; }\n");
  const std::string warn = "-arch=sm_90 -I inc -cubin w.cu -o w.cubin";
  ASSERT_TRUE(stored(warn));
  write("w.cu", "#include \"params.h\"\n#warning from w.cu\n__global__ void k(float* x) { x[0] *= SCALE; }\n");
  std::uint64_t misses = counter("misses");
  const Ran warned = real(warn);
  ASSERT_EQ(warned.code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "served by a text that hides a #warning";
  EXPECT_NE(warned.err.find("#warning from w.cu"), std::string::npos) << warned.err;
  // The headers nvcc's generated files include, through the command's -I:
  // one created there later is compiled in, never the old object served
  // (by the direct key or by the text).
  const std::string object = "-arch=sm_90 -I inc -c k.cu -o k.o";
  ASSERT_TRUE(stored(object));
  write("inc/fatbinary_section.h",
        "#include \"" + m_bin +
            "/../include/fatbinary_section.h\"\n"
            "static const char shadow_marker[] __attribute__((used)) = \"SHADOW_MARKER\";\n");
  misses = counter("misses");
  ASSERT_EQ(real(object).code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "a header the generated files include was not noticed";
  EXPECT_NE(read("k.o").find("SHADOW_MARKER"), std::string::npos);
  // What such a header includes, and what that includes in turn: an edit
  // two levels down is compiled in.
  write("inc/fatbinary_section.h",
        "#include \"" + m_bin + "/../include/fatbinary_section.h\"\n#include \"deeper.h\"\n");
  write("inc/deeper.h", "#include \"deepest.h\"\n");
  write("inc/deepest.h", "static const char deep_marker[] __attribute__((used)) = \"DEEP_ONE\";\n");
  ASSERT_TRUE(stored(object));
  write("inc/deepest.h", "static const char deep_marker[] __attribute__((used)) = \"DEEP_TWO\";\n");
  ASSERT_EQ(real(object).code, 0);
  EXPECT_NE(read("k.o").find("DEEP_TWO"), std::string::npos) << "an edit two includes down was served stale";
  // A line marker there, with a warning quoting the file it names: not
  // stored, so an edit of that file is printed as plain nvcc prints it.
  write("inc/deepest.h", "# 1 \"named.h\"\n#warning from the generated files' headers\n");
  write("named.h", "the named file, first\n");
  ASSERT_EQ(real(object).code, 0);
  write("named.h", "the named file, edited\n");
  const Ran named = real(object);
  ASSERT_EQ(named.code, 0);
  EXPECT_NE(named.err.find("the named file, edited"), std::string::npos) << "a stale warning: " << named.err;
  fs::remove(m_tmp.sub("work/inc/deeper.h"));
  fs::remove(m_tmp.sub("work/inc/deepest.h"));
  fs::remove(m_tmp.sub("work/inc/fatbinary_section.h"));
  // #include_next through three directories: an edit in the last is
  // compiled in, by the direct key and by the text (after a comment edit).
  for (const char* d : {"n1", "n2", "n3"}) fs::create_directories(m_tmp.sub(std::string("work/") + d));
  write("n1/fatbinary_section.h", "#include_next <fatbinary_section.h>\n");
  write("n2/fatbinary_section.h", "#include_next <fatbinary_section.h>\n");
  const auto next_marker = [&](const std::string& v) {
    write("n3/fatbinary_section.h",
          "#include_next <fatbinary_section.h>\nstatic const char next_marker[] __attribute__((used)) = \"" + v +
              "\";\n");
  };
  next_marker("NEXT_ONE");
  write("n.cu", "__global__ void k(int* p) { *p = 1; }\n");
  const std::string nexted = "-arch=sm_90 -I n1 -I n2 -I n3 -c n.cu -o n.o";
  ASSERT_TRUE(stored(nexted));
  next_marker("NEXT_TWO");
  ASSERT_EQ(real(nexted).code, 0);
  EXPECT_NE(read("n.o").find("NEXT_TWO"), std::string::npos) << "an edit behind two #include_next was served stale";
  ASSERT_TRUE(stored(nexted));
  next_marker("NEXT_THREE");
  write("n.cu", "__global__ void k(int* p) { *p = 1; }  // a comment\n");
  ASSERT_EQ(real(nexted).code, 0);
  EXPECT_NE(read("n.o").find("NEXT_THREE"), std::string::npos) << "served stale by the text";
  // ... and a comment edit alone is served by the text.
  const std::uint64_t by_text = counter("preprocessed_hits");
  write("n.cu", "__global__ void k(int* p) { *p = 1; }  // another comment\n");
  ASSERT_EQ(real(nexted).code, 0);
  EXPECT_EQ(counter("preprocessed_hits"), by_text + 1);
  EXPECT_NE(read("n.o").find("NEXT_THREE"), std::string::npos);
  // #pragma GCC dependency warns when the file it names is newer than the
  // one it is in: that file's time is not keyed, so such a compile is not
  // stored (nor one spelled through _Pragma).
  write("dep_other.h", "int other;\n");
  ASSERT_EQ(std::system(("touch -d 2020-01-01 " + quote(m_tmp.sub("work/dep_other.h"))).c_str()), 0);
  for (const std::string pragma :
       {"#pragma GCC dependency \"dep_other.h\"", "_Pragma(\"GCC dependency \\\"dep_other.h\\\"\")"}) {
    write("dep.cu", pragma + "\n__global__ void k(int* p) { *p = 1; }\n");
    ASSERT_EQ(std::system(("touch -d 2021-01-01 " + quote(m_tmp.sub("work/dep.cu"))).c_str()), 0);
    const std::string dep = "-arch=sm_90 -ptx dep.cu -o dep.ptx";
    ASSERT_EQ(real(dep).code, 0);
    ASSERT_EQ(real(dep).code, 0);
    ASSERT_EQ(std::system(("touch " + quote(m_tmp.sub("work/dep_other.h"))).c_str()), 0);
    const Ran newer = real(dep);
    const Ran plain_newer = plain("-arch=sm_90 -ptx dep.cu -o plain.ptx");
    EXPECT_EQ(newer.err, plain_newer.err) << pragma;
    EXPECT_NE(newer.err.find("older than"), std::string::npos) << pragma << ": " << newer.err;
    ASSERT_EQ(std::system(("touch -d 2020-01-01 " + quote(m_tmp.sub("work/dep_other.h"))).c_str()), 0);
  }
  // #pragma once and a copy of a header read already: gcc skips the copy
  // while its size, time and text match, so nvcc's list omits it. Touched,
  // it is read, and the output changes.
  write("inc/a.h", "#pragma once\n#ifdef SEEN\n#define TWICE\n#endif\n#define SEEN\n");
  ASSERT_EQ(std::system(("cp -p " + quote(m_tmp.sub("work/inc/a.h")) + " " + quote(m_tmp.sub("work/inc/b.h"))).c_str()),
            0);
  write("p.cu",
        "#include \"a.h\"\n#include \"b.h\"\n#ifdef TWICE\n#define V 222\n#else\n#define V 111\n#endif\n"
        "__global__ void k(int* p) { p[0] = V; }\n");
  const std::string once = "-arch=sm_90 -I inc -cubin p.cu -o p.cubin";
  ASSERT_TRUE(stored(once));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_EQ(std::system(("touch " + quote(m_tmp.sub("work/inc/b.h"))).c_str()), 0);
  ASSERT_EQ(real(once).code, 0);
  ASSERT_EQ(plain(once + " -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("p.cubin"), read("plain.cubin"))) << "the copy skipped by #pragma once was not watched";
  // Line information and a #line directive naming a relative file: cicc
  // joins the working directory to it, and the place is not keyed.
  write("l.cu", "#line 1 \"rel/gen.cu\"\n__global__ void k(int* p) { p[0] = 1; }\n");
  const std::string lined = "-arch=sm_90 -lineinfo -cubin " + quote(m_tmp.sub("work/l.cu")) + " -o l.cubin";
  for (int i = 0; i < 2; ++i) ASSERT_EQ(real(lined).code, 0);
  EXPECT_EQ(launcher_stats()["not_stored"].value(
                "a #line directive with line information: the name it gives may be relative", 0),
            2);
  // The host compiler's -v prints its commands, output names included.
  const std::string verbose = "-arch=sm_90 -I inc -Xcompiler -v -c k.cu";
  ASSERT_EQ(real(verbose + " -o first.o").code, 0);
  ASSERT_EQ(real(verbose + " -o first.o").code, 0);
  const Ran second = real(verbose + " -o second.o");
  ASSERT_EQ(second.code, 0);
  EXPECT_EQ(second.err.find("first.o"), std::string::npos) << "replayed another output's name";
}

TEST_F(NvccLauncherTextTest, ASpecsFileAlongLibraryPathIsNeverServedAroundByTheText) {
  // The preprocessed text is the same with a specs file gcc reads from a
  // LIBRARY_PATH directory; the object is not (here, no compiler ident).
  fs::create_directories(m_tmp.sub("work/lp"));
  const std::string env = "LIBRARY_PATH=" + quote(m_tmp.sub("work/lp"));
  const std::string args = "-arch=sm_90 -I inc -c k.cu -o k.o";
  auto run = [&] { return real(args, env); };
  ASSERT_TRUE(stored(args, env));
  write("lp/specs", "*cc1plus:\n+ -fno-ident\n\n");
  const std::uint64_t hits = counter("hits");
  ASSERT_EQ(run().code, 0);
  EXPECT_EQ(counter("hits"), hits) << "served with a specs file along LIBRARY_PATH";
  EXPECT_EQ(read("k.o").find("GCC: ("), std::string::npos) << "the specs file was not read";
  // What the record refuses (here a precompiled header where gcc looks)
  // keeps the text from serving too: the text is the same with it.
  fs::remove(m_tmp.sub("work/lp/specs"));
  ASSERT_TRUE(stored(args, env));
  write("inc/stdc-predef.h.gch", "not a precompiled header\n");
  const std::uint64_t before = counter("hits");
  ASSERT_EQ(run().code, 0);
  EXPECT_EQ(counter("hits"), before) << "served by the text with a precompiled header where gcc looks";
}

TEST_F(NvccLauncherTextTest, ADirectoryRenamedOrALinkRetargetedWhileTheLauncherReadsIsNeverRecorded) {
  // A host compiler that lingers after the launcher's own preprocessing
  // step, so that the swap lands between that step and nvcc's compile.
  fs::create_directories(m_tmp.sub("bin/cc"));
  testing::write_all(m_tmp.sub("bin/cc/gcc"),
                     "#!/bin/sh\n/usr/bin/gcc \"$@\"; rc=$?\n"
                     "case \"$*\" in *progcache-nvcc-*) sleep 1.5;; esac\nexit $rc\n");
  fs::permissions(m_tmp.sub("bin/cc/gcc"), fs::perms::owner_all);
  write("s.cu", "#include \"a.h\"\n__global__ void k(int* p) { p[0] = A; }\n");
  struct Swap {
    std::string name, setup, to_v2, to_v1;
  };
  // inc2 a directory renamed into place; inc3/a.h a link retargeted.
  const std::vector<Swap> swaps = {
      {"directory renamed",
       "mkdir -p d1 d2 && echo '#define A 111' > d1/a.h && echo '#define A 222' > d2/a.h && mv d1 inc",
       "mv inc d1 && mv d2 inc", "mv inc d2 && mv d1 inc"},
      {"link retargeted",
       "mkdir -p inc && echo '#define A 111' > v1.h && echo '#define A 222' > v2.h && ln -sfn ../v1.h inc/a.h",
       "ln -sfn ../v2.h inc/a.new && mv -T inc/a.new inc/a.h", "ln -sfn ../v1.h inc/a.new && mv -T inc/a.new inc/a.h"}};
  for (const Swap& w : swaps) {
    SCOPED_TRACE(w.name);
    ASSERT_EQ(sh("sh -c " + quote("rm -rf inc d1 d2 v1.h v2.h && " + w.setup)).code, 0);
    const std::string args = "-arch=sm_90 -ccbin " + quote(m_tmp.sub("bin/cc")) + " -I inc -cubin s.cu -o s.cubin";
    ASSERT_TRUE(stored(args));
    // v2 as the launcher's step reads, back to v1 before nvcc runs.
    ASSERT_EQ(sh("sh -c " + quote(w.to_v2)).code, 0);
    const Ran swapped = sh("sh -c " + quote("(sleep 0.9; " + w.to_v1 + ") & " + cli() + " " + quote(m_bin + "/nvcc") +
                                            " " + args + "; s=$?; wait; exit $s"));
    ASSERT_EQ(swapped.code, 0) << swapped.err;
    // From now on v2: whatever is served must be v2's cubin.
    ASSERT_EQ(sh("sh -c " + quote(w.to_v2)).code, 0);
    ASSERT_EQ(real(args).code, 0);
    ASSERT_EQ(plain(args + " -o plain.cubin").code, 0);
    EXPECT_TRUE(same(read("s.cubin"), read("plain.cubin"))) << "the text of v2 was made to point at v1's cubin";
  }
}

TEST_F(NvccLauncherOracleTest, AnOptionsFileNvccSplitsOtherwiseThanAShellIsRefused) {
  write("h.cu", "__global__ void scale(float* x) { x[0] *= HOST_SCALE; }\n");
  write("o.opt", "-DHOST_SCALE=2\n");
  const std::string args = "-arch=sm_90 -cubin h.cu -o h.cubin -optf o.opt";
  // nvcc keeps the quotes: '2' is a character there, 50, not 2.
  expect_compiled_again(
      args, "h.cubin", "", [&] { write("o.opt", "-DHOST_SCALE='2'\n"); }, "");
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("options file '...' holds a quote or a backslash: how nvcc splits it is not known", 0), 1)
      << u.dump();
}

TEST_F(NvccLauncherTest, AHeaderWrittenJustBeforeTheCompileIsStoredAndServed) {
  // A generated header, written by the build step right before the compile
  // (the same shell command): written before nvcc ran, so the result is
  // stored, and the next run is a hit that equals plain nvcc's output.
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    const std::string gen = "printf '#define SCALE " + std::to_string(i + 3) + ".0f\\n' > inc/params.h && ";
    const Ran cold = sh("sh -c " + quote(gen + cli() + " " + noting_nvcc() + " " + args));
    ASSERT_EQ(cold.code, 0) << cold.err;
    EXPECT_EQ(nvcc_runs(), 1);
    const std::string compiled = read("k.cubin");
    fs::remove(m_tmp.sub("work/k.cubin"));
    ASSERT_EQ(launch(args).code, 0);
    EXPECT_EQ(nvcc_runs(), 0) << "not stored: " << launcher_stats().dump();
    EXPECT_TRUE(same(read("k.cubin"), compiled));
    ASSERT_EQ(plain(args).code, 0);
    EXPECT_TRUE(same(read("k.cubin"), compiled));
  }
  EXPECT_EQ(launcher_stats().value("not_stored", nlohmann::json::object()).size(), 0U);
}

TEST_F(NvccLauncherTest, AHeaderWhoseModificationTimeIsInTheFutureIsStoredAndServed) {
  // As extracted from an archive made where the clock runs ahead: the file
  // was not changed while nvcc ran, whatever its mtime says.
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(sh("touch -d @$(( $(date +%s) + 3600 )) inc/params.h").code, 0);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  const std::string compiled = read("k.cubin");
  fs::remove(m_tmp.sub("work/k.cubin"));
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "not stored: " << launcher_stats().dump();
  EXPECT_TRUE(same(read("k.cubin"), compiled));
  ASSERT_EQ(plain(args).code, 0);
  EXPECT_TRUE(same(read("k.cubin"), compiled));
  // An edit after that still counts: its ctime is now.
  write("inc/params.h", "#define SCALE 7.0f\n");
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  ASSERT_EQ(plain("-arch=sm_90 -I inc -cubin k.cu -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("k.cubin"), read("plain.cubin")));
}

TEST_F(NvccLauncherTest, AHostCompilerThatLeavesAProcessBehindNeverKeepsTheBuildWaiting) {
  // A -ccbin wrapper that starts a process which outlives it and holds the
  // output pipes (as a compiler server a wrapper starts would): nvcc
  // returns, and so must the launcher, miss and hit alike.
  const std::string marker = "sleep 600." + std::to_string(::getpid());  // found again by pkill
  testing::write_all(m_tmp.sub("bin/cc-wrapper"), "#!/bin/sh\n" + marker + " &\nexec g++ \"$@\"\n");
  fs::permissions(m_tmp.sub("bin/cc-wrapper"), fs::perms::owner_all);
  const std::string args = "-arch=sm_90 -I inc -ccbin " + quote(m_tmp.sub("bin/cc-wrapper")) + " -c k.cu -o k.o";
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    const Ran r = watched(cli() + " " + noting_nvcc() + " " + args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(exists("k.o"));
  }
  ASSERT_EQ(plain(args + " -o plain.o").code, 0);
  (void)std::system(("pkill -f '" + marker + "' 2>/dev/null").c_str());
  EXPECT_TRUE(same(mask_temp_names(read("k.o")), mask_temp_names(read("plain.o"))));
}

TEST_F(NvccLauncherTest, APathThatFindsTheSameProgramsSharesEntries) {
  // PATH is keyed by what it finds: an empty directory added to it, or the
  // directory of a link named nvcc to progcache (the masquerade), still hit;
  // a PATH that finds another assembler does not.
  const std::string args = "-arch=sm_90 -I inc -c k.cu -o k.o";
  const std::string path = m_bin + ":/usr/local/bin:/usr/bin:/bin";
  ASSERT_EQ(launch(args).code, 0);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  fs::create_directories(m_tmp.sub("empty"));
  fs::create_directories(m_tmp.sub("masq"));
  fs::create_symlink(PROGCACHE_CLI_PATH, m_tmp.sub("masq/nvcc"));
  for (const std::string& spelled :
       {path + ":" + m_tmp.sub("empty"), m_tmp.sub("masq") + ":" + path, path + "::" + m_tmp.sub("empty") + "/"}) {
    ASSERT_EQ(launch(args, "PATH=" + quote(spelled)).code, 0) << spelled;
    EXPECT_EQ(nvcc_runs(), 0) << "PATH=" << spelled << " finds the same programs, yet compiled again";
  }
  fs::create_directories(m_tmp.sub("otheras"));
  testing::write_all(m_tmp.sub("otheras/as"), "#!/bin/sh\nexec /usr/bin/as \"$@\"\n");
  fs::permissions(m_tmp.sub("otheras/as"), fs::perms::owner_all);
  ASSERT_EQ(launch(args, "PATH=" + quote(m_tmp.sub("otheras") + ":" + path)).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a PATH that finds another assembler was served";
}

TEST_F(NvccLauncherTest, AHostCompilerThatIsAScriptIsKeyedWithWhatItReads) {
  // A -ccbin wrapper that takes flags from the environment and runs the
  // compiler beside it (as Spack's and conda's wrappers do).
  write("k2.cu", "__global__ void k(float* x) { x[0] = VAL; }\n");
  testing::write_all(m_tmp.sub("bin/wrapcc"), "#!/bin/sh\nexec \"$(dirname \"$0\")/real-g++\" $MYFLAGS \"$@\"\n");
  testing::write_all(m_tmp.sub("bin/real-g++"), "#!/bin/sh\nexec /usr/bin/g++ \"$@\"\n");
  for (const char* f : {"bin/wrapcc", "bin/real-g++"}) fs::permissions(m_tmp.sub(f), fs::perms::owner_all);
  const std::string args = "-arch=sm_90 -ccbin " + quote(m_tmp.sub("bin/wrapcc")) + " -c k2.cu -o k2.o";
  auto as_plain = [&](const std::string& env) {
    const std::string served = read("k2.o");
    EXPECT_EQ(sh(quote(m_bin + "/nvcc") + " " + args + " -o plain.o", env).code, 0);
    return same(mask_temp_names(served), mask_temp_names(read("plain.o")));
  };
  ASSERT_EQ(launch(args, "MYFLAGS=-DVAL=1.0f").code, 0);
  ASSERT_EQ(launch(args, "MYFLAGS=-DVAL=1.0f").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a script host compiler's command was not cached at all";
  EXPECT_TRUE(as_plain("MYFLAGS=-DVAL=1.0f"));

  ASSERT_EQ(launch(args, "MYFLAGS=-DVAL=2.0f").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "served what the wrapper compiled under another environment";
  EXPECT_TRUE(as_plain("MYFLAGS=-DVAL=2.0f")) << "not what nvcc makes with the environment now";

  // make's own variables change with every build (its job server): a hit.
  ASSERT_EQ(launch(args, "MYFLAGS=-DVAL=2.0f MAKEFLAGS=' -j4 --jobserver-auth=fifo:/tmp/GMfifo1' MAKELEVEL=1").code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "make's job server made a miss";

  // What the wrapper runs in the end, changed under it: compiled again.
  testing::write_all(m_tmp.sub("bin/real-g++"), "#!/bin/sh\nexec /usr/bin/g++ -DVAL=3.0f \"$@\"\n");
  ASSERT_EQ(launch(args, "MYFLAGS=").code, 0);
  ASSERT_EQ(launch(args, "MYFLAGS=").code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  testing::write_all(m_tmp.sub("bin/real-g++"), "#!/bin/sh\nexec /usr/bin/g++ -DVAL=4.0f \"$@\"\n");
  ASSERT_EQ(launch(args, "MYFLAGS=").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "served what the compiler behind the wrapper made before it changed";
  EXPECT_TRUE(as_plain("MYFLAGS="));
}

TEST_F(NvccLauncherTest, AHeaderMadeWhereAHostCompilerScriptSearchesIsCompiledAgain) {
  // A wrapper that adds include directories of its own, searched before
  // the command's -isystem: they are the user's, not the compiler's, and a
  // header made there after a store is what gcc reads.
  fs::create_directories(m_tmp.sub("work/extra"));
  fs::create_directories(m_tmp.sub("work/quoted"));
  fs::create_directories(m_tmp.sub("work/isys"));
  write("isys/val.h", "#define VAL 1.0f\n");
  write("k3.cu", "#include \"val.h\"\n#include <val2.h>\n__global__ void k(float* x) { x[0] = VAL + VAL2; }\n");
  write("isys/val2.h", "#define VAL2 1.0f\n");
  testing::write_all(m_tmp.sub("bin/addcc"), "#!/bin/sh\nexec /usr/bin/g++ \"$@\" -I" + m_tmp.sub("work/extra") + "\n");
  fs::permissions(m_tmp.sub("bin/addcc"), fs::perms::owner_all);
  const std::string args = "-arch=sm_90 -ccbin " + quote(m_tmp.sub("bin/addcc")) + " -isystem isys -c k3.cu -o k3.o";
  auto as_plain = [&] {
    EXPECT_EQ(plain(args + " -o plain.o").code, 0);
    return same(mask_temp_names(read("k3.o")), mask_temp_names(read("plain.o")));
  };
  ASSERT_EQ(launch(args).code, 0);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a wrapper that adds directories was not cached";
  write("extra/val2.h", "#define VAL2 2.0f\n");
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "served around a header made in a directory the wrapper adds";
  EXPECT_TRUE(as_plain());
  // -iquote directories are searched for quoted names alone, which the
  // record cannot tell apart: compiled every time, as plain nvcc compiles.
  testing::write_all(m_tmp.sub("bin/addcc"),
                     "#!/bin/sh\nexec /usr/bin/g++ \"$@\" -iquote " + m_tmp.sub("work/quoted") + "\n");
  ASSERT_EQ(launch(args).code, 0);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "a result of a wrapper that adds -iquote directories was stored";
  write("quoted/val.h", "#define VAL 3.0f\n");
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_TRUE(as_plain());
}

TEST_F(NvccLauncherTest, DirectoriesCpathAddsAreTheUsersThoughTheHostCompilerListsThem) {
  // gcc lists CPATH's directories among its own: they are still the
  // user's, so an include through a macro in one of their headers, which
  // names no place to watch, keeps the result from being stored.
  fs::create_directories(m_tmp.sub("work/cp"));
  write("cp/a.h", "#define S(x) #x\n#include S(b.h)\n");
  write("cp/b.h", "#define VAL 1.0f\n");
  write("k4.cu", "#include <a.h>\n__global__ void k(float* x) { x[0] = VAL; }\n");
  const std::string args = "-arch=sm_90 -c k4.cu -o k4.o";
  const std::string env = "CPATH=" + quote(m_tmp.sub("work/cp"));
  ASSERT_EQ(launch(args, env).code, 0);
  ASSERT_EQ(launch(args, env).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "stored a result whose CPATH header includes through a macro";
}

TEST_F(NvccLauncherTest, AnEmptyOrCutShortOutputIsNeverStored) {
  // An nvcc that exits 0 having written an empty output (as ptxas does on a
  // full disk): nothing is stored, and the next run compiles.
  testing::write_all(m_tmp.sub("bin/nvcc-empty"),
                     "#!/bin/sh\n" + quote(m_bin + "/nvcc") +
                         " \"$@\" || exit $?\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && : > \"$2\"; shift; done\n");
  fs::permissions(m_tmp.sub("bin/nvcc-empty"), fs::perms::owner_all);
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  const Ran empty = sh(cli() + " " + quote(m_tmp.sub("bin/nvcc-empty")) + " " + args);
  ASSERT_EQ(empty.code, 0) << empty.err;
  EXPECT_EQ(fs::file_size(m_tmp.sub("work/k.cubin")), 0U);
  EXPECT_EQ(launcher_stats()["not_stored"].value("the output is empty or not of its kind", 0), 1);
  ASSERT_EQ(launch(args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "an empty output was stored and served";
  ASSERT_EQ(plain("-arch=sm_90 -I inc -cubin k.cu -o plain.cubin").code, 0);
  EXPECT_TRUE(same(read("k.cubin"), read("plain.cubin")));
}

TEST_F(NvccLauncherTest, AHitFailsWhereNvccWouldAndLeavesTheOutputAsItWas) {
  // The dependency file's directory removed after the entry was stored:
  // nvcc fails and writes no output; the hit must not replace the output.
  fs::create_directories(m_tmp.sub("work/dd"));
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin -MD -MF dd/k.d -MT t";
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(args).code, 0);
  ASSERT_EQ(nvcc_runs() < 3, true) << "never stored";
  fs::remove_all(m_tmp.sub("work/dd"));
  write("k.cubin", "OLD");
  const Ran oracle = plain(args);
  EXPECT_NE(oracle.code, 0);
  write("k.cubin", "OLD");
  const Ran hit = launch(args);
  EXPECT_EQ(hit.code, oracle.code) << hit.err;
  EXPECT_EQ(read("k.cubin"), "OLD") << "the output was replaced though the dependency file could not be written";
  // $TMPDIR gone (nvcc writes its temporary files there first): nvcc
  // fails, and so does the hit.
  fs::create_directories(m_tmp.sub("tgone"));
  const std::string cubin = "-arch=sm_90 -I inc -cubin k.cu -o t.cubin";
  const std::string env = "TMPDIR=" + quote(m_tmp.sub("tgone"));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(cubin, env).code, 0);
  fs::remove_all(m_tmp.sub("tgone"));
  const Ran no_tmp_oracle = sh(quote(m_bin + "/nvcc") + " " + cubin, env);
  EXPECT_NE(no_tmp_oracle.code, 0);
  EXPECT_EQ(launch(cubin, env).code, no_tmp_oracle.code);
}

TEST_F(NvccLauncherTest, AHitNeverReplacesAnOutputNvccCouldNotWrite) {
  // A user who may not write the output file: plain nvcc fails, so must
  // the hit, and the file stays as it was.
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0) {
    GTEST_SKIP() << "needs root and setpriv to run the launcher as another user";
  }
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  ASSERT_EQ(std::system(("chown -R 65534:65534 " + quote(m_tmp.path())).c_str()), 0);
  const std::string args = "-arch=sm_90 -I inc -cubin k.cu -o k.cubin";
  ASSERT_EQ(sh(as_nobody + cli() + " nvcc " + args).code, 0);
  ASSERT_GE(stored_entries(), 2U);  // a hit is what the next run would serve
  testing::write_all(m_tmp.sub("work/k.cubin"), "protected");
  ASSERT_EQ(std::system(("chown 65534:65534 " + quote(m_tmp.sub("work/k.cubin")) + " && chmod 0444 " +
                         quote(m_tmp.sub("work/k.cubin")))
                            .c_str()),
            0);
  const Ran oracle = sh(as_nobody + quote(m_bin + "/nvcc") + " " + args);
  const Ran hit = sh(as_nobody + cli() + " nvcc " + args);
  EXPECT_NE(oracle.code, 0);
  EXPECT_EQ(hit.code, oracle.code) << hit.err;
  EXPECT_EQ(read("k.cubin"), "protected");
}

TEST_F(NvccLauncherTest, WhatTheClockOrAnAssemblerFileDecidesIsNeverStored) {
  // __DATE__/__TIME__ change with the clock, __TIMESTAMP__ with the file's
  // mtime, .incbin reads a file no dependency output lists: each run
  // compiles (as ccache), unless SOURCE_DATE_EPOCH (keyed) fixes the clock.
  write("stamp.cu", "__device__ const char when[] = __DATE__ \" \" __TIME__;\n__global__ void k() {}\n");
  write("ts.cu", "__device__ const char when[] = __TIMESTAMP__;\n__global__ void k() {}\n");
  write("data.bin", "AAAA");
  write("inc.cu", "asm(\".section .rodata\\n.incbin \\\"data.bin\\\"\\n.text\");\n__global__ void k() {}\n");
  for (const std::string src : {"stamp.cu", "ts.cu", "inc.cu"}) {
    SCOPED_TRACE(src);
    const std::string args = "-arch=sm_90 -c " + src + " -o out.o";
    ASSERT_EQ(launch(args).code, 0);
    ASSERT_EQ(launch(args).code, 0);
    EXPECT_EQ(nvcc_runs(), 2) << "served a result the clock or an unlisted file decides";
  }
  const std::string fixed = "SOURCE_DATE_EPOCH=1700000000";
  ASSERT_EQ(launch("-arch=sm_90 -cubin stamp.cu -o s.cubin", fixed).code, 0);
  ASSERT_EQ(launch("-arch=sm_90 -cubin stamp.cu -o s.cubin", fixed).code, 0);
  EXPECT_EQ(nvcc_runs(), 1);
  const auto reasons = launcher_stats()["not_stored"];
  EXPECT_EQ(reasons.value("an input uses .incbin: the file it reads is not keyed", 0), 2);
  EXPECT_EQ(reasons.value("an input uses __TIMESTAMP__", 0), 2);
}

TEST_F(NvccLauncherTest, TheApparentDirectoryAndTmpdirThatDebugInformationNamesAreKeyed) {
  // With -g the host compiler names $PWD (the path through a link the user
  // went by) and nvcc its temporary files under $TMPDIR: another of either
  // is another object, never the first one served.
  fs::create_directory_symlink(m_tmp.sub("work"), m_tmp.sub("alias1"));
  fs::create_directory_symlink(m_tmp.sub("work"), m_tmp.sub("alias2"));
  const std::string args = "-arch=sm_90 -I inc -g -c k.cu -o k.o";
  for (const std::string dir : {"alias1", "alias2"}) {
    ASSERT_EQ(sh("sh -c " + quote("cd ../" + dir + " && exec " + cli() + " " + noting_nvcc() + " " + args)).code, 0);
  }
  EXPECT_EQ(nvcc_runs(), 2) << "an object naming alias1 was served in alias2";
  fs::create_directories(m_tmp.sub("tA"));
  fs::create_directories(m_tmp.sub("tB"));
  ASSERT_EQ(launch(args, "TMPDIR=" + quote(m_tmp.sub("tA"))).code, 0);
  ASSERT_EQ(launch(args, "TMPDIR=" + quote(m_tmp.sub("tB"))).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "an object naming one TMPDIR was served under another";
  // The host compiler's own dependency-file variables: its file is nvcc's to write.
  const Ran dep = launch("-arch=sm_90 -I inc -c k.cu -o d.o", "DEPENDENCIES_OUTPUT=" + quote(m_tmp.sub("dep.d")));
  ASSERT_EQ(dep.code, 0) << dep.err;
  EXPECT_TRUE(fs::exists(m_tmp.sub("dep.d")));
  EXPECT_EQ(launcher_stats()["uncacheable"].size(), 1U);
}

// ---- where the build runs (#2): two build directories of one checkout
// share entries; what really depends on the place is keyed.

class NvccLauncherPlaceTest : public NvccLauncherTest {
 protected:
  // A checkout at `root` (under the test's directory): src/k.cu including
  // "params.h" from src/inc, and `builds` build directories beside src.
  void checkout(const std::string& root, const std::string& scale, const std::vector<std::string>& builds) {
    fs::create_directories(m_tmp.sub(root + "/src/inc"));
    testing::write_all(m_tmp.sub(root + "/src/k.cu"), read("k.cu"));
    testing::write_all(m_tmp.sub(root + "/src/inc/params.h"), "#define SCALE " + scale + "\n");
    for (const auto& b : builds) fs::create_directories(m_tmp.sub(root + "/" + b + "/CMakeFiles/k.dir"));
  }
  // Runs the launcher (or, `plain`, nvcc itself) in `dir` (under the test's directory).
  Ran in(const std::string& dir, const std::string& args, bool plain_nvcc = false) {
    const std::string program = plain_nvcc ? quote(m_bin + "/nvcc") : cli() + " " + noting_nvcc();
    return sh("sh -c " + quote("cd " + quote(m_tmp.sub(dir)) + " && exec " + program + " " + args));
  }
  // Runs `args` in `dir` until a run is served (a file written in the tick
  // before a compile is not stored from it); false if none was.
  bool stored_in(const std::string& dir, const std::string& args) {
    for (int i = 0; i < 4; ++i) {
      if (in(dir, args).code != 0) return false;
      if (i > 0 && nvcc_runs() == 0) return true;
      nvcc_runs();
    }
    return false;
  }
  std::string file(const std::string& rel) { return testing::read_all(m_tmp.sub(rel)); }
};

TEST_F(NvccLauncherPlaceTest, TwoBuildDirectoriesOfOneCheckoutShareEveryEntryAndServeWhatNvccWritesThere) {
  checkout("ck", "2.0f", {"b1", "b2"});
  const std::string src = m_tmp.sub("ck/src");
  // As CMake writes it: absolute source and include paths, the object and
  // its dependency file relative to the build directory.
  const std::string object = "-arch=sm_90 -I " + quote(src + "/inc") +
                             " -MD -MT CMakeFiles/k.dir/k.cu.o -MF CMakeFiles/k.dir/k.cu.o.d -x cu -c " +
                             quote(src + "/k.cu") + " -o CMakeFiles/k.dir/k.cu.o";
  const std::string cubin = "-arch=sm_90 -I " + quote(src + "/inc") + " -cubin " + quote(src + "/k.cu");
  ASSERT_TRUE(stored_in("ck/b1", object));
  ASSERT_TRUE(stored_in("ck/b1", cubin + " -o k.cubin"));
  // The second build directory: every command served, nvcc never run.
  ASSERT_EQ(in("ck/b2", object).code, 0);
  ASSERT_EQ(in("ck/b2", cubin + " -o k.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "a second build directory of the same checkout compiled again";
  // Another output name is the same compile: served, byte for byte nvcc's.
  ASSERT_EQ(in("ck/b2", cubin + " -o renamed.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "another -o name compiled again";
  const std::string served_object = file("ck/b2/CMakeFiles/k.dir/k.cu.o");
  const std::string served_depfile = file("ck/b2/CMakeFiles/k.dir/k.cu.o.d");
  ASSERT_EQ(in("ck/b2", object, true).code, 0);
  EXPECT_TRUE(same(mask_temp_names(served_object), mask_temp_names(file("ck/b2/CMakeFiles/k.dir/k.cu.o"))));
  EXPECT_EQ(served_depfile, file("ck/b2/CMakeFiles/k.dir/k.cu.o.d"));
  ASSERT_EQ(in("ck/b2", cubin + " -o plain.cubin", true).code, 0);
  EXPECT_TRUE(same(file("ck/b2/renamed.cubin"), file("ck/b2/plain.cubin")));
  EXPECT_TRUE(same(file("ck/b2/k.cubin"), file("ck/b2/plain.cubin")));
}

TEST_F(NvccLauncherPlaceTest, RelativePathsAreResolvedWhereTheCommandRunsNotWhereItWasStored) {
  // Two checkouts side by side, one command spelled with relative paths:
  // the same words name other files in each, and each gets its own output.
  checkout("ck1", "2.0f", {"build"});
  checkout("ck2", "3.0f", {"build"});
  checkout("ck3", "2.0f", {"build"});
  const std::string args = "-arch=sm_90 -I ../src/inc -cubin ../src/k.cu -o k.cubin";
  ASSERT_TRUE(stored_in("ck1/build", args));
  // ck2: the header found through -I differs.
  ASSERT_EQ(in("ck2/build", args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "ck1's output served for ck2's header";
  ASSERT_EQ(in("ck2/build", args + " -o plain.cubin", true).code, 0);
  EXPECT_TRUE(same(file("ck2/build/k.cubin"), file("ck2/build/plain.cubin")));
  // ck3: the same files, and a header beside the source that the quoted
  // include finds first (a place that was empty in ck1).
  testing::write_all(m_tmp.sub("ck3/src/params.h"), "#define SCALE 4.0f\n");
  ASSERT_EQ(in("ck3/build", args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "ck1's output served though a header shadows ck3's";
  ASSERT_EQ(in("ck3/build", args + " -o plain.cubin", true).code, 0);
  EXPECT_TRUE(same(file("ck3/build/k.cubin"), file("ck3/build/plain.cubin")));
  // ck4: the same files as ck1, but a relocatable object's module ID is
  // made from the source's resolved path: compiled again, never ck1's.
  checkout("ck4", "2.0f", {"build"});
  const std::string dc = "-arch=sm_90 -I ../src/inc -dc ../src/k.cu -o k.o";
  ASSERT_TRUE(stored_in("ck1/build", dc));
  ASSERT_EQ(in("ck4/build", dc).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "ck1's -dc object served for ck4's source";
  ASSERT_EQ(in("ck4/build", "-arch=sm_90 -I ../src/inc -dc ../src/k.cu -o plain.o", true).code, 0);
  EXPECT_TRUE(same(mask_temp_names(file("ck4/build/k.o")), mask_temp_names(file("ck4/build/plain.o"))));
}

TEST_F(NvccLauncherPlaceTest, DebugInformationAndADependencyTargetKeepThePlaceAndTheNameInTheKey) {
  checkout("ck", "2.0f", {"b1", "b2"});
  const std::string src = m_tmp.sub("ck/src");
  // -g: the object names the directory it was compiled in.
  const std::string debug = "-arch=sm_90 -I " + quote(src + "/inc") + " -g -c " + quote(src + "/k.cu") + " -o k.o";
  ASSERT_TRUE(stored_in("ck/b1", debug));
  ASSERT_EQ(in("ck/b2", debug).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "an object with debug information served in another directory";
  EXPECT_NE(file("ck/b2/k.o").find(m_tmp.sub("ck/b2")), std::string::npos) << "the object does not name b2";
  // The same for the host compiler's own debug words.
  const std::string host_g = "-arch=sm_90 -I " + quote(src + "/inc") + " -Xcompiler -g -c " + quote(src + "/k.cu");
  ASSERT_TRUE(stored_in("ck/b1", host_g + " -o x.o"));
  ASSERT_EQ(in("ck/b2", host_g + " -o x.o").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "-Xcompiler -g: served in another directory";
  // Device line information names each file by the working directory
  // joined to the path it was reached by: with absolute paths (CMake's) the
  // cubin is the same in every build directory, and served; with a
  // relative one it names the directory, and is compiled again.
  for (const std::string extra : {"-lineinfo", "-Xptxas -lineinfo"}) {
    const std::string abs = "-arch=sm_90 -I " + quote(src + "/inc") + " " + extra + " -cubin " + quote(src + "/k.cu");
    ASSERT_TRUE(stored_in("ck/b1", abs + " -o li.cubin")) << extra;
    ASSERT_EQ(in("ck/b2", abs + " -o li.cubin").code, 0);
    EXPECT_EQ(nvcc_runs(), 0) << extra << ": absolute paths, yet compiled again";
    ASSERT_EQ(in("ck/b2", abs + " -o plain-li.cubin", true).code, 0);
    EXPECT_TRUE(same(file("ck/b2/li.cubin"), file("ck/b2/plain-li.cubin"))) << extra;
    const std::string rel = "-arch=sm_90 -I ../src/inc " + extra + " -cubin ../src/k.cu";
    ASSERT_TRUE(stored_in("ck/b1", rel + " -o lr.cubin")) << extra;
    ASSERT_EQ(in("ck/b2", rel + " -o lr.cubin").code, 0);
    EXPECT_EQ(nvcc_runs(), 1) << extra << ": a relative path, served in another directory";
    ASSERT_EQ(in("ck/b2", rel + " -o plain-lr.cubin", true).code, 0);
    EXPECT_TRUE(same(file("ck/b2/lr.cubin"), file("ck/b2/plain-lr.cubin"))) << extra;
  }
  // -objtemp: nvcc names its temporary files after the output, and the
  // object names them.
  const std::string objtemp = "-arch=sm_90 -I " + quote(src + "/inc") + " -objtemp -c " + quote(src + "/k.cu");
  fs::create_directories(m_tmp.sub("ck/b1/o1"));
  fs::create_directories(m_tmp.sub("ck/b1/o2"));
  ASSERT_TRUE(stored_in("ck/b1", objtemp + " -o o1/x.o"));
  ASSERT_EQ(in("ck/b1", objtemp + " -o o2/y.o").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "-objtemp: an object naming o1/x.o served for o2/y.o";
  ASSERT_EQ(in("ck/b1", objtemp + " -o o2/plain.o", true).code, 0);
  EXPECT_NE(file("ck/b1/o2/y.o").find("y.o.cudafe1"), std::string::npos);
  // nvcc's temporary directory: a sanitizer's instrumentation names the
  // stub file under $TMPDIR, with or without debug information.
  fs::create_directories(m_tmp.sub("t1"));
  fs::create_directories(m_tmp.sub("t2"));
  const std::string asan = "-arch=sm_90 -I " + quote(src + "/inc") + " -Xcompiler -fsanitize=address -c " +
                           quote(src + "/k.cu") + " -o asan.o";
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(asan, "TMPDIR=" + quote(m_tmp.sub("t1"))).code, 0);
  nvcc_runs();
  ASSERT_EQ(launch(asan, "TMPDIR=" + quote(m_tmp.sub("t2"))).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "an object naming one TMPDIR served under another";
  EXPECT_EQ(read("asan.o").find(m_tmp.sub("t1")), std::string::npos) << "the object names the other TMPDIR";
  // -MD without -MT: the dependency file's target is the output's name.
  const std::string cubin = "-arch=sm_90 -I " + quote(src + "/inc") + " -cubin " + quote(src + "/k.cu");
  ASSERT_TRUE(stored_in("ck/b1", cubin + " -o a.cubin -MD -MF a.d"));
  ASSERT_EQ(in("ck/b1", cubin + " -o b.cubin -MD -MF b.d").code, 0);
  const std::string served = file("ck/b1/b.d");
  ASSERT_EQ(in("ck/b1", cubin + " -o b.cubin -MD -MF b.d", true).code, 0);
  EXPECT_EQ(served, file("ck/b1/b.d")) << "a dependency file naming another target was served";
}

// Checkouts at different paths under one base directory
// (PROGCACHE_BASE_DIR, ccache's base_dir), built through the toolkit's own
// nvcc (its preprocessed text shows whether a result names a path); what
// nvcc did is read from the launcher's counters.
class NvccLauncherBaseDirTest : public NvccLauncherPlaceTest {
 protected:
  // The launcher in `dir`, under the base directory (the test's own) or
  // none, with `env` (VAR=value words) set too.
  Ran at(const std::string& dir, const std::string& args, bool base = true, const std::string& env = "") {
    return sh("sh -c " + quote("cd " + quote(m_tmp.sub(dir)) + " && exec " + cli() + " " + quote(m_bin + "/nvcc") +
                               " " + args),
              (base ? "PROGCACHE_BASE_DIR=" + quote(m_tmp.path()) + " " : std::string()) + env);
  }
  std::uint64_t counter(const char* name) {
    const auto j = launcher_stats();
    return j.is_object() ? j.value(name, std::uint64_t{0}) : 0;
  }
  // Runs `args` in `dir` until it is a hit (a file written in the tick
  // before a compile is not stored from it); false if it never is.
  bool stored_at(const std::string& dir, const std::string& args, const std::string& env = "") {
    for (int i = 0; i < 4; ++i) {
      const std::uint64_t hits = counter("hits");
      if (at(dir, args, true, env).code != 0) return false;
      if (counter("hits") == hits + 1) return true;
    }
    return false;
  }
  // The commands CMake writes for checkout `ck`: absolute source and
  // include paths, outputs relative to the build directory.
  std::string object(const std::string& ck, const std::string& extra = "") {
    const std::string src = m_tmp.sub(ck + "/src");
    return "-arch=sm_90 -I " + quote(src + "/inc") + " " + extra +
           " -MD -MT CMakeFiles/k.dir/k.cu.o -MF CMakeFiles/k.dir/k.cu.o.d -x cu -c " + quote(src + "/k.cu") +
           " -o CMakeFiles/k.dir/k.cu.o";
  }
  std::string device(const std::string& ck, const std::string& mode, const std::string& extra = "") {
    const std::string src = m_tmp.sub(ck + "/src");
    return "-arch=sm_90 -I " + quote(src + "/inc") + " " + extra + " " + mode + " " + quote(src + "/k.cu");
  }
};

TEST_F(NvccLauncherBaseDirTest, TwoCheckoutsUnderABaseDirectoryShareWhatNamesNoPathAndServeWhatNvccWritesThere) {
  checkout("ck1", "2.0f", {"build"});
  checkout("ck2", "2.0f", {"build"});
  ASSERT_TRUE(stored_at("ck1/build", object("ck1")));
  ASSERT_TRUE(stored_at("ck1/build", device("ck1", "-cubin") + " -o k.cubin"));
  ASSERT_TRUE(stored_at("ck1/build", device("ck1", "-ptx") + " -o k.ptx"));
  ASSERT_TRUE(stored_at("ck1/build", device("ck1", "-fatbin") + " -o k.fatbin"));
  // An include directory spelled with "..", as CMake writes
  // `${CMAKE_CURRENT_SOURCE_DIR}/../Common`: the dependency file spells
  // every header so.
  const auto dotted = [&](const std::string& ck) {
    fs::create_directories(m_tmp.sub(ck + "/src/sub"));
    const std::string src = m_tmp.sub(ck + "/src");
    return "-arch=sm_90 -I " + quote(src + "/sub/../inc") + " -MD -MF dotted.d -cubin " + quote(src + "/k.cu") +
           " -o dotted.cubin";
  };
  ASSERT_TRUE(stored_at("ck1/build", dotted("ck1")));
  // The second checkout: every command served, none compiled.
  std::uint64_t misses = counter("misses");
  ASSERT_EQ(at("ck2/build", object("ck2")).code, 0);
  for (const char* mode : {"cubin", "ptx", "fatbin"}) {
    ASSERT_EQ(at("ck2/build", device("ck2", std::string("-") + mode) + " -o k." + mode).code, 0);
  }
  ASSERT_EQ(at("ck2/build", dotted("ck2")).code, 0);
  EXPECT_EQ(counter("misses"), misses) << "a second checkout under the base directory compiled again";
  EXPECT_EQ(counter("relocated_hits"), 5U);
  const std::string served_dotted = file("ck2/build/dotted.d");
  ASSERT_EQ(in("ck2/build", dotted("ck2"), true).code, 0);
  EXPECT_EQ(served_dotted, file("ck2/build/dotted.d"));
  EXPECT_NE(served_dotted.find(m_tmp.sub("ck2/src/sub/../inc/params.h")), std::string::npos) << served_dotted;
  // What was served is what nvcc writes there now: the object but for its
  // temporary file's name (as two plain runs differ), the dependency file
  // (naming ck2's files) and the device code byte for byte.
  const std::string served_object = file("ck2/build/CMakeFiles/k.dir/k.cu.o");
  const std::string served_depfile = file("ck2/build/CMakeFiles/k.dir/k.cu.o.d");
  ASSERT_EQ(in("ck2/build", object("ck2"), true).code, 0);
  EXPECT_TRUE(same(mask_temp_names(served_object), mask_temp_names(file("ck2/build/CMakeFiles/k.dir/k.cu.o"))));
  EXPECT_EQ(served_depfile, file("ck2/build/CMakeFiles/k.dir/k.cu.o.d"));
  EXPECT_NE(served_depfile.find(m_tmp.sub("ck2/src/inc/params.h")), std::string::npos) << served_depfile;
  EXPECT_EQ(served_depfile.find(m_tmp.sub("ck1/")), std::string::npos) << served_depfile;
  for (const char* mode : {"cubin", "ptx", "fatbin"}) {
    ASSERT_EQ(in("ck2/build", device("ck2", std::string("-") + mode) + " -o plain." + mode, true).code, 0);
    EXPECT_TRUE(same(file("ck2/build/k." + std::string(mode)), file("ck2/build/plain." + std::string(mode)))) << mode;
  }
  // `explain` in a third checkout under the base says where the hit comes from.
  checkout("ck3", "2.0f", {"build"});
  const Ran said = sh("sh -c " + quote("cd " + quote(m_tmp.sub("ck3/build")) + " && exec " + cli() + " explain " +
                                       quote(m_bin + "/nvcc") + " " + device("ck3", "-cubin") + " -o k.cubin"),
                      "PROGCACHE_BASE_DIR=" + quote(m_tmp.path()));
  EXPECT_EQ(said.code, 0) << said.out << said.err;
  EXPECT_NE(said.out.find("hit (relocated key"), std::string::npos) << said.out;
  EXPECT_FALSE(fs::exists(m_tmp.sub("ck3/build/k.cubin"))) << "explain wrote the output";
  // Without the base directory, that checkout shares nothing.
  misses = counter("misses");
  ASSERT_EQ(at("ck3/build", device("ck3", "-cubin") + " -o k.cubin", false).code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "served across checkouts with no base directory";
  // A checkout whose header differs, and one with a header created where
  // the quoted include finds it first (beside the source, a place that was
  // empty in ck1): compiled, as nvcc makes them there.
  checkout("ck4", "3.0f", {"build"});
  checkout("ck5", "2.0f", {"build"});
  testing::write_all(m_tmp.sub("ck5/src/params.h"), "#define SCALE 4.0f\n");
  for (const std::string ck : {"ck4", "ck5"}) {
    misses = counter("misses");
    ASSERT_EQ(at(ck + "/build", device(ck, "-cubin") + " -o k.cubin").code, 0);
    EXPECT_EQ(counter("misses"), misses + 1) << ck << ": ck1's cubin served for other files";
    ASSERT_EQ(in(ck + "/build", device(ck, "-cubin") + " -o plain.cubin", true).code, 0);
    EXPECT_TRUE(same(file(ck + "/build/k.cubin"), file(ck + "/build/plain.cubin"))) << ck;
  }
}

TEST_F(NvccLauncherBaseDirTest, WhatNamesTheCheckoutsPathIsNeverSharedAcrossCheckouts) {
  // Each case: a source (or options) whose output names where the checkout
  // is, stored in ck1 and compiled again in ck2, served there as plain
  // nvcc writes it.
  struct Case {
    std::string what, source, mode, extra;
  };
  const std::string head = "#include \"params.h\"\n";
  const std::vector<Case> cases = {
      {"__FILE__ in device code", head + "__global__ void k(const char** p) { *p = __FILE__; }\n", "-cubin", ""},
      {"assert in device code",
       "#include <cassert>\n" + head + "__global__ void k(float* x) { assert(x[0] < SCALE); }\n", "-cubin", ""},
      {"a relocatable object (its module ID)", head + "__global__ void k(float* x) { x[0] = SCALE; }\n", "-c",
       "-rdc=true"},
      {"line information", head + "__global__ void k(float* x) { x[0] = SCALE; }\n", "-cubin", "-lineinfo"},
      {"a sanitizer's source locations (a host compiler word)",
       head + "int g[10];\nint* pg() { return g; }\n__global__ void k(float* x) { x[0] = SCALE; }\n", "-c",
       "-Xcompiler -fsanitize=address"},
      {"an anonymous namespace (nvcc names its kernels after the source's path)",
       head + "namespace {\n__global__ void anon(float* x) { x[0] = SCALE; }\n}\n"
              "void launch(float* x) { anon<<<1, 1>>>(x); }\n",
       "-cubin", ""},
      {"an anonymous namespace behind an attribute",
       head + "namespace [[deprecated]] {\n__device__ int g;\n}\n"
              "namespace __attribute__((visibility(\"hidden\"))) <%\n__device__ int h;\n%>\n"
              "__global__ void k(int* x) { x[0] = g + h; }\n",
       "-cubin", "-w"},
      {"a warning naming the source", head + "#warning checkout\n__global__ void k(float* x) { x[0] = SCALE; }\n",
       "-cubin", ""},
  };
  int n = 0;
  for (const auto& c : cases) {
    const std::string ck1 = "a" + std::to_string(n);
    const std::string ck2 = "b" + std::to_string(n++);
    for (const auto& ck : {ck1, ck2}) {
      checkout(ck, "2.0f", {"build"});
      testing::write_all(m_tmp.sub(ck + "/src/k.cu"), c.source);
    }
    const std::string out = c.mode == "-c" ? "k.o" : "k.cubin";
    ASSERT_TRUE(stored_at(ck1 + "/build", device(ck1, c.mode, c.extra) + " -o " + out)) << c.what;
    const std::uint64_t misses = counter("misses");
    const Ran served = at(ck2 + "/build", device(ck2, c.mode, c.extra) + " -o " + out);
    ASSERT_EQ(served.code, 0) << c.what;
    EXPECT_EQ(counter("misses"), misses + 1) << c.what << ": served from the other checkout";
    const Ran plain = in(ck2 + "/build", device(ck2, c.mode, c.extra) + " -o plain-" + out, true);
    ASSERT_EQ(plain.code, 0) << c.what;
    EXPECT_TRUE(same(mask_temp_names(file(ck2 + "/build/" + out)), mask_temp_names(file(ck2 + "/build/plain-" + out))))
        << c.what;
    EXPECT_EQ(served.err, plain.err) << c.what;
  }
  // `progcache stats` says why each was not shared.
  const auto why = launcher_stats()["not_relocated"];
  EXPECT_GE(why.value("the preprocessed text names a path under the base (__FILE__, a string, std::source_location) "
                      "or opens an anonymous namespace",
                      0),
            6)
      << why.dump();
  EXPECT_GE(why.value("relocatable device code: its module ID is made from the path of the source", 0), 2)
      << why.dump();
  EXPECT_GE(why.value("nvcc printed something, which may name a path", 0), 2) << why.dump();
  // A header included by its absolute path (the first checkout's, in both
  // sources): nvcc in the second checkout reads the first's, and its
  // dependency file names it.
  const std::string first = m_tmp.sub("c1/src/inc/params.h");
  for (const std::string ck : {"c1", "c2"}) {
    checkout(ck, "2.0f", {"build"});
    testing::write_all(m_tmp.sub(ck + "/src/k.cu"),
                       "#include \"" + first + "\"\n__global__ void k(float* x) { x[0] = SCALE; }\n");
  }
  const auto cubin = [&](const std::string& ck) { return device(ck, "-cubin") + " -MD -MF k.d -o k.cubin"; };
  ASSERT_TRUE(stored_at("c1/build", cubin("c1")));
  const std::uint64_t misses = counter("misses");
  ASSERT_EQ(at("c2/build", cubin("c2")).code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "a header included by its absolute path: served from the other checkout";
  const std::string served_depfile = file("c2/build/k.d");
  ASSERT_EQ(in("c2/build", cubin("c2"), true).code, 0);
  EXPECT_EQ(served_depfile, file("c2/build/k.d"));
  EXPECT_EQ(counter("relocated_hits"), 0U);
}

TEST_F(NvccLauncherBaseDirTest, APathUnderTheBaseSpelledTheSameInEveryCheckoutIsNeverRelocated) {
  // Each case: one string names the first checkout's files in both
  // checkouts' commands or environments (a dependency target, a search
  // directory of the environment, a list of -I paths mixing relative and
  // absolute ones): the second checkout's compile reads or writes what it
  // names, so nothing is served from the first, and what is written is
  // plain nvcc's.
  struct Case {
    std::string what, extra, env;
  };
  const std::string first = m_tmp.sub("a/src/inc");
  // A directory outside the base whose name holds the base's path after a
  // space: the dependency file escapes that space.
  testing::TempDir outside;
  const std::string spaced = outside.sub("x " + m_tmp.path() + "/inc");
  fs::create_directories(spaced);
  testing::write_all(spaced + "/more.h", "#define MORE 1\n");
  const std::vector<Case> cases = {
      {"an absolute -MT under the base", "-MD -MT " + quote(m_tmp.sub("a/build/k.cubin")) + " -MF k.d", ""},
      {"CPATH under the base", "-MD -MF k.d", "CPATH=" + quote(first)},
      {"a list of -I paths mixing relative and absolute ones", "-I../src/inc," + quote(first) + " -MD -MF k.d", ""},
      {"a header found outside the base by a path holding it", "-MD -MF k.d -include more.h", "CPATH=" + quote(spaced)},
  };
  for (const auto& c : cases) {
    for (const std::string ck : {"a", "b"}) {
      fs::remove_all(m_tmp.sub(ck));
      checkout(ck, "2.0f", {"build"});
    }
    const auto cubin = [&](const std::string& ck) {
      // CPATH's header, not -I's, in the CPATH case: -I names none.
      const std::string src = m_tmp.sub(ck + "/src");
      const bool by_env = c.env.starts_with("CPATH=" + quote(first));
      return "-arch=sm_90 " + (by_env ? std::string() : "-I " + quote(src + "/inc")) + " " + c.extra + " -cubin " +
             quote(src + "/k.cu") + " -o k.cubin";
    };
    ASSERT_TRUE(stored_at("a/build", cubin("a"), c.env)) << c.what;
    const std::uint64_t misses = counter("misses");
    ASSERT_EQ(at("b/build", cubin("b"), true, c.env).code, 0) << c.what;
    EXPECT_EQ(counter("misses"), misses + 1) << c.what << ": served from the other checkout";
    const std::string served = file("b/build/k.cubin");
    const std::string served_depfile = file("b/build/k.d");
    ASSERT_EQ(sh("sh -c " + quote("cd " + quote(m_tmp.sub("b/build")) + " && exec " + quote(m_bin + "/nvcc") + " " +
                                  cubin("b")),
                 c.env)
                  .code,
              0)
        << c.what;
    EXPECT_TRUE(same(served, file("b/build/k.cubin"))) << c.what;
    EXPECT_EQ(served_depfile, file("b/build/k.d")) << c.what;
  }
  EXPECT_EQ(counter("relocated_hits"), 0U);
}

TEST_F(NvccLauncherBaseDirTest, ASymbolicLinkOnTheSearchLeadsEachCheckoutToItsOwnHeaders) {
  // gcc writes a system header by its real path when that is shorter
  // (-fcanonical-system-headers): an -isystem directory that is a link
  // (to outside the base, to another place in each checkout) is not in the
  // dependency list, and each checkout's link leads elsewhere.
  testing::TempDir outside;
  for (const std::string v : {"7.0f", "9.0f"}) {
    fs::create_directories(outside.sub(v));
    testing::write_all(outside.sub(v + "/a.h"), "#define SCALE " + v + "\n");
  }
  for (const auto& [ck, v] : {std::pair{"a", "7.0f"}, std::pair{"b", "9.0f"}}) {
    checkout(ck, "2.0f", {"build"});
    testing::write_all(m_tmp.sub(std::string(ck) + "/src/k.cu"),
                       "#include <a.h>\n__global__ void k(float* x) { x[0] = SCALE; }\n");
    fs::create_directory_symlink(outside.sub(v), m_tmp.sub(std::string(ck) + "/sys"));
  }
  const auto cmd = [&](const std::string& ck) {
    return "-arch=sm_90 -isystem " + quote(m_tmp.sub(ck + "/sys")) + " -MD -MF k.d -cubin " +
           quote(m_tmp.sub(ck + "/src/k.cu")) + " -o k.cubin";
  };
  ASSERT_TRUE(stored_at("a/build", cmd("a")));
  const std::uint64_t misses = counter("misses");
  ASSERT_EQ(at("b/build", cmd("b")).code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "the other checkout's header served";
  const std::string served = file("b/build/k.cubin");
  const std::string served_depfile = file("b/build/k.d");
  ASSERT_EQ(in("b/build", cmd("b"), true).code, 0);
  EXPECT_TRUE(same(served, file("b/build/k.cubin")));
  EXPECT_EQ(served_depfile, file("b/build/k.d"));
  EXPECT_EQ(counter("relocated_hits"), 0U);
}

TEST_F(NvccLauncherBaseDirTest, AHeaderInABranchNotTakenIsSharedAcrossCheckoutsAndOnlyItsBeingThereCounts) {
  // A project header under a false #if, and one named by __has_include:
  // found by the search, read by no compile step. Each checkout has its own
  // copies (other inodes and times, and here other contents): the second
  // checkout is served, and what it is served is what nvcc writes there.
  // Only the header's being there decides anything: gone, the
  // __has_include branch flips, and the output with it.
  const std::string source =
      "#include \"params.h\"\n"
      "#if __has_include(\"opt.h\")\n#define EXTRA 1.0f\n#else\n#define EXTRA 0.5f\n#endif\n"
      "#ifdef PROGCACHE_TEST_NEVER\n#include \"unused.h\"\n#endif\n"
      "__global__ void k(float* x) { x[0] = SCALE + EXTRA; }\n";
  for (const std::string ck : {"ck1", "ck2"}) {
    checkout(ck, "2.0f", {"build"});
    testing::write_all(m_tmp.sub(ck + "/src/k.cu"), source);
    testing::write_all(m_tmp.sub(ck + "/src/inc/opt.h"), "#error never read (" + ck + ")\n");
    testing::write_all(m_tmp.sub(ck + "/src/inc/unused.h"), "#error never read either (" + ck + ")\n");
  }
  const auto cubin = [&](const std::string& ck, const std::string& out) { return device(ck, "-cubin") + " -o " + out; };
  ASSERT_TRUE(stored_at("ck1/build", cubin("ck1", "k.cubin")));
  std::uint64_t misses = counter("misses");
  ASSERT_EQ(at("ck2/build", cubin("ck2", "k.cubin")).code, 0);
  EXPECT_EQ(counter("misses"), misses) << "a header no step read kept the other checkout from being served";
  ASSERT_EQ(in("ck2/build", cubin("ck2", "plain.cubin"), true).code, 0);
  EXPECT_TRUE(same(file("ck2/build/k.cubin"), file("ck2/build/plain.cubin")));
  // An unread header edited: still served, and still what nvcc writes.
  testing::write_all(m_tmp.sub("ck2/src/inc/unused.h"), "#error edited, and never read\n");
  misses = counter("misses");
  ASSERT_EQ(at("ck2/build", cubin("ck2", "k.cubin")).code, 0);
  EXPECT_EQ(counter("misses"), misses) << "an edit of a header no step reads was a miss";
  // The __has_include header gone: compiled, as nvcc makes it now.
  fs::remove(m_tmp.sub("ck2/src/inc/opt.h"));
  misses = counter("misses");
  ASSERT_EQ(at("ck2/build", cubin("ck2", "k.cubin")).code, 0);
  EXPECT_EQ(counter("misses"), misses + 1) << "served with the header __has_include asks for gone";
  ASSERT_EQ(in("ck2/build", cubin("ck2", "plain.cubin"), true).code, 0);
  EXPECT_TRUE(same(file("ck2/build/k.cubin"), file("ck2/build/plain.cubin")));
  EXPECT_FALSE(same(file("ck2/build/k.cubin"), file("ck1/build/k.cubin"))) << "the branch did not flip";
}

TEST_F(NvccLauncherPlaceTest, ALinkIntoTheSystemsHeadersOrOneClimbedOutOfIsTheUsersAndIsWatched) {
  // A user's link into the system's headers is the user's: retargeted, it
  // leads elsewhere, though the header it led to is the system's.
  checkout("ck", "2.0f", {"build"});
  fs::create_directories(m_tmp.sub("fake"));
  testing::write_all(m_tmp.sub("fake/xt_mark.h"), "struct xt_mark_tginfo2 { char c[3]; };\n");
  testing::write_all(m_tmp.sub("ck/src/k.cu"),
                     "#include <xt_mark.h>\n"
                     "__global__ void k(int* x) { x[0] = sizeof(xt_mark_tginfo2); }\n");
  fs::create_directory_symlink("/usr/include/linux/netfilter", m_tmp.sub("ck/L"));
  const std::string sys = "-arch=sm_90 -isystem " + quote(m_tmp.sub("ck/L"));
  ASSERT_TRUE(stored_in("ck/build", sys + " -cubin ../src/k.cu -o k.cubin"));
  fs::remove(m_tmp.sub("ck/L"));
  fs::create_directory_symlink(m_tmp.sub("fake"), m_tmp.sub("ck/L"));
  ASSERT_EQ(in("ck/build", sys + " -cubin ../src/k.cu -o k.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a link into /usr/include retargeted, and the old header's cubin served";
  ASSERT_EQ(in("ck/build", sys + " -cubin ../src/k.cu -o plain.cubin", true).code, 0);
  EXPECT_TRUE(same(file("ck/build/k.cubin"), file("ck/build/plain.cubin")));
  // A directory climbed out of through a link (`L2/..`): the place names
  // the link's parent, which a lexical reading of its spelling takes for
  // another directory.
  for (const std::string d : {"Y/s", "Z/s"}) fs::create_directories(m_tmp.sub("ck/" + d));
  testing::write_all(m_tmp.sub("ck/Y/h.h"), "#define SCALE 111.0f\n");
  testing::write_all(m_tmp.sub("ck/Z/h.h"), "#define SCALE 222.0f\n");
  testing::write_all(m_tmp.sub("ck/h.h"), "#define LOCAL 7\n");
  testing::write_all(m_tmp.sub("ck/k2.cu"),
                     "#include \"h.h\"\n#include <h.h>\n__global__ void k(float* x) { x[0] = SCALE + LOCAL; }\n");
  fs::create_directory_symlink(m_tmp.sub("ck/Y/s"), m_tmp.sub("ck/L2"));
  const std::string climbed =
      "-arch=sm_90 -isystem " + quote(m_tmp.sub("ck/L2/..")) + " -cubin " + quote(m_tmp.sub("ck/k2.cu"));
  ASSERT_TRUE(stored_in("ck/build", climbed + " -o k2.cubin"));
  fs::remove(m_tmp.sub("ck/L2"));
  fs::create_directory_symlink(m_tmp.sub("ck/Z/s"), m_tmp.sub("ck/L2"));
  ASSERT_EQ(in("ck/build", climbed + " -o k2.cubin").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "a link climbed out of retargeted, and the old header's cubin served";
  ASSERT_EQ(in("ck/build", climbed + " -o plain2.cubin", true).code, 0);
  EXPECT_TRUE(same(file("ck/build/k2.cubin"), file("ck/build/plain2.cubin")));
}

TEST_F(NvccLauncherPlaceTest, ASymbolicLinkOnTheSearchRetargetedSinceTheStoreIsNotServedAround) {
  // The same without a base directory: an -isystem link retargeted to a
  // directory whose header differs; the dependency list named the header
  // the link led to, which did not change. The test's nvcc is a wrapper
  // script in bin/: a targets/ directory beside it must not make the
  // test's directory a toolkit whose headers are taken as they are.
  fs::create_directories(m_tmp.sub("targets/x86_64-linux/include"));
  checkout("ck", "2.0f", {"build"});
  for (const std::string v : {"7.0f", "9.0f"}) {
    fs::create_directories(m_tmp.sub("v" + v));
    testing::write_all(m_tmp.sub("v" + v + "/a.h"), "#define SCALE " + v + "\n");
  }
  testing::write_all(m_tmp.sub("ck/src/k.cu"), "#include <a.h>\n__global__ void k(float* x) { x[0] = SCALE; }\n");
  fs::create_directory_symlink(m_tmp.sub("v7.0f"), m_tmp.sub("ck/sys"));
  // An absolute spelling, longer than the real path it leads to: gcc lists
  // the real path.
  const std::string sys = "-arch=sm_90 -isystem " + quote(m_tmp.sub("ck/sys"));
  const std::string args = sys + " -cubin ../src/k.cu -o k.cubin";
  ASSERT_TRUE(stored_in("ck/build", args));
  fs::remove(m_tmp.sub("ck/sys"));
  fs::create_directory_symlink(m_tmp.sub("v9.0f"), m_tmp.sub("ck/sys"));
  ASSERT_EQ(in("ck/build", args).code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "the header the link led to before was served around";
  ASSERT_EQ(in("ck/build", sys + " -cubin ../src/k.cu -o plain.cubin", true).code, 0);
  EXPECT_TRUE(same(file("ck/build/k.cubin"), file("ck/build/plain.cubin")));
}

// A device link (nvcc -dlink): relocatable objects, a device library found
// by -l, nvcc's registration stub compiled by the host compiler.
class NvccLauncherDeviceLinkTest : public NvccLauncherOracleTest {
 protected:
  // Runs `command` in work/d2.
  Ran in_d2(const std::string& command) { return sh("sh -c " + quote("cd d2 && " + command)); }
  void SetUp() override {
    NvccLauncherOracleTest::SetUp();
    if (m_bin.empty()) return;
    write("a.cu",
          "extern __device__ float twice(float);\n"
          "extern __device__ float thrice(float);\n"
          "__global__ void k(float* x) { x[0] = thrice(twice(x[0])); }\n");
    write("b.cu", "__device__ float twice(float v) { return v * FACTOR; }\n");
    write("c.cu", "__device__ float thrice(float v) { return v * FACTOR; }\n");
    for (const auto* d : {"lib", "lib0", "lib2", "d2/lib"}) fs::create_directories(m_tmp.sub("work/" + std::string(d)));
    ASSERT_EQ(plain("-arch=sm_90 -dc a.cu -o a.o").code, 0);
    ASSERT_EQ(plain("-arch=sm_90 -DFACTOR=2.0f -dc b.cu -o b.o").code, 0);
    library("lib/libdev.a", "3.0f");
  }
  // A device library (nvcc -lib) whose thrice() multiplies by `factor`.
  void library(const std::string& rel, const std::string& factor) {
    ASSERT_EQ(plain("-arch=sm_90 -DFACTOR=" + factor + " -dc c.cu -o c.o").code, 0);
    ASSERT_EQ(plain("-arch=sm_90 -lib c.o -o " + rel).code, 0);
  }
  const std::string m_link = "-arch=sm_90 -Xcompiler=-fPIC -dlink a.o b.o -o link.o -L lib0 -L lib -ldev";
};

TEST_F(NvccLauncherDeviceLinkTest, ADeviceLinkIsServedAsPlainNvccWritesItAndCompiledAgainWhenAnythingItReadsChanges) {
  // An input object rebuilt from another source.
  expect_compiled_again(
      m_link, "link.o", "", [&] { ASSERT_EQ(plain("-arch=sm_90 -DFACTOR=5.0f -dc b.cu -o b.o").code, 0); }, "");
  // A library made where nvlink now finds it first (an earlier -L).
  expect_compiled_again(
      m_link, "link.o", "", [&] { library("lib0/libdev.a", "7.0f"); }, "");
  fs::remove(m_tmp.sub("work/lib0/libdev.a"));
  // ... or along LIBRARY_PATH.
  const std::string by_env = "-arch=sm_90 -Xcompiler=-fPIC -dlink a.o b.o -o link.o -ldev";
  expect_compiled_again(
      by_env, "link.o", "LIBRARY_PATH=lib2:lib", [&] { library("lib2/libdev.a", "9.0f"); }, "LIBRARY_PATH=lib2:lib");
  // The library itself rebuilt in place.
  expect_compiled_again(
      m_link, "link.o", "", [&] { library("lib/libdev.a", "11.0f"); }, "");
  // A header the registration stub's compile finds first: its -I. is the
  // working directory.
  const std::string real = testing::read_all(m_bin + "/../include/fatbinary_section.h");
  expect_compiled_again(
      m_link, "link.o", "",
      [&] {
        write(
            "fatbinary_section.h",
            "#ifndef PLANTED\n#define PLANTED\nstatic int planted_marker __attribute__((used)) = 42;\n#endif\n" + real);
      },
      "");
  EXPECT_NE(read("link.o").find("planted_marker"), std::string::npos) << "the planted header was not compiled in";
}

TEST_F(NvccLauncherDeviceLinkTest, TwoBuildDirectoriesAndAnotherOutputNameShareOneDeviceLink) {
  int runs = 1;
  for (int i = 0; i < 4 && runs != 0; ++i) {
    ASSERT_EQ(launch(m_link).code, 0);
    runs = i == 0 ? (nvcc_runs(), 1) : nvcc_runs();
  }
  ASSERT_EQ(runs, 0) << "never served";
  // Another output name: the same link.
  ASSERT_EQ(launch("-arch=sm_90 -Xcompiler=-fPIC -dlink a.o b.o -o renamed.o -L lib0 -L lib -ldev").code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "another -o name linked again";
  // A second directory holding copies of the inputs and the library.
  for (const auto* f : {"a.o", "b.o", "lib/libdev.a"})
    fs::copy_file(m_tmp.sub("work/" + std::string(f)), m_tmp.sub("work/d2/" + std::string(f)));
  fs::create_directories(m_tmp.sub("work/d2/lib0"));
  ASSERT_EQ(in_d2(cli() + " " + noting_nvcc() + " " + m_link).code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "a second directory linked again";
  const std::string served = read("d2/link.o");
  ASSERT_EQ(in_d2(quote(m_bin + "/nvcc") + " " + m_link + " -o plain.o").code, 0);
  EXPECT_TRUE(same(served, read("d2/plain.o"))) << "the served device link differs from plain nvcc's";
  EXPECT_TRUE(same(read("renamed.o"), read("d2/plain.o")));
  // Line information is the inputs' own: -lineinfo leaves the place out of the key too.
  const std::string lined = m_link + " -lineinfo";
  for (int i = 0; i < 3; ++i) ASSERT_EQ(launch(lined).code, 0);
  nvcc_runs();
  ASSERT_EQ(in_d2(cli() + " " + noting_nvcc() + " " + lined).code, 0);
  EXPECT_EQ(nvcc_runs(), 0) << "-lineinfo: a second directory linked again";
  const std::string served_lined = read("d2/link.o");
  ASSERT_EQ(in_d2(quote(m_bin + "/nvcc") + " " + lined + " -o plain.o").code, 0);
  EXPECT_TRUE(same(served_lined, read("d2/plain.o")));
  // The object holds host code: in a group-shared root without signed
  // entries it is neither served nor stored.
  ::chmod(m_tmp.sub("cache").c_str(), 02770);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(m_link, "PROGCACHE_SHARING=group").code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "a device link was served from a group-shared root without signed entries";
}

TEST_F(NvccLauncherDeviceLinkTest, WhatADeviceLinksToolsFindThroughTheEnvironmentIsKeyedOrRefused) {
  // A header made in $TMPDIR, where nvcc writes the fatbin source that
  // includes "fatbinary_section.h": found there first.
  fs::create_directories(m_tmp.sub("tmpd"));
  const std::string tmp_env = "TMPDIR=" + quote(m_tmp.sub("tmpd"));
  const std::string real = testing::read_all(m_bin + "/../include/fatbinary_section.h");
  expect_compiled_again(
      m_link, "link.o", tmp_env,
      [&] {
        testing::write_all(m_tmp.sub("tmpd/fatbinary_section.h"),
                           "#ifndef PLANTED\n#define PLANTED\nstatic int planted_marker __attribute__((used)) = 42;\n"
                           "#endif\n" +
                               real);
      },
      tmp_env);
  EXPECT_NE(read("link.o").find("planted_marker"), std::string::npos) << "the planted header was not compiled in";
  // LIBRARIES and NVLINK_FLAGS reach nvlink (directories, libraries,
  // objects) and are not followed: nvcc runs, every time.
  library("lib0/libdev.a", "13.0f");
  for (const std::string env : {"LIBRARIES=-Llib0", "NVLINK_FLAGS=-Llib0"}) {
    SCOPED_TRACE(env);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(m_link, env).code, 0);
    EXPECT_EQ(nvcc_runs(), 2);
    const std::string served = read("link.o");
    ASSERT_EQ(sh(quote(m_bin + "/nvcc") + " " + m_link + " -o plain.o", env).code, 0);
    EXPECT_TRUE(same(served, read("plain.o")));
  }
  // A $TMPDIR whose name a shell reads: the launcher's own host compiler
  // word could not carry it, so nvcc runs as given (and no shell runs it).
  fs::create_directories(m_tmp.sub("t;touch pwned;x"));
  const std::string odd_env = "TMPDIR=" + quote(m_tmp.sub("t;touch pwned;x"));
  const Ran odd = launch(m_link, odd_env);
  ASSERT_EQ(odd.code, 0) << odd.err;
  EXPECT_EQ(nvcc_runs(), 1);
  EXPECT_FALSE(exists("pwned")) << "a shell ran what $TMPDIR's name says";
  const auto n = launcher_stats()["not_stored"];
  EXPECT_EQ(n.value("the name of $TMPDIR cannot be handed to the host compiler", 0), 1) << n.dump();
}

TEST_F(NvccLauncherDeviceLinkTest, ASpecsFileTheHostCompilerFindsAlongLibraryPathIsNeverServedAround) {
  // gcc reads <dir>/specs from each LIBRARY_PATH directory: one made there
  // later (here, leaving out the compiler's ident) changes the output.
  fs::create_directories(m_tmp.sub("work/lp"));
  const std::string env = "LIBRARY_PATH=" + quote(m_tmp.sub("work/lp"));
  const std::string specs = "*cc1plus:\n+ -fno-ident\n\n";
  ASSERT_NE(read("a.o").find("GCC: ("), std::string::npos);
  expect_compiled_again(
      m_link, "link.o", env, [&] { write("lp/specs", specs); }, env);
  EXPECT_EQ(read("link.o").find("GCC: ("), std::string::npos) << "the specs file was not read";
  // An object's compile too; and none is stored while the file is there.
  fs::remove(m_tmp.sub("work/lp/specs"));
  const std::string obj = "-arch=sm_90 -I inc -c k.cu -o k.o";
  int runs = 1;
  for (int i = 0; i < 4 && runs != 0; ++i) {
    ASSERT_EQ(launch(obj, env).code, 0);
    runs = i == 0 ? (nvcc_runs(), 1) : nvcc_runs();
  }
  ASSERT_EQ(runs, 0) << "never served";
  write("lp/specs", specs);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(obj, env).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "served or stored with a specs file along LIBRARY_PATH";
  const std::string served = read("k.o");
  EXPECT_EQ(served.find("GCC: ("), std::string::npos);
  ASSERT_EQ(sh(quote(m_bin + "/nvcc") + " " + obj + " -o plain.o", env).code, 0);
  EXPECT_TRUE(same(mask_temp_names(served), mask_temp_names(read("plain.o"))));
  // The directories where gcc finds its own programs and specs: refused,
  // nvcc runs as given.
  fs::remove(m_tmp.sub("work/lp/specs"));
  for (const std::string var : {"COMPILER_PATH=lp", "GCC_EXEC_PREFIX=lp/"}) {
    const Ran r = launch(obj, var);
    EXPECT_EQ(nvcc_runs(), 1) << var;
    EXPECT_EQ(r.code, sh(quote(m_bin + "/nvcc") + " " + obj + " -o plain.o", var).code) << var;
  }
  const auto u = launcher_stats()["uncacheable"];
  EXPECT_EQ(u.value("variable '...' set: nvcc reads it, and what it names is not keyed", 0), 2) << u.dump();
}

TEST_F(NvccLauncherDeviceLinkTest, ADirectoryRenamedIntoPlaceWhileNvccRunsIsNeverRecorded) {
  // A host compiler that swaps a directory once, at nvcc's last step (the
  // host compile of a compile, the stub's compile of a device link): what
  // nvcc read is the old directory's, the files there after are the new one's.
  write("swapgcc",
        "#!/bin/sh\ncase \"$*\" in *cudafe1.cpp*|*link.stub*) [ -d swap_in ] && mv swap_out swap_old && "
        "mv swap_in swap_out ;; esac\nexec gcc \"$@\"\n");
  fs::permissions(m_tmp.sub("work/swapgcc"), fs::perms::owner_all);
  auto arm = [&](const std::function<void(const std::string&, int)>& fill) {
    fs::remove_all(m_tmp.sub("work/swap_out"));
    fs::remove_all(m_tmp.sub("work/swap_old"));
    fs::create_directories(m_tmp.sub("work/swap_out"));
    fs::create_directories(m_tmp.sub("work/swap_in"));
    fill("swap_out", 1);
    fill("swap_in", 2);
  };
  // A compile: a header under a subdirectory of the source's.
  write("r.cu", "#include \"swap_out/val.h\"\n__global__ void k(float* x) { x[0] = VAL; }\n");
  const std::string compile = "-arch=sm_90 -ccbin ./swapgcc -c r.cu -o r.o";
  arm([&](const std::string& d, int v) { write(d + "/val.h", "#define VAL " + std::to_string(v) + ".0f\n"); });
  ASSERT_EQ(launch(compile).code, 0);
  ASSERT_EQ(launch(compile).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "recorded what nvcc read under the files renamed in after it";
  const std::string served = read("r.o");
  ASSERT_EQ(plain("-arch=sm_90 -c r.cu -o plain.o").code, 0);
  EXPECT_TRUE(same(mask_temp_names(served), mask_temp_names(read("plain.o"))));
  // A device link: an input's directory.
  const std::string link = "-arch=sm_90 -ccbin ./swapgcc -dlink a.o swap_out/b.o -o link.o -L lib -ldev";
  arm([&](const std::string& d, int v) {
    ASSERT_EQ(plain("-arch=sm_90 -DFACTOR=" + std::to_string(v) + ".0f -dc b.cu -o " + d + "/b.o").code, 0);
  });
  ASSERT_EQ(launch(link).code, 0);
  ASSERT_EQ(launch(link).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "recorded what nvlink read under the inputs renamed in after it";
  const std::string linked = read("link.o");
  ASSERT_EQ(plain("-arch=sm_90 -dlink a.o swap_out/b.o -o plain.o -L lib -ldev").code, 0);
  EXPECT_TRUE(same(linked, read("plain.o")));
}

TEST_F(NvccLauncherDeviceLinkTest, WhatTheHostCompilerFindsBesideItsSearchIsKeyedOrRefused) {
  // A precompiled header where gcc looks for one (here the working
  // directory, the stub's -I.): nothing is stored while it is there.
  write("stdc-predef.h.gch", "not a precompiled header\n");
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(m_link).code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "stored with a precompiled header where gcc looks";
  fs::remove(m_tmp.sub("work/stdc-predef.h.gch"));
  // ... and a compile's, in an -I directory (searched before the system's).
  write("inc/stdc-predef.h.gch", "not a precompiled header\n");
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch("-arch=sm_90 -I inc -c k.cu -o k.o").code, 0);
  EXPECT_EQ(nvcc_runs(), 2) << "a compile stored with a precompiled header where gcc looks";
  fs::remove(m_tmp.sub("work/inc/stdc-predef.h.gch"));
  // An assembler made earlier on PATH assembles every object.
  fs::create_directories(m_tmp.sub("asbin"));
  const std::string env = "PATH=" + quote(m_tmp.sub("asbin") + ":" + m_bin + ":/usr/local/bin:/usr/bin:/bin");
  expect_compiled_again(
      m_link, "link.o", env,
      [&] {
        testing::write_all(m_tmp.sub("asbin/extra.s"), ".globl planted_by_as\n.data\nplanted_by_as: .long 7\n");
        testing::write_all(m_tmp.sub("asbin/as"),
                           "#!/bin/sh\nexec /usr/bin/as \"$@\" " + quote(m_tmp.sub("asbin/extra.s")) + "\n");
        fs::permissions(m_tmp.sub("asbin/as"), fs::perms::owner_all);
      },
      env);
  EXPECT_NE(read("link.o").find("planted_by_as"), std::string::npos) << "the planted assembler did not run";
  // What the tools print is replayed: its language is keyed.
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(m_link, "LC_ALL=C").code, 0);
  nvcc_runs();
  ASSERT_EQ(launch(m_link, "LC_ALL=C.UTF-8").code, 0);
  EXPECT_EQ(nvcc_runs(), 1) << "another locale served what the first printed";
  // clang's driver options from the environment: refused.
  for (int i = 0; i < 2; ++i) ASSERT_EQ(launch(m_link, "CCC_OVERRIDE_OPTIONS=+-DX").code, 0);
  EXPECT_EQ(nvcc_runs(), 2);
}

}  // namespace
}  // namespace progcache
