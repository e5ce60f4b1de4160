// nvcc/environment.h — the variables the nvcc launcher keys, follows or
// refuses, and the search-path variables as gcc reads them. Not public API.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nvcc/nvcc_command.h"

namespace progcache::nvcc {

// Every variable the key holds: the fixed list, then those nvcc.profile names.
std::vector<std::string> keyed_variables(const ProfileVariables& profile);

// The first variable set in the environment that nvcc or its profile reads,
// that the launcher does not follow and the profile does not replace.
std::optional<std::string> unfollowed_variable(const std::vector<std::string>& names, const ProfileVariables& profile,
                                               bool device_link);

// A search-path variable's directories (CPATH, C_INCLUDE_PATH,
// CPLUS_INCLUDE_PATH): ':'-separated, an empty entry meaning the working
// directory, as gcc reads them.
std::vector<std::string> env_dirs(const char* name);

}  // namespace progcache::nvcc
