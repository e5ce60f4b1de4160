// Loading object code into the current CUDA context. Needs a GPU and its
// driver; everywhere else the functions answer unavailable.
#include <map>
#include <mutex>
#include <string>

#include "cuda_libs.h"
#include "progcache/compile.h"
#include "progcache/hash.h"

namespace progcache {

namespace {

std::string driver_error(const cuda::Driver* d, cuda::CUresult r, const char* what) {
  const char* s = nullptr;
  d->get_error_string(r, &s);
  return std::string(what) + ": " + (s != nullptr ? s : "CUDA error " + std::to_string(r));
}

Result<const cuda::Driver*> initialised_driver() {
  PROGCACHE_ASSIGN_OR_RETURN(const cuda::Driver* d, cuda::driver());
  static std::once_flag once;
  static cuda::CUresult init_rc = 0;
  std::call_once(once, [&] { init_rc = d->init(0); });
  if (init_rc != 0) return unavailable(driver_error(d, init_rc, "cuInit"));
  return d;
}

// The current context, or device 0's primary context made current.
Result<cuda::CUcontext> current_context(const cuda::Driver* d) {
  cuda::CUcontext ctx = nullptr;
  if (auto r = d->ctx_get_current(&ctx); r != 0) return unavailable(driver_error(d, r, "cuCtxGetCurrent"));
  if (ctx != nullptr) return ctx;
  cuda::CUdevice dev = 0;
  if (auto r = d->device_get(&dev, 0); r != 0) return unavailable(driver_error(d, r, "cuDeviceGet"));
  if (auto r = d->primary_ctx_retain(&ctx, dev); r != 0) {
    return unavailable(driver_error(d, r, "cuDevicePrimaryCtxRetain"));
  }
  if (auto r = d->ctx_set_current(ctx); r != 0) return unavailable(driver_error(d, r, "cuCtxSetCurrent"));
  return ctx;
}

}  // namespace

bool gpu_available(std::string* why_not) {
  auto d = initialised_driver();
  if (!d.ok()) {
    if (why_not != nullptr) *why_not = d.status().message();
    return false;
  }
  int n = 0;
  if ((*d)->device_get_count(&n) != 0 || n == 0) {
    if (why_not != nullptr) *why_not = "no CUDA device";
    return false;
  }
  return true;
}

Result<std::string> device_arch(int ordinal) {
  PROGCACHE_ASSIGN_OR_RETURN(const cuda::Driver* d, initialised_driver());
  cuda::CUdevice dev = 0;
  if (auto r = d->device_get(&dev, ordinal); r != 0) return unavailable(driver_error(d, r, "cuDeviceGet"));
  constexpr int k_cc_major = 75, k_cc_minor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}
  int major = 0, minor = 0;
  if (auto r = d->device_get_attribute(&major, k_cc_major, dev); r != 0) {
    return unavailable(driver_error(d, r, "cuDeviceGetAttribute"));
  }
  if (auto r = d->device_get_attribute(&minor, k_cc_minor, dev); r != 0) {
    return unavailable(driver_error(d, r, "cuDeviceGetAttribute"));
  }
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

Result<Kernel> get_kernel(const ObjectCode& code, std::string_view name_expression) {
  if (code.kind != TargetType::cubin && code.kind != TargetType::ptx) {
    return invalid_argument("only cubin and PTX can be loaded, not " + std::string(target_type_name(code.kind)));
  }
  PROGCACHE_ASSIGN_OR_RETURN(const cuda::Driver* d, initialised_driver());
  PROGCACHE_ASSIGN_OR_RETURN(cuda::CUcontext ctx, current_context(d));
  // Modules are cached per (context, code digest): loading the same object
  // twice in a context returns the same module.
  static std::mutex mu;
  static std::map<std::pair<cuda::CUcontext, std::string>, cuda::CUmodule> modules;
  const Digest256 digest = sha256(code.code.view());
  const std::string digest_key(as_view(digest));
  cuda::CUmodule mod = nullptr;
  {
    std::lock_guard lock(mu);
    auto it = modules.find({ctx, digest_key});
    if (it != modules.end()) {
      mod = it->second;
    } else {
      std::string image = code.code.str();
      if (code.kind == TargetType::ptx && (image.empty() || image.back() != '\0')) image.push_back('\0');
      if (auto r = d->module_load_data(&mod, image.data()); r != 0) {
        return Status(Code::invalid_argument, driver_error(d, r, "cuModuleLoadData"));
      }
      modules.emplace(std::make_pair(ctx, digest_key), mod);
    }
  }
  Kernel k;
  auto it = code.symbol_mapping.find(std::string(name_expression));
  k.lowered_name = it != code.symbol_mapping.end() ? it->second : std::string(name_expression);
  cuda::CUfunction fn = nullptr;
  if (auto r = d->module_get_function(&fn, mod, k.lowered_name.c_str()); r != 0) {
    return not_found(driver_error(d, r, ("kernel '" + k.lowered_name + "'").c_str()));
  }
  k.function = fn;
  return k;
}

}  // namespace progcache
