#include "testing/redis_server.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "testing/test_util.h"

namespace progcache::testing {

std::string RedisServer::binary() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

RedisServer::RedisServer(std::vector<std::string> extra, int port) : m_extra(std::move(extra)) {
  if (binary().empty()) return;
  char tmpl[] = "/tmp/progcache-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return;
  m_dir = tmpl;
  m_port = port != 0 ? port : free_loopback_port();
  start();
}

RedisServer::~RedisServer() {
  kill();
  if (!m_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
}

bool RedisServer::start() {
  std::vector<std::string> args = {binary(),
                                   "--port",
                                   std::to_string(m_port),
                                   "--bind",
                                   "127.0.0.1",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--dir",
                                   m_dir,
                                   "--logfile",
                                   m_dir + "/log",
                                   "--protected-mode",
                                   "yes"};
  args.insert(args.end(), m_extra.begin(), m_extra.end());
  const std::string log = m_dir + "/log";
  const std::size_t logged_before = read_all(log).size();  // a restart appends to the log
  const pid_t pid = spawn_quiet(std::move(args));
  m_pid = pid;
  // Ready when this server (not another one that took the port first) says
  // so in its log and answers a connection. One that exits at once (its port
  // taken) is seen at once, not after the whole wait.
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      m_pid = -1;
      return false;
    }
    if (read_all(log).find("Ready to accept connections", logged_before) != std::string::npos) {
      timeval tv{0, 100000};
      redisContext* c = redisConnectWithTimeout("127.0.0.1", m_port, tv);
      const bool ok = c != nullptr && c->err == 0;
      if (c != nullptr) redisFree(c);
      if (ok) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
  return false;
}

std::string RedisServer::url(const std::string& query) const {
  return "redis://127.0.0.1:" + std::to_string(m_port) + (query.empty() ? "" : "?" + query);
}

void RedisServer::pause() {
  if (m_pid > 0) ::kill(m_pid, SIGSTOP);
}
void RedisServer::resume() {
  if (m_pid > 0) ::kill(m_pid, SIGCONT);
}
void RedisServer::kill() {
  if (m_pid > 0) {
    ::kill(m_pid, SIGCONT);
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }
}
bool RedisServer::restart() {
  kill();
  return start();
}

std::string RedisServer::command(const std::vector<std::string>& argv) const {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", m_port, tv);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return "<no connection>";
  }
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
  std::string out = "<error>";
  if (r != nullptr) {
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR) {
      out.assign(r->str, r->len);
    } else if (r->type == REDIS_REPLY_INTEGER) {
      out = std::to_string(r->integer);
    } else if (r->type == REDIS_REPLY_NIL) {
      out = "<nil>";
    }
    freeReplyObject(r);
  }
  redisFree(c);
  return out;
}

}  // namespace progcache::testing
