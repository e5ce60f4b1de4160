// progcache/compile.h — compile GPU programs through the cache.
//
// CUDA C++ goes through NVRTC (to PTX, cubin or LTO-IR); PTX and LTO-IR go
// through nvJitLink (to cubin, or LTO-IR to PTX), and several PTX / LTO-IR
// modules link into one cubin. libnvrtc, libnvJitLink and libcuda are opened
// at run time (dlopen), never linked, so progcache builds and its store tests
// run where CUDA is absent.
//
// compile(program, target, cache):
//   1. derives the key (make_program_cache_key) from the program and the
//      compiler identity. The identity (versions and a build fingerprint, the
//      SHA-256 of the library file) is memoized on disk keyed by the library
//      file's path, size, mtime and inode, so a warm hit never loads or runs a
//      compiler;
//   2. looks the key up; a hit rebuilds the ObjectCode, symbol mapping and
//      log included, from the entry;
//   3. on a miss, compiles once per key: threads of a process share one
//      in-flight compile, processes of a host serialise on a per-key lock
//      file (flock: a dead holder's lock vanishes with it) and look again
//      before compiling;
//   4. stores the result. A compile failure is returned with the full log
//      and never stored; a cache failure never loses a compile (the object
//      code is returned and the failure counted in CompileStats).
//
// Thread safety: all functions are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "progcache/bytes.h"
#include "progcache/key.h"
#include "progcache/status.h"
#include "progcache/store.h"

namespace progcache {

// One program: the code and everything that decides what it compiles to.
struct Program {
  std::string code;  // CUDA C++ source, PTX text, or LTO-IR bytes
  CodeType code_type = CodeType::cxx;
  std::vector<std::string> options;  // NVRTC / nvJitLink options (-arch=sm_90, -std=c++17, ...)
  std::vector<InMemoryHeader> headers;
  std::vector<std::string> name_expressions;  // C++ only: names to lower (kernel<float>, &fn)
  std::string name = "program";               // NVRTC program name
  // Further PTX / LTO-IR modules linked with `code` into one cubin.
  std::vector<std::string> link_inputs;
  // Fingerprint of files the key cannot see (include dirs, PCH); required
  // when options read files (-I, -include).
  std::optional<std::string> extra_digest;
  // NVVM IR only (keyed, not compiled: see program_key): further named
  // modules in link order, and whether libdevice is linked.
  std::vector<InMemoryHeader> nvvm_extra_sources;
  bool use_libdevice = false;
};

// The compiled result, equal whether it came from the compiler or the cache.
struct ObjectCode {
  Bytes code;
  TargetType kind = TargetType::cubin;
  std::string name;
  std::map<std::string, std::string> symbol_mapping;  // name expression -> lowered name
  std::string log;                                    // compiler log (may be empty)
  CompilerIdentity compiler;
  Key key;
  bool from_cache = false;
  // Why this program could not be keyed, and so was compiled without the
  // cache, neither looked up nor stored (what the include scan cannot
  // follow, an option with side effects: the message says which, and what
  // to do); `key` is then all zero. Empty when it was keyed.
  std::string uncacheable;
};

// Filled when a compile fails: the compiler's log and what it was given, as data.
struct CompileFailure {
  std::string log;
  std::vector<std::string> options;
  std::string program_name;
};

// Process-wide counters (all compile() calls of this process).
struct CompileStats {
  std::uint64_t compiles = 0;         // compiler invocations that succeeded
  std::uint64_t compile_errors = 0;   // compiler invocations that failed
  std::uint64_t hits = 0;             // served from the cache
  std::uint64_t shared_waits = 0;     // waited for another thread's compile of the same key
  std::uint64_t lock_waits = 0;       // waited for another process's compile of the same key
  std::uint64_t cache_errors = 0;     // cache lookups or stores that failed (compile still returned)
  std::uint64_t unstable_inputs = 0;  // compiles not stored: a header, or the compiler file, changed meanwhile
  std::uint64_t bytes_served = 0;     // bytes of the object code hits returned
  std::uint64_t uncacheable = 0;      // compiles that could not be keyed (ObjectCode::uncacheable says why)
  // Time of a whole compile() call that hit (one in 16 of each thread, and
  // its first) and of each compiler run, median and 99th percentile in
  // nanoseconds, within 12.5 %.
  std::uint64_t hit_samples = 0;
  std::uint64_t hit_p50_ns = 0;
  std::uint64_t hit_p99_ns = 0;
  std::uint64_t compile_p50_ns = 0;
  std::uint64_t compile_p99_ns = 0;
};
CompileStats compile_stats();

struct CompileOptions {
  // The cache; nullptr compiles without caching.
  Store* cache = nullptr;
  // Directory for per-key lock files and the compiler-identity memo. Empty:
  // <default_cache_root()>. Must be private to the user, like the cache.
  std::string state_dir;
  // How long to wait for another process compiling the same key before
  // compiling anyway (default 10 minutes).
  std::chrono::milliseconds lock_timeout = std::chrono::minutes(10);
  // Set to skip the cross-process lock (threads still share one compile).
  bool process_lock = true;
};

// Compiles `program` to `target` through `options.cache`. What cannot be
// keyed is compiled uncached (ObjectCode::uncacheable), never refused: a
// cache failure costs at most a miss. Errors: invalid_argument (an
// impossible target or code type, an option holding a NUL byte), unavailable
// (compiler library not found: the message lists every place searched),
// compile_error (the log is in the message and in *failure when given).
Result<ObjectCode> compile(const Program& program, TargetType target, const CompileOptions& options = {},
                           CompileFailure* failure = nullptr);

// The key compile() would use, without compiling (the identity memo may load
// the compiler once, the first time a library file is seen). Also keys what
// compile() does not run but cuda.core's make_program_cache_key accepts: NVVM
// IR (libNVVM's file digest is the compiler identity) and PTX → PTX. Where a
// compiler library is not found the key carries a fixed "not found" identity
// instead of failing, so it never equals a key made with the library.
Result<Key> program_key(const Program& program, TargetType target, const CompileOptions& options = {});

// The compilers progcache would use, and where they were found.
struct CompilerInfo {
  std::string nvrtc_path;
  std::string nvjitlink_path;
  CompilerIdentity identity;
};
// Locates the libraries without loading them (identity from the memo, or by
// loading them once). unavailable when none is found.
Result<CompilerInfo> compiler_info(const CompileOptions& options = {});

// Every place searched for `library` ("nvrtc", "nvJitLink", "cuda"), in order.
std::vector<std::string> library_search_paths(std::string_view library);

// Makes `path` the file of `library` ("nvrtc", "nvJitLink") this process
// compiles and keys with from now on, where its override variable
// (PROGCACHE_NVRTC, PROGCACHE_NVJITLINK) is not set: so that progcache runs,
// and its keys name, the compiler another part of the process loads
// (Python's progcache follows cuda-python's choice this way). An empty path
// forgets the preference. A library progcache has loaded already stays the
// one it runs, and its keys name it.
void prefer_library(std::string_view library, std::string path);

// A digest of every file under `dirs` (relative path, type, size, mtime,
// ctime, device, inode; symbolic links followed; files changed in the last
// two seconds by content): editing, adding or removing any header there
// changes it. compile() already fingerprints its -I directories; this is for
// callers that build keys themselves (Program::extra_digest). One stat per
// file.
Result<std::string> fingerprint_directories(const std::vector<std::string>& dirs);

// ---------------------------------------------------------------- loader

// A kernel function handle in the current CUDA context (a CUfunction).
struct Kernel {
  void* function = nullptr;
  std::string lowered_name;
};

// Loads `code` (cubin or PTX) into the current CUDA context and returns the
// kernel named by `name_expression` (looked up through the symbol mapping,
// else taken as the lowered name). Modules are cached per context and per
// code digest. unavailable when there is no driver or no GPU.
Result<Kernel> get_kernel(const ObjectCode& code, std::string_view name_expression);

// True when libcuda loads and at least one device initialises.
bool gpu_available(std::string* why_not = nullptr);

// The architecture of device `ordinal` as NVRTC spells it ("sm_90"): the
// -arch a cubin needs to load there. unavailable without a driver or GPU.
Result<std::string> device_arch(int ordinal = 0);

}  // namespace progcache
