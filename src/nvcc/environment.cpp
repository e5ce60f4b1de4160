// nvcc/environment.cpp — what nvcc and the host compiler read from the
// environment: the tables of variables keyed, followed and refused.
#include "nvcc/environment.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nvcc/nvcc_command.h"

namespace progcache::nvcc {

namespace {

// What nvcc and the host compiler read from the environment (nvcc's own
// names as its program holds them), besides every variable nvcc.profile
// names, which is read from the profile at run time.
constexpr const char* k_keyed_variables[] = {
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",  "NVCC_CCBIN",      "CPATH",
    "C_INCLUDE_PATH",     "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
    "SOURCE_DATE_EPOCH",  "PTXAS_FLAGS",        "CUDAFE_FLAGS",    "NVVM_FLAGS",
    "NVASM_FLAGS",        "NVDISASM_FLAGS",     "NVLINK_FLAGS",    "NV_NVVM_VERSION",
    "CICC_PATH",          "NVVMIR_LIBRARY_DIR",
};

// The language and colours of what the tools print, which a hit replays:
// keyed by value (and followed: they name no file).
constexpr const char* k_print_variables[] = {
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "GCC_COLORS", "GCC_URLS",
};

// Variables nvcc reads whose value the key holds and whose words the
// launcher follows (NVCC_*_FLAGS, PTXAS_FLAGS, CUDAFE_FLAGS), or that do not
// bear on one compile's output beyond their value (PATH and LD_LIBRARY_PATH
// find the programs whose identities are keyed; LIBRARIES and NVLINK_FLAGS
// are nvlink's, which a compile does not run). Any other variable nvcc or
// its profile reads, set and not replaced by the profile, may name files
// the key cannot see: refused. So are GCC_EXEC_PREFIX and COMPILER_PATH
// (where the host compiler finds its own programs and specs files), and,
// for a device link, LIBRARIES and NVLINK_FLAGS (libraries, directories,
// objects for nvlink, not followed).
constexpr std::string_view k_followed_variables[] = {
    "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN", "PTXAS_FLAGS",    "CUDAFE_FLAGS",       "PATH",
    "LD_LIBRARY_PATH",    "SOURCE_DATE_EPOCH", "CPATH",      "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARIES",
    "NVLINK_FLAGS",
};

constexpr std::string_view k_link_variables[] = {"LIBRARIES", "NVLINK_FLAGS"};

}  // namespace

std::vector<std::string> keyed_variables(const ProfileVariables& profile) {
  std::vector<std::string> out(std::begin(k_keyed_variables), std::end(k_keyed_variables));
  out.insert(out.end(), std::begin(k_print_variables), std::end(k_print_variables));
  for (const auto& n : profile.names) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

std::optional<std::string> unfollowed_variable(const std::vector<std::string>& names, const ProfileVariables& profile,
                                               bool device_link) {
  for (const auto& n : names) {
    const char* v = std::getenv(n.c_str());
    if (v != nullptr && device_link &&
        std::find(std::begin(k_link_variables), std::end(k_link_variables), n) != std::end(k_link_variables)) {
      return n;
    }
    if (v == nullptr || *v == '\0') continue;
    if (std::find(std::begin(k_followed_variables), std::end(k_followed_variables), n) !=
            std::end(k_followed_variables) ||
        std::find(std::begin(k_print_variables), std::end(k_print_variables), n) != std::end(k_print_variables)) {
      continue;
    }
    if (std::find(profile.replaced.begin(), profile.replaced.end(), n) != profile.replaced.end()) continue;
    return n;
  }
  return std::nullopt;
}

std::vector<std::string> env_dirs(const char* name) {
  std::vector<std::string> out;
  const char* v = std::getenv(name);
  if (v == nullptr) return out;
  const std::string value = v;
  std::size_t start = 0;
  while (true) {
    const auto colon = value.find(':', start);
    std::string d = value.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    out.push_back(d.empty() ? "." : std::move(d));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

}  // namespace progcache::nvcc
