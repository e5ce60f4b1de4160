// The host-wide lock behind single-flight: exclusive across holders of one
// process and across processes, released by a holder's death, never left on
// disk, and bounded by its timeout.
#include "progcache/lock_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "testing/test_util.h"

namespace progcache {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

TEST(LockFile, ExcludesAnotherHolderUntilReleasedAndLeavesNoFile) {
  testing::TempDir tmp;
  const std::string dir = tmp.sub("locks");
  auto first = LockFile::acquire(Env::posix(), dir, "k", milliseconds(0));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE(fs::exists(first->path()));
  bool waited = false;
  auto second = LockFile::acquire(Env::posix(), dir, "k", milliseconds(30), &waited);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::deadline_exceeded) << second.status().to_string();
  EXPECT_TRUE(waited);
  // Another name is another lock.
  EXPECT_TRUE(LockFile::acquire(Env::posix(), dir, "other", milliseconds(0)).ok());
  first->release();
  EXPECT_TRUE(fs::is_empty(dir)) << "a released lock file stayed on disk";
  auto third = LockFile::acquire(Env::posix(), dir, "k", milliseconds(0), &waited);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_FALSE(waited);
}

TEST(LockFile, AKilledHolderLeavesNoStaleLock) {
  testing::TempDir tmp;
  const std::string dir = tmp.sub("locks");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto held = LockFile::acquire(Env::posix(), dir, "k", milliseconds(0));
    const char c = held.ok() ? '1' : '0';
    (void)!::write(ready[1], &c, 1);
    ::pause();  // killed while holding the lock
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, '1');
  EXPECT_FALSE(LockFile::acquire(Env::posix(), dir, "k", milliseconds(0)).ok()) << "the child holds it";
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  // Its file is still there (nobody unlinked it), but the lock died with it.
  auto after = LockFile::acquire(Env::posix(), dir, "k", milliseconds(0));
  EXPECT_TRUE(after.ok()) << after.status().to_string();
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace progcache
