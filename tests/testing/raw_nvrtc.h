// NVRTC itself, driven without progcache: the oracle a test compares what
// progcache compiles (or serves) with. The library is the one progcache
// would load (compiler_info()).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace progcache::testing {

struct RawCompile {
  bool ok = false;  // NVRTC compiled the program
  std::string ptx;  // its PTX, when it did, with the NUL NVRTC ends it with
  std::string log;
};

// Compiles CUDA C++ `code` to PTX under the program name `name` with
// `options`, as a program with no in-memory headers and no name
// expressions. nullopt where no NVRTC is found.
std::optional<RawCompile> raw_nvrtc_ptx(const std::string& code, const std::string& name,
                                        const std::vector<std::string>& options);

}  // namespace progcache::testing
