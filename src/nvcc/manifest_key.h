// nvcc/manifest_key.h — the nvcc launcher's first key, which names a
// manifest of the files the last compile read. Not public API.
#pragma once

#include <string>
#include <vector>

#include "nvcc/nvcc_command.h"
#include "nvcc/relocation.h"
#include "progcache/key.h"

namespace progcache::nvcc {

Key manifest_key(const std::string& nvcc_path, const Command& cmd, const std::vector<std::string>& variables,
                 const Relocation* reloc = nullptr);

}  // namespace progcache::nvcc
