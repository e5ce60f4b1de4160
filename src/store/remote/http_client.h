// What the HTTP-speaking backends (http_backend.cpp, s3_backend.cpp) share:
// one request made through libcurl by a deadline, its body kept in memory
// that never grows past a limit, and a pool of handles whose connections are
// kept alive between requests. Not public API.
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/remote_store.h"
#include "store/remote/curl_api.h"
#include "util/mutex.h"

namespace progcache::detail {

enum class HttpMethod { get, head, put, remove };
const char* method_name(HttpMethod m);

// A reply's body, in memory that grows with what arrives and never past the
// limit (http_client.cpp says why not a std::string).
class HttpBody {
 public:
  HttpBody() = default;
  HttpBody(const HttpBody&) = delete;
  HttpBody& operator=(const HttpBody&) = delete;
  HttpBody(HttpBody&& o) noexcept;
  HttpBody& operator=(HttpBody&& o) noexcept;
  ~HttpBody();

  // Makes room for `n` bytes in all; false when no memory.
  bool reserve(std::size_t n);
  // Appends, growing geometrically but never past `limit`; false when the
  // body would pass it (or no memory).
  bool append(const char* data, std::size_t n, std::size_t limit);
  [[nodiscard]] std::size_t size() const { return m_size; }
  [[nodiscard]] std::string_view view() const { return {m_data, m_size}; }
  // The body as Bytes (the memory handed over, trimmed to the body).
  Bytes take();

 private:
  void reserve_exact_down();
  char* m_data = nullptr;
  std::size_t m_size = 0;
  std::size_t m_capacity = 0;
};

// What one request brings back.
struct HttpReply {
  long status = 0;
  HttpBody body;
  curl_off_t content_length = -1;
};

struct HttpRequest {
  HttpMethod method = HttpMethod::get;
  std::string url;
  std::string_view upload;           // the body of a PUT
  std::vector<std::string> headers;  // "Name: value", added to the request
  std::string ca_file;               // "" for the system's CAs
  std::chrono::milliseconds connect_timeout{300};
  // A PUT is sent without "Expect: 100-continue" (a round trip, or a
  // second's wait on servers that never answer it) unless this is set.
  bool keep_expect = false;
  // Sets the request's credentials on the handle (basic, bearer, SigV4);
  // called after the handle's options are reset.
  std::function<void(const CurlApi&, CURL*)> authorize;
};

// Handles kept with their live connections, at most `max_idle` idle.
class HttpClient {
 public:
  HttpClient(std::string id, int max_idle, std::size_t max_body_bytes);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // One request, answered (headers and the whole body) by `deadline`. A
  // handle whose transfer failed is discarded, never pooled. Errors:
  // deadline_exceeded, unavailable (no connection), data_loss (a body cut
  // short), resource_exhausted (a body over the limit), each naming `id`.
  Result<HttpReply> request(const HttpRequest& r, RemoteDeadline deadline);

  [[nodiscard]] const std::string& id() const { return m_id; }

 private:
  CURL* take();
  void give_back(CURL* h);
  [[nodiscard]] Status transfer_error(HttpMethod m, CURLcode rc, bool too_big) const;

  const std::string m_id;
  const int m_max_idle;
  const std::size_t m_max_body_bytes;
  const CurlApi* m_curl = nullptr;  // null when libcurl cannot be loaded: every request fails with
  Status m_load_error;              // this
  Mutex m_mu;
  std::vector<CURL*> m_idle PROGCACHE_GUARDED_BY(m_mu);
};

}  // namespace progcache::detail
