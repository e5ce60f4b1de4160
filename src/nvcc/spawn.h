// nvcc/spawn.h — how the nvcc launcher runs programs. Not public API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace progcache::nvcc {

struct Ran {
  int status = 127;  // as a shell reports it: the exit code, or 128 + signal
  std::string out, err;
};

// Replaces this process with nvcc (argv[0] is `nvcc`); never returns.
[[noreturn]] void exec_nvcc(const std::string& nvcc, const std::vector<std::string>& args);

// Runs `program` with `args` (argv[0] is `program`), reading its standard
// output and error through pipes (passed through as they come when `echo`)
// until it has exited. What decides the end is the child's exit, not the
// pipes' end: a wrapper that leaves a process behind holding them (a
// compiler server a wrapper starts) must not keep the build waiting once
// the compile returned. `timeout_ns` (0: none) kills a child that runs
// longer. `null_stdin` gives it /dev/null instead of this process's input.
Ran run_child(const std::string& program, const std::vector<std::string>& args, bool echo, bool null_stdin,
              std::int64_t timeout_ns = 0, const std::vector<std::string>* env = nullptr);

// Runs nvcc, passing its output through as it comes and keeping a copy.
Ran run_capturing(const std::string& nvcc, const std::vector<std::string>& args);

// The time the compile starts, on the fine clock, returned once the coarse
// clock has passed it. A file changed before it carries an earlier time,
// whichever clock stamped it; a file changed from the return on carries a
// later one: the coarse clock (which stamps most writes) is already past
// it, and a fine-grained stamp (multigrain timestamps, Linux 6.13 and
// later, which give a file read just after its write a time beyond the
// coarse clock) is later still. Taking the start from the coarse clock
// made every input written in the last tick before the launcher look
// changed during the run, and nothing was stored.
std::int64_t tick_start();

// A new empty file in the temporary directory, named with `suffix` (the
// host compiler takes a file's kind from it).
std::optional<std::string> make_temp_file(const std::string& suffix);

}  // namespace progcache::nvcc
