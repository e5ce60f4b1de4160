// util/mapped_access.h: a SIGBUS from an access inside a guarded call ends
// the call, and every other SIGBUS is what it was without the guard.
#include "util/mapped_access.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "testing/test_util.h"

namespace progcache::detail {
namespace {

using testing::TempDir;

// A page of `path` mapped shared, its file then cut to nothing: touching
// the page is SIGBUS.
volatile char* cut_mapping(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::ftruncate(fd, 4096) != 0) std::abort();
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED || ::ftruncate(fd, 0) != 0) std::abort();
  ::close(fd);
  return static_cast<volatile char*>(p);
}

// Runs `body` in a child (alarm: a hang is a failure, not a stuck test) and
// returns its wait status.
template <typename F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(20);
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

bool died_by(int status, int sig) {
  return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}
// Ended as a fault ends it without the guard: by SIGBUS, or by whatever the
// handler found before it does (a sanitizer's reports and aborts), but
// neither carried on nor hung.
bool ended_by_the_fault(int status) {
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !died_by(status, SIGALRM);
}

TEST(MappedAccessTest, AnAccessPastTheCutEndsTheGuardedCallAndTheNextOneWorks) {
  TempDir tmp;
  const int status = in_child([&] {
    volatile char* p = cut_mapping(tmp.sub("f"));
    for (int i = 0; i < 3; ++i) {
      if (guarded([&] { p[0] = 1; })) ::_exit(10);  // the store should have faulted
    }
    int fine = 0;
    if (!guarded([&] { fine = 1; }) || fine != 1) ::_exit(11);
    sigset_t now;
    ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
    if (sigismember(&now, SIGBUS) != 0) ::_exit(12);  // left blocked
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(MappedAccessTest, AFaultOutsideAGuardedCallEndsTheProcessEvenWhereSigbusIsIgnored) {
  TempDir tmp;
  const int status = in_child([&] {
    ::signal(SIGBUS, SIG_IGN);  // inherited across exec: a program may start so
    (void)guarded([] {});       // the guard's handler installed
    volatile char* p = cut_mapping(tmp.sub("f"));
    p[0] = 1;  // the program's own mapping: the kernel kills it, as without the guard
  });
  EXPECT_TRUE(ended_by_the_fault(status)) << "status " << status << (died_by(status, SIGALRM) ? " (hung)" : "");
}

TEST(MappedAccessTest, ASigbusSentByKillIsNeverTakenForAnAccess) {
  const int status = in_child([] { (void)guarded([] { ::raise(SIGBUS); }); });
  EXPECT_TRUE(ended_by_the_fault(status)) << status;
}

// A handler installed after the guard's, chaining to it the common way:
// without SA_NODEFER and with every signal blocked while it runs.
struct sigaction g_guards {};
void chaining(int sig, siginfo_t* info, void* uctx) {
  g_guards.sa_sigaction(sig, info, uctx);
}

TEST(MappedAccessTest, AHandlerThatChainsLeavesNoSignalBlockedAfterTheCall) {
  TempDir tmp;
  const int status = in_child([&] {
    (void)guarded([] {});
    struct sigaction sa {};
    sa.sa_sigaction = chaining;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO;
    ::sigaction(SIGBUS, &sa, &g_guards);
    volatile char* p = cut_mapping(tmp.sub("f"));
    for (int i = 0; i < 2; ++i) {  // a second fault with SIGBUS blocked would kill it
      if (guarded([&] { p[0] = 1; })) ::_exit(10);
    }
    sigset_t now;
    ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
    if (sigismember(&now, SIGBUS) != 0 || sigismember(&now, SIGTERM) != 0) ::_exit(12);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace progcache::detail
