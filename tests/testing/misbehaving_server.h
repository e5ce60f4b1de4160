// A TCP server on a loopback port whose every connection is served by a
// function of the test's, for the Redis and HTTP tiers' tests.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace progcache::testing {

// A server on a loopback port that speaks just enough of a protocol (RESP,
// HTTP) to misbehave: each connection runs `serve(fd, stop)` on its own
// thread. For the faults a real server cannot be made to show (a trickled
// reply, a cursor that never ends, a value of any claimed size, a body cut
// short of its announced length).
class MisbehavingServer {
 public:
  using Serve = std::function<void(int fd, const std::atomic<bool>& stop)>;
  explicit MisbehavingServer(Serve serve) : m_serve(std::move(serve)) {
    m_listen = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(m_listen, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(m_listen, 16) != 0 ||
        ::getsockname(m_listen, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
      return;
    }
    m_port = ntohs(a.sin_port);
    m_accept = std::thread([this] {
      while (!m_stop) {
        pollfd p{m_listen, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int fd = ::accept(m_listen, nullptr, nullptr);
        if (fd < 0) continue;
        m_conns.emplace_back([this, fd] {
          m_serve(fd, m_stop);
          ::close(fd);
        });
      }
    });
  }
  ~MisbehavingServer() {
    m_stop = true;
    if (m_accept.joinable()) m_accept.join();
    for (auto& t : m_conns) t.join();
    ::close(m_listen);
  }
  [[nodiscard]] int port() const { return m_port; }
  // redis://127.0.0.1:<port>?<query>
  [[nodiscard]] std::string url(const std::string& query) const {
    return "redis://127.0.0.1:" + std::to_string(m_port) + "?" + query;
  }

  // Waits for the next request's bytes (their content does not matter here).
  static bool next_request(int fd, const std::atomic<bool>& stop) {
    char buf[65536];
    while (!stop) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      return ::recv(fd, buf, sizeof(buf), 0) > 0;
    }
    return false;
  }
  // Sends `reply` one byte every `gap`, until done, stopped, or the peer leaves.
  static void trickle(int fd, const std::atomic<bool>& stop, const std::string& reply, std::chrono::milliseconds gap) {
    for (char ch : reply) {
      if (stop || ::send(fd, &ch, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(gap);
    }
  }

 private:
  Serve m_serve;
  int m_listen = -1;
  int m_port = 0;
  std::atomic<bool> m_stop{false};
  std::thread m_accept;
  std::vector<std::thread> m_conns;  // touched only by the accept thread until it is joined
};

}  // namespace progcache::testing
