#include "store/remote/http_client.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

namespace progcache::detail {

const char* method_name(HttpMethod m) {
  switch (m) {
    case HttpMethod::get:
      return "GET";
    case HttpMethod::head:
      return "HEAD";
    case HttpMethod::put:
      return "PUT";
    case HttpMethod::remove:
      return "DELETE";
  }
  return "?";
}

// ---------------------------------------------------------------- the body

// A std::string grown by appends doubled its capacity and copied: an endless
// body cost the 251 MB it had plus the 503 MB it was moving to, twice the
// limit. realloc of a large block moves pages (mremap) instead of copying
// them, so what is held is what arrived; a body that announces its length
// gets exactly that, once, and one that announces more than the limit is
// abandoned before its first byte.
HttpBody::HttpBody(HttpBody&& o) noexcept
    : m_data(std::exchange(o.m_data, nullptr)),
      m_size(std::exchange(o.m_size, 0)),
      m_capacity(std::exchange(o.m_capacity, 0)) {}

HttpBody& HttpBody::operator=(HttpBody&& o) noexcept {
  std::swap(m_data, o.m_data);
  std::swap(m_size, o.m_size);
  std::swap(m_capacity, o.m_capacity);
  return *this;
}

HttpBody::~HttpBody() {
  std::free(m_data);
}

bool HttpBody::reserve(std::size_t n) {
  if (n <= m_capacity) return true;
  void* p = std::realloc(m_data, n);
  if (p == nullptr) return false;
  m_data = static_cast<char*>(p);
  m_capacity = n;
  return true;
}

bool HttpBody::append(const char* data, std::size_t n, std::size_t limit) {
  if (n > limit - m_size) return false;
  if (m_size + n > m_capacity) {
    const std::size_t grown = std::max({m_size + n, 2 * m_capacity, std::size_t{64} << 10});
    if (!reserve(std::min(grown, limit))) return false;
  }
  std::memcpy(m_data + m_size, data, n);
  m_size += n;
  return true;
}

Bytes HttpBody::take() {
  if (m_size == 0) return Bytes();
  if (m_size < m_capacity) reserve_exact_down();
  char* data = m_data;
  const std::size_t size = m_size;
  m_data = nullptr;
  m_size = m_capacity = 0;
  return Bytes::wrap(std::shared_ptr<const void>(data, [](const void* p) { std::free(const_cast<void*>(p)); }), data,
                     size);
}

void HttpBody::reserve_exact_down() {
  if (void* p = std::realloc(m_data, m_size); p != nullptr) {
    m_data = static_cast<char*>(p);
    m_capacity = m_size;
  }
}

// ---------------------------------------------------------------- one request

namespace {

long millis_until(RemoteDeadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RemoteClock::now()).count();
  return left <= 0 ? 0 : static_cast<long>(std::min<long long>(left, 1LL << 30));
}

struct Download {
  HttpBody* body;
  std::size_t limit;
  const CurlApi* curl;
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

}  // namespace

HttpClient::HttpClient(std::string id, int max_idle, std::size_t max_body_bytes)
    : m_id(std::move(id)), m_max_idle(max_idle), m_max_body_bytes(max_body_bytes) {
  auto api = curl_api();
  if (api.ok()) {
    m_curl = *api;
  } else {
    m_load_error = api.status();
  }
}

HttpClient::~HttpClient() {
  for (CURL* h : m_idle) m_curl->easy_cleanup(h);
}

CURL* HttpClient::take() {
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

void HttpClient::give_back(CURL* h) {
  {
    MutexLock l(m_mu);
    if (static_cast<int>(m_idle.size()) < m_max_idle) {
      m_idle.push_back(h);
      return;
    }
  }
  m_curl->easy_cleanup(h);
}

Result<HttpReply> HttpClient::request(const HttpRequest& r, RemoteDeadline deadline) {
  const long left = millis_until(deadline);
  if (left <= 0) return deadline_exceeded("remote " + m_id + ": no time left for " + method_name(r.method));
  if (m_curl == nullptr) return m_load_error.with_context("remote " + m_id);
  CURL* h = take();
  if (h == nullptr) return unavailable("remote " + m_id + ": cannot allocate an HTTP handle");
  // reset keeps the handle's live connection and caches, drops the options.
  m_curl->easy_reset(h);
  HttpReply reply;
  Download down{&reply.body, m_max_body_bytes, m_curl, h};
  Upload up{r.upload};
  curl_slist* headers = nullptr;
  m_curl->easy_setopt(h, CURLOPT_URL, r.url.c_str());
  m_curl->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  m_curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  m_curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, left);
  m_curl->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                      std::max(1L, std::min(left, static_cast<long>(r.connect_timeout.count()))));
  m_curl->easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  m_curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  m_curl->easy_setopt(h, CURLOPT_WRITEDATA, &down);
  if (!r.ca_file.empty()) m_curl->easy_setopt(h, CURLOPT_CAINFO, r.ca_file.c_str());
  if (r.authorize) r.authorize(*m_curl, h);
  for (const std::string& header : r.headers) headers = m_curl->slist_append(headers, header.c_str());
  switch (r.method) {
    case HttpMethod::get:
      // libcurl refuses a body announced larger than the limit itself, too.
      m_curl->easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(m_max_body_bytes));
      break;
    case HttpMethod::head:
      m_curl->easy_setopt(h, CURLOPT_NOBODY, 1L);
      break;
    case HttpMethod::put:
      m_curl->easy_setopt(h, CURLOPT_UPLOAD, 1L);
      m_curl->easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
      m_curl->easy_setopt(h, CURLOPT_READDATA, &up);
      m_curl->easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.upload.size()));
      // No "Expect: 100-continue": it costs a round trip (or a second's
      // wait on servers that never answer it) on every put.
      if (r.keep_expect) {
        // A server that never answers 100 costs at most this, not libcurl's
        // default second.
        m_curl->easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 100L);
      } else {
        headers = m_curl->slist_append(headers, "Expect:");
      }
      headers = m_curl->slist_append(headers, "Content-Type: application/octet-stream");
      break;
    case HttpMethod::remove:
      m_curl->easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
      break;
  }
  if (headers != nullptr) m_curl->easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  const CURLcode rc = m_curl->easy_perform(h);
  m_curl->slist_free_all(headers);
  if (rc != CURLE_OK) {
    m_curl->easy_cleanup(h);
    return transfer_error(r.method, rc, down.too_big || rc == CURLE_FILESIZE_EXCEEDED);
  }
  m_curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply.status);
  m_curl->easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &reply.content_length);
  give_back(h);
  return reply;
}

Status HttpClient::transfer_error(HttpMethod m, CURLcode rc, bool too_big) const {
  const std::string what = "remote " + m_id + ": " + method_name(m) + ": " + m_curl->easy_strerror(rc);
  if (too_big) {
    return resource_exhausted("remote " + m_id + ": a body over " + std::to_string(m_max_body_bytes) +
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

}  // namespace progcache::detail
