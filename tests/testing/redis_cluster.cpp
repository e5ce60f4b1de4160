#include "testing/redis_cluster.h"

#include <hiredis/hiredis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "testing/test_util.h"

namespace progcache::testing {

namespace {

// Replicas listed by the CLUSTER SLOTS answer of the node on `port`.
int listed_replicas(int port) {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr || c->err != 0) {
    if (c != nullptr) redisFree(c);
    return 0;
  }
  int n = 0;
  if (auto* r = static_cast<redisReply*>(redisCommand(c, "CLUSTER SLOTS"))) {
    if (r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < r->elements; ++i) {
        if (r->element[i]->elements > 3) n += static_cast<int>(r->element[i]->elements - 3);
      }
    }
    freeReplyObject(r);
  }
  redisFree(c);
  return n;
}

std::string cli_binary() {
  for (const char* p : {"/usr/bin/redis-cli", "/usr/local/bin/redis-cli"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return "";
}

}  // namespace

std::string RedisCluster::missing() {
  if (RedisServer::binary().empty()) return "redis-server not installed";
  if (cli_binary().empty()) return "redis-cli not installed";
  return "";
}

int RedisCluster::redis_cli(const std::vector<std::string>& args) {
  std::vector<std::string> all = {cli_binary()};
  all.insert(all.end(), args.begin(), args.end());
  const pid_t pid = spawn_quiet(std::move(all));
  if (pid < 0) return 127;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

RedisCluster::RedisCluster(int primaries, int replicas_each) {
  if (!missing().empty()) return;
  const int n = primaries * (1 + replicas_each);
  std::vector<std::string> create = {"--cluster", "create"};
  for (int i = 0; i < n; ++i) {
    // A node is suspected after 1 s without an answer, so a failover takes
    // seconds, not the default 15.
    // A port found free can be taken by a concurrent test before this node
    // binds it (the client port or the bus port, 10000 above): then the node
    // exits at once and another pair of ports is tried.
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto node =
          std::make_unique<RedisServer>(std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-node-timeout",
                                                                 "1000", "--cluster-config-file", "nodes.conf",
                                                                 // A replica syncs at once, not after the default 5 s.
                                                                 "--repl-diskless-sync-delay", "0"},
                                        free_loopback_port_pair(10000));
      const bool up = node->running();
      m_nodes.push_back(std::move(node));
      if (up) break;
      m_nodes.pop_back();
    }
    if (static_cast<int>(m_nodes.size()) != i + 1) return;
    create.push_back("127.0.0.1:" + std::to_string(m_nodes.back()->port()));
  }
  create.insert(create.end(), {"--cluster-replicas", std::to_string(replicas_each), "--cluster-yes"});
  if (redis_cli(create) != 0) return;
  m_ready = wait_until_ok();
  // Every replica attached to its primary (so that a failover has one) and
  // listed by CLUSTER SLOTS (so that clients can read from it).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (m_ready) {
    int linked = 0;
    for (int r : replicas()) {
      linked += m_nodes[r]->command({"INFO", "replication"}).find("master_link_status:up") != std::string::npos;
    }
    if (linked == primaries * replicas_each && listed_replicas(m_nodes[0]->port()) == primaries * replicas_each) break;
    if (std::chrono::steady_clock::now() > until) m_ready = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string RedisCluster::url(const std::string& query, int seeds) const {
  std::string u = "redis+cluster://";
  for (int i = 0; i < seeds && i < size(); ++i) {
    u += (i == 0 ? "" : ",") + std::string("127.0.0.1:") + std::to_string(m_nodes[i]->port());
  }
  return u + (query.empty() ? "" : "?" + query);
}

std::vector<int> RedisCluster::primaries() const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) {
    if (m_nodes[i]->running() && m_nodes[i]->command({"INFO", "replication"}).find("role:master") != std::string::npos)
      out.push_back(i);
  }
  return out;
}

std::vector<int> RedisCluster::replicas() const {
  std::vector<int> out;
  for (int i = 0; i < size(); ++i) {
    if (m_nodes[i]->running() && m_nodes[i]->command({"INFO", "replication"}).find("role:slave") != std::string::npos)
      out.push_back(i);
  }
  return out;
}

int RedisCluster::replica_of(int p) const {
  const std::string port = "master_port:" + std::to_string(m_nodes[p]->port()) + "\r";
  for (int r : replicas()) {
    if (m_nodes[r]->command({"INFO", "replication"}).find(port) != std::string::npos) return r;
  }
  return -1;
}

std::string RedisCluster::node_id(int i) const {
  return m_nodes[i]->command({"CLUSTER", "MYID"});
}

bool RedisCluster::wait_until_primary(int i, int seconds) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (m_nodes[i]->command({"INFO", "replication"}).find("role:master") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool RedisCluster::wait_until_ok(int seconds) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    bool ok = true;
    for (const auto& n : m_nodes) {
      if (!n->running()) continue;
      const std::string info = n->command({"CLUSTER", "INFO"});
      if (info.find("cluster_state:ok") == std::string::npos ||
          info.find("cluster_slots_ok:16384") == std::string::npos) {
        ok = false;
        break;
      }
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace progcache::testing
