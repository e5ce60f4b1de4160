#include "progcache/s3_backend.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>
#include <vector>

#include "progcache/env.h"
#include "store/remote/http_client.h"
#include "store/remote/url_parts.h"

namespace progcache {

namespace {

using detail::HttpMethod;
using remote_url::parse_int;

bool lower_or_digit(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// A bucket name S3 accepts (3 to 63 of a-z 0-9 . -, starting and ending with
// a letter or digit): one that could be misread in a URL never is.
bool valid_bucket(std::string_view b) {
  return b.size() >= 3 && b.size() <= 63 && lower_or_digit(b.front()) && lower_or_digit(b.back()) &&
         std::all_of(b.begin(), b.end(), [](char c) { return lower_or_digit(c) || c == '.' || c == '-'; });
}

bool plain_path_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '/';
}

// scheme://host[:port] with nothing after it but an optional '/'.
bool valid_endpoint(std::string_view e) {
  std::string_view rest;
  if (e.starts_with("http://")) {
    rest = e.substr(7);
  } else if (e.starts_with("https://")) {
    rest = e.substr(8);
  } else {
    return false;
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  return !rest.empty() && rest.front() != ':' && std::all_of(rest.begin(), rest.end(), [](char c) {
    return lower_or_digit(c) || (c >= 'A' && c <= 'Z') || c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
  });
}

bool valid_region(std::string_view r) {
  return !r.empty() && r.size() <= 64 &&
         std::all_of(r.begin(), r.end(), [](char c) { return lower_or_digit(c) || c == '-'; });
}

// An endpoint whose host is an address: no bucket can be a name under it.
bool host_is_address(std::string_view endpoint) {
  std::string_view host = endpoint.substr(endpoint.find("://") + 3);
  if (host.starts_with('[')) return true;
  host = host.substr(0, host.find(':'));
  return !host.empty() &&
         std::all_of(host.begin(), host.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

std::string env_or(const char* name, const char* otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(otherwise);
}

}  // namespace

std::string S3Url::shown() const {
  return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix) + " (" + endpoint + ")";
}

std::string S3Url::object_url(std::string_view name) const {
  const std::string key = (prefix.empty() ? "" : prefix + "/") + std::string(name);
  if (!virtual_hosted) return endpoint + "/" + bucket + "/" + key;
  const auto sep = endpoint.find("://") + 3;
  return endpoint.substr(0, sep) + bucket + "." + endpoint.substr(sep) + "/" + key;
}

Result<S3Url> parse_s3_url(std::string_view url) {
  auto bad = [](const std::string& why) { return invalid_argument("bad S3 URL 's3://...': " + why); };
  if (!url.starts_with("s3://")) return invalid_argument("bad S3 URL: it must start with s3://");
  std::string_view rest = url.substr(5);
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.find('@') != std::string_view::npos) {
    return bad(
        "credentials never go in the URL (every local user could read them); give them in AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY or the shared credentials file");
  }
  S3Url u;
  const auto slash = rest.find('/');
  const std::string_view bucket = rest.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (!valid_bucket(bucket)) return bad("the bucket must be 3 to 63 of a-z 0-9 . - (starting with a letter or digit)");
  u.bucket = std::string(bucket);
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  if (prefix.starts_with('/') || !std::all_of(prefix.begin(), prefix.end(), plain_path_char) ||
      prefix.find("//") != std::string_view::npos || prefix == "." || prefix == ".." || prefix.starts_with("./") ||
      prefix.starts_with("../") || prefix.find("/./") != std::string_view::npos ||
      prefix.find("/../") != std::string_view::npos || prefix.ends_with("/.") || prefix.ends_with("/..")) {
    return bad("the prefix may hold only letters, digits and - . _ ~ between single slashes");
  }
  u.prefix = std::string(prefix);
  std::string addressing;
  std::vector<std::string_view> seen;
  while (!query.empty()) {
    const remote_url::QueryParam param = remote_url::take_query_param(query);
    // Never echoed: a parameter without '=' may be a pasted credential.
    if (!param.has_value) return bad("a query parameter has no value (parameters are name=value)");
    const std::string_view k = param.key, v = param.value;
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) return bad("'" + std::string(k) + "' is given twice");
    seen.push_back(k);
    std::int64_t n = 0;
    if (k == "endpoint") {
      if (!valid_endpoint(v)) return bad("endpoint must be http://host[:port] or https://host[:port]");
      u.endpoint = std::string(v.ends_with('/') ? v.substr(0, v.size() - 1) : v);
    } else if (k == "region") {
      if (!valid_region(v)) return bad("region must be of a-z 0-9 -");
      u.region = std::string(v);
    } else if (k == "addressing") {
      if (v != "path" && v != "virtual") return bad("addressing must be path or virtual");
      addressing = std::string(v);
    } else if (k == "profile") {
      if (v.empty() || !std::all_of(v.begin(), v.end(), plain_path_char) || v.find('/') != std::string_view::npos) {
        return bad("profile must be plain characters");
      }
      u.profile = std::string(v);
    } else if (k == "timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("timeout must be positive milliseconds");
      u.timeout = std::chrono::milliseconds(n);
    } else if (k == "connect_timeout") {
      if (!parse_int(v, &n) || n <= 0) return bad("connect_timeout must be positive milliseconds");
      u.connect_timeout = std::chrono::milliseconds(n);
    } else if (k == "ca_file") {
      if (v.empty()) return bad("ca_file is empty");
      u.ca_file = std::string(v);
    } else {
      const bool plain =
          k.size() <= 32 && std::all_of(k.begin(), k.end(), [](char c) { return lower_or_digit(c) || c == '_'; });
      return bad((plain ? "unknown parameter '" + std::string(k) + "'" : std::string("an unknown parameter")) +
                 " (endpoint, region, addressing, profile, timeout, connect_timeout, ca_file)");
    }
  }
  if (u.region.empty()) {
    // The environment's region names the host requests go to: judged as
    // the URL's would be.
    for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
      const std::string r = env_or(name, "");
      if (r.empty()) continue;
      if (!valid_region(r)) return invalid_argument(std::string(name) + " must be a region name, of a-z 0-9 -");
      u.region = r;
      break;
    }
    if (u.region.empty()) u.region = "us-east-1";
  }
  const bool aws = u.endpoint.empty();
  if (aws) u.endpoint = "https://s3." + u.region + ".amazonaws.com";
  u.virtual_hosted = addressing.empty() ? aws : addressing == "virtual";
  if (u.virtual_hosted && host_is_address(u.endpoint))
    return bad("addressing=virtual needs an endpoint named by a host name");
  // A bucket with a dot cannot be a host name under a TLS certificate for
  // *.s3.<region>.amazonaws.com.
  if (u.virtual_hosted && u.endpoint.starts_with("https://") && u.bucket.find('.') != std::string::npos) {
    return bad("a bucket with a '.' needs addressing=path over https");
  }
  return u;
}

// ---------------------------------------------------------------- credentials

namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

// The keys of `profile` in an INI text of the shared credentials file's
// form ("[name]", then "key = value" lines; '#' and ';' begin comments).
std::vector<std::pair<std::string, std::string>> profile_keys(std::string_view text, const std::string& profile,
                                                              bool* found) {
  std::vector<std::pair<std::string, std::string>> out;
  bool in = false;
  *found = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      in = trim(std::string_view(line).substr(1, line.size() - 2)) == profile;
      *found = *found || in;
      continue;
    }
    const auto eq = line.find('=');
    if (in && eq != std::string::npos) {
      out.emplace_back(trim(std::string_view(line).substr(0, eq)), trim(std::string_view(line).substr(eq + 1)));
    }
  }
  return out;
}

}  // namespace

Result<S3Credentials> find_s3_credentials(const std::string& url_profile) {
  S3Credentials c;
  // The URL's profile first, as the AWS tools put a profile named for the
  // call before the environment's keys; then the keys; then AWS_PROFILE or
  // "default" of the shared credentials file.
  if (url_profile.empty()) {
    c.access_key_id = env_or("AWS_ACCESS_KEY_ID", "");
    c.secret_access_key = env_or("AWS_SECRET_ACCESS_KEY", "");
    if (!c.access_key_id.empty() || !c.secret_access_key.empty()) {
      if (c.access_key_id.empty() || c.secret_access_key.empty()) {
        return invalid_argument("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
      }
      c.session_token = env_or("AWS_SESSION_TOKEN", "");
      c.source = "the environment";
      return c;
    }
  }
  const std::string env_profile = env_or("AWS_PROFILE", "");
  const std::string profile = !url_profile.empty() ? url_profile : !env_profile.empty() ? env_profile : "default";
  const bool named = profile != "default" || !url_profile.empty() || !env_profile.empty();
  std::string file = env_or("AWS_SHARED_CREDENTIALS_FILE", "");
  if (file.empty()) {
    const std::string home = env_or("HOME", "");
    if (!home.starts_with('/')) {
      if (named)
        return invalid_argument("the profile '" + profile +
                                "' is named, and there is no HOME to find ~/.aws/credentials in");
      return S3Credentials{};
    }
    file = home + "/.aws/credentials";
  }
  auto text = read_regular_file(Env::posix(), file, 1 << 20);
  if (!text.ok()) {
    if (text.status().code() == Code::not_found && !named) return S3Credentials{};
    return text.status().with_context("the shared credentials file (profile '" + profile + "')");
  }
  std::string_view body = *text;
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // a UTF-8 byte order mark
  bool found = false;
  for (auto [k, v] : profile_keys(body, profile, &found)) {
    std::transform(k.begin(), k.end(), k.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (k == "aws_access_key_id") c.access_key_id = v;
    if (k == "aws_secret_access_key") c.secret_access_key = v;
    if (k == "aws_session_token") c.session_token = v;
  }
  if (!found && named)
    return invalid_argument("the shared credentials file " + file + " has no profile '" + profile + "'");
  if (c.access_key_id.empty() != c.secret_access_key.empty()) {
    return invalid_argument("the shared credentials file's profile '" + profile +
                            "' needs both aws_access_key_id and aws_secret_access_key");
  }
  if (!c.access_key_id.empty()) c.source = "profile '" + profile + "' of " + file;
  return c;
}

// ---------------------------------------------------------------- backend

namespace {

// The payload hash S3 is told: entries are checksummed (and signed, when
// signing is on) by progcache itself, so the body is not hashed again.
constexpr const char* k_unsigned_payload = "x-amz-content-sha256: UNSIGNED-PAYLOAD";

// <Code>...</Code> of an S3 error body ("" when there is none).
std::string error_code(std::string_view body) {
  const auto open = body.find("<Code>");
  if (open == std::string_view::npos) return "";
  const auto start = open + 6;
  const auto close = body.find("</Code>", start);
  if (close == std::string_view::npos || close - start > 64) return "";
  std::string code(body.substr(start, close - start));
  if (!std::all_of(code.begin(), code.end(), [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); })) {
    return "";
  }
  return code;
}

bool one_of(std::string_view code, std::initializer_list<std::string_view> codes) {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

}  // namespace

Status s3_reply_status(const S3Url& url, std::string_view credential_source, std::string_view method, long status,
                       std::string_view body) {
  if (status >= 200 && status < 300) return {};
  const std::string code = error_code(body);
  const std::string what = "remote " + url.shown() + ": " + std::string(method) + " answered HTTP " +
                           std::to_string(status) + (code.empty() ? "" : " " + code);
  // By S3's error code first: S3 answers some refusals with 400
  // (ExpiredToken) and some outages with 503 (SlowDown).
  if (code == "NoSuchKey") return not_found(what);
  if (one_of(code, {"ExpiredToken", "TokenRefreshRequired", "InvalidToken"})) {
    return permission_denied(what +
                             " (the session token is no longer valid: credentials are read when the tier opens and "
                             "never refreshed; start again with fresh ones)");
  }
  if (one_of(code, {"RequestTimeTooSkewed", "RequestExpired"})) {
    return permission_denied(what + " (this machine's clock differs from the server's by more than it allows)");
  }
  if (code == "NoSuchBucket") return permission_denied(what + " (the bucket '" + url.bucket + "' does not exist)");
  if (one_of(code, {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"}) ||
      status == 301 || status == 307) {
    return permission_denied(what + " (the bucket is in another region than " + url.region + ": set region=)");
  }
  if (one_of(code, {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"})) return unavailable(what);
  const std::string from =
      credential_source.empty() ? std::string("none were found") : "they came from " + std::string(credential_source);
  if (one_of(code, {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "AccountProblem",
                    "AllAccessDisabled"}) ||
      status == 401 || status == 403) {
    // Without s3:ListBucket, S3 answers a missing object AccessDenied.
    const bool reads = method == "GET" || method == "HEAD";
    return permission_denied(what + " (credentials refused; " + from +
                             (code == "AccessDenied" && reads
                                  ? "; without s3:ListBucket on the bucket, a missing object is answered so too"
                                  : "") +
                             ")");
  }
  if (status == 404) {
    // A HEAD has no body to tell by; a GET's 404 that is not S3's is
    // another server at the endpoint (a console, a filer), never a miss.
    if (method == "HEAD" || method == "DELETE") return not_found(what);
    return permission_denied(what + " (not an S3 answer: is the endpoint an S3 API?)");
  }
  if (status >= 500 || status == 408 || status == 429) return unavailable(what);
  return data_loss(what);
}

namespace {

class S3Backend final : public RemoteBackend {
 public:
  S3Backend(S3Url url, S3BackendOptions o)
      : m_url(std::move(url)),
        m_id(m_url.shown()),
        m_opt(std::move(o)),
        m_client(m_id, m_opt.max_idle_connections, m_opt.max_body_bytes),
        m_sigv4("aws:amz:" + m_url.region + ":s3"),
        m_userpwd(m_opt.credentials.access_key_id + ":" + m_opt.credentials.secret_access_key) {}

  Result<std::optional<Bytes>> get(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::get, name, {}, deadline));
    const Status st = judge(HttpMethod::get, r);
    if (st.code() == Code::not_found) return std::optional<Bytes>();
    PROGCACHE_TRY(st);
    // A body that is not an entry fails to decode above this backend.
    return std::optional<Bytes>(r.body.take());
  }

  Status set(std::string_view name, std::string_view value, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::put, name, value, deadline));
    return judge(HttpMethod::put, r);
  }

  Result<bool> remove(std::string_view name, RemoteDeadline deadline) override {
    // S3 answers 204 whether or not the object was there: a HEAD first says.
    PROGCACHE_ASSIGN_OR_RETURN(const std::uint64_t held, size_of(name, deadline));
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::remove, name, {}, deadline));
    const Status st = judge(HttpMethod::remove, r);
    if (st.code() == Code::not_found) return false;
    PROGCACHE_TRY(st);
    return held > 0;
  }

  Result<std::uint64_t> size_of(std::string_view name, RemoteDeadline deadline) override {
    PROGCACHE_ASSIGN_OR_RETURN(detail::HttpReply r, request(HttpMethod::head, name, {}, deadline));
    const Status st = judge(HttpMethod::head, r);
    if (st.code() == Code::not_found) return std::uint64_t{0};  // a HEAD has no body to tell a missing bucket by
    PROGCACHE_TRY(st);
    return r.content_length < 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(r.content_length);
  }

  Result<std::string> scan(std::string_view, std::vector<std::string>*, RemoteDeadline) override {
    return failed_precondition("remote " + m_id +
                               ": the bucket's entries are not walked by progcache; they expire by the bucket's "
                               "lifecycle rules, and are counted and cleared by S3's own tools");
  }

  [[nodiscard]] std::string id() const override { return m_id; }
  [[nodiscard]] std::chrono::milliseconds call_timeout() const override { return m_url.timeout; }

 private:
  [[nodiscard]] Status judge(HttpMethod m, const detail::HttpReply& r) const {
    return s3_reply_status(m_url, m_opt.credentials.source, detail::method_name(m), r.status, r.body.view());
  }

  Result<detail::HttpReply> request(HttpMethod m, std::string_view name, std::string_view upload,
                                    RemoteDeadline deadline) {
    detail::HttpRequest r;
    r.method = m;
    r.url = m_url.object_url(name);
    r.upload = upload;
    r.ca_file = m_url.ca_file;
    r.connect_timeout = m_url.connect_timeout;
    // libcurl signs every header it sends, and one it is told to drop
    // ("Expect:") as well, which the server then cannot match: the put keeps
    // libcurl's Expect.
    r.keep_expect = true;
    r.headers.emplace_back(k_unsigned_payload);
    if (!m_opt.credentials.session_token.empty()) {
      r.headers.push_back("x-amz-security-token: " + m_opt.credentials.session_token);
    }
    if (!m_opt.credentials.access_key_id.empty()) {
      r.authorize = [this](const detail::CurlApi& curl, CURL* h) {
        curl.easy_setopt(h, CURLOPT_AWS_SIGV4, m_sigv4.c_str());
        curl.easy_setopt(h, CURLOPT_USERPWD, m_userpwd.c_str());
      };
    }
    return m_client.request(r, deadline);
  }

  const S3Url m_url;
  const std::string m_id;
  const S3BackendOptions m_opt;
  detail::HttpClient m_client;
  const std::string m_sigv4;    // "aws:amz:<region>:s3"
  const std::string m_userpwd;  // "<key id>:<secret>", what libcurl's SigV4 signs with
};

}  // namespace

std::unique_ptr<RemoteBackend> make_s3_backend(S3Url url, S3BackendOptions options) {
  return std::make_unique<S3Backend>(std::move(url), std::move(options));
}

}  // namespace progcache
