#include "util/mapped_access.h"

#include <csetjmp>
#include <csignal>
#include <mutex>

namespace progcache::detail {
namespace {

// The guarded call running in this thread, if any. Set before the first
// access, so the thread's TLS block exists when the handler reads it.
thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous {};

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  if (sigjmp_buf* g = t_guard) siglongjmp(*g, 1);
  // Not a guarded access: what the process had before.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (g_previous.sa_handler == SIG_IGN) {
    return;
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: put it back and raise again (a fault raised by
  // the hardware would repeat on return anyway; one sent by kill would not).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  ::raise(SIGBUS);
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sigemptyset(&sa.sa_mask);
  // SA_NODEFER: SIGBUS stays unblocked when the handler leaves by
  // siglongjmp, so sigsetjmp need not save the mask (a system call).
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  ::sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

bool run_guarded(void (*fn)(void*), void* ctx) noexcept {
  static std::once_flag once;
  std::call_once(once, install);
  sigjmp_buf here;
  sigjmp_buf* const outer = t_guard;
  if (sigsetjmp(here, 0) != 0) {
    t_guard = outer;
    return false;
  }
  t_guard = &here;
  fn(ctx);
  t_guard = outer;
  return true;
}

}  // namespace progcache::detail
