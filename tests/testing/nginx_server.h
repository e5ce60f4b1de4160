// A real nginx on a free loopback port, started and stopped by the test, with
// its WebDAV module serving an HTTP cache: the server progcache's HTTP tier is
// tested against. Tests that need one skip when the binary is absent.
//
// Locations (each a WebDAV tree under data_dir() unless said otherwise):
//   /cache/   PUT, GET, HEAD, DELETE, no credentials
//   /auth/    the same behind basic auth (user "ci", password basic_password())
//   /bearer/  the same behind "Authorization: Bearer <bearer_token()>"
//   /slow/    /cache/'s files, sent at 2 KiB/s
//   /err500/  every request answered 500
//   /html/    every request answered 200 with an HTML page
#pragma once

#include <sys/types.h>

#include <string>

namespace progcache::testing {

class NginxServer {
 public:
  // Path of nginx, or "" when not installed.
  static std::string binary();
  static std::string basic_password() { return "ci-secret-1"; }
  static std::string bearer_token() { return "token-0123456789"; }

  NginxServer();
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  [[nodiscard]] bool running() const { return m_pid > 0; }
  [[nodiscard]] int port() const { return m_port; }
  // "http://127.0.0.1:<port>/<location>" plus "?query" when given.
  [[nodiscard]] std::string url(const std::string& location, const std::string& query = "") const;
  // The file nginx serves for <location>/<rest>, for tests that plant bytes.
  [[nodiscard]] std::string file(const std::string& location, const std::string& rest) const;
  // Why it did not start (its error log), for test messages.
  [[nodiscard]] std::string log() const;

  void kill();  // SIGKILL and reap

 private:
  bool start();
  std::string m_dir;
  int m_port = 0;
  pid_t m_pid = -1;
};

}  // namespace progcache::testing
