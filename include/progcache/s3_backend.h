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
// file (AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials) under the profile
// the URL names, or AWS_PROFILE, or "default"; else requests go unsigned (a
// public bucket). Read when the backend is made.
//
// Answers the tier acts on: a missing object is a miss; refused credentials
// (InvalidAccessKeyId, SignatureDoesNotMatch, AccessDenied, ExpiredToken), a
// missing bucket (NoSuchBucket), a clock the server finds skewed
// (RequestTimeTooSkewed) and a bucket in another region are
// permission_denied naming which (the remote tier counts them as refusals,
// says the first once, and opens its breaker); 5xx and SlowDown are
// unavailable. The bucket cannot be walked through this backend: entries
// expire by the bucket's lifecycle rules.
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

// The credentials the environment and the shared credentials file give for
// `profile` ("" for AWS_PROFILE or "default"); empty ones when none.
// invalid_argument for a credentials file that names the profile but lacks
// a key, or a key without its secret.
Result<S3Credentials> find_s3_credentials(const std::string& profile);

struct S3BackendOptions {
  S3Credentials credentials;
  int max_idle_connections = 8;
  std::size_t max_body_bytes = std::size_t{256} << 20;
};

std::unique_ptr<RemoteBackend> make_s3_backend(S3Url url, S3BackendOptions options);

}  // namespace progcache
