// A real Redis Cluster on loopback: six redis-server processes (three
// primaries, three replicas) joined by `redis-cli --cluster create`, started
// and stopped by the test. Tests skip when redis-server or redis-cli is
// absent.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "testing/redis_server.h"

namespace progcache::testing {

class RedisCluster {
 public:
  // "" when redis-server and redis-cli are both installed, else what is missing.
  static std::string missing();

  explicit RedisCluster(int primaries = 3, int replicas_each = 1);
  ~RedisCluster() = default;
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // True once every slot is served and every node agrees.
  [[nodiscard]] bool ready() const { return m_ready; }
  // redis+cluster://127.0.0.1:<port of node 0>[,...]?<query>: `seeds` nodes as seeds.
  [[nodiscard]] std::string url(const std::string& query = "", int seeds = 1) const;

  [[nodiscard]] int size() const { return static_cast<int>(m_nodes.size()); }
  RedisServer& node(int i) { return *m_nodes[i]; }
  // The nodes that are primaries (or replicas) now, as indexes.
  [[nodiscard]] std::vector<int> primaries() const;
  [[nodiscard]] std::vector<int> replicas() const;
  // The replica of primary `p`, or -1.
  [[nodiscard]] int replica_of(int p) const;
  [[nodiscard]] std::string node_id(int i) const;

  // Waits (up to `seconds`) until every running node reports
  // cluster_state:ok with all 16384 slots served.
  bool wait_until_ok(int seconds = 20) const;
  // Waits (up to `seconds`) until node `i` is a primary.
  bool wait_until_primary(int i, int seconds = 30) const;
  // Runs redis-cli with `args` (the cluster subcommands); its exit status.
  static int redis_cli(const std::vector<std::string>& args);

 private:
  std::vector<std::unique_ptr<RedisServer>> m_nodes;
  bool m_ready = false;
};

}  // namespace progcache::testing
