// nvcc/spawn.cpp — running nvcc and the programs the launcher asks: child
// processes, their output, temporary files and the start of a compile.
#include "nvcc/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compile/scan_files.h"
#include "util/user_io.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace progcache::nvcc {

namespace {

namespace dt = progcache::detail;
using cli::write_all_to;

}  // namespace

[[noreturn]] void exec_nvcc(const std::string& nvcc, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(nvcc.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): execv's signature
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  argv.push_back(nullptr);
  ::execv(nvcc.c_str(), argv.data());
  std::fprintf(stderr, "progcache: cannot run '%s': %s\n", nvcc.c_str(), std::strerror(errno));
  std::_Exit(127);
}

Ran run_child(const std::string& program, const std::vector<std::string>& args, bool echo, bool null_stdin,
              std::int64_t timeout_ns, const std::vector<std::string>* env) {
  Ran r;
  std::array<int, 2> out_pipe{-1, -1};
  std::array<int, 2> err_pipe{-1, -1};
  if (::pipe2(out_pipe.data(), O_CLOEXEC) != 0 || ::pipe2(err_pipe.data(), O_CLOEXEC) != 0) {
    std::fprintf(stderr, "progcache: cannot make a pipe: %s\n", std::strerror(errno));
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (null_stdin) posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args)
    argv.push_back(
        const_cast<char*>(a.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): posix_spawn's signature
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (env != nullptr) {
    envp.reserve(env->size() + 1);
    for (const auto& e : *env)
      envp.push_back(
          const_cast<char*>(e.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): posix_spawn's signature
    envp.push_back(nullptr);
  }
  pid_t pid = -1;
  const int rc =
      ::posix_spawn(&pid, program.c_str(), &fa, nullptr, argv.data(), env != nullptr ? envp.data() : environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    std::fprintf(stderr, "progcache: cannot run '%s': %s\n", program.c_str(), std::strerror(rc));
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return r;
  }
  std::array<pollfd, 2> fds{pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
  std::array<char, 1 << 16> buf{};
  // Reads what one pipe holds now; false once it is closed or failed.
  auto take = [&](std::size_t i) {
    const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) {
      ::close(fds[i].fd);
      fds[i].fd = -1;
      return false;
    }
    const std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
    (i == 0 ? r.out : r.err).append(chunk);
    if (echo) (void)write_all_to(i == 0 ? 1 : 2, chunk, i == 0 ? "standard output" : "standard error");
    return true;
  };
  const std::int64_t deadline = timeout_ns > 0 ? dt::now_ns() + timeout_ns : 0;
  int status = 0;
  bool exited = false;
  while (!exited) {
    const int ready = ::poll(fds.data(), fds.size(), 50);
    if (ready < 0 && errno != EINTR) break;
    for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].fd >= 0 && fds[i].revents != 0) take(i);
    }
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    exited = w == pid || (w < 0 && errno != EINTR);
    if (!exited && deadline != 0 && dt::now_ns() > deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      exited = true;
    }
  }
  // The child is gone: take what it left in the pipes, without waiting for
  // an end that another holder of them may never give.
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].fd < 0) continue;
    (void)::fcntl(fds[i].fd, F_SETFL, ::fcntl(fds[i].fd, F_GETFL) | O_NONBLOCK);
    for (;;) {
      const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      const std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
      (i == 0 ? r.out : r.err).append(chunk);
      if (echo) (void)write_all_to(i == 0 ? 1 : 2, chunk, i == 0 ? "standard output" : "standard error");
    }
    ::close(fds[i].fd);
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Ran run_capturing(const std::string& nvcc, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {nvcc};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_child(nvcc, argv, true, false);
}

std::int64_t tick_start() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  const std::int64_t start = dt::ns_of(t);
  timespec now{};
  for (;;) {
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (dt::ns_of(now) > start) break;
    ::usleep(500);
  }
  return start;
}

std::optional<std::string> make_temp_file(const std::string& suffix) {
  std::error_code ec;
  std::string tmpl = (std::filesystem::temp_directory_path(ec) / ("progcache-nvcc-XXXXXX" + suffix)).string();
  if (ec) return std::nullopt;
  const int fd = ::mkstemps(tmpl.data(), static_cast<int>(suffix.size()));
  if (fd < 0) return std::nullopt;
  ::close(fd);
  return tmpl;
}

}  // namespace progcache::nvcc
