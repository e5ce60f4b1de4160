// progcache/s3_backend.h — an S3 bucket as a backend of the remote tier:
// AWS S3, GCS through its S3 interoperability, MinIO, SeaweedFS, Ceph RGW.
//
// URLs (credentials never in them):
//   s3://BUCKET[/PREFIX]?endpoint=URL&region=R&addressing=path|virtual
//        &profile=NAME&timeout=MS&connect_timeout=MS&ca_file=PATH
// An entry is the object PREFIX/<64 hex digits of the key>. Defaults: the
// region from AWS_REGION or AWS_DEFAULT_REGION, else us-east-1; the endpoint
// https://s3.<region>.amazonaws.com with virtual-hosted addressing
// (https://BUCKET.s3.<region>.amazonaws.com/...); a given endpoint with path
// addressing (ENDPOINT/BUCKET/...), as MinIO and SeaweedFS serve it.
// Connect timeout 500 ms, call timeout 2000 ms.
//
// Requests are signed with AWS Signature Version 4 by libcurl
// (CURLOPT_AWS_SIGV4). Credentials: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; else the shared credentials
// file (AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials) under AWS_PROFILE
// or "default"; a profile the URL names comes before the environment's keys;
// else requests go unsigned (a public bucket). A profile named (by the URL or
// AWS_PROFILE) that the file lacks is an error.
//
// Answers the tier acts on (s3_reply_status, below): a missing object is a
// miss; refusals are permission_denied naming their cause (the remote tier
// counts them apart, says the first once, and opens its breaker); outages are
// unavailable. The bucket cannot be walked through this backend: entries
// expire by the bucket's lifecycle rules. Credentials are read once, when
// the backend is made, and never refreshed.
//
// Thread safety: thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "progcache/remote_store.h"

namespace progcache {

struct S3Url {
  std::string bucket;
  std::string prefix;    // "" or "a/b", no leading or trailing '/'
  std::string endpoint;  // scheme://host[:port], no trailing '/'
  std::string region;
  bool virtual_hosted = false;
  std::string profile;  // "" for AWS_PROFILE or "default"
  std::string ca_file;
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds timeout{2000};

  // s3://bucket/prefix (endpoint): what messages show (no secret in it).
  [[nodiscard]] std::string shown() const;
  // The object of one entry.
  [[nodiscard]] std::string object_url(std::string_view name) const;
};

// invalid_argument naming the problem. The default region is read from the
// environment (AWS_REGION, AWS_DEFAULT_REGION).
Result<S3Url> parse_s3_url(std::string_view url);

struct S3Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string source;  // where they came from, for messages ("" when none)
};

// The credentials the environment and the shared credentials file give, for
// the URL's `profile` ("" for none); empty ones when none. invalid_argument
// for a named profile the file lacks, or a key without its secret.
Result<S3Credentials> find_s3_credentials(const std::string& profile);

struct S3BackendOptions {
  S3Credentials credentials;
  int max_idle_connections = 8;
  std::size_t max_body_bytes = std::size_t{256} << 20;
};

std::unique_ptr<RemoteBackend> make_s3_backend(S3Url url, S3BackendOptions options);

// What one S3 reply means to the tier, by S3's error code first and its
// HTTP status second: OK for a success; not_found for a missing object
// (NoSuchKey; a HEAD's or DELETE's 404); permission_denied, naming the cause,
// for a refusal (credentials, an expired session token, a skewed clock, a
// missing bucket, another region, a 404 that is not S3's); unavailable for an
// outage (5xx, 408, 429, SlowDown); data_loss for anything else.
// `credential_source` is where the credentials came from ("" for none).
Status s3_reply_status(const S3Url& url, std::string_view credential_source, std::string_view method, long status,
                       std::string_view body);

}  // namespace progcache
