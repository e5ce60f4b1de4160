#include "progcache/http_backend.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "store/remote/curl_api.h"
#include "store/remote/url_parts.h"
#include "util/mutex.h"

namespace progcache {

// ---------------------------------------------------------------- URLs

std::string HttpUrl::shown() const {
  std::string out = tls ? "https://" : "http://";
  if (!user.empty()) out += user + "@";
  out += host;
  if (port != 0) out += ":" + std::to_string(port);
  return out + prefix;
}

std::string HttpUrl::entry_url(std::string_view name) const {
  return shown() + "/ac/" + std::string(name);
}

namespace {

using remote_url::parse_int;

// A path or host character that needs no quoting in a URL; anything else in
// a prefix is refused rather than guessed at.
bool plain_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '/';
}

}  // namespace

Result<HttpUrl> parse_http_url(std::string_view url) {
  HttpUrl u;
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    u.tls = true;
    rest = url.substr(8);
  } else {
    return invalid_argument("bad HTTP cache URL: it must start with http:// or https://");
  }
  const std::string shown_scheme = u.tls ? "https://" : "http://";
  auto bad = [&](const std::string& why) {
    return invalid_argument("bad HTTP cache URL '" + shown_scheme + "...': " + why);
  };
  // Credentials end at the URL's last '@' (a password may hold '?', '/' or
  // '@'); a ':' before it is a password, refused before anything else is
  // split so that no part of one can reach a message.
  if (auto at = rest.rfind('@');
      at != std::string_view::npos && rest.substr(0, at).find(':') != std::string_view::npos) {
    return bad(
        "a password in the URL would be visible to every local user; put it in a file named by "
        "PROGCACHE_REMOTE_PASSWORD_FILE (the user stays in the URL)");
  }
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = authority.substr(0, at);
    if (userinfo.empty() || !std::all_of(userinfo.begin(), userinfo.end(), plain_char) ||
        userinfo.find('/') != std::string_view::npos) {
      return bad("the user name must be plain characters");
    }
    u.user = std::string(userinfo);
    authority = authority.substr(at + 1);
  }
  std::string_view hostpart = authority;
  std::string_view portpart;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    hostpart = authority.substr(0, close + 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) return bad("unexpected text after the host");
      portpart = after.substr(1);
      if (portpart.empty()) return bad("port must be 1-65535");
    }
  } else if (auto colon = authority.find(':'); colon != std::string_view::npos) {
    hostpart = authority.substr(0, colon);
    portpart = authority.substr(colon + 1);
    if (portpart.empty()) return bad("port must be 1-65535");
  }
  if (hostpart.empty()) return bad("missing host");
  if (!hostpart.starts_with('[') &&
      !std::all_of(hostpart.begin(), hostpart.end(), [](char c) { return plain_char(c) && c != '/'; })) {
    return bad("the host must be a name or an address");
  }
  u.host = std::string(hostpart);
  if (!portpart.empty()) {
    std::int64_t port = 0;
    if (!parse_int(portpart, &port) || port <= 0 || port > 65535) return bad("port must be 1-65535");
    u.port = static_cast<int>(port);
  }
  while (path.ends_with('/')) path.remove_suffix(1);
  if (!std::all_of(path.begin(), path.end(), plain_char) || path.find("//") != std::string_view::npos ||
      path.find("/./") != std::string_view::npos || path.find("/../") != std::string_view::npos ||
      path.ends_with("/..") || path.ends_with("/.")) {
    return bad("the path prefix may hold only letters, digits and - . _ ~ between single slashes");
  }
  u.prefix = std::string(path);
  while (!query.empty()) {
    const remote_url::QueryParam param = remote_url::take_query_param(query);
    if (!param.has_value) return bad("query parameter '" + std::string(param.text) + "' has no value");
    const std::string_view k = param.key, v = param.value;
    std::int64_t n = 0;
    if (k == "timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("timeout must be positive milliseconds");
      u.timeout = std::chrono::milliseconds(n);
    } else if (k == "connect_timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("connect_timeout must be positive milliseconds");
      u.connect_timeout = std::chrono::milliseconds(n);
    } else if (k == "ca_file") {
      if (!u.tls) return bad("ca_file is for https:// URLs");
      if (v.empty()) return bad("ca_file is empty");
      u.ca_file = std::string(v);
    } else {
      return bad("unknown parameter '" + std::string(k) + "' (timeout, connect_timeout, ca_file)");
    }
  }
  return u;
}

// ---------------------------------------------------------------- backend

namespace {

long millis_until(RemoteDeadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RemoteClock::now()).count();
  return left <= 0 ? 0 : static_cast<long>(std::min<long long>(left, 1LL << 30));
}

// A reply's body, in memory that grows with what arrives and never past the
// limit. A std::string grown by appends doubled its capacity and copied: an
// endless body cost the 251 MB it had plus the 503 MB it was moving to, twice
// the limit. realloc of a large block moves pages (mremap) instead of
// copying them, so what is held is what arrived; a body that announces its
// length gets exactly that, once, and one that announces more than the limit
// is abandoned before its first byte.
class Body {
 public:
  Body() = default;
  Body(const Body&) = delete;
  Body& operator=(const Body&) = delete;
  Body(Body&& o) noexcept
      : m_data(std::exchange(o.m_data, nullptr)),
        m_size(std::exchange(o.m_size, 0)),
        m_capacity(std::exchange(o.m_capacity, 0)) {}
  Body& operator=(Body&& o) noexcept {
    std::swap(m_data, o.m_data);
    std::swap(m_size, o.m_size);
    std::swap(m_capacity, o.m_capacity);
    return *this;
  }
  ~Body() { std::free(m_data); }

  // Makes room for `n` bytes in all; false when no memory.
  bool reserve(std::size_t n) {
    if (n <= m_capacity) return true;
    void* p = std::realloc(m_data, n);
    if (p == nullptr) return false;
    m_data = static_cast<char*>(p);
    m_capacity = n;
    return true;
  }
  // Appends, growing geometrically but never past `limit`; false when the
  // body would pass it (or no memory).
  bool append(const char* data, std::size_t n, std::size_t limit) {
    if (n > limit - m_size) return false;
    if (m_size + n > m_capacity) {
      const std::size_t grown = std::max({m_size + n, 2 * m_capacity, std::size_t{64} << 10});
      if (!reserve(std::min(grown, limit))) return false;
    }
    std::memcpy(m_data + m_size, data, n);
    m_size += n;
    return true;
  }
  [[nodiscard]] std::size_t size() const { return m_size; }
  // The body as Bytes (the memory handed over, trimmed to the body).
  Bytes take() {
    if (m_size == 0) return Bytes();
    if (m_size < m_capacity) reserve_exact_down();
    char* data = m_data;
    const std::size_t size = m_size;
    m_data = nullptr;
    m_size = m_capacity = 0;
    return Bytes::wrap(std::shared_ptr<const void>(data, [](const void* p) { std::free(const_cast<void*>(p)); }), data,
                       size);
  }

 private:
  void reserve_exact_down() {
    if (void* p = std::realloc(m_data, m_size); p != nullptr) {
      m_data = static_cast<char*>(p);
      m_capacity = m_size;
    }
  }
  char* m_data = nullptr;
  std::size_t m_size = 0;
  std::size_t m_capacity = 0;
};

// What one request brings back.
struct Reply {
  long status = 0;
  Body body;
  curl_off_t content_length = -1;
};

struct Download {
  Body* body;
  std::size_t limit;
  const detail::CurlApi* curl;
  CURL* handle;
  bool started = false;
  bool too_big = false;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* d = static_cast<Download*>(user);
  const std::size_t len = size * n;
  if (!d->started) {
    d->started = true;
    // A length announced up front is judged before any byte is kept.
    curl_off_t announced = -1;
    d->curl->easy_getinfo(d->handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
    if (announced > 0 && static_cast<std::uint64_t>(announced) > d->limit) {
      d->too_big = true;
      return 0;  // libcurl aborts the transfer (CURLE_WRITE_ERROR)
    }
    if (announced > 0) d->body->reserve(static_cast<std::size_t>(announced));
  }
  if (!d->body->append(data, len, d->limit)) {
    d->too_big = true;
    return 0;
  }
  return len;
}

struct Upload {
  std::string_view data;
};

std::size_t on_upload(char* buffer, std::size_t size, std::size_t n, void* user) {
  auto* u = static_cast<Upload*>(user);
  const std::size_t len = std::min(size * n, u->data.size());
  std::copy_n(u->data.data(), len, buffer);
  u->data.remove_prefix(len);
  return len;
}

enum class Method { get, head, put, remove };

const char* method_name(Method m) {
  switch (m) {
    case Method::get:
      return "GET";
    case Method::head:
      return "HEAD";
    case Method::put:
      return "PUT";
    case Method::remove:
      return "DELETE";
  }
  return "?";
}

class HttpBackend final : public RemoteBackend {
 public:
  HttpBackend(HttpUrl url, HttpBackendOptions o) : m_url(std::move(url)), m_id(m_url.shown()), m_opt(std::move(o)) {
    auto api = detail::curl_api();
    if (api.ok()) {
      m_curl = *api;
    } else {
      m_load_error = api.status();
    }
  }
  ~HttpBackend() override {
    for (CURL* h : m_idle) m_curl->easy_cleanup(h);
  }
  HttpBackend(const HttpBackend&) = delete;
  HttpBackend& operator=(const HttpBackend&) = delete;

  Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(Reply r, request(Method::get, name, {}, deadline));
    if (r.status == 404) return std::optional<Bytes>();
    PROGCACHE_TRY(expect_success(Method::get, r));
    // A body that is not an entry (HTML, another key's bytes) fails to
    // decode above this backend: a corrupt miss.
    return std::optional<Bytes>(r.body.take());
  }

  Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(Reply r, request(Method::put, name, value, deadline));
    return expect_success(Method::put, r);
  }

  Result<bool> remove(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(Reply r, request(Method::remove, name, {}, deadline));
    if (r.status == 404) return false;
    PROGCACHE_TRY(expect_success(Method::remove, r));
    return true;
  }

  Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(Reply r, request(Method::head, name, {}, deadline));
    if (r.status == 404) return std::uint64_t{0};
    PROGCACHE_TRY(expect_success(Method::head, r));
    return r.content_length < 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(r.content_length);
  }

  Result<std::string> scan(std::string_view, std::vector<std::string>*, RemoteDeadline) override {
    return failed_precondition("remote " + m_id +
                               ": an HTTP cache server cannot list its entries; it evicts, counts and clears them "
                               "by its own means");
  }

  [[nodiscard]] std::string id() const override { return m_id; }
  [[nodiscard]] std::chrono::milliseconds call_timeout() const override { return m_url.timeout; }

 private:
  // 2xx: done. 401/403: refused credentials (they open the breaker: every
  // call would be refused the same way). 5xx and 408/429: the server is
  // there but not serving. Anything else: an answer that is not one.
  Status expect_success(Method m, const Reply& r) const {
    if (r.status >= 200 && r.status < 300) return {};
    const std::string what = "remote " + m_id + ": " + method_name(m) + " answered HTTP " + std::to_string(r.status);
    if (r.status == 401 || r.status == 403) return permission_denied(what + " (credentials refused)");
    if (r.status >= 500 || r.status == 408 || r.status == 429) return unavailable(what);
    return data_loss(what);
  }

  CURL* take() {
    {
      MutexLock l(m_mu);
      if (!m_idle.empty()) {
        CURL* h = m_idle.back();
        m_idle.pop_back();
        return h;
      }
    }
    return m_curl->easy_init();
  }

  void give_back(CURL* h) {
    {
      MutexLock l(m_mu);
      if (static_cast<int>(m_idle.size()) < m_opt.max_idle_connections) {
        m_idle.push_back(h);
        return;
      }
    }
    m_curl->easy_cleanup(h);
  }

  // One request, answered (headers and the whole body) by `deadline`. A
  // handle whose transfer failed is discarded, never pooled.
  Result<Reply> request(Method m, std::string_view name, std::string_view upload, RemoteDeadline deadline) {
    const long left = millis_until(deadline);
    if (left <= 0) return deadline_exceeded("remote " + m_id + ": no time left for " + method_name(m));
    if (m_curl == nullptr) return m_load_error.with_context("remote " + m_id);
    CURL* h = take();
    if (h == nullptr) return unavailable("remote " + m_id + ": cannot allocate an HTTP handle");
    // reset keeps the handle's live connection and caches, drops the options.
    m_curl->easy_reset(h);
    Reply reply;
    Download down{&reply.body, m_opt.max_body_bytes, m_curl, h};
    Upload up{upload};
    curl_slist* headers = nullptr;
    const std::string url = m_url.entry_url(name);
    m_curl->easy_setopt(h, CURLOPT_URL, url.c_str());
    m_curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    m_curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    m_curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, left);
    m_curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                        std::max(1L, std::min(left, static_cast<long>(m_url.connect_timeout.count()))));
    m_curl->easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    m_curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    m_curl->easy_setopt(h, CURLOPT_WRITEDATA, &down);
    if (!m_url.ca_file.empty()) m_curl->easy_setopt(h, CURLOPT_CAINFO, m_url.ca_file.c_str());
    if (!m_opt.secret.empty()) {
      if (!m_url.user.empty()) {
        m_curl->easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
        m_curl->easy_setopt(h, CURLOPT_USERNAME, m_url.user.c_str());
        m_curl->easy_setopt(h, CURLOPT_PASSWORD, m_opt.secret.c_str());
      } else {
        m_curl->easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        m_curl->easy_setopt(h, CURLOPT_XOAUTH2_BEARER, m_opt.secret.c_str());
      }
    }
    switch (m) {
      case Method::get:
        // libcurl refuses a body announced larger than the limit itself, too.
        m_curl->easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(m_opt.max_body_bytes));
        break;
      case Method::head:
        m_curl->easy_setopt(h, CURLOPT_NOBODY, 1L);
        break;
      case Method::put:
        m_curl->easy_setopt(h, CURLOPT_UPLOAD, 1L);
        m_curl->easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
        m_curl->easy_setopt(h, CURLOPT_READDATA, &up);
        m_curl->easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(upload.size()));
        // No "Expect: 100-continue": it costs a round trip (or a second's
        // wait on servers that never answer it) on every put.
        headers = m_curl->slist_append(headers, "Expect:");
        headers = m_curl->slist_append(headers, "Content-Type: application/octet-stream");
        m_curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        break;
      case Method::remove:
        m_curl->easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
    }
    const CURLcode rc = m_curl->easy_perform(h);
    m_curl->slist_free_all(headers);
    if (rc != CURLE_OK) {
      m_curl->easy_cleanup(h);
      return transfer_error(m, rc, down.too_big || rc == CURLE_FILESIZE_EXCEEDED);
    }
    m_curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply.status);
    m_curl->easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &reply.content_length);
    give_back(h);
    return reply;
  }

  Status transfer_error(Method m, CURLcode rc, bool too_big) const {
    const std::string what = "remote " + m_id + ": " + method_name(m) + ": " + m_curl->easy_strerror(rc);
    if (too_big) {
      return resource_exhausted("remote " + m_id + ": a body over " + std::to_string(m_opt.max_body_bytes) +
                                " bytes, abandoned");
    }
    switch (rc) {
      case CURLE_OPERATION_TIMEDOUT:
        return deadline_exceeded(what);
      case CURLE_PARTIAL_FILE:  // the body ended before its announced length
      case CURLE_BAD_CONTENT_ENCODING:
      case CURLE_WEIRD_SERVER_REPLY:
        return data_loss(what);
      case CURLE_LOGIN_DENIED:
        return permission_denied(what);
      case CURLE_URL_MALFORMAT:
      case CURLE_UNSUPPORTED_PROTOCOL:
        return invalid_argument(what);
      default:  // cannot resolve, connect or talk TLS; the connection dropped
        return unavailable(what);
    }
  }

  const HttpUrl m_url;
  const std::string m_id;
  const HttpBackendOptions m_opt;
  const detail::CurlApi* m_curl = nullptr;  // null when libcurl cannot be loaded: every request fails with
  Status m_load_error;                      // this
  Mutex m_mu;
  std::vector<CURL*> m_idle PROGCACHE_GUARDED_BY(m_mu);
};

}  // namespace

std::unique_ptr<RemoteBackend> make_http_backend(HttpUrl url, HttpBackendOptions options) {
  return std::make_unique<HttpBackend>(std::move(url), std::move(options));
}

}  // namespace progcache
