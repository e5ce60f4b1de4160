// Per example kernel: a cold compile (NVRTC / nvJitLink every time) against a
// warm hit through compile() from the memory tier and from the disk tier.
// Kernels come from examples/kernels/manifest.json. Link jobs are measured
// by the main job, not here.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compile/scan_files.h"
#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "progcache/memory_store.h"

namespace pc = progcache;
namespace fs = std::filesystem;

namespace {

std::string read(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string cuda_root() {
  for (const char* v : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* s = std::getenv(v); s != nullptr && *s != '\0') return s;
  }
  return "/usr/local/cuda";
}

// Builds the Program a manifest job describes (single-input jobs only).
std::optional<pc::Program> program_of(const nlohmann::json& job, const std::string& arch) {
  if (job["inputs"].size() != 1) return std::nullopt;
  const std::string file = job["inputs"][0];
  pc::Program p;
  p.code = read(std::string(PROGCACHE_EXAMPLES_DIR) + "/" + file);
  p.code_type = file.ends_with(".ptx") ? pc::CodeType::ptx : pc::CodeType::cxx;
  p.name = file;
  p.options = {"-arch=" + arch};
  std::vector<std::string> includes;
  const auto& args = job["args"];
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--name-expr") {
      p.name_expressions.push_back(args[++i]);
    } else if (a == "-I") {
      std::string dir = args[++i];
      dir.replace(dir.find("{cuda}"), 6, cuda_root());
      includes.push_back(dir);
      p.options.push_back("-I" + dir);
    } else {
      p.options.push_back(a);
    }
  }
  if (!includes.empty()) p.extra_digest = *pc::fingerprint_directories(includes);
  return p;
}

void register_all() {
  const auto manifest = nlohmann::json::parse(read(std::string(PROGCACHE_EXAMPLES_DIR) + "/manifest.json"));
  const std::string arch = manifest["arch"];
  static std::string state = "/tmp/progcache-compile-bench-" + std::to_string(::getpid());
  for (const auto& job : manifest["jobs"]) {
    auto prog = program_of(job, arch);
    if (!prog) continue;
    const std::string name = prog->name;
    benchmark::RegisterBenchmark(("cold/" + name).c_str(),
                                 [p = *prog](benchmark::State& st) {
                                   pc::CompileOptions o{.state_dir = state};
                                   for (auto _ : st) {
                                     auto r = pc::compile(p, pc::TargetType::cubin, o);
                                     if (!r.ok()) st.SkipWithError(r.status().to_string().c_str());
                                   }
                                 })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
    benchmark::RegisterBenchmark(("warm_memory/" + name).c_str(), [p = *prog](benchmark::State& st) {
      auto mem = std::move(*pc::make_memory_store());
      pc::CompileOptions o{.cache = mem.get(), .state_dir = state};
      pc::compile(p, pc::TargetType::cubin, o).status().ignore();
      for (auto _ : st) {
        auto r = pc::compile(p, pc::TargetType::cubin, o);
        if (!r.ok() || !r->from_cache) st.SkipWithError("not a hit");
      }
    })->Unit(benchmark::kMicrosecond);
    // The floor of a warm memory hit: the store's own get of the entry.
    benchmark::RegisterBenchmark(("memory_get/" + name).c_str(), [p = *prog](benchmark::State& st) {
      auto mem = std::move(*pc::make_memory_store());
      pc::CompileOptions o{.cache = mem.get(), .state_dir = state};
      auto r = pc::compile(p, pc::TargetType::cubin, o);
      if (!r.ok()) {
        st.SkipWithError(r.status().to_string().c_str());
        return;
      }
      for (auto _ : st) {
        auto got = mem->get(r->key);
        if (!got.ok() || !got->has_value()) st.SkipWithError("not a hit");
        benchmark::DoNotOptimize(got);
      }
    })->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("warm_disk/" + name).c_str(), [p = *prog](benchmark::State& st) {
      auto disk = std::move(*pc::FileStore::open({.root = state + "/disk"}));
      pc::CompileOptions o{.cache = disk.get(), .state_dir = state};
      pc::compile(p, pc::TargetType::cubin, o).status().ignore();
      for (auto _ : st) {
        auto r = pc::compile(p, pc::TargetType::cubin, o);
        if (!r.ok() || !r->from_cache) st.SkipWithError("not a hit");
      }
    })->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

// The stat a manifest check makes per path (docs/compile.md, "Stat
// identities"): identity_stat (statx, naming the mount) against the plain
// fstatat it replaced, on one toolkit header; and the credentials a
// manifest's name holds.
void register_stat() {
  const std::string header = cuda_root() + "/include/cuda.h";
  benchmark::RegisterBenchmark("stat/fstatat", [header](benchmark::State& st) {
    struct stat s {};
    for (auto _ : st) benchmark::DoNotOptimize(::fstatat(AT_FDCWD, header.c_str(), &s, 0));
  });
  benchmark::RegisterBenchmark("stat/identity_stat", [header](benchmark::State& st) {
    struct stat s {};
    for (auto _ : st) benchmark::DoNotOptimize(pc::detail::identity_stat(header, s));
  });
  // What a warm lookup of a program with headers adds to name its manifest
  // by the credentials (docs/compile.md, "Stat identities").
  benchmark::RegisterBenchmark("stat/credentials_id", [](benchmark::State& st) {
    for (auto _ : st) benchmark::DoNotOptimize(pc::detail::credentials_id());
  });
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_stat();
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
