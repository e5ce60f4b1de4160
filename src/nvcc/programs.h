// nvcc/programs.h — the nvcc launcher's programs: each found on PATH as the
// shell finds it, and keyed by its identity. Not public API.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nvcc/nvcc_command.h"
#include "progcache/key.h"

namespace progcache::nvcc {

// Whether `p` leads to a regular file this process may execute.
bool executable_file(const std::string& p);

// `name` as the shell finds it: itself when it has a slash, else the first
// executable on PATH that is not this program.
std::optional<std::string> find_program(const std::string& name);

// `name` as a shell with PATH=`path` finds it: itself when it has a slash,
// else the first executable file in a directory of `path` (an empty entry
// is the working directory).
std::optional<std::string> find_on(const std::string& name, const std::string& path);

// `p` with every link resolved, or as given where it cannot be.
std::string real_path(const std::string& p);

// A program's or data file's identity in the key: its path, and the size,
// modification time, device and inode of the file it leads to (ccache's
// compiler_check=mtime), or absent.
void add_file_identity(KeyBuilder& kb, std::string_view label, const std::string& path);

// The host compilers nvcc may run: -ccbin (a program, or a directory of
// them), else $NVCC_CCBIN, else gcc and g++ from PATH.
std::vector<std::string> host_compilers(const Command& cmd);

}  // namespace progcache::nvcc
