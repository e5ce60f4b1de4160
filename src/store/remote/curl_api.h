// libcurl, loaded when the first HTTP tier opens instead of when the program
// starts. libcurl brings about 28 shared libraries with it (TLS, Kerberos,
// LDAP, SSH, ...): linked, every process paid for mapping and relocating
// them at start-up (about 10 ms of a 13 ms `progcache --version` on a
// 2-core machine), while only a process with an http:// or https:// tier
// uses any of it. The functions below are the whole of what the HTTP tier
// calls, resolved by name from libcurl.so.4 (the ABI soname libcurl has
// kept since 2006).
#pragma once

#include <curl/curl.h>

#include "progcache/status.h"

namespace progcache::detail {

struct CurlApi {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL* h);
  void (*easy_reset)(CURL* h);
  CURLcode (*easy_setopt)(CURL* h, CURLoption option, ...);
  CURLcode (*easy_getinfo)(CURL* h, CURLINFO info, ...);
  CURLcode (*easy_perform)(CURL* h);
  const char* (*easy_strerror)(CURLcode code);
  curl_slist* (*slist_append)(curl_slist* list, const char* text);
  void (*slist_free_all)(curl_slist* list);
};

// libcurl loaded and initialised (curl_global_init) once per process,
// thread-safe; failed_precondition naming the library and dlerror's reason
// when it cannot be loaded.
Result<const CurlApi*> curl_api();

}  // namespace progcache::detail
