// The scheme table: which URL makes which backend. The only place that knows
// which backends this build has; front ends ask check_remote_url and
// remote_schemes instead of testing build flags.
#include <algorithm>
#include <limits>

#include "progcache/remote_store.h"
#ifdef PROGCACHE_WITH_REDIS
#include "progcache/redis_backend.h"
#endif
#ifdef PROGCACHE_WITH_HTTP
#include "progcache/http_backend.h"
#include "progcache/s3_backend.h"
#include "store/remote/curl_api.h"
#endif

namespace progcache {

namespace {

struct Scheme {
  const char* name;  // as written before "://"
  // Checks a URL of this scheme without contacting anything.
  Result<RemoteUrlInfo> (*check)(std::string_view url);
  // Makes its backend (`options` gives the password and pool size).
  Result<std::unique_ptr<RemoteBackend>> (*make)(std::string_view url, const RemoteStoreOptions& options);
};

#ifdef PROGCACHE_WITH_REDIS
// a + b, or the largest size_t where that would wrap (a limit of "none").
std::size_t saturating_add(std::size_t a, std::size_t b) {
  return a > std::numeric_limits<std::size_t>::max() - b ? std::numeric_limits<std::size_t>::max() : a + b;
}

Result<RemoteUrlInfo> check_redis(std::string_view url) {
  PROGCACHE_ASSIGN_OR_RETURN(RedisUrl u, parse_redis_url(url));
  return RemoteUrlInfo{u.redacted(), !u.password.empty()};
}

Result<std::unique_ptr<RemoteBackend>> make_redis(std::string_view url, const RemoteStoreOptions& o) {
  PROGCACHE_ASSIGN_OR_RETURN(RedisUrl u, parse_redis_url(url));
  if (u.password.empty()) u.password = o.password;
  // Room for the framing around one value ("$<len>\r\n" ... "\r\n").
  return make_redis_backend(
      u, {.max_idle_connections = o.max_idle_connections, .max_reply_bytes = saturating_add(o.max_value_bytes, 64)});
}
#endif

#ifdef PROGCACHE_WITH_HTTP
Result<RemoteUrlInfo> check_http(std::string_view url) {
  PROGCACHE_ASSIGN_OR_RETURN(HttpUrl u, parse_http_url(url));
  return RemoteUrlInfo{u.shown(), false};  // an HTTP URL never carries a password
}

Result<RemoteUrlInfo> check_s3(std::string_view url) {
  PROGCACHE_ASSIGN_OR_RETURN(S3Url u, parse_s3_url(url));
  return RemoteUrlInfo{u.shown(), false};  // an S3 URL never carries a credential
}

Result<std::unique_ptr<RemoteBackend>> make_s3(std::string_view url, const RemoteStoreOptions& o) {
  PROGCACHE_ASSIGN_OR_RETURN(S3Url u, parse_s3_url(url));
  PROGCACHE_TRY(detail::curl_api().status());
  PROGCACHE_ASSIGN_OR_RETURN(S3Credentials creds, find_s3_credentials(u.profile));
  return make_s3_backend(std::move(u), {.credentials = std::move(creds),
                                        .max_idle_connections = o.max_idle_connections,
                                        .max_body_bytes = o.max_value_bytes});
}

Result<std::unique_ptr<RemoteBackend>> make_http(std::string_view url, const RemoteStoreOptions& o) {
  PROGCACHE_ASSIGN_OR_RETURN(HttpUrl u, parse_http_url(url));
  // Said when the tier is configured, not on the first request.
  PROGCACHE_TRY(detail::curl_api().status());
  return make_http_backend(
      std::move(u),
      {.secret = o.password, .max_idle_connections = o.max_idle_connections, .max_body_bytes = o.max_value_bytes});
}
#endif

constexpr Scheme k_schemes[] = {
#ifdef PROGCACHE_WITH_REDIS
    {"redis", check_redis, make_redis},
    {"redis+unix", check_redis, make_redis},
    {"redis+cluster", check_redis, make_redis},
#endif
#ifdef PROGCACHE_WITH_HTTP
    {"http", check_http, make_http},
    {"https", check_http, make_http},
    {"s3", check_s3, make_s3},
#endif
    {nullptr, nullptr, nullptr},
};

std::string_view scheme_of(std::string_view url) {
  const auto sep = url.find("://");
  return sep == std::string_view::npos ? std::string_view() : url.substr(0, sep);
}

Result<const Scheme*> find_scheme(std::string_view url) {
  const std::string_view scheme = scheme_of(url);
  for (const Scheme& s : k_schemes) {
    if (s.name != nullptr && scheme == s.name) return &s;
  }
  std::string known;
  for (const Scheme& s : k_schemes) {
    if (s.name != nullptr) known += (known.empty() ? "" : ", ") + std::string(s.name) + "://";
  }
  if (scheme == "redis" || scheme == "redis+unix" || scheme == "redis+cluster") {
    return unavailable("remote URL scheme '" + std::string(scheme) +
                       "://' needs the Redis tier, and this progcache was built without it (hiredis)");
  }
  if (scheme == "http" || scheme == "https" || scheme == "s3") {
    return unavailable("remote URL scheme '" + std::string(scheme) +
                       "://' needs the HTTP tier, and this progcache was built without it (libcurl)");
  }
  // Never echo the URL: it may hold a password. The scheme is shown only
  // when it is one ("user:secret://..." is not).
  const bool plain = !scheme.empty() && scheme.size() <= 32 && std::all_of(scheme.begin(), scheme.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-';
  });
  return invalid_argument(
      "bad remote URL: " + (plain ? "unknown scheme '" + std::string(scheme) + "'" : std::string("no known scheme")) +
      " (" + (known.empty() ? "this build has no remote backends" : "use " + known) + ")");
}

}  // namespace

Result<RemoteUrlInfo> check_remote_url(std::string_view url) {
  PROGCACHE_ASSIGN_OR_RETURN(const Scheme* s, find_scheme(url));
  return s->check(url);
}

std::vector<std::string> split_remote_urls(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (item.empty()) continue;
    if (item.find("://") == std::string_view::npos && !out.empty() && out.back().starts_with("redis+cluster://")) {
      out.back() += "," + std::string(item);
    } else {
      out.emplace_back(item);
    }
  }
  return out;
}

std::vector<std::string> remote_schemes() {
  std::vector<std::string> out;
  for (const Scheme& s : k_schemes) {
    if (s.name != nullptr) out.emplace_back(s.name);
  }
  return out;
}

Result<std::unique_ptr<RemoteStore>> make_remote_store(const RemoteStoreOptions& options) {
  if (options.urls.empty()) return invalid_argument("a remote store needs at least one URL");
  std::vector<std::unique_ptr<RemoteBackend>> backends;
  for (const auto& url : options.urls) {
    PROGCACHE_ASSIGN_OR_RETURN(const Scheme* s, find_scheme(url));
    PROGCACHE_ASSIGN_OR_RETURN(auto b, s->make(url, options));
    backends.push_back(std::move(b));
  }
  return make_remote_store(std::move(backends), options);
}

}  // namespace progcache
