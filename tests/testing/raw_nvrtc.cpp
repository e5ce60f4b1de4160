#include "testing/raw_nvrtc.h"

#include <dlfcn.h>

#include "progcache/compile.h"

namespace progcache::testing {

namespace {

using Program = void*;
using Create = int (*)(Program*, const char*, const char*, int, const char* const*, const char* const*);
using CompileFn = int (*)(Program, int, const char* const*);
using Size = int (*)(Program, std::size_t*);
using Get = int (*)(Program, char*);
using Destroy = int (*)(Program*);

}  // namespace

std::optional<RawCompile> raw_nvrtc_ptx(const std::string& code, const std::string& name,
                                        const std::vector<std::string>& options) {
  auto info = compiler_info();
  if (!info.ok() || info->nvrtc_path.empty()) return std::nullopt;
  void* lib = ::dlopen(info->nvrtc_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  const auto create = reinterpret_cast<Create>(::dlsym(lib, "nvrtcCreateProgram"));
  const auto compile = reinterpret_cast<CompileFn>(::dlsym(lib, "nvrtcCompileProgram"));
  const auto ptx_size = reinterpret_cast<Size>(::dlsym(lib, "nvrtcGetPTXSize"));
  const auto ptx = reinterpret_cast<Get>(::dlsym(lib, "nvrtcGetPTX"));
  const auto log_size = reinterpret_cast<Size>(::dlsym(lib, "nvrtcGetProgramLogSize"));
  const auto log = reinterpret_cast<Get>(::dlsym(lib, "nvrtcGetProgramLog"));
  const auto destroy = reinterpret_cast<Destroy>(::dlsym(lib, "nvrtcDestroyProgram"));
  if (!create || !compile || !ptx_size || !ptx || !log_size || !log || !destroy) return std::nullopt;
  Program prog = nullptr;
  if (create(&prog, code.c_str(), name.c_str(), 0, nullptr, nullptr) != 0) return std::nullopt;
  std::vector<const char*> argv;
  for (const auto& o : options) argv.push_back(o.c_str());
  RawCompile out;
  out.ok = compile(prog, static_cast<int>(argv.size()), argv.data()) == 0;
  std::size_t n = 0;
  if (log_size(prog, &n) == 0 && n > 0) {
    out.log.resize(n);
    log(prog, out.log.data());
    out.log.resize(n - 1);
  }
  if (out.ok && ptx_size(prog, &n) == 0 && n > 0) {
    out.ptx.resize(n);  // with its terminating NUL, as NVRTC gives it
    ptx(prog, out.ptx.data());
  }
  destroy(&prog);
  return out;
}

}  // namespace progcache::testing
