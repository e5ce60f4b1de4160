// A full filesystem costs an error, never the process. Each case runs on a
// real 1 MiB tmpfs filled to the last byte, in a forked child, so a SIGBUS
// (the accounting file written through a mapping it has no blocks for)
// shows as a signal instead of killing the test runner. Skips, saying why,
// where mounting a tmpfs is not permitted (it needs root or CAP_SYS_ADMIN).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_mnt = m_tmp.sub("mnt");
    fs::create_directories(m_mnt);
    if (::mount("tmpfs", m_mnt.c_str(), "tmpfs", 0, "size=1M,mode=0700") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root or CAP_SYS_ADMIN";
    }
    m_mounted = true;
  }
  void TearDown() override {
    if (m_mounted) ::umount2(m_mnt.c_str(), MNT_DETACH);
  }

  // Writes until the filesystem refuses another byte.
  void fill() {
    const int fd = ::open((m_mnt + "/fill").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    const std::string block(4096, 'f');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    while (::write(fd, block.data(), 1) > 0) {
    }
    EXPECT_EQ(errno, ENOSPC);
    ::close(fd);
  }

  // Runs `body` in a child; returns its wait status description and whether
  // it exited 0.
  static bool in_child(const std::function<bool()>& body, std::string* how) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body() ? 0 : 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
      *how = "killed by signal " + std::to_string(WTERMSIG(status));
      return false;
    }
    *how = "exit " + std::to_string(WEXITSTATUS(status));
    return WEXITSTATUS(status) == 0;
  }

  int cli(const std::string& args) {
    const std::string cmd = "env -u PROGCACHE_DISABLE PROGCACHE_DIR=" + quote(m_mnt + "/cache") + " " +
                            quote(PROGCACHE_CLI_PATH) + " " + args + " > " + quote(m_tmp.sub("out")) + " 2> " +
                            quote(m_tmp.sub("err")) + " < /dev/null";
    const int status = std::system(cmd.c_str());
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
  }

  testing::TempDir m_tmp;
  std::string m_mnt;
  bool m_mounted = false;
};

TEST_F(FullDiskTest, OpeningANewStoreOnAFullDiskIsAnError) {
  fill();
  std::string how;
  EXPECT_TRUE(in_child(
      [&] {
        auto s = FileStore::open({.root = m_mnt + "/cache"});
        if (s.ok()) return (*s)->put_bytes(testing::make_key(1), Bytes::copy_of("x")).ok() == false;
        return !s.status().message().empty();
      },
      &how))
      << how;
}

TEST_F(FullDiskTest, LostAccountingFileOnAFullDiskIsAnError) {
  {
    auto s = FileStore::open({.root = m_mnt + "/cache"});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_TRUE((*s)->put_bytes(testing::make_key(1), Bytes::copy_of("kept")).ok());
  }
  fs::remove(m_mnt + "/cache/v1/accounting");
  fill();
  std::string how;
  EXPECT_TRUE(in_child(
      [&] {
        auto s = FileStore::open({.root = m_mnt + "/cache"});
        return !s.ok() && s.status().message().find("disk") != std::string::npos;
      },
      &how))
      << how;
}

TEST_F(FullDiskTest, PutsOnAStoreWhoseDiskFilledUpFailCleanlyAndGetsStillHit) {
  auto s = FileStore::open({.root = m_mnt + "/cache"});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE((*s)->put_bytes(testing::make_key(1), Bytes::copy_of("kept")).ok());
  fill();
  std::string how;
  EXPECT_TRUE(in_child(
      [&] {
        const Status st = (*s)->put_bytes(testing::make_key(2), Bytes::copy_of(std::string(100000, 'p')));
        auto g = (*s)->get_bytes(testing::make_key(1));
        return !st.ok() && g.ok() && g->has_value() && (*g)->view() == "kept";
      },
      &how))
      << how;
}

TEST_F(FullDiskTest, CliPutFailsWithAnErrorAndCompileStillCompiles) {
  fill();
  testing::write_all(m_tmp.sub("value.bin"), "some bytes");
  const int put = cli("put k " + quote(m_tmp.sub("value.bin")));
  EXPECT_EQ(put, 3) << testing::read_all(m_tmp.sub("err"));
  auto info = compiler_info();
  if (!info.ok() || info->nvrtc_path.empty()) GTEST_SKIP() << "no NVRTC for the compile half";
  testing::write_all(m_tmp.sub("k.cu"), "__global__ void k(int* x) { x[0] = 1; }\n");
  const int comp = cli("compile " + quote(m_tmp.sub("k.cu")) + " --arch sm_80 -o " + quote(m_tmp.sub("k.cubin")));
  EXPECT_EQ(comp, 0) << testing::read_all(m_tmp.sub("err"));
  EXPECT_EQ(testing::read_all(m_tmp.sub("k.cubin")).substr(0, 4),
            "\x7f"
            "ELF");
}

}  // namespace
}  // namespace progcache
