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

#include "store/remote/http_client.h"
#include "store/remote/url_parts.h"

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

using detail::HttpMethod;

class HttpBackend final : public RemoteBackend {
 public:
  HttpBackend(HttpUrl url, HttpBackendOptions o)
      : m_url(std::move(url)),
        m_id(m_url.shown()),
        m_opt(std::move(o)),
        m_client(m_id, m_opt.max_idle_connections, m_opt.max_body_bytes) {}

  Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::get, name, {}, deadline));
    if (r.status == 404) return std::optional<Bytes>();
    PROGCACHE_TRY(expect_success(HttpMethod::get, r));
    // A body that is not an entry (HTML, another key's bytes) fails to
    // decode above this backend: a corrupt miss.
    return std::optional<Bytes>(r.body.take());
  }

  Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::put, name, value, deadline));
    return expect_success(HttpMethod::put, r);
  }

  Result<bool> remove(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::remove, name, {}, deadline));
    if (r.status == 404) return false;
    PROGCACHE_TRY(expect_success(HttpMethod::remove, r));
    return true;
  }

  Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::head, name, {}, deadline));
    if (r.status == 404) return std::uint64_t{0};
    PROGCACHE_TRY(expect_success(HttpMethod::head, r));
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
  Status expect_success(HttpMethod m, const detail::HttpReply& r) const {
    if (r.status >= 200 && r.status < 300) return {};
    const std::string what =
        "remote " + m_id + ": " + detail::method_name(m) + " answered HTTP " + std::to_string(r.status);
    if (r.status == 401 || r.status == 403) return permission_denied(what + " (credentials refused)");
    if (r.status >= 500 || r.status == 408 || r.status == 429) return unavailable(what);
    return data_loss(what);
  }

  Result<detail::HttpReply> request(HttpMethod m, std::string_view name, std::string_view upload,
                                    RemoteDeadline deadline) {
    detail::HttpRequest r;
    r.method = m;
    r.url = m_url.entry_url(name);
    r.upload = upload;
    r.ca_file = m_url.ca_file;
    r.connect_timeout = m_url.connect_timeout;
    if (!m_opt.secret.empty()) {
      r.authorize = [this](const detail::CurlApi& curl, CURL* h) {
        if (!m_url.user.empty()) {
          curl.easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
          curl.easy_setopt(h, CURLOPT_USERNAME, m_url.user.c_str());
          curl.easy_setopt(h, CURLOPT_PASSWORD, m_opt.secret.c_str());
        } else {
          curl.easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
          curl.easy_setopt(h, CURLOPT_XOAUTH2_BEARER, m_opt.secret.c_str());
        }
      };
    }
    return m_client.request(r, deadline);
  }

  const HttpUrl m_url;
  const std::string m_id;
  const HttpBackendOptions m_opt;
  detail::HttpClient m_client;
};

}  // namespace

std::unique_ptr<RemoteBackend> make_http_backend(HttpUrl url, HttpBackendOptions options) {
  return std::make_unique<HttpBackend>(std::move(url), std::move(options));
}

}  // namespace progcache
