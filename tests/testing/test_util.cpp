#include "testing/test_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "store/file/recency.h"

namespace progcache::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/progcache-test-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) throw std::runtime_error("mkdtemp failed");
  m_path = p;
}

TempDir::~TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const bool failed = info != nullptr && info->result() != nullptr && info->result()->Failed();
  if (failed) {
    std::fprintf(stderr, "test failed: keeping %s\n", m_path.c_str());
    return;
  }
  std::error_code ec;
  // Make everything removable first (tests chmod things away).
  for (auto it = std::filesystem::recursive_directory_iterator(m_path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      std::filesystem::permissions(it->path(), std::filesystem::perms::owner_all, std::filesystem::perm_options::add,
                                   ec);
    }
  }
  std::filesystem::remove_all(m_path, ec);
}

Key make_key(std::uint64_t n, int first_byte) {
  Key k = KeyBuilder("test").add_int("n", static_cast<std::int64_t>(n)).finish();
  if (first_byte >= 0) k.bytes[0] = static_cast<std::uint8_t>(first_byte);
  return k;
}

std::string make_payload(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(size, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

Entry make_entry(std::string_view payload) {
  return Entry::from_bytes(Bytes::copy_of(payload));
}

namespace {

std::string pem_of(EVP_PKEY* key, bool private_key) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (private_key) {
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  } else {
    PEM_write_bio_PUBKEY(bio, key);
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return out;
}

}  // namespace

Ed25519Pem make_ed25519_key() {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  Ed25519Pem out{pem_of(key, true), pem_of(key, false)};
  EVP_PKEY_free(key);
  return out;
}

std::string make_ec_public_pem() {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  std::string out = pem_of(key, false);
  EVP_PKEY_free(key);
  return out;
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

bool loopback_port_accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

namespace {

bool loopback_port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int free_loopback_port_pair(int offset) {
  // Ports 20000-29999: below Linux's ephemeral range (32768 up), so that no
  // outgoing connection takes one between this check and the server's bind.
  static std::atomic<unsigned> next{static_cast<unsigned>(::getpid()) * 7919u};
  for (int tries = 0; tries < 10000; ++tries) {
    const int port = 20000 + static_cast<int>(next.fetch_add(1) % 10000);
    if (loopback_port_free(port) && loopback_port_free(port + offset)) return port;
  }
  return free_loopback_port();
}

pid_t spawn_quiet(std::vector<std::string> args) {
  std::vector<char*> argv;  // made before fork: the child only calls what is async-signal-safe
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

namespace {
template <typename Fn>
void for_each_entry_file(const std::string& root, Fn&& fn) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(root + "/v1", ec)) {
    if (e.is_regular_file() && e.path().filename().string().size() == 62) fn(e);
  }
}
}  // namespace

std::size_t entry_files_on_disk(const std::string& root) {
  std::size_t n = 0;
  for_each_entry_file(root, [&](const auto&) { ++n; });
  return n;
}

std::uint64_t entry_bytes_on_disk(const std::string& root) {
  std::uint64_t n = 0;
  for_each_entry_file(root, [&](const auto& e) { n += e.file_size(); });
  return n;
}

std::string compressible_payload(std::size_t size, unsigned seed) {
  const std::string words = make_payload(64, seed);
  std::string out;
  out.reserve(size);
  for (std::size_t i = 0; out.size() < size; ++i) {
    out.append(words, (i * 8) % 56, 8);
    if (i % 5 == 0) out.push_back(static_cast<char>(i * 31 + seed));
  }
  out.resize(size);
  return out;
}

void forget_recorded_use(const std::string& entry_path) {
  const std::filesystem::path p(entry_path);
  auto key = Key::from_hex(p.parent_path().filename().string() + p.filename().string());
  ASSERT_TRUE(key.ok()) << entry_path << " is not an entry's path";
  file_store::RecencyTable table;
  ASSERT_TRUE(table.open(Env::posix(), (p.parent_path().parent_path() / "recency").string(), 0600).ok());
  table.forget(*key);
}

}  // namespace progcache::testing
