#include "testing/nginx_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "testing/test_util.h"

namespace progcache::testing {

std::string NginxServer::binary() {
  for (const char* p : {"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

NginxServer::NginxServer() {
  if (binary().empty()) return;
  char tmpl[] = "/tmp/progcache-nginx-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return;
  m_dir = tmpl;
  m_port = free_loopback_port();
  start();
}

NginxServer::~NginxServer() {
  kill();
  if (!m_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
}

std::string NginxServer::url(const std::string& location, const std::string& query) const {
  return "http://127.0.0.1:" + std::to_string(m_port) + "/" + location + (query.empty() ? "" : "?" + query);
}

std::string NginxServer::file(const std::string& location, const std::string& rest) const {
  return m_dir + "/data/" + location + "/" + rest;
}

std::string NginxServer::log() const {
  std::ifstream in(m_dir + "/error.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool NginxServer::start() {
  for (const char* d : {"data/cache", "data/auth", "data/bearer", "tmp"}) {
    std::filesystem::create_directories(m_dir + "/" + d);
  }
  {
    std::ofstream pw(m_dir + "/htpasswd");
    pw << "ci:{PLAIN}" << basic_password() << "\n";
  }
  const std::string d = m_dir;
  const std::string dav = "dav_methods PUT DELETE; create_full_put_path on; dav_access user:rw;";
  std::ofstream conf(d + "/nginx.conf");
  // One process (no master), so it runs as whoever runs the test, root
  // included, and dies with one signal.
  conf << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
       << "error_log " << d << "/error.log;\npid " << d << "/nginx.pid;\n"
       << "events { worker_connections 256; }\n"
       << "http {\n  access_log off;\n  client_max_body_size 0;\n"
       << "  client_body_temp_path " << d << "/tmp;\n  proxy_temp_path " << d << "/tmp;\n"
       << "  fastcgi_temp_path " << d << "/tmp;\n  uwsgi_temp_path " << d << "/tmp;\n"
       << "  scgi_temp_path " << d << "/tmp;\n  keepalive_requests 100000;\n"
       << "  server {\n    listen 127.0.0.1:" << m_port << ";\n    root " << d << "/data;\n"
       << "    location /cache/ { " << dav << " }\n"
       << "    location /auth/ { auth_basic \"cache\"; auth_basic_user_file " << d << "/htpasswd; " << dav << " }\n"
       << "    location /bearer/ { if ($http_authorization != \"Bearer " << bearer_token() << "\") { return 401; } "
       << dav << " }\n"
       << "    location /slow/ { alias " << d << "/data/cache/; limit_rate 2k; }\n"
       << "    location /err500/ { return 500; }\n"
       << "    location /html/ { default_type text/html; return 200 \"<html><body>Welcome</body></html>\"; }\n"
       << "  }\n}\n";
  conf.close();
  const std::vector<std::string> args = {binary(), "-p", d, "-c", d + "/nginx.conf"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  m_pid = pid;
  for (int i = 0; i < 500; ++i) {
    if (loopback_port_accepts(m_port)) return true;
    if (::waitpid(m_pid, nullptr, WNOHANG) == m_pid) {
      m_pid = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
  return false;
}

void NginxServer::kill() {
  if (m_pid > 0) {
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }
}

}  // namespace progcache::testing
