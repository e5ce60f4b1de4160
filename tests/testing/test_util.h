// Test helpers: a private temp directory per test, removed when the test
// passes and kept (path printed) when it fails.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "progcache/bytes.h"
#include "progcache/entry.h"
#include "progcache/key.h"

namespace progcache::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return m_path; }
  [[nodiscard]] std::string sub(const std::string& name) const { return m_path + "/" + name; }

 private:
  std::string m_path;
};

// A key whose first byte (file-store shard) and last byte (memory shard) are
// chosen, the rest derived from `n`.
Key make_key(std::uint64_t n, int first_byte = -1);
// A deterministic payload of `size` bytes seeded by `seed`.
std::string make_payload(std::size_t size, std::uint64_t seed);
// Bytes like a cubin's: runs of repeated instruction words with some
// variety, which zstd shrinks several-fold.
std::string compressible_payload(std::size_t size, unsigned seed);
Entry make_entry(std::string_view payload);

std::string read_all(const std::string& path);

// A new Ed25519 key pair as PEM text (OpenSSL), for signing tests.
struct Ed25519Pem {
  std::string private_pem;
  std::string public_pem;
};
Ed25519Pem make_ed25519_key();
// A PEM public key of another algorithm (EC P-256), which must be refused.
std::string make_ec_public_pem();

// A free TCP port on 127.0.0.1 (bound, read back, released), for the test
// servers (redis-server, nginx) a test starts.
int free_loopback_port();
// Whether something accepts a TCP connection on 127.0.0.1:port (a server
// the test started is up).
bool loopback_port_accepts(int port);
// A loopback port P below the ephemeral range with P + `offset` free too
// (a Redis Cluster node listens on P and on its bus port P + 10000).
int free_loopback_port_pair(int offset);

// Starts `args` (args[0] is the program's path) as a child process whose
// output goes to /dev/null, and returns its pid (-1 when fork fails). The
// child dies with the test process, so a test killed part-way (a sanitizer's
// report) leaves no server holding the test runner's output open.
pid_t spawn_quiet(std::vector<std::string> args);

// What a file store rooted at `root` holds on disk, counted from the files
// themselves (entry files only: no temps, no control files): the truth the
// store's accounting and caps are checked against.
std::size_t entry_files_on_disk(const std::string& root);
std::uint64_t entry_bytes_on_disk(const std::string& root);
void write_all(const std::string& path, std::string_view data);
// Drops the reads and puts the store's recency table (src/store/file/
// recency.h) holds for the entry file at `entry_path`, so that the file's
// own times, set by a test to stand for a history of use, decide its age.
void forget_recorded_use(const std::string& entry_path);

}  // namespace progcache::testing
