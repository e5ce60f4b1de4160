// util/mapped_access.h — accesses to a shared mapping that survive the file
// being cut short under them.
#pragma once

#include <type_traits>

namespace progcache::detail {

// Runs `fn` so that a SIGBUS raised in this thread while it runs ends it
// early instead of the process: `fn` returns false then, true otherwise.
//
// For accesses to a shared mapping of a file that another process may cut
// short (the store's accounting file and recency table: anyone who can write
// the store can truncate them), where a load or store past the file's new
// end is SIGBUS. `fn` must touch only such memory and locals, and own
// nothing that needs destroying: it is left by siglongjmp.
//
// The handler is installed on first use and keeps the one it found. A
// SIGBUS is the guarded call's only where the kernel raised it (an access,
// not kill(2)) in a thread inside one; any other goes to that handler, or
// ends the process as the default does (also where SIGBUS was ignored: an
// access cannot be). A handler installed later that does not chain to ours
// makes a fault here what it was without this guard; Python's faulthandler
// chains only by raising the signal again, so with faulthandler enabled
// after progcache's first guarded call a fault here ends the process as it
// would without progcache.
bool run_guarded(void (*fn)(void*), void* ctx) noexcept;

template <typename F>
bool guarded(F&& fn) noexcept {
  using Fn = std::remove_reference_t<F>;
  return run_guarded([](void* c) { (*static_cast<Fn*>(c))(); }, const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace progcache::detail
