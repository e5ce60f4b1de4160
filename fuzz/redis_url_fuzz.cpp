// libFuzzer target: remote URL parsing. Beyond "nothing crashes", it checks
// what the parser promises about secrets: text placed where a password goes
// never appears in an error message or in a parsed URL's redacted form, and
// a parsed URL's fields are within their stated ranges.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "progcache/redis_backend.h"

using namespace progcache;

namespace {

constexpr std::string_view k_secret = "Zq7SECRETq7Z";

void check(const std::string& url) {
  auto r = parse_redis_url(url);
  // The secret is a password when it stands before the URL's last '@'
  // (credentials end there) and after the first ':' of the credentials, or
  // in credentials with no ':' (a password alone). Elsewhere it is a user
  // name, a host or a query, which may be shown.
  const auto scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  const auto at = url.rfind('@');
  const auto secret = url.find(k_secret);
  bool credential = false;
  if (at != std::string::npos && at >= start && secret != std::string::npos && secret >= start && secret < at) {
    const auto colon = url.find(':', start);
    credential = colon == std::string::npos || colon >= at || secret > colon;
  }
  if (!r.ok()) {
    if (credential && r.status().message().find(k_secret) != std::string::npos) __builtin_trap();
    return;
  }
  if (credential && r->redacted().find(k_secret) != std::string::npos) __builtin_trap();
  if (r->port <= 0 || r->port > 65535 || r->db < 0) __builtin_trap();
  if (r->timeout.count() <= 0 || r->connect_timeout.count() <= 0) __builtin_trap();
  if (r->unix_path.empty() == r->host.empty()) __builtin_trap();  // exactly one of the two
  if (r->cluster != !r->seeds.empty()) __builtin_trap();          // a cluster has seeds, one server none
  for (const auto& s : r->seeds) {
    if (s.host.empty() || s.port <= 0 || s.port > 65535) __builtin_trap();
  }
  if (r->cluster && r->db != 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  // The input as a whole URL (no secret planted: only the range checks bite),
  // then the input around a password in the shapes people write.
  (void)parse_redis_url(in);
  if (in.find(k_secret) != std::string::npos) return 0;  // one planted copy only
  check("redis://u:" + std::string(k_secret) + in);
  check("redis://:" + std::string(k_secret) + in);
  check("redis://" + std::string(k_secret) + in);
  check("redis+unix://u:" + std::string(k_secret) + in);
  check("redis+cluster://u:" + std::string(k_secret) + in);
  const auto at = in.find('@');
  if (at != std::string::npos) {
    check("redis://u:" + in.substr(0, at) + std::string(k_secret) + in.substr(at));
  }
  return 0;
}
