#include "cuda_libs.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "progcache/compile.h"
#include "progcache/config.h"
#include "progcache/env.h"
#include "progcache/hash.h"
#include "scan_files.h"

namespace progcache::cuda {

namespace {

struct LibrarySpec {
  std::string_view name;  // "nvrtc"; its override variable is config.h's library_override_variable
  std::vector<std::string_view> files;
  std::vector<std::string_view> wheel_dirs;  // under site-packages/nvidia/
};

const LibrarySpec& spec_of(std::string_view library) {
  static const LibrarySpec k_nvrtc{
      "nvrtc", {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, {"cu13/lib", "cuda_nvrtc/lib"}};
  static const LibrarySpec k_jit{
      "nvJitLink", {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"}, {"cu13/lib", "nvjitlink/lib"}};
  static const LibrarySpec k_cuda{"cuda", {"libcuda.so.1", "libcuda.so"}, {}};
  // libNVVM is only fingerprinted (for NVVM IR keys), never loaded.
  static const LibrarySpec k_nvvm{"nvvm", {"libnvvm.so.4", "libnvvm.so"}, {"cu13/nvvm/lib64", "cuda_nvcc/nvvm/lib64"}};
  if (library == "nvrtc") return k_nvrtc;
  if (library == "nvJitLink") return k_jit;
  if (library == "nvvm") return k_nvvm;
  return k_cuda;
}

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The files prefer_library() named, by library.
struct Preferred {
  std::mutex mu;
  std::map<std::string, std::string, std::less<>> paths;  // under mu
};
Preferred& preferred() {
  static auto* p = new Preferred();  // never destroyed: read until exit
  return *p;
}
std::string preferred_path(std::string_view library) {
  Preferred& p = preferred();
  std::lock_guard lock(p.mu);
  auto it = p.paths.find(library);
  return it != p.paths.end() ? it->second : std::string();
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The site-packages directory of the environment this code was installed
// into, if any: the Python module's (site-packages/progcache/_core*.so) or,
// for the command pip puts in <prefix>/bin, <prefix>/lib/python3*/site-packages.
// So an environment's NVIDIA wheels are found whether or not it is activated
// (no VIRTUAL_ENV), as they are when it is.
std::vector<std::string> own_site_packages() {
  std::vector<std::string> files;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&own_site_packages), &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] == '/') {
    files.emplace_back(info.dli_fname);
  }
  files.emplace_back("/proc/self/exe");
  std::vector<std::string> roots;
  for (const auto& f : files) {
    char* resolved = ::realpath(f.c_str(), nullptr);
    if (resolved == nullptr) continue;
    const std::string path = resolved;
    std::free(resolved);  // NOLINT(cppcoreguidelines-no-malloc): realpath's buffer
    bool in_site = false;
    for (std::string_view dir : {"/site-packages/", "/dist-packages/"}) {
      if (auto at = path.rfind(dir); at != std::string::npos) {
        roots.push_back(path.substr(0, at + dir.size() - 1));
        in_site = true;
        break;
      }
    }
    const auto slash = path.rfind('/');
    const std::string dir = path.substr(0, slash);
    if (!in_site && dir.size() > 4 && dir.ends_with("/bin")) {
      roots.push_back(dir.substr(0, dir.size() - 4) + "/lib/python3*/site-packages");
    }
  }
  return roots;
}

// site-packages directories where pip puts NVIDIA's wheels.
std::vector<std::string> site_packages() {
  std::vector<std::string> roots = own_site_packages();
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (auto v = getenv_str(var); !v.empty()) roots.push_back(v + "/lib/python3*/site-packages");
  }
  std::stringstream pp(getenv_str("PYTHONPATH"));
  for (std::string item; std::getline(pp, item, ':');) {
    if (!item.empty()) roots.push_back(item);
  }
  if (auto home = getenv_str("HOME"); !home.empty()) roots.push_back(home + "/.local/lib/python3*/site-packages");
  for (const char* p : {"/usr/local/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
                        "/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages"}) {
    roots.emplace_back(p);
  }
  return roots;
}

}  // namespace

}  // namespace progcache::cuda

namespace progcache {

void prefer_library(std::string_view library, std::string path) {
  cuda::Preferred& p = cuda::preferred();
  std::lock_guard lock(p.mu);
  if (path.empty()) {
    p.paths.erase(std::string(library));
  } else {
    p.paths[std::string(library)] = std::move(path);
  }
}

std::vector<std::string> library_search_paths(std::string_view library) {
  const auto& spec = cuda::spec_of(library);
  std::vector<std::string> dirs;
  if (auto v = cuda::getenv_str(std::string(library_override_variable(spec.name)).c_str()); !v.empty()) return {v};
  if (auto v = cuda::preferred_path(library); !v.empty()) return {v};
  // libNVVM sits in the toolkit's nvvm/ directory, not beside libnvrtc.
  const std::string nvvm_dir = library == "nvvm" ? "/nvvm" : "";
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = cuda::getenv_str(var); !v.empty()) {
      dirs.push_back(v + nvvm_dir + "/lib64");
      dirs.push_back(v + nvvm_dir + "/lib");
    }
  }
  if (library == "cuda") {
    // The driver comes with the GPU driver install, not the toolkit.
    for (const char* d :
         {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"}) {
      dirs.emplace_back(d);
    }
  } else {
    dirs.emplace_back("/usr/local/cuda" + nvvm_dir + "/lib64");
  }
  std::stringstream ld(cuda::getenv_str("LD_LIBRARY_PATH"));
  for (std::string item; std::getline(ld, item, ':');) {
    if (!item.empty()) dirs.push_back(item);
  }
  for (const auto& root : cuda::site_packages()) {
    for (auto sub : spec.wheel_dirs) {
      const std::string pattern = root + "/nvidia/" + std::string(sub);
      glob_t g{};
      if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (std::size_t i = 0; i < g.gl_pathc; ++i) dirs.emplace_back(g.gl_pathv[i]);
      }
      ::globfree(&g);
    }
  }
  if (library != "cuda") {
    for (const char* d : {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"}) dirs.emplace_back(d);
  }
  std::vector<std::string> out;
  for (const auto& d : dirs) {
    for (auto f : spec.files) out.push_back(join_path(d, f));
  }
  return out;
}

}  // namespace progcache

namespace progcache::cuda {

namespace {

// The search (several stats and globs of site-packages) is memoized per
// process, keyed by every variable that steers it.
struct FoundMemo {
  std::mutex mu;
  std::map<std::string, std::string> paths;  // under mu
};
FoundMemo& found_memo() {
  static FoundMemo memo;
  return memo;
}

std::string found_key(std::string_view library) {
  std::string key(library);
  const std::string override_var(library_override_variable(spec_of(library).name));
  for (const char* var : {override_var.c_str(), "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV",
                          "CONDA_PREFIX", "PYTHONPATH"}) {
    key += '\0';
    key += getenv_str(var);
  }
  key += '\0';
  key += preferred_path(library);
  return key;
}

}  // namespace

std::optional<std::string> located_before(std::string_view library) {
  const std::string memo_key = found_key(library);
  FoundMemo& memo = found_memo();
  std::lock_guard lock(memo.mu);
  if (auto it = memo.paths.find(memo_key); it != memo.paths.end()) return it->second;
  return std::nullopt;
}

Result<std::string> locate(std::string_view library) {
  const auto& spec = spec_of(library);
  // A memo hit re-checks only that the file is still there.
  const std::string memo_key = found_key(library);
  FoundMemo& memo = found_memo();
  {
    std::lock_guard lock(memo.mu);
    if (auto it = memo.paths.find(memo_key); it != memo.paths.end() && is_file(it->second)) return it->second;
  }
  const auto candidates = library_search_paths(library);
  for (const auto& c : candidates) {
    if (is_file(c)) {
      std::lock_guard lock(memo.mu);
      memo.paths[memo_key] = c;
      return c;
    }
  }
  std::string msg = "lib" + std::string(spec.name) + " not found; searched:";
  for (const auto& c : candidates) msg += "\n  " + c;
  msg += "\nset " + std::string(library_override_variable(spec.name)) +
         " to the library file, or CUDA_HOME to the CUDA toolkit";
  return unavailable(msg);
}

namespace {

template <typename F>
bool bind(void* handle, F& fn, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* p = ::dlsym(handle, n)) {
      fn = reinterpret_cast<F>(p);
      return true;
    }
  }
  return false;
}

// What makes a library file the same file to the identity memo: its
// identity as identity_stat takes it (the mount's unique ID with the
// device number: a device number alone can be given to the next file
// system mounted at one place, with the same inodes and times), its size
// and both times.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{};
  timespec ctime{};

  static FileStamp of(const struct stat& st) { return {st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim}; }
  bool operator==(const FileStamp& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
  }
  // The memo files' spelling; the epoch ties it to the boot whose mount IDs
  // it names.
  std::string spelling() const {
    return std::to_string(size) + "|" + std::to_string(mtime.tv_sec) + "." + std::to_string(mtime.tv_nsec) + "|" +
           std::to_string(ino) + "|" + std::to_string(dev) + "|" + std::to_string(ctime.tv_sec) + "." +
           std::to_string(ctime.tv_nsec) + "|" + detail::identity_epoch();
  }
};

Result<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (detail::identity_stat(path, st) != 0) return errno_status(errno, "stat", path);
  return FileStamp::of(st);
}

struct PinnedIdentity {
  std::string state_dir;
  LibraryIdentity identity;
};

// The file a library was loaded from, when that can be told. Written once,
// before `loaded` is set; the pinned identity is made on first use.
struct LoadRecord {
  std::atomic<bool> loaded{false};
  bool known = false;
  std::string path;
  FileStamp stamp;
  std::mutex mu;
  std::atomic<const PinnedIdentity*> identity{nullptr};  // never freed: lives as long as the loaded library
};

LoadRecord& load_record(std::string_view library) {
  static LoadRecord nvrtc_record;
  static LoadRecord jitlink_record;
  static LoadRecord other_record;
  if (library == "nvrtc") return nvrtc_record;
  if (library == "nvJitLink") return jitlink_record;
  return other_record;
}

// Whether the object behind `handle` is mapped from the file (dev, ino):
// the line of /proc/self/maps that holds its dynamic section names the
// device and inode its pages come from, whatever its path holds now.
bool maps_file(void* handle, dev_t dev, ino_t ino) {
  struct link_map* lm = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == nullptr || lm->l_ld == nullptr) return false;
  const auto at = reinterpret_cast<std::uintptr_t>(lm->l_ld);
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return false;
  bool same = false;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long lo = 0, hi = 0, inode = 0;  // NOLINT(google-runtime-int): sscanf's %lx and %lu
    unsigned major = 0, minor = 0;
    // NOLINTNEXTLINE(cert-err34-c): a line that does not parse is skipped
    if (std::sscanf(line, "%lx-%lx %*s %*x %x:%x %lu", &lo, &hi, &major, &minor, &inode) != 5) continue;
    if (at < lo || at >= hi) continue;
    same = makedev(major, minor) == dev && inode == ino;
    break;
  }
  std::fclose(maps);
  return same;
}

Result<void*> open_library(std::string_view library, std::string* path, LoadRecord& record) {
  PROGCACHE_ASSIGN_OR_RETURN(*path, locate(library));
  // A library the application loaded under this name before progcache did
  // (CuPy's or cuda-python's NVRTC) is reused by dlopen; the file it came
  // from is told by its mapping below.
  void* earlier = ::dlopen(path->c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (earlier != nullptr) ::dlclose(earlier);
  auto before = stamp_of(*path);
  void* h = ::dlopen(path->c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    return unavailable("cannot load '" + *path + "': " + (err != nullptr ? err : "unknown error"));
  }
  // The same file at the path just before and just after the load is the
  // file that was loaded. One the application loaded earlier is this file
  // when its pages are this file's inode: a file replaced at the path since
  // (a new inode) is not, and its identity is never written down for the
  // file there now.
  auto after = stamp_of(*path);
  // (A stamp's device is its mount's identity; the mapping names the device
  // number stat gives.)
  struct stat real {};
  const bool this_file = earlier == nullptr || (before.ok() && ::stat(path->c_str(), &real) == 0 &&
                                                real.st_ino == before->ino && maps_file(h, real.st_dev, real.st_ino));
  if (this_file && before.ok() && after.ok() && *before == *after) {
    record.known = true;
    record.path = *path;
    record.stamp = *before;
  }
  return h;
}

// Loads `library` once per process and binds its functions with `bind_all`
// (which returns false when a required one is missing). The API object and
// the library live as long as the process.
template <typename Api, typename BindAll>
Result<const Api*> load_once(std::once_flag& once, Result<const Api*>& result, std::string_view library,
                             std::string_view what, BindAll bind_all) {
  std::call_once(once, [&] {
    auto api = std::make_unique<Api>();
    LoadRecord& record = load_record(library);
    auto h = open_library(library, &api->path, record);
    if (!h.ok()) {
      result = h.status();
      return;
    }
    if (!bind_all(*h, *api)) {
      result = unavailable("'" + api->path + "' lacks the " + std::string(what) + " functions progcache needs");
      return;
    }
    result = static_cast<const Api*>(api.release());  // lives as long as the loaded library: the process
    record.loaded.store(true, std::memory_order_release);
  });
  return result;
}

}  // namespace

Result<const Nvrtc*> nvrtc() {
  static std::once_flag once;
  static Result<const Nvrtc*> result{unavailable("not loaded")};
  return load_once<Nvrtc>(once, result, "nvrtc", "NVRTC", [](void* h, Nvrtc& api) {
    // Optional: older NVRTCs lack cubin / LTO-IR output.
    bind(h, api.get_cubin_size, {"nvrtcGetCUBINSize"});
    bind(h, api.get_cubin, {"nvrtcGetCUBIN"});
    bind(h, api.get_ltoir_size, {"nvrtcGetLTOIRSize"});
    bind(h, api.get_ltoir, {"nvrtcGetLTOIR"});
    return bind(h, api.version, {"nvrtcVersion"}) && bind(h, api.get_error_string, {"nvrtcGetErrorString"}) &&
           bind(h, api.create_program, {"nvrtcCreateProgram"}) &&
           bind(h, api.destroy_program, {"nvrtcDestroyProgram"}) &&
           bind(h, api.compile_program, {"nvrtcCompileProgram"}) &&
           bind(h, api.add_name_expression, {"nvrtcAddNameExpression"}) &&
           bind(h, api.get_lowered_name, {"nvrtcGetLoweredName"}) &&
           bind(h, api.get_program_log_size, {"nvrtcGetProgramLogSize"}) &&
           bind(h, api.get_program_log, {"nvrtcGetProgramLog"}) && bind(h, api.get_ptx_size, {"nvrtcGetPTXSize"}) &&
           bind(h, api.get_ptx, {"nvrtcGetPTX"});
  });
}

Result<const NvJitLink*> nvjitlink() {
  static std::once_flag once;
  static Result<const NvJitLink*> result{unavailable("not loaded")};
  return load_once<NvJitLink>(once, result, "nvJitLink", "nvJitLink", [](void* h, NvJitLink& api) {
    // CUDA 12 exports versioned names (__nvJitLinkCreate_12_0); 13 also
    // exports plain ones.
    auto jit = [h](auto& fn, const std::string& name) {
      return bind(h, fn, {name.c_str(), ("__" + name + "_13_0").c_str(), ("__" + name + "_12_0").c_str()});
    };
    return bind(h, api.version, {"nvJitLinkVersion"}) && jit(api.create, "nvJitLinkCreate") &&
           jit(api.destroy, "nvJitLinkDestroy") && jit(api.add_data, "nvJitLinkAddData") &&
           jit(api.complete, "nvJitLinkComplete") && jit(api.get_linked_cubin_size, "nvJitLinkGetLinkedCubinSize") &&
           jit(api.get_linked_cubin, "nvJitLinkGetLinkedCubin") &&
           jit(api.get_linked_ptx_size, "nvJitLinkGetLinkedPtxSize") &&
           jit(api.get_linked_ptx, "nvJitLinkGetLinkedPtx") &&
           jit(api.get_error_log_size, "nvJitLinkGetErrorLogSize") && jit(api.get_error_log, "nvJitLinkGetErrorLog") &&
           jit(api.get_info_log_size, "nvJitLinkGetInfoLogSize") && jit(api.get_info_log, "nvJitLinkGetInfoLog");
  });
}

Result<const Driver*> driver() {
  static std::once_flag once;
  static Result<const Driver*> result{unavailable("not loaded")};
  return load_once<Driver>(once, result, "cuda", "CUDA driver", [](void* h, Driver& api) {
    return bind(h, api.init, {"cuInit"}) && bind(h, api.driver_get_version, {"cuDriverGetVersion"}) &&
           bind(h, api.device_get_count, {"cuDeviceGetCount"}) && bind(h, api.device_get, {"cuDeviceGet"}) &&
           bind(h, api.device_get_attribute, {"cuDeviceGetAttribute"}) &&
           bind(h, api.ctx_get_current, {"cuCtxGetCurrent"}) && bind(h, api.ctx_set_current, {"cuCtxSetCurrent"}) &&
           bind(h, api.primary_ctx_retain, {"cuDevicePrimaryCtxRetain"}) &&
           bind(h, api.module_load_data, {"cuModuleLoadData"}) &&
           bind(h, api.module_get_function, {"cuModuleGetFunction"}) &&
           bind(h, api.get_error_string, {"cuGetErrorString"});
  });
}

namespace {

// The version the loaded library reports ("13.0"); empty for libNVVM,
// which is never loaded. Loads the library when it is not yet.
Result<std::string> loaded_version(std::string_view library) {
  if (library == "nvrtc") {
    PROGCACHE_ASSIGN_OR_RETURN(const Nvrtc* api, nvrtc());
    int major = 0, minor = 0;
    api->version(&major, &minor);
    return std::to_string(major) + "." + std::to_string(minor);
  }
  if (library == "nvvm") return std::string();
  PROGCACHE_ASSIGN_OR_RETURN(const NvJitLink* api, nvjitlink());
  unsigned major = 0, minor = 0;
  api->version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

// The build fingerprint is the digest of the library file itself: two
// builds that report the same version (a hotfix, a distro rebuild) still
// get different keys. The file is read through one descriptor whose stamp
// must be `stamp`, so the digest and the stamp it is memoized under name
// one file; failed_precondition when the path now holds another.
Result<std::string> fingerprint_file(const std::string& path, const FileStamp& stamp) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "open", path);
  const std::unique_ptr<const int, void (*)(const int*)> closer(&fd, [](const int* f) { ::close(*f); });
  struct stat st {};
  if (detail::identity_stat(fd, "", AT_EMPTY_PATH, st) != 0) return errno_status(errno, "fstat", path);
  if (!(FileStamp::of(st) == stamp)) return failed_precondition("'" + path + "' changed while it was fingerprinted");
  Sha256 sha;
  std::string buf(1 << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "read", path);
    if (n == 0) break;
    sha.update(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  }
  return digest_hex(sha.finish());
}

// The most identity memos kept: each library file seen through another
// mount (a container) or in another boot has one.
constexpr std::size_t k_max_identity_memos = 256;

// The identity of the file `stamp` describes at `path`. Memoized in memory
// and in <state_dir>/compilers/ under the stamp. Without `with_version` only
// the fingerprint is made (no library is loaded to ask a version), for a file
// another loader chose.
Result<LibraryIdentity> identity_at(std::string_view library, const std::string& path, const FileStamp& stamp,
                                    const std::string& state_dir, bool with_version = true) {
  const std::string file_id = std::string(library) + (with_version ? "|" : "|file|") + path + "|" + stamp.spelling();
  // In-process memo, per state directory: each gets its own memo file.
  static std::mutex mu;
  static std::map<std::string, LibraryIdentity, std::less<>> memo;
  const std::string memo_key = state_dir + '\0' + file_id;
  {
    std::lock_guard lock(mu);
    if (auto it = memo.find(memo_key); it != memo.end()) return it->second;
  }
  const Digest256 d = sha256(file_id);
  const std::string dir = join_path(state_dir, "compilers");
  const std::string memo_path = join_path(dir, to_hex(as_view(d).substr(0, 16)) + ".json");
  LibraryIdentity id;
  bool found = false;
  // Read without following links or blocking on a FIFO: the state
  // directory may have been tampered with.
  if (auto text = read_regular_file(Env::posix(), memo_path, 1 << 20); text.ok()) {
    auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    // Every field is checked for its type: the file is on disk, and a
    // well-formed memo of the wrong shape must cost a library load, not the
    // process.
    auto str = [&](const char* name) -> const std::string* {
      if (!j.is_object()) return nullptr;
      auto it = j.find(name);
      return it != j.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
    };
    const std::string* memo_id = str("id");
    const std::string* version = str("version");
    const std::string* fingerprint = str("fingerprint");
    if (memo_id != nullptr && *memo_id == file_id && version != nullptr && fingerprint != nullptr) {
      id.version = *version;
      id.fingerprint = *fingerprint;
      found = true;
    }
  }
  if (!found) {
    if (with_version) {
      PROGCACHE_ASSIGN_OR_RETURN(id.version, loaded_version(library));
    }
    PROGCACHE_ASSIGN_OR_RETURN(id.fingerprint, fingerprint_file(path, stamp));
    // The version came from the loaded library: written down for this file
    // only when the loaded library is this file. In memory it is kept either
    // way: it is what this process's library says, every call.
    const LoadRecord& record = load_record(library);
    const bool version_is_this_files =
        !with_version || library == "nvvm" || (record.known && record.path == path && record.stamp == stamp);
    // Best effort: a memo that cannot be written only costs the next
    // process one library load.
    Env* env = Env::posix();
    if (version_is_this_files) {
      if (Status s = env->mkdir(dir, 0700); s.ok() || s.code() == Code::failed_precondition) {
        const nlohmann::json j{{"id", file_id}, {"version", id.version}, {"fingerprint", id.fingerprint}};
        write_file_atomic(env, memo_path, temp_path_beside(memo_path), j.dump(), 0600, Durability::none).ignore();
        detail::keep_newest_files(dir, k_max_identity_memos);
      }
    }
  }
  std::lock_guard lock(mu);
  memo.emplace(memo_key, id);
  return id;
}

}  // namespace

Result<LibraryIdentity> identity(std::string_view library, const std::string& path, const std::string& state_dir) {
  PROGCACHE_ASSIGN_OR_RETURN(const FileStamp stamp, stamp_of(path));
  return identity_at(library, path, stamp, state_dir);
}

Result<std::string> file_fingerprint(std::string_view library, const std::string& path, const std::string& state_dir) {
  PROGCACHE_ASSIGN_OR_RETURN(const FileStamp stamp, stamp_of(path));
  PROGCACHE_ASSIGN_OR_RETURN(LibraryIdentity id, identity_at(library, path, stamp, state_dir, false));
  return std::move(id.fingerprint);
}

Result<const LibraryIdentity*> loaded_identity(std::string_view library, const std::string& state_dir) {
  if (library == "nvvm") return nullptr;
  LoadRecord& record = load_record(library);
  if (!record.loaded.load(std::memory_order_acquire) || !record.known) return nullptr;
  // The identity is pinned for the first state directory asked (its memo
  // file gave or took the fingerprint); another directory's comes from its
  // own memo and is kept apart, so a memo file in one never speaks for
  // another.
  const PinnedIdentity* pinned = record.identity.load(std::memory_order_acquire);
  if (pinned != nullptr && pinned->state_dir == state_dir) return &pinned->identity;
  std::lock_guard lock(record.mu);
  // Other directories' identities, kept as long as the process (never
  // replaced, so a pointer handed out stays valid).
  static auto* others = new std::map<std::string, std::unique_ptr<const LibraryIdentity>>();
  const std::string other_key = std::string(library) + '\0' + state_dir;
  pinned = record.identity.load(std::memory_order_acquire);
  if (pinned != nullptr) {
    if (pinned->state_dir == state_dir) return &pinned->identity;
    if (auto it = others->find(other_key); it != others->end()) return it->second.get();
  }
  auto id = identity_at(library, record.path, record.stamp, state_dir);
  if (!id.ok()) {
    // The file cannot be read as it was loaded (replaced, removed, or an
    // I/O error): the fingerprint names the loaded inode instead, so this
    // process's keys match no process that fingerprinted a file.
    LibraryIdentity by_stamp;
    PROGCACHE_ASSIGN_OR_RETURN(by_stamp.version, loaded_version(library));
    by_stamp.fingerprint = "loaded " + std::string(library) + " " + record.stamp.spelling() + ", since replaced";
    id = std::move(by_stamp);
  }
  if (pinned == nullptr) {
    pinned = new PinnedIdentity{state_dir, std::move(*id)};  // never freed, as the library is never unloaded
    record.identity.store(pinned, std::memory_order_release);
    return &pinned->identity;
  }
  auto& slot = (*others)[other_key];
  slot = std::make_unique<const LibraryIdentity>(std::move(*id));
  return slot.get();
}

Result<const LibraryIdentity*> compiler_identity(std::string_view library, const std::string& state_dir,
                                                 bool tolerate_missing, LibraryIdentity& scratch) {
  // A library this process has loaded is the compiler, whatever its path
  // holds now: its identity was pinned at the load, and costs no syscall
  // and no copy.
  PROGCACHE_ASSIGN_OR_RETURN(const LibraryIdentity* pinned, loaded_identity(library, state_dir));
  if (pinned != nullptr) return pinned;
  LibraryIdentity& li = scratch;
  // The file found before is tried first: identity() stats it anyway, so
  // the search's own re-check is skipped; a file gone since means a search.
  Result<LibraryIdentity> known = unavailable("not searched yet");
  if (auto before = located_before(library)) known = identity(library, *before, state_dir);
  if (known.ok()) {
    li = std::move(*known);
  } else if (auto path = locate(library); path.ok()) {
    PROGCACHE_ASSIGN_OR_RETURN(li, identity(library, *path, state_dir));
  } else if (tolerate_missing || library == "nvvm") {
    li.fingerprint = "lib" + std::string(library) + " not found";
  } else {
    return path.status();
  }
  // A memo miss above loads the library to ask its version: from then on
  // the loaded file is the compiler.
  PROGCACHE_ASSIGN_OR_RETURN(pinned, loaded_identity(library, state_dir));
  return pinned != nullptr ? pinned : &li;
}

}  // namespace progcache::cuda
