#include "testing/seaweed_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "store/remote/curl_api.h"
#include "testing/test_util.h"

namespace progcache::testing {

namespace {

std::string port_arg(const std::string& flag) {
  return "-" + flag + "=" + std::to_string(free_loopback_port());
}

std::size_t discard(char*, std::size_t size, std::size_t n, void*) {
  return size * n;
}

// One signed request to the S3 API; the HTTP status, or 0 when none came.
long signed_request(const std::string& url, const char* method) {
  auto api = detail::curl_api();
  if (!api.ok()) return 0;
  const detail::CurlApi& curl = **api;
  CURL* h = curl.easy_init();
  if (h == nullptr) return 0;
  const std::string sigv4 = "aws:amz:us-east-1:s3";
  const std::string userpwd = SeaweedServer::access_key() + ":" + SeaweedServer::secret_key();
  curl_slist* headers = curl.slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  curl.easy_setopt(h, CURLOPT_URL, url.c_str());
  curl.easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl.easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl.easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
  curl.easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl.easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
  curl.easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
  long status = 0;
  if (curl.easy_perform(h) == CURLE_OK) curl.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl.slist_free_all(headers);
  curl.easy_cleanup(h);
  return status;
}

}  // namespace

std::string SeaweedServer::binary() {
  if (const char* p = std::getenv("PROGCACHE_TEST_WEED"); p != nullptr && *p != '\0') {
    return ::access(p, X_OK) == 0 ? std::string(p) : std::string();
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string d; std::getline(dirs, d, ':');) {
    if (d.empty()) continue;
    std::string candidate = d + "/weed";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

SeaweedServer::SeaweedServer(int extra_volume_servers) {
  if (binary().empty()) return;
  char tmpl[] = "/tmp/progcache-seaweed-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return;
  m_dir = tmpl;
  if (!start(extra_volume_servers)) kill();
}

SeaweedServer::~SeaweedServer() {
  kill();
  if (!m_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
}

std::string SeaweedServer::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(m_s3_port);
}

std::string SeaweedServer::url(const std::string& bucket, const std::string& prefix, const std::string& query) const {
  return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix) + "?endpoint=" + endpoint() + "&region=us-east-1" +
         (query.empty() ? "" : "&" + query);
}

bool SeaweedServer::create_bucket(const std::string& bucket) const {
  const long status = signed_request(endpoint() + "/" + bucket, "PUT");
  if (status != 200 && status != 409) return false;
  // One object written: a bucket's first write waits for its volumes to be
  // made (seconds on a loaded machine), which no test's deadline should pay.
  for (int i = 0; i < 100; ++i) {
    if (signed_request(endpoint() + "/" + bucket + "/progcache-first-write", "PUT") == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string SeaweedServer::log() const {
  std::stringstream ss;
  for (const char* f : {"/weed.log", "/volume.log"}) {
    std::ifstream in(m_dir + f);
    ss << in.rdbuf();
  }
  const std::string all = ss.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

pid_t SeaweedServer::spawn(const std::vector<std::string>& args, const std::string& log_file) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

bool SeaweedServer::start(int extra_volume_servers) {
  std::filesystem::create_directories(m_dir + "/data");
  {
    std::ofstream id(m_dir + "/s3.json");
    id << R"({"identities":[{"name":"ci","credentials":[{"accessKey":")" << access_key() << R"(","secretKey":")"
       << secret_key() << R"("}],"actions":["Admin","Read","Write","List","Tagging"]}]})";
  }
  m_s3_port = free_loopback_port();
  m_master_port = free_loopback_port();
  m_master_grpc_port = free_loopback_port();
  const std::string replication = extra_volume_servers > 0 ? "001" : "000";
  // Every port named: none of weed's fixed defaults (6060, 8111, 16777, ...)
  // is bound, so tests run side by side.
  std::vector<std::string> args = {binary(),
                                   "server",
                                   "-dir=" + m_dir + "/data",
                                   "-ip=127.0.0.1",
                                   "-ip.bind=127.0.0.1",
                                   "-master.port=" + std::to_string(m_master_port),
                                   "-master.port.grpc=" + std::to_string(m_master_grpc_port),
                                   "-master.telemetry=false",
                                   "-master.volumeSizeLimitMB=64",
                                   "-master.defaultReplication=" + replication,
                                   port_arg("volume.port"),
                                   port_arg("volume.port.grpc"),
                                   "-volume.max=8",
                                   port_arg("filer.port"),
                                   port_arg("filer.port.grpc"),
                                   "-s3",
                                   "-s3.port=" + std::to_string(m_s3_port),
                                   port_arg("s3.port.grpc"),
                                   "-s3.port.iceberg=0",
                                   "-s3.port.lance=0",
                                   "-s3.config=" + m_dir + "/s3.json",
                                   port_arg("metricsPort"),
                                   port_arg("debug.port")};
  m_pid = spawn(args, m_dir + "/weed.log");
  for (int i = 0; i < extra_volume_servers; ++i) {
    const std::string dir = m_dir + "/volume" + std::to_string(i);
    std::filesystem::create_directories(dir);
    m_volume_pids.push_back(
        spawn({binary(), "volume", "-dir=" + dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1", port_arg("port"),
               port_arg("port.grpc"), port_arg("metricsPort"), "-max=8",
               "-master=127.0.0.1:" + std::to_string(m_master_port) + "." + std::to_string(m_master_grpc_port)},
              m_dir + "/volume.log"));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    if (::waitpid(m_pid, nullptr, WNOHANG) == m_pid) {
      m_pid = -1;
      return false;
    }
    // The S3 port answers before the filer behind it is ready: a bucket
    // made is the sign that it serves.
    if (loopback_port_accepts(m_s3_port) && create_bucket("progcache-ready")) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

void SeaweedServer::kill_extra_volume_server() {
  if (m_volume_pids.empty()) return;
  ::kill(m_volume_pids.back(), SIGKILL);
  ::waitpid(m_volume_pids.back(), nullptr, 0);
  m_volume_pids.pop_back();
}

void SeaweedServer::kill() {
  while (!m_volume_pids.empty()) kill_extra_volume_server();
  if (m_pid > 0) {
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }
}

}  // namespace progcache::testing
