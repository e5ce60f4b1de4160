// libFuzzer target: HTTP cache URL parsing. Beyond "nothing crashes": an
// HTTP URL never carries a password, so text placed where one goes is always
// refused and never appears in the message; and a parsed URL's fields are
// within their stated ranges, its prefix cannot climb out of itself, and
// what it shows holds nothing the parser was not asked to keep.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "progcache/http_backend.h"

using namespace progcache;

namespace {

constexpr std::string_view k_secret = "Zq7SECRETq7Z";

void check_parsed(const HttpUrl& u) {
  if (u.port < 0 || u.port > 65535) __builtin_trap();
  if (u.timeout.count() <= 0 || u.connect_timeout.count() <= 0) __builtin_trap();
  if (u.host.empty()) __builtin_trap();
  if (u.prefix.find("//") != std::string::npos || u.prefix.find("/../") != std::string::npos ||
      u.prefix.ends_with("/..") || u.prefix.ends_with('/'))
    __builtin_trap();
  if (u.user.find(':') != std::string::npos || u.user.find('@') != std::string::npos) __builtin_trap();
  const std::string e = u.entry_url(std::string(64, 'a'));
  if (!e.starts_with(u.shown()) || !e.ends_with("/ac/" + std::string(64, 'a'))) __builtin_trap();
}

// `url` holds k_secret as a password: it must be refused, and unechoed.
void check_refused(const std::string& url) {
  auto r = parse_http_url(url);
  if (r.ok()) __builtin_trap();
  if (r.status().message().find(k_secret) != std::string::npos) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  for (const char* scheme : {"", "http://", "https://"}) {
    auto r = parse_http_url(scheme + in);
    if (r.ok()) check_parsed(*r);
  }
  if (in.find(k_secret) != std::string::npos) return 0;  // one planted copy only
  // A password before an '@' that ends the credentials, whatever follows.
  check_refused("http://u:" + std::string(k_secret) + "@" + in);
  check_refused("https://:" + std::string(k_secret) + "@h" + in);
  const auto at = in.rfind('@');
  if (at != std::string::npos) {
    check_refused("http://u:" + in.substr(0, at) + std::string(k_secret) + in.substr(at));
  }
  return 0;
}
