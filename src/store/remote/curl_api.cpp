#include "store/remote/curl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace progcache::detail {

namespace {

constexpr const char* k_library = "libcurl.so.4";

struct Loaded {
  CurlApi api{};
  std::string error;  // empty when loaded
};

template <typename Fn>
bool resolve(void* lib, const char* name, Fn*& out, std::string& error) {
  void* sym = ::dlsym(lib, name);
  if (sym == nullptr) {
    error = std::string(k_library) + " has no " + name;
    return false;
  }
  out = reinterpret_cast<Fn*>(sym);  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast): dlsym's contract
  return true;
}

Loaded load() {
  Loaded l;
  // Never unloaded: handles and callbacks may outlive any owner.
  void* lib = ::dlopen(k_library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    l.error = std::string("the HTTP tier needs libcurl, which cannot be loaded (") +
              (why != nullptr ? why : k_library) + "): install libcurl4";
    return l;
  }
  CurlApi& a = l.api;
  if (!(resolve(lib, "curl_global_init", a.global_init, l.error) &&
        resolve(lib, "curl_easy_init", a.easy_init, l.error) &&
        resolve(lib, "curl_easy_cleanup", a.easy_cleanup, l.error) &&
        resolve(lib, "curl_easy_reset", a.easy_reset, l.error) &&
        resolve(lib, "curl_easy_setopt", a.easy_setopt, l.error) &&
        resolve(lib, "curl_easy_getinfo", a.easy_getinfo, l.error) &&
        resolve(lib, "curl_easy_perform", a.easy_perform, l.error) &&
        resolve(lib, "curl_easy_strerror", a.easy_strerror, l.error) &&
        resolve(lib, "curl_slist_append", a.slist_append, l.error) &&
        resolve(lib, "curl_slist_free_all", a.slist_free_all, l.error))) {
    return l;
  }
  if (a.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) l.error = "libcurl failed to initialise";
  return l;
}

}  // namespace

Result<const CurlApi*> curl_api() {
  static const Loaded loaded = load();  // thread-safe, once
  if (!loaded.error.empty()) return Status(Code::failed_precondition, loaded.error);
  return &loaded.api;
}

}  // namespace progcache::detail
