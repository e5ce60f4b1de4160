// Internal: locating and loading libnvrtc, libnvJitLink and libcuda at run
// time, and the memoized compiler identity. Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/key.h"
#include "progcache/status.h"

namespace progcache::cuda {

// The C ABI of the three libraries, declared here so progcache builds without
// the CUDA headers. Only the calls progcache makes.
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
using nvJitLinkResult = int;
using nvJitLinkHandle = struct nvJitLink*;
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

enum JitInput : int { jit_input_ptx = 2, jit_input_ltoir = 3 };

struct Nvrtc {
  std::string path;
  nvrtcResult (*version)(int*, int*) = nullptr;
  const char* (*get_error_string)(nvrtcResult) = nullptr;
  nvrtcResult (*create_program)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*) = nullptr;
  nvrtcResult (*destroy_program)(nvrtcProgram*) = nullptr;
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*add_name_expression)(nvrtcProgram, const char*) = nullptr;
  nvrtcResult (*get_lowered_name)(nvrtcProgram, const char*, const char**) = nullptr;
  nvrtcResult (*get_program_log_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*get_program_log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_ptx_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*get_ptx)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_cubin_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*get_cubin)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_ltoir_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*get_ltoir)(nvrtcProgram, char*) = nullptr;
};

struct NvJitLink {
  std::string path;
  nvJitLinkResult (*version)(unsigned*, unsigned*) = nullptr;
  nvJitLinkResult (*create)(nvJitLinkHandle*, std::uint32_t, const char**) = nullptr;
  nvJitLinkResult (*destroy)(nvJitLinkHandle*) = nullptr;
  nvJitLinkResult (*add_data)(nvJitLinkHandle, int, const void*, std::size_t, const char*) = nullptr;
  nvJitLinkResult (*complete)(nvJitLinkHandle) = nullptr;
  nvJitLinkResult (*get_linked_cubin_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*get_linked_cubin)(nvJitLinkHandle, void*) = nullptr;
  nvJitLinkResult (*get_linked_ptx_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*get_linked_ptx)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*get_error_log_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*get_error_log)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*get_info_log_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*get_info_log)(nvJitLinkHandle, char*) = nullptr;
};

struct Driver {
  std::string path;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*driver_get_version)(int*) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, int, CUdevice) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
};

// Finds the library file without loading it. unavailable, listing every
// place searched, when none exists. An explicit override variable
// (PROGCACHE_NVRTC, PROGCACHE_NVJITLINK, PROGCACHE_LIBCUDA) that names a
// missing file is an error, not a hint.
Result<std::string> locate(std::string_view library);
// The file locate() last found for `library` under the current environment,
// without looking at the filesystem; nullopt when it has not searched. A
// caller that stats the file anyway (identity) uses this and falls back to
// locate() when the file is gone, saving the re-check's stat.
std::optional<std::string> located_before(std::string_view library);

// Loads (once per process) and returns the API. unavailable on failure.
Result<const Nvrtc*> nvrtc();
Result<const NvJitLink*> nvjitlink();
Result<const Driver*> driver();

// Version and build fingerprint of the library at `path` ("13.0", SHA-256 of
// the file). Memoized in memory and in <state_dir>/compilers/, keyed by the
// file's path, size, mtime and inode, so warm processes never load it.
struct LibraryIdentity {
  std::string version;
  std::string fingerprint;
};
Result<LibraryIdentity> identity(std::string_view library, const std::string& path, const std::string& state_dir);

// The fingerprint alone (SHA-256 of the file) of a copy of `library` another
// loader chose (CuPy's NVRTC), memoized as identity() is; no library is
// loaded for it.
Result<std::string> file_fingerprint(std::string_view library, const std::string& path, const std::string& state_dir);

// The identity of `library` as this process loaded it, pinned at the load:
// once a library is loaded, it is what every compile of this process runs,
// whatever the path holds later. nullptr when it is not loaded, or was loaded
// by the application before progcache (which file that was cannot be told);
// then identity() of the file found is the compiler's. A file replaced since
// the load, whose memo was never written, gets a fingerprint naming the
// loaded inode: keys that match no other process's, never another file's.
Result<const LibraryIdentity*> loaded_identity(std::string_view library, const std::string& state_dir);

// The identity of the compiler that would run now, in one call: the loaded
// library's when there is one; else the file found before (or found now)
// by its memo; a library that is not found is an error, or, with
// `tolerate_missing` (keys only) and always for "nvvm", a fixed "not found"
// fingerprint, so the key exists but never equals one made with the library.
// Points at the pinned identity, or at `scratch`, which it fills.
Result<const LibraryIdentity*> compiler_identity(std::string_view library, const std::string& state_dir,
                                                 bool tolerate_missing, LibraryIdentity& scratch);

}  // namespace progcache::cuda
