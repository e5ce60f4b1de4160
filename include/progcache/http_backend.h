// progcache/http_backend.h — an HTTP cache server as a backend of the
// remote tier: bazel-remote (which fronts S3, GCS and Azure), nginx with its
// DAV module, or any server that answers GET, PUT, HEAD and DELETE.
//
// URLs:
//   http[s]://[user@]host[:port][/prefix]?timeout=MS&connect_timeout=MS&ca_file=PATH
// An entry is the resource <prefix>/ac/<64 hex digits of the key>: the
// layout of bazel-remote's action cache (run it with
// --disable_http_ac_validation, as the entries are progcache's, not
// ActionResults) that a WebDAV server serves as plain files (nginx:
// `dav_methods PUT DELETE; create_full_put_path on;`). Defaults: connect
// timeout 300 ms, call timeout 1000 ms, a total deadline for one request
// (connecting, sending, and reading the whole body).
//
// Credentials never appear in a URL: a URL carrying a password is refused.
// The secret comes from PROGCACHE_REMOTE_PASSWORD_FILE
// (RemoteStoreOptions::password): with a user in the URL it is the basic-auth
// password, without one a bearer token. https:// verifies the server's
// certificate against the system's CAs, or `ca_file`.
//
// Connections are reused (a pool of libcurl handles, each keeping its
// connection alive between requests). The server cannot list its keys, so
// the tier's walks (count, size, clear) answer unimplemented: an HTTP cache
// server evicts and is cleared by its own means.
//
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "progcache/remote_store.h"

namespace progcache {

struct HttpUrl {
  bool tls = false;
  std::string user;
  std::string host;    // as written: a name, an IPv4 address or [IPv6]
  int port = 0;        // 0: the scheme's default
  std::string prefix;  // "" or "/a/b", no trailing '/'
  std::string ca_file;
  std::chrono::milliseconds connect_timeout{300};
  std::chrono::milliseconds timeout{1000};

  // scheme://[user@]host[:port]prefix: what messages show (it holds no secret).
  [[nodiscard]] std::string shown() const;
  // The resource of one entry.
  [[nodiscard]] std::string entry_url(std::string_view name) const;
};

// invalid_argument naming the problem (never echoing anything after a '@').
Result<HttpUrl> parse_http_url(std::string_view url);

struct HttpBackendOptions {
  std::string secret;  // basic-auth password (with a user) or bearer token; "" for none
  int max_idle_connections = 8;
  // A body larger than this is abandoned part-way (resource_exhausted).
  std::size_t max_body_bytes = std::size_t{256} << 20;
};

std::unique_ptr<RemoteBackend> make_http_backend(HttpUrl url, HttpBackendOptions options);

}  // namespace progcache
