#include "progcache/redis_backend.h"

#include <string>
#include <utility>
#include <vector>

#include "progcache/hash.h"
#include "store/remote/redis_cluster.h"
#include "store/remote/redis_conn.h"
#include "store/remote/url_parts.h"

namespace progcache {

// ---------------------------------------------------------------- URLs

std::string RedisEndpoint::shown() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string RedisUrl::redacted() const {
  std::string auth;
  if (!user.empty() || !password.empty()) auth = (user.empty() ? "" : user) + (password.empty() ? "" : ":***") + "@";
  std::string out;
  if (!unix_path.empty()) {
    out = "redis+unix://" + auth + unix_path;
  } else if (cluster) {
    out = "redis+cluster://" + auth;
    for (std::size_t i = 0; i < seeds.size(); ++i) out += (i == 0 ? "" : ",") + seeds[i].shown();
  } else {
    out = "redis://" + auth + RedisEndpoint{host, port}.shown();
  }
  if (db != 0) out += (unix_path.empty() ? "/" : "?db=") + std::to_string(db);
  return out;
}

namespace {

using remote_url::parse_int;

std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      auto hex = from_hex(s.substr(i + 1, 2));
      if (hex.ok()) {
        out += *hex;
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

namespace {

// The URL as error messages may show it. Credentials end at the last '@'
// (a password may itself hold '@', '?', ':' or '/'), and all of them are
// hidden. Without an '@', what follows the first ':' after the scheme is
// hidden too: "redis://user:secret" (the '@' forgotten) or a fragment of a
// password cut at a ',' must not be echoed either.
std::string shown_url(std::string_view url) {
  const auto scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const std::string_view scheme = url.substr(0, start);
  const std::string_view rest = url.substr(start);
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    return std::string(scheme) + "<credentials>@" + std::string(rest.substr(at + 1));
  }
  if (const auto colon = rest.find(':'); colon != std::string_view::npos) {
    return std::string(scheme) + std::string(rest.substr(0, colon)) + ":<hidden>";
  }
  return std::string(url);
}

}  // namespace

namespace {

// "host[:port]" or "[v6]:port" into `e` (the port stays as it was when none
// is written); the reason when it is not one.
std::optional<std::string> parse_endpoint(std::string_view hostport, RedisEndpoint* e) {
  std::string_view port_text;
  bool has_port = false;
  if (hostport.starts_with("[")) {  // [::1]:6379
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) return "unclosed '[' in host";
    e->host = std::string(hostport.substr(1, close - 1));
    hostport = hostport.substr(close + 1);
    has_port = hostport.starts_with(":");
    if (has_port)
      port_text = hostport.substr(1);
    else if (!hostport.empty())
      return "unexpected text after ']'";
  } else {
    const auto colon = hostport.rfind(':');
    e->host = std::string(hostport.substr(0, colon));
    has_port = colon != std::string_view::npos;
    if (has_port) port_text = hostport.substr(colon + 1);
  }
  if (has_port) {
    std::int64_t port = 0;
    if (!parse_int(port_text, &port) || port <= 0 || port > 65535) return "port must be 1-65535";
    e->port = static_cast<int>(port);
  }
  if (e->host.empty()) return "missing host";
  return std::nullopt;
}

}  // namespace

Result<RedisUrl> parse_redis_url(std::string_view url) {
  RedisUrl u;
  const auto bad = [&](const std::string& why) {
    return invalid_argument("bad remote URL '" + shown_url(url) + "': " + why);
  };
  std::string_view rest;
  bool is_unix = false;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("redis+unix://")) {
    rest = url.substr(13);
    is_unix = true;
  } else if (url.starts_with("redis+cluster://")) {
    rest = url.substr(16);
    u.cluster = true;
  } else {
    return bad("use redis://host[:port][/db], redis+unix:///path or redis+cluster://host:port[,host:port...]");
  }
  // Credentials first, up to the last '@', so that a '?' or '/' inside a
  // password cannot be taken for the query or the database.
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (auto colon = cred.find(':'); colon != std::string_view::npos) {
      u.user = percent_decode(cred.substr(0, colon));
      u.password = percent_decode(cred.substr(colon + 1));
    } else {
      u.password = percent_decode(cred);  // redis://secret@host: a password alone
    }
  }
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (is_unix) {
    if (rest.empty() || rest[0] != '/') return bad("a unix socket URL needs an absolute path");
    u.unix_path = std::string(rest);
  } else {
    std::string_view hosts = rest;
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
      hosts = rest.substr(0, slash);
      std::int64_t db = 0;
      const auto dbs = rest.substr(slash + 1);
      if (!dbs.empty() && (!parse_int(dbs, &db) || db < 0 || db > 1000))
        return bad("db must be a number from 0 to 1000");
      u.db = static_cast<int>(db);
    }
    // A cluster names its seeds separated by ','; one server names itself.
    while (true) {
      const auto comma = u.cluster ? hosts.find(',') : std::string_view::npos;
      RedisEndpoint e;
      if (auto why = parse_endpoint(hosts.substr(0, comma), &e)) return bad(*why);
      u.seeds.push_back(std::move(e));
      if (comma == std::string_view::npos) break;
      hosts = hosts.substr(comma + 1);
    }
    u.host = u.seeds.front().host;
    u.port = u.seeds.front().port;
    if (!u.cluster) u.seeds.clear();
  }
  while (!query.empty()) {
    const remote_url::QueryParam param = remote_url::take_query_param(query);
    if (!param.has_value) return bad("query parameter '" + std::string(param.text) + "' has no value");
    const std::string_view k = param.key, v = param.value;
    std::int64_t n = 0;
    if (k == "prefix") {
      u.prefix = percent_decode(v);
    } else if (k == "ttl") {
      if (!parse_int(v, &n) || n <= 0) return bad("ttl must be a positive number of seconds");
      u.ttl_seconds = n;
    } else if (k == "timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("timeout must be positive milliseconds");
      u.timeout = std::chrono::milliseconds(n);
    } else if (k == "connect_timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("connect_timeout must be positive milliseconds");
      u.connect_timeout = std::chrono::milliseconds(n);
    } else if (k == "db") {
      if (!parse_int(v, &n) || n < 0 || n > 1000) return bad("db must be a number from 0 to 1000");
      u.db = static_cast<int>(n);
    } else if (k == "read_from" && u.cluster) {
      if (v != "primaries" && v != "replicas") return bad("read_from must be primaries or replicas");
      u.read_from_replicas = v == "replicas";
    } else {
      return bad("unknown parameter '" + std::string(k) + "' (prefix, ttl, timeout, connect_timeout, " +
                 (u.cluster ? "read_from)" : "db)"));
    }
  }
  if (u.cluster && u.db != 0) return bad("a Redis Cluster has database 0 only");
  return u;
}

// ---------------------------------------------------------------- backend

namespace {

// One Redis server and a pool of idle connections to it.
class RedisBackend final : public redis::KeyedBackend {
 public:
  RedisBackend(const RedisUrl& url, const RedisBackendOptions& o)
      : KeyedBackend(url.prefix, url.ttl_seconds, url.redacted(), url.timeout),
        m_node(redis::node_options(url, url.host, url.port, o)) {}

  Result<std::string> scan(std::string_view cursor, std::vector<std::string>* names, RemoteDeadline deadline) override {
    auto next = scan_node(m_node, cursor, names, deadline);
    if (!next.ok() || *next != "0") return next;
    return std::string();
  }

 private:
  Result<redis::Reply> call(std::string_view /*rkey*/, const std::vector<std::string_view>& args, bool /*read*/,
                            RemoteDeadline deadline) override {
    redis::Reply reply;
    PROGCACHE_TRY(m_node.with_connection(deadline, [&](redis::Conn& c) -> Status {
      PROGCACHE_ASSIGN_OR_RETURN(reply, c.exec(args));
      return {};
    }));
    return reply;
  }

  redis::Node m_node;
};

}  // namespace

redis::NodeOptions redis::node_options(const RedisUrl& url, const std::string& host, int port,
                                       const RedisBackendOptions& o) {
  redis::NodeOptions n;
  n.host = host;
  n.port = port;
  n.unix_path = url.unix_path;
  n.user = url.user;
  n.password = url.password;
  n.db = url.db;
  n.connect_timeout = url.connect_timeout;
  n.shown = url.redacted();
  n.max_reply = o.max_reply_bytes;
  n.max_idle = o.max_idle_connections;
  return n;
}

std::unique_ptr<RemoteBackend> make_redis_backend(const RedisUrl& url, const RedisBackendOptions& options) {
  if (url.cluster) return redis::make_cluster_backend(url, options);
  return std::make_unique<RedisBackend>(url, options);
}

}  // namespace progcache
