#include "util/mapped_access.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <mutex>

namespace progcache::detail {
namespace {

// The guarded call running in this thread, if any. Set before the access,
// so the thread's TLS block exists when the handler reads it for a guarded
// access. (The initial-exec model, which never allocates, cannot be had in
// a Python extension: dlopen refuses it where the static TLS space is used
// up. A fault in a thread that never ran a guarded call may have its block
// allocated in the handler, on the way to ending the process.)
thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous {};

[[noreturn]] void die_by_default(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // not reached: the default action ends the process
}

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  // Ours only where the kernel raised it (an access, not kill(2)) in a thread
  // inside a guarded call. The mask goes back to what it was at the access:
  // a handler that chained here may have run with SIGBUS (or more) blocked.
  const bool from_an_access = info != nullptr && info->si_code > 0;
  if (sigjmp_buf* g = t_guard; g != nullptr && from_an_access) {
    if (uctx != nullptr) ::pthread_sigmask(SIG_SETMASK, &static_cast<ucontext_t*>(uctx)->uc_sigmask, nullptr);
    siglongjmp(*g, 1);
  }
  // Not a guarded access: what the process had before.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous.sa_sigaction != nullptr) {
      g_previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (g_previous.sa_handler == SIG_IGN) {
    // An access cannot be ignored: returning would run it again, forever
    // (the kernel kills a process that ignores a SIGBUS it raises).
    if (from_an_access) die_by_default(sig);
    return;
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  die_by_default(sig);
}

void install() {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sigemptyset(&sa.sa_mask);
  // SA_NODEFER: SIGBUS stays unblocked while the handler runs, and a jump
  // out of it needs no saved mask (sigsetjmp without one is no system call).
  // SA_ONSTACK: a runtime's alternate signal stack, where it has one.
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
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
  std::atomic_signal_fence(std::memory_order_seq_cst);
  fn(ctx);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = outer;
  return true;
}

}  // namespace progcache::detail
