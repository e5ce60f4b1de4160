// compile() against the real NVRTC and nvJitLink. Every test skips (and says
// why) when the CUDA toolkit's libraries are absent; the loader tests also
// skip without a GPU.
#include "progcache/compile.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "progcache/entry.h"
#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "progcache/lock_file.h"
#include "progcache/memory_store.h"
#include "testing/fault_env.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_saxpy = R"(
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

bool have_nvrtc(std::string* why) {
  auto info = compiler_info();
  if (!info.ok()) *why = info.status().message();
  return info.ok() && !info->nvrtc_path.empty();
}

#define REQUIRE_NVRTC()                                         \
  do {                                                          \
    std::string why;                                            \
    if (!have_nvrtc(&why)) GTEST_SKIP() << "no NVRTC: " << why; \
  } while (false)

// A program unique to this test run, so nothing is cached yet.
Program saxpy_program(const std::string& salt) {
  Program p;
  p.code = std::string(k_saxpy) + "// " + salt + "\n";
  p.options = {"-arch=sm_80", "-std=c++17"};
  p.name_expressions = {"saxpy<float>", "saxpy<double>"};
  p.name = "saxpy.cu";
  return p;
}

class CompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = FileStore::open({.root = m_tmp.sub("cache")});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    m_store = std::move(*s);
    m_opts.cache = m_store.get();
    m_opts.state_dir = m_tmp.sub("cache");
  }
  std::string salt() const {
    return std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  testing::TempDir m_tmp;
  std::unique_ptr<FileStore> m_store;
  CompileOptions m_opts;
};

TEST_F(CompileTest, CxxToCubinAndPtxWithSymbolMapping) {
  REQUIRE_NVRTC();
  auto cubin = compile(saxpy_program(salt()), TargetType::cubin, m_opts);
  ASSERT_TRUE(cubin.ok()) << cubin.status().to_string();
  EXPECT_EQ(cubin->code.view().substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(cubin->kind, TargetType::cubin);
  EXPECT_FALSE(cubin->from_cache);
  ASSERT_EQ(cubin->symbol_mapping.size(), 2u);
  EXPECT_EQ(cubin->symbol_mapping.at("saxpy<float>"), "_Z5saxpyIfEvT_PKS0_PS0_i");
  EXPECT_FALSE(cubin->compiler.nvrtc_version.empty());
  EXPECT_EQ(cubin->compiler.nvrtc_fingerprint.size(), 64u);
  auto ptx = compile(saxpy_program(salt()), TargetType::ptx, m_opts);
  ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
  EXPECT_NE(ptx->code.view().find(".entry _Z5saxpyIfEvT_PKS0_PS0_i"), std::string_view::npos);
  EXPECT_NE(ptx->key, cubin->key);
}

TEST_F(CompileTest, HitEqualsAFreshCompileSymbolsAndLogIncluded) {
  REQUIRE_NVRTC();
  Program p = saxpy_program(salt());
  p.code += "__global__ void warn() { int unused; }\n";  // a log worth keeping
  auto first = compile(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const auto before = compile_stats();
  auto second = compile(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(compile_stats().compiles, before.compiles);  // no compiler ran
  EXPECT_EQ(compile_stats().hits, before.hits + 1);
  EXPECT_EQ(second->code, first->code);
  EXPECT_EQ(second->symbol_mapping, first->symbol_mapping);
  EXPECT_EQ(second->log, first->log);
  EXPECT_FALSE(second->log.empty());
  EXPECT_EQ(second->key, first->key);
  // And equal to a compile that never saw the cache.
  auto fresh = compile(p, TargetType::cubin, CompileOptions{.state_dir = m_tmp.sub("cache")});
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(fresh->from_cache);
  EXPECT_EQ(fresh->code, first->code);
  // The raw artifact is stored as is: what `progcache get` hands to cuobjdump.
  auto raw = m_store->get_bytes(first->key);
  ASSERT_TRUE(raw.ok() && raw->has_value());
  EXPECT_EQ(**raw, first->code);
}

TEST_F(CompileTest, OptionsTargetAndCompilerChangeTheKey) {
  REQUIRE_NVRTC();
  Program p = saxpy_program(salt());
  auto k1 = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(k1.ok());
  p.options.push_back("--use_fast_math");
  auto k2 = program_key(p, TargetType::cubin, m_opts);
  p.options = {"-arch=sm_90", "-std=c++17"};
  auto k3 = program_key(p, TargetType::cubin, m_opts);
  EXPECT_NE(*k1, *k2);
  EXPECT_NE(*k1, *k3);
  p.options = {"--gpu-architecture", "sm_80", "--std=c++17"};
  EXPECT_EQ(*program_key(p, TargetType::cubin, m_opts), *k1);  // one option, three spellings
}

// A warm call finds its key in a memo of the key's inputs: each input,
// changed alone after the program is warm, must still give the key a fresh
// derivation gives (program_key derives afresh) and never the warm one.
TEST_F(CompileTest, EveryInputOfAWarmProgramStillDecidesItsKey) {
  REQUIRE_NVRTC();
  auto mem = std::move(*make_memory_store());
  const CompileOptions o{.cache = mem.get(), .state_dir = m_tmp.sub("cache")};
  const Program base = saxpy_program(salt());
  auto warm = compile(base, TargetType::cubin, o);
  ASSERT_TRUE(warm.ok()) << warm.status().to_string();
  ASSERT_TRUE(compile(base, TargetType::cubin, o)->from_cache);
  std::vector<std::pair<std::string, Program>> variants;
  auto variant = [&](const std::string& what, auto change) {
    Program v = base;
    change(v);
    variants.emplace_back(what, std::move(v));
  };
  variant("code", [](Program& v) { v.code += "// edited\n"; });
  variant("options", [](Program& v) { v.options.push_back("-DSCALE=2"); });
  variant("option order", [](Program& v) { std::swap(v.options[0], v.options[1]); });
  variant("headers", [](Program& v) { v.headers.push_back({"unused.h", "// not included"}); });
  variant("name expressions", [](Program& v) { v.name_expressions.pop_back(); });
  variant("name", [](Program& v) { v.name = "other.cu"; });
  variant("extra digest", [](Program& v) { v.extra_digest = "a fingerprint of files the key cannot see"; });
  for (const auto& [what, v] : variants) {
    for (TargetType target : {TargetType::cubin, TargetType::ptx}) {
      auto fresh = program_key(v, target, o);
      ASSERT_TRUE(fresh.ok()) << what << ": " << fresh.status().to_string();
      for (int call = 0; call < 2; ++call) {  // a miss, then a warm call through the memo
        auto r = compile(v, target, o);
        ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
        EXPECT_EQ(r->key, *fresh) << what << ", call " << call;
        EXPECT_NE(r->key, warm->key) << what;
        EXPECT_EQ(r->from_cache, call == 1) << what;
      }
    }
  }
  auto again = compile(base, TargetType::cubin, o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->key, warm->key);
}

// Parsed metadata is kept by its bytes: two entries whose metadata differs
// in one field each keep their own on every warm hit.
TEST_F(CompileTest, WarmHitsOfProgramsWithNearlyEqualMetadataKeepTheirOwn) {
  REQUIRE_NVRTC();
  auto mem = std::move(*make_memory_store());
  const CompileOptions o{.cache = mem.get(), .state_dir = m_tmp.sub("cache")};
  Program a = saxpy_program(salt());
  Program b = a;
  a.name = "a.cu";
  b.name = "b.cu";
  b.name_expressions = {"saxpy<float>"};
  for (int round = 0; round < 3; ++round) {
    auto ra = compile(a, TargetType::cubin, o);
    auto rb = compile(b, TargetType::cubin, o);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->from_cache, round > 0);
    EXPECT_EQ(rb->from_cache, round > 0);
    EXPECT_EQ(ra->name, "a.cu") << round;
    EXPECT_EQ(rb->name, "b.cu") << round;
    EXPECT_EQ(ra->symbol_mapping.size(), 2u) << round;
    EXPECT_EQ(rb->symbol_mapping.size(), 1u) << round;
  }
}

TEST_F(CompileTest, CompileErrorCarriesTheLogAndIsNeverStored) {
  REQUIRE_NVRTC();
  Program p;
  p.code = "__global__ void broken( { }  // " + salt();
  p.options = {"-arch=sm_80"};
  p.name = "broken.cu";
  CompileFailure failure;
  auto r = compile(p, TargetType::cubin, m_opts, &failure);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::compile_error);
  EXPECT_NE(r.status().message().find("broken.cu"), std::string::npos);
  EXPECT_NE(failure.log.find("error"), std::string::npos) << failure.log;
  EXPECT_EQ(failure.options, p.options);
  EXPECT_EQ(*m_store->count(), 0u);
  // A second try compiles again (nothing cached) and fails the same way.
  const auto before = compile_stats().compile_errors;
  EXPECT_EQ(compile(p, TargetType::cubin, m_opts).status().code(), Code::compile_error);
  EXPECT_EQ(compile_stats().compile_errors, before + 1);
}

TEST_F(CompileTest, UnknownArchitectureAndRejectedOptionAreCompileErrors) {
  REQUIRE_NVRTC();
  Program p = saxpy_program(salt());
  p.options = {"-arch=sm_1"};
  auto r = compile(p, TargetType::cubin, m_opts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::compile_error) << r.status().to_string();
  p.options = {"-arch=sm_80", "--no-such-option"};
  EXPECT_FALSE(compile(p, TargetType::cubin, m_opts).ok());
  EXPECT_EQ(*m_store->count(), 0u);
}

TEST_F(CompileTest, RefusalsHappenBeforeAnyCompile) {
  REQUIRE_NVRTC();
  Program p = saxpy_program(salt());
  EXPECT_EQ(compile(p, TargetType::fatbin, m_opts).status().code(), Code::invalid_argument);
  // compile() fingerprints what -I and -include make readable (see
  // source_deps_test); an option that writes files cannot be served from a
  // cache (a hit would skip the write): such a program is compiled every
  // time, uncached, and the file is written each time.
  const std::string pch = m_tmp.sub("saxpy.pch");
  p.options.push_back("--create-pch=" + pch);
  for (int i = 0; i < 2; ++i) {
    std::filesystem::remove(pch);
    auto r = compile(p, TargetType::cubin, m_opts);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->from_cache);
    EXPECT_NE(r->uncacheable.find("side effects"), std::string::npos) << r->uncacheable;
    EXPECT_TRUE(std::filesystem::exists(pch)) << "the compiler did not run";
  }
  EXPECT_EQ(*m_store->count(), 0u);
  EXPECT_EQ(program_key(p, TargetType::cubin, m_opts).status().code(), Code::invalid_argument);
  p.options.back().push_back('\0');
  EXPECT_EQ(compile(p, TargetType::cubin, m_opts).status().code(), Code::invalid_argument);
  Program ptx;
  ptx.code = ".version 8.0\n.target sm_80\n.address_size 64\n";
  ptx.code_type = CodeType::ptx;
  ptx.name_expressions = {"k"};
  EXPECT_EQ(compile(ptx, TargetType::cubin, m_opts).status().code(), Code::invalid_argument);
}

TEST_F(CompileTest, CacheWriteFailureNeverLosesTheCompile) {
  REQUIRE_NVRTC();
  testing::FaultEnv env;
  auto s = FileStore::open({.root = m_tmp.sub("faulty"), .env = &env});
  ASSERT_TRUE(s.ok());
  env.fail(testing::Op::open_create, ENOSPC, 0, /*sticky=*/true);
  const auto before = compile_stats().cache_errors;
  auto r = compile(saxpy_program(salt()), TargetType::cubin, {.cache = s->get(), .state_dir = m_tmp.sub("faulty")});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->code.view().substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(compile_stats().cache_errors, before + 1);
  EXPECT_EQ(*(*s)->count(), 0u);
}

TEST_F(CompileTest, CorruptEntryIsRecompiledNotFatal) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  auto first = compile(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(first.ok());
  const std::string path = m_store->entry_path(first->key);
  std::string bytes = testing::read_all(path);
  bytes[bytes.size() / 2] ^= 0x55;
  testing::write_all(path, bytes);
  auto again = compile(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(again->from_cache);
  EXPECT_EQ(again->code, first->code);
  EXPECT_EQ(m_store->stats().corrupt_dropped, 1u);
  EXPECT_TRUE(compile(p, TargetType::cubin, m_opts)->from_cache);  // repaired by the recompile
}

TEST_F(CompileTest, ThreadsShareOneInFlightCompile) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  const auto before = compile_stats();
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto r = compile(p, TargetType::cubin, m_opts);
      results[t] = r.ok() ? r->code.str() : "error: " + r.status().to_string();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(compile_stats().compiles, before.compiles + 1);
  for (const auto& r : results) EXPECT_EQ(r, results[0]);
  EXPECT_EQ(results[0].substr(0, 4),
            "\x7f"
            "ELF");
}

TEST_F(CompileTest, AHeldKeyLockDelaysACompileByTheTimeoutNeverStopsIt) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  auto key = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  // Another holder of the key's lock that never lets go (a stuck process).
  auto held = LockFile::acquire(Env::posix(), m_opts.state_dir + "/locks", key->hex(), std::chrono::milliseconds(0));
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  CompileOptions o = m_opts;
  o.lock_timeout = std::chrono::milliseconds(50);
  const auto before = compile_stats();
  auto r = compile(p, TargetType::cubin, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->from_cache);
  EXPECT_EQ(compile_stats().lock_waits, before.lock_waits + 1);
  EXPECT_TRUE(compile(p, TargetType::cubin, o)->from_cache);  // and it was stored
}

TEST_F(CompileTest, ACompileServedAfterWaitingForAnotherProcessCountsOneHitAndNoMiss) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  auto key = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  // What the other process will have stored: the same compile's entry,
  // made in a cache of its own.
  auto other = FileStore::open({.root = m_tmp.sub("other")});
  ASSERT_TRUE(other.ok());
  CompileOptions elsewhere = m_opts;
  elsewhere.cache = other->get();
  elsewhere.state_dir = m_tmp.sub("other");
  ASSERT_TRUE(compile(p, TargetType::cubin, elsewhere).ok());
  // That process holds the key's lock while it compiles: this one misses,
  // waits, and finds the entry once the lock is let go.
  auto held = LockFile::acquire(Env::posix(), m_opts.state_dir + "/locks", key->hex(), std::chrono::milliseconds(0));
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  m_store->zero_stats();
  CompileOptions o = m_opts;
  o.lock_timeout = std::chrono::seconds(60);
  std::optional<Result<ObjectCode>> served;
  std::thread waiter([&] { served.emplace(compile(p, TargetType::cubin, o)); });
  const auto before = compile_stats().lock_waits;
  for (int i = 0; i < 2000 && m_store->host_stats().misses == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string to = m_store->entry_path(*key);
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  std::filesystem::copy_file((*other)->entry_path(*key), to + ".part");
  std::filesystem::rename(to + ".part", to);
  held->release();  // let go
  waiter.join();
  ASSERT_TRUE(served && served->ok()) << (served ? served->status().to_string() : "no result");
  EXPECT_TRUE((*served)->from_cache);
  EXPECT_EQ(compile_stats().lock_waits, before + 1);
  const StoreStats st = m_store->host_stats();
  EXPECT_EQ(st.hits, 1u) << "one lookup, served";
  EXPECT_EQ(st.misses, 0u) << "the look before the wait is not the lookup's outcome";
}

TEST_F(CompileTest, EightProcessesCompileAnUncachedKernelExactlyOnce) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  const std::string root = m_tmp.sub("shared");
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const auto before = compile_stats().compiles;  // inherited from the parent
      auto s = FileStore::open({.root = root});
      if (!s.ok()) ::_exit(2);
      auto r = compile(p, TargetType::cubin, {.cache = s->get(), .state_dir = root});
      if (!r.ok()) ::_exit(3);
      testing::write_all(root + "/../out" + std::to_string(i), r->code.view());
      ::_exit(compile_stats().compiles - before == 1 ? 10 : 0);
    }
    pids.push_back(pid);
  }
  int compiled = 0, failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 10)
      ++compiled;
    else if (code != 0)
      ++failed;
  }
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(compiled, 1);
  auto s = FileStore::open({.root = root});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->host_stats().puts, 1u);  // one compile, one store
  const std::string first = testing::read_all(m_tmp.sub("out0"));
  EXPECT_EQ(first.substr(0, 4),
            "\x7f"
            "ELF");
  for (int i = 1; i < 8; ++i) EXPECT_EQ(testing::read_all(m_tmp.sub("out" + std::to_string(i))), first) << i;
}

TEST_F(CompileTest, PtxAndAnLtoIrPairLinkThroughNvJitLink) {
  REQUIRE_NVRTC();
  Program a;
  a.code = "extern \"C\" __device__ float twice(float x) { return 2 * x; } // " + salt();
  a.options = {"-arch=sm_80", "-rdc=true"};
  a.name = "a.cu";
  Program b;
  b.code =
      "extern \"C\" __device__ float twice(float);\n"
      "extern \"C\" __global__ void k(float* x) { x[0] = twice(x[0]); }";
  b.options = a.options;
  b.name = "b.cu";
  auto la = compile(a, TargetType::ltoir, m_opts);
  auto lb = compile(b, TargetType::ltoir, m_opts);
  ASSERT_TRUE(la.ok()) << la.status().to_string();
  ASSERT_TRUE(lb.ok()) << lb.status().to_string();
  Program link;
  link.code = lb->code.str();
  link.code_type = CodeType::ltoir;
  link.link_inputs = {la->code.str()};
  link.options = {"-arch=sm_80"};
  link.name = "link";
  auto linked = compile(link, TargetType::cubin, m_opts);
  ASSERT_TRUE(linked.ok()) << linked.status().to_string();
  EXPECT_EQ(linked->code.view().substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_FALSE(linked->compiler.nvjitlink_version.empty());
  EXPECT_TRUE(compile(link, TargetType::cubin, m_opts)->from_cache);
  // PTX through nvJitLink.
  auto ptx = compile(saxpy_program(salt()), TargetType::ptx, m_opts);
  ASSERT_TRUE(ptx.ok());
  Program from_ptx;
  from_ptx.code = ptx->code.str();
  from_ptx.code_type = CodeType::ptx;
  from_ptx.options = {"-arch", "sm_80"};
  auto cubin = compile(from_ptx, TargetType::cubin, m_opts);
  ASSERT_TRUE(cubin.ok()) << cubin.status().to_string();
  EXPECT_EQ(cubin->code.view().substr(0, 4),
            "\x7f"
            "ELF");
  // An unresolved symbol is a link error with the log.
  Program lonely = link;
  lonely.link_inputs.clear();
  CompileFailure failure;
  auto bad = compile(lonely, TargetType::cubin, m_opts, &failure);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::compile_error);
}

TEST_F(CompileTest, IdentityIsMemoizedOnDisk) {
  REQUIRE_NVRTC();
  ASSERT_TRUE(program_key(saxpy_program(salt()), TargetType::cubin, m_opts).ok());
  std::size_t memos = 0;
  for (const auto& e : fs::directory_iterator(m_tmp.sub("cache") + "/compilers")) {
    const std::string text = testing::read_all(e.path().string());
    EXPECT_NE(text.find("\"fingerprint\""), std::string::npos);
    ++memos;
  }
  EXPECT_GE(memos, 1u);
}

TEST_F(CompileTest, WrongTypedMetadataIsAMissNeverACrash) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  auto key = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(key.ok());
  // Well-formed JSON of the wrong types, as a foreign or hostile writer of a
  // shared tier could leave it.
  for (const char* meta : {R"({"kind":"cubin","log":[]})", R"({"kind":5})", R"({"kind":"cubin","name":{},"log":""})",
                           R"({"kind":"cubin","name":"x","log":"","symbols":[1,2]})"}) {
    std::vector<Artifact> arts;
    arts.push_back({"cubin", Bytes::copy_of("not a cubin")});
    ASSERT_TRUE(m_store->put(*key, Entry(meta, std::move(arts))).ok());
    auto r = compile(p, TargetType::cubin, m_opts);
    ASSERT_TRUE(r.ok()) << meta << ": " << r.status().to_string();
    EXPECT_EQ(r->code.view().substr(0, 4),
              "\x7f"
              "ELF")
        << meta;
  }
}

// The memo of NVRTC's identity (its version and the digest of its file,
// part of every key) is found by the library file's identity as the
// include scan takes it (identity_stat: the mount's unique ID on a file
// system whose times come from an image), inode, size, both times, and
// the boot. A fingerprint planted under that identity is believed (which
// shows the memo is read); under the device number as stat gives it, or
// another boot, it is not.
TEST_F(CompileTest, ALibrarysKeptIdentityHoldsOnlyForItsMountAndItsBoot) {
  REQUIRE_NVRTC();
  const Program p = saxpy_program(salt());
  const auto real = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(real.ok()) << real.status().to_string();
  std::string id;
  for (const auto& e : fs::directory_iterator(m_tmp.sub("cache") + "/compilers")) {
    const auto j = nlohmann::json::parse(testing::read_all(e.path().string()));
    if (j.value("id", "").starts_with("nvrtc|")) id = j["id"];
  }
  ASSERT_FALSE(id.empty()) << "no memo of NVRTC's identity";
  // nvrtc|<path>|<size>|<mtime>|<inode>|<mount>|<ctime>|<epoch>
  std::vector<std::string> f;
  for (std::size_t at = 0;;) {
    const auto bar = id.find('|', at);
    f.push_back(id.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  ASSERT_EQ(f.size(), 8u) << id;
  struct stat st {};
  ASSERT_EQ(::stat(f[1].c_str(), &st), 0) << f[1];
  const std::uint64_t device = st.st_dev;
  EXPECT_NE(f[5], std::to_string(device)) << "the memo names the library's file by its device number as stat gives it";
  const auto joined = [](std::vector<std::string> v) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : "|") + v[i];
    return out;
  };
  struct Case {
    const char* label;
    std::string id;
    bool believed;
  };
  auto by_device = f;
  by_device[5] = std::to_string(device);
  auto other_boot = f;
  other_boot[7] = "boot 00000000-0000-0000-0000-000000000000";
  const std::vector<Case> cases = {{"its own identity", id, true},
                                   {"the device number", joined(by_device), false},
                                   {"another boot", joined(other_boot), false}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string state = m_tmp.sub("state-" + std::to_string(i));
    fs::create_directories(state + "/compilers");
    const Digest256 d = sha256(c.id);
    static constexpr char k_hex[] = "0123456789abcdef";
    std::string name;
    for (std::size_t b = 0; b < 16; ++b) name += {k_hex[d[b] >> 4], k_hex[d[b] & 15]};
    const nlohmann::json planted{{"id", c.id}, {"version", "12.0"}, {"fingerprint", std::string(64, 'a' + i)}};
    testing::write_all(state + "/compilers/" + name + ".json", planted.dump());
    CompileOptions o = m_opts;
    o.state_dir = state;
    const auto k = program_key(p, TargetType::cubin, o);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    EXPECT_EQ(*k != *real, c.believed) << "a library identity kept under " << c.label
                                       << (c.believed ? " was not used" : " was used");
  }
}

TEST_F(CompileTest, WrongTypedCompilerMemoCostsALoadNeverTheProcess) {
  REQUIRE_NVRTC();
  ASSERT_TRUE(program_key(saxpy_program(salt()), TargetType::cubin, m_opts).ok());
  // The same memo file names under another state directory, each holding
  // well-formed JSON of the wrong types.
  const std::string other = m_tmp.sub("other-state");
  fs::create_directories(other + "/compilers");
  int i = 0;
  const char* bad[] = {R"({"id":5})", R"({"id":"x","version":[],"fingerprint":{}})", R"([1,2,3])", R"("text")"};
  for (const auto& e : fs::directory_iterator(m_tmp.sub("cache") + "/compilers")) {
    testing::write_all(other + "/compilers/" + e.path().filename().string(), bad[i++ % 4]);
  }
  ASSERT_GT(i, 0);
  CompileOptions o = m_opts;
  o.state_dir = other;
  auto k = program_key(saxpy_program(salt()), TargetType::cubin, o);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ(*k, *program_key(saxpy_program(salt()), TargetType::cubin, m_opts));
}

// A warm call trusts the library file found before only as far as its own
// stat of it: once that file is gone, the search runs again.
// Runs `fn` in a forked child and returns what it returned. A library the
// child loads stays in the child: this process can still test what happens
// before one is loaded.
std::string in_child(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(120);  // a child stuck after fork fails the test, never hangs it
    const std::string out = fn();
    for (std::size_t done = 0; done < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "the child process did not exit cleanly (status " << status << ")";
    return {};
  }
  return out;
}

bool is_loaded(const std::string& path) {
  void* h = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (h != nullptr) ::dlclose(h);
  return h != nullptr;
}

// Where NVRTC is, found in a child so that this process has not loaded it;
// empty when there is none.
std::string nvrtc_path_unloaded() {
  return in_child([] {
    auto info = compiler_info();
    return info.ok() ? info->nvrtc_path : std::string();
  });
}

// Points PROGCACHE_NVRTC at a link to `nvrtc` in `dir` and returns the
// link; then has a forked child key `p`, so the identity memo is on disk and
// this process can key it without loading the library. The child's key is
// returned in `*child_key`.
std::string link_nvrtc_and_key_in_child(const std::string& nvrtc, const std::string& dir, const Program& p,
                                        const CompileOptions& o, std::string* child_key) {
  const std::string link = dir + "/libnvrtc.so";
  fs::create_directories(dir);
  fs::create_symlink(nvrtc, link);
  ::setenv("PROGCACHE_NVRTC", link.c_str(), 1);
  *child_key = in_child([&] {
    auto k = program_key(p, TargetType::cubin, o);
    return k.ok() ? k->hex() : std::string();
  });
  return link;
}

TEST_F(CompileTest, ACompilerFileGoneSinceItWasFoundIsSearchedForAgain) {
  const std::string nvrtc = nvrtc_path_unloaded();
  if (nvrtc.empty()) GTEST_SKIP() << "no NVRTC";
  // What follows is about a process that has not loaded it (ctest runs each
  // test in a process of its own; a run of the whole binary may not).
  if (is_loaded(nvrtc)) GTEST_SKIP() << "NVRTC is already loaded in this process; run this test on its own";
  const Program p = saxpy_program(salt());
  // The identity memo is written by a process that loads the library, so
  // this one reads it and never loads.
  std::string in_other;
  const std::string link = link_nvrtc_and_key_in_child(nvrtc, m_tmp.sub("lib"), p, m_opts, &in_other);
  auto first = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->hex(), in_other);
  ASSERT_FALSE(is_loaded(link));
  fs::remove(link);
  auto gone = program_key(p, TargetType::cubin, m_opts);
  // Neither the identity of the file found before nor a stat error of it:
  // the search's own verdict, "not found", which keys never match.
  ASSERT_TRUE(gone.ok()) << gone.status().to_string();
  EXPECT_NE(*gone, *first);
  EXPECT_FALSE(compile(p, TargetType::cubin, m_opts).ok());
  fs::create_symlink(nvrtc, link);
  auto back = program_key(p, TargetType::cubin, m_opts);
  ::unsetenv("PROGCACHE_NVRTC");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, *first);
}

// The memo files of a state directory's compilers/ (the library identities
// written down so that warm processes never hash the library).
std::size_t compiler_memos(const std::string& state) {
  std::error_code ec;
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(state + "/compilers", ec)) n += e.path().extension() == ".json" ? 1 : 0;
  return n;
}

// An application that loaded NVRTC before progcache (CuPy, cuda-python):
// the library it loaded is told by its pages. The same file as the one
// found: its identity is written down once, and later processes of that
// application key without hashing the 100 MB library again. A file put at
// that path since the application loaded the library is not the compiler:
// nothing is written down for it.
TEST_F(CompileTest, AnNvrtcTheApplicationLoadedFirstIsKnownByItsPagesAndRemembered) {
  const std::string nvrtc = nvrtc_path_unloaded();
  if (nvrtc.empty()) GTEST_SKIP() << "no NVRTC";
  const Program p = saxpy_program(salt());
  const std::string same_state = m_tmp.sub("state-same");
  fs::create_directories(same_state);
  const std::string out = in_child([&] {
    if (::dlopen(nvrtc.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) return std::string("dlopen failed");
    CompileOptions o = m_opts;
    o.state_dir = same_state;
    auto k = program_key(p, TargetType::cubin, o);
    return k.ok() ? std::string("ok") : k.status().to_string();
  });
  EXPECT_EQ(out, "ok");
  EXPECT_EQ(compiler_memos(same_state), 1u) << "the application's NVRTC, the file found, was not written down";

  // A copy the application loads, then replaced at its path by another
  // copy (a new inode) before progcache looks.
  const std::string dir = m_tmp.sub("copied");
  fs::create_directories(dir);
  const std::string copy = dir + "/libnvrtc.so.13";
  fs::copy_file(nvrtc, copy);
  const std::string replaced_state = m_tmp.sub("state-replaced");
  fs::create_directories(replaced_state);
  const std::string out2 = in_child([&] {
    if (::dlopen(copy.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) return std::string("dlopen failed");
    fs::copy_file(nvrtc, copy + ".new");
    fs::rename(copy + ".new", copy);
    ::setenv("PROGCACHE_NVRTC", copy.c_str(), 1);
    CompileOptions o = m_opts;
    o.state_dir = replaced_state;
    auto k = program_key(p, TargetType::cubin, o);
    return k.ok() ? std::string("ok") : k.status().to_string();
  });
  EXPECT_EQ(out2, "ok");
  EXPECT_EQ(compiler_memos(replaced_state), 0u)
      << "a file replaced since the application loaded the library was written down as the compiler";
}

// An upgrade installed over the library while a process runs changes the
// file, not the library the process loaded: its compiles are still the old
// library's, and must be keyed as such, never under the new file's
// fingerprint where processes running the new library would find them.
TEST_F(CompileTest, ALibraryReplacedAfterItWasLoadedStaysTheCompilerOfThisProcess) {
  REQUIRE_NVRTC();
  auto info = compiler_info();
  ASSERT_TRUE(info.ok());
  const std::string link = m_tmp.sub("lib/libnvrtc.so");
  fs::create_directories(fs::path(link).parent_path());
  fs::create_symlink(info->nvrtc_path, link);
  ::setenv("PROGCACHE_NVRTC", link.c_str(), 1);
  const Program a = saxpy_program(salt() + "-a");
  auto first = compile(a, TargetType::cubin, m_opts);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const std::string loaded = first->compiler.nvrtc_fingerprint;
  testing::write_all(m_tmp.sub("lib/new"), "another build of the library");
  fs::rename(m_tmp.sub("lib/new"), link);
  const Program b = saxpy_program(salt() + "-b");
  auto second = compile(b, TargetType::cubin, m_opts);
  auto key_b = program_key(b, TargetType::cubin, m_opts);
  auto again = compile(a, TargetType::cubin, m_opts);
  ::unsetenv("PROGCACHE_NVRTC");
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_FALSE(second->from_cache);
  EXPECT_EQ(second->compiler.nvrtc_fingerprint, loaded);
  ASSERT_TRUE(key_b.ok());
  EXPECT_EQ(*key_b, second->key);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->key, first->key);
}

// A cold process keys a program by the library its identity memo names,
// without loading it; the compile loads it later. A file replaced in
// between (here while the compile waits for another process's key lock)
// compiles under a key naming the old file: its output is returned with the
// identity of what ran, and never stored.
TEST_F(CompileTest, AResultFromAnotherLibraryThanItsKeyNamesIsNeverStored) {
  const std::string nvrtc = nvrtc_path_unloaded();
  if (nvrtc.empty()) GTEST_SKIP() << "no NVRTC";
  if (is_loaded(nvrtc)) GTEST_SKIP() << "NVRTC is already loaded in this process; run this test on its own";
  std::string other;
  for (const auto& e : fs::directory_iterator(fs::path(nvrtc).parent_path())) {
    const std::string n = e.path().filename().string();
    if (n.starts_with("libnvrtc.alt.so.") && fs::is_regular_file(e.path())) other = e.path().string();
  }
  if (other.empty()) GTEST_SKIP() << "no second NVRTC build (libnvrtc.alt.so.*) beside " << nvrtc;
  const Program p = saxpy_program(salt());
  std::string in_other;
  const std::string link = link_nvrtc_and_key_in_child(nvrtc, m_tmp.sub("lib"), p, m_opts, &in_other);
  auto key = program_key(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  ASSERT_EQ(key->hex(), in_other);
  ASSERT_FALSE(is_loaded(link));
  auto held = LockFile::acquire(Env::posix(), m_opts.state_dir + "/locks", key->hex(), std::chrono::milliseconds(0));
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  CompileOptions o = m_opts;
  o.lock_timeout = std::chrono::seconds(30);
  const auto before = compile_stats();
  Result<ObjectCode> r = internal_error("not run");
  std::thread compiling([&] { r = compile(p, TargetType::cubin, o); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  fs::create_symlink(other, m_tmp.sub("lib/new"));
  fs::rename(m_tmp.sub("lib/new"), link);  // an upgrade lands while the compile waits
  held->release();
  compiling.join();
  ::unsetenv("PROGCACHE_NVRTC");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->from_cache);
  EXPECT_EQ(r->key, *key);
  auto known = compiler_info();  // the library the key named, as another process sees it
  ASSERT_TRUE(known.ok());
  EXPECT_NE(r->compiler.nvrtc_fingerprint, known->identity.nvrtc_fingerprint);
  EXPECT_EQ(compile_stats().unstable_inputs, before.unstable_inputs + 1);
  auto stored = m_store->get(*key);
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->has_value()) << "stored under a key that names another library";
}

// Loaded, then replaced before any compile asked who it was, with no memo
// of its fingerprint for this state directory: its bytes cannot be read by
// path any more. Its compiles get keys of their own, never the new file's.
TEST_F(CompileTest, ALibraryReplacedBeforeItsFingerprintWasTakenGetsKeysOfItsOwn) {
  const std::string nvrtc = nvrtc_path_unloaded();
  if (nvrtc.empty()) GTEST_SKIP() << "no NVRTC";
  if (is_loaded(nvrtc)) GTEST_SKIP() << "NVRTC is already loaded in this process; run this test on its own";
  const std::string link = m_tmp.sub("lib/libnvrtc.so");
  fs::create_directories(fs::path(link).parent_path());
  fs::create_symlink(nvrtc, link);
  ::setenv("PROGCACHE_NVRTC", link.c_str(), 1);
  // Loads the library, remembering its fingerprint under another state
  // directory than the compiles below use.
  auto info = compiler_info({.state_dir = m_tmp.sub("other-state")});
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  ASSERT_TRUE(is_loaded(link));
  testing::write_all(m_tmp.sub("lib/new"), "another build of the library");
  fs::rename(m_tmp.sub("lib/new"), link);
  const Program p = saxpy_program(salt());
  auto r = compile(p, TargetType::cubin, m_opts);
  auto again = compile(p, TargetType::cubin, m_opts);
  ::unsetenv("PROGCACHE_NVRTC");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->compiler.nvrtc_fingerprint, info->identity.nvrtc_fingerprint);
  EXPECT_NE(r->compiler.nvrtc_fingerprint, digest_hex(sha256("another build of the library")));
  EXPECT_TRUE(r->compiler.nvrtc_fingerprint.starts_with("loaded nvrtc ")) << r->compiler.nvrtc_fingerprint;
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache);
}

TEST(CompileLibraries, MissingLibraryListsWhereItLooked) {
  ::setenv("PROGCACHE_NVJITLINK", "/nonexistent/libnvJitLink.so.13", 1);
  Program p;
  p.code = ".version 8.0\n.target sm_80\n.address_size 64\n";
  p.code_type = CodeType::ptx;
  p.options = {"-arch=sm_80"};
  auto r = compile(p, TargetType::cubin);
  // A key without the library exists (cuda.core's contract) and never
  // equals the key made with it.
  auto key_without = program_key(p, TargetType::cubin);
  ::unsetenv("PROGCACHE_NVJITLINK");
  ASSERT_TRUE(key_without.ok()) << key_without.status().to_string();
  if (auto key_with = program_key(p, TargetType::cubin); key_with.ok()) {
    EXPECT_NE(*key_with, *key_without);
  }
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::unavailable);
  EXPECT_NE(r.status().message().find("/nonexistent/libnvJitLink.so.13"), std::string::npos);
  EXPECT_NE(r.status().message().find("PROGCACHE_NVJITLINK"), std::string::npos);
  const auto paths = library_search_paths("nvrtc");
  bool toolkit = false, wheels_or_system = false;
  for (const auto& s : paths) {
    toolkit |= s.starts_with("/usr/local/cuda/lib64/");
    wheels_or_system |= s.starts_with("/usr/lib");
  }
  EXPECT_TRUE(toolkit);
  EXPECT_TRUE(wheels_or_system);
}

TEST(CompileLibraries, NvvmAndPtxToPtxAreKeyedButNotCompiled) {
  Program nvvm;
  nvvm.code = "nvvm ir";
  nvvm.code_type = CodeType::nvvm;
  EXPECT_TRUE(program_key(nvvm, TargetType::ptx).ok());
  auto r = compile(nvvm, TargetType::ptx);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("libNVVM"), std::string::npos);
  Program ptx;
  ptx.code = ".version 8.0\n.target sm_80\n.address_size 64\n";
  ptx.code_type = CodeType::ptx;
  ptx.options = {"-arch=sm_80"};
  EXPECT_TRUE(program_key(ptx, TargetType::ptx).ok());
  auto r2 = compile(ptx, TargetType::ptx);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("PTX compiles to cubin"), std::string::npos);
}

TEST(FingerprintDirectories, AnyHeaderChangeChangesTheDigest) {
  testing::TempDir tmp;
  fs::create_directories(tmp.sub("inc/sub"));
  testing::write_all(tmp.sub("inc/a.h"), "int a;");
  testing::write_all(tmp.sub("inc/sub/b.h"), "int b;");
  const auto d1 = fingerprint_directories({tmp.sub("inc")});
  ASSERT_TRUE(d1.ok());
  EXPECT_EQ(*fingerprint_directories({tmp.sub("inc")}), *d1);
  testing::write_all(tmp.sub("inc/sub/b.h"), "int b2;");  // edited (size changes)
  const auto d2 = fingerprint_directories({tmp.sub("inc")});
  EXPECT_NE(*d2, *d1);
  testing::write_all(tmp.sub("inc/c.h"), "");  // added
  EXPECT_NE(*fingerprint_directories({tmp.sub("inc")}), *d2);
  EXPECT_FALSE(fingerprint_directories({tmp.sub("missing")}).ok());
}

// ------------------------------------------------------------ loader (GPU)

TEST_F(CompileTest, LoadsTheCachedCubinAndLaunchesAKernel) {
  REQUIRE_NVRTC();
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << "no GPU: " << why;
  // A cubin loads only on the architecture it was built for (sm_80 code
  // does not load on sm_90), so build for the device at hand.
  auto arch = device_arch();
  ASSERT_TRUE(arch.ok()) << arch.status().to_string();
  Program p = saxpy_program(salt());
  p.options[0] = "-arch=" + *arch;
  ASSERT_TRUE(compile(p, TargetType::cubin, m_opts).ok());
  auto cached = compile(p, TargetType::cubin, m_opts);
  ASSERT_TRUE(cached.ok() && cached->from_cache);
  auto kernel = get_kernel(*cached, "saxpy<float>");
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  auto again = get_kernel(*cached, "saxpy<float>");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->function, kernel->function);  // module cached per context

  // Launch it through the driver API and check y = 2*x + y.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  using Alloc = int (*)(unsigned long long*, std::size_t);
  using HtoD = int (*)(unsigned long long, const void*, std::size_t);
  using DtoH = int (*)(void*, unsigned long long, std::size_t);
  using Launch =
      int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
  using Sync = int (*)();
  using Free = int (*)(unsigned long long);
  auto alloc = reinterpret_cast<Alloc>(::dlsym(lib, "cuMemAlloc_v2"));
  auto htod = reinterpret_cast<HtoD>(::dlsym(lib, "cuMemcpyHtoD_v2"));
  auto dtoh = reinterpret_cast<DtoH>(::dlsym(lib, "cuMemcpyDtoH_v2"));
  auto launch = reinterpret_cast<Launch>(::dlsym(lib, "cuLaunchKernel"));
  auto sync = reinterpret_cast<Sync>(::dlsym(lib, "cuCtxSynchronize"));
  auto mfree = reinterpret_cast<Free>(::dlsym(lib, "cuMemFree_v2"));
  const int n = 1000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  unsigned long long dx = 0, dy = 0;
  ASSERT_EQ(alloc(&dx, n * sizeof(float)), 0);
  ASSERT_EQ(alloc(&dy, n * sizeof(float)), 0);
  ASSERT_EQ(htod(dx, x.data(), n * sizeof(float)), 0);
  ASSERT_EQ(htod(dy, y.data(), n * sizeof(float)), 0);
  float a = 2.0f;
  int nn = n;
  void* args[] = {&a, &dx, &dy, &nn};
  ASSERT_EQ(launch(kernel->function, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr), 0);
  ASSERT_EQ(sync(), 0);
  ASSERT_EQ(dtoh(y.data(), dy, n * sizeof(float)), 0);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 2.0f * i + 1.0f) << i;
  mfree(dx);
  mfree(dy);
}

TEST(Loader, ReportsUnavailableWithoutAGpu) {
  std::string why;
  if (gpu_available(&why)) GTEST_SKIP() << "a GPU is present; this checks the no-GPU path";
  ObjectCode oc;
  oc.code = Bytes::copy_of(
      "\x7f"
      "ELF");
  oc.kind = TargetType::cubin;
  auto k = get_kernel(oc, "k");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), Code::unavailable);
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(device_arch().status().code(), Code::unavailable);
}

}  // namespace
}  // namespace progcache
