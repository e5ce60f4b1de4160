// nvcc/host_compiler.h — the host compiler as the nvcc launcher knows it:
// its own include directories, what a wrapper script adds, its specs
// places, and a script's inputs in the key (docs/nvcc.md). Not public API.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "progcache/key.h"

namespace progcache::nvcc {

// What `host -E -x c++ -v /dev/null` lists, asked once per process and
// compiler: its <...> search in its order (nullopt where it says none);
// of those, the directories of the compiler itself (for a script, those of
// the compiler it runs, asked without it) and those a script adds before
// them (searched first, and the user's: their places are recorded); and
// whether a script adds directories for quoted names alone (-iquote).
std::optional<std::vector<std::string>> host_system_dirs(const std::string& host);

std::vector<std::string> host_own_dirs(const std::string& host);

std::vector<std::string> host_added_dirs(const std::string& host);

bool host_adds_quoted_dirs(const std::string& host);

// gcc reads a `specs` file, which can change any option it runs with, from
// each LIBRARY_PATH directory (as <dir>/specs and <dir>/<target>/<version>/specs)
// before its own: places that must stay empty (the gcc installation's own
// are the compiler's, whose identity is keyed). Why one is not, or nullopt.
std::optional<std::string> specs_places(const std::string& host, std::vector<std::string>& absent);

// What a host compiler that is a script reads besides its words, keyed
// where `program` starts with "#!" (docs/nvcc.md, "Host compilers that are
// scripts"); nothing for any other program.
void add_script_inputs(KeyBuilder& kb, const std::string& program);

}  // namespace progcache::nvcc
