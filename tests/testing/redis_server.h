// A real redis-server on a free loopback port, started and stopped by the
// test. Tests that need one skip when the binary is absent.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace progcache::testing {

class RedisServer {
 public:
  // Path of redis-server, or "" when not installed.
  static std::string binary();

  // Starts a server with `extra` arguments (e.g. {"--requirepass", "pw"}).
  // `port` 0: a free one.
  explicit RedisServer(std::vector<std::string> extra = {}, int port = 0);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  [[nodiscard]] bool running() const { return m_pid > 0; }
  [[nodiscard]] int port() const { return m_port; }
  [[nodiscard]] std::string url(const std::string& query = "") const;

  void pause();    // SIGSTOP: accepts connections, answers nothing
  void resume();   // SIGCONT
  void kill();     // SIGKILL and reap
  bool restart();  // start again on the same port

  // Runs a raw command (argv) and returns the reply as text; for tests that
  // plant values behind progcache's back.
  std::string command(const std::vector<std::string>& argv) const;

 private:
  bool start();
  std::vector<std::string> m_extra;
  std::string m_dir;
  int m_port = 0;
  pid_t m_pid = -1;
};

}  // namespace progcache::testing
