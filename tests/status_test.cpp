#include "progcache/status.h"

#include <gtest/gtest.h>

#include "progcache/bytes.h"

namespace progcache {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  PROGCACHE_ASSIGN_OR_RETURN(int h, half(x));
  PROGCACHE_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  PROGCACHE_TRY(half(x));
  return {};
}

TEST(Status, OkByDefaultAndCarriesCodeAndMessage) {
  EXPECT_TRUE(Status().ok());
  Status s = data_loss("entry x: checksum mismatch");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::data_loss);
  EXPECT_EQ(s.to_string(), "data_loss: entry x: checksum mismatch");
  EXPECT_EQ(s.with_context("get").message(), "get: entry x: checksum mismatch");
}

TEST(Status, ResultPropagatesThroughMacros) {
  EXPECT_EQ(*quarter(8), 2);
  auto r = quarter(6);  // 6/2 = 3 is odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_EQ(check_even(5).code(), Code::invalid_argument);
}

TEST(Status, ResultFromOkStatusIsAnInternalError) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::internal);
}

TEST(Status, ErrnoIsMappedToCanonicalCodesWithPath) {
  EXPECT_EQ(errno_status(ENOSPC, "write", "/x").code(), Code::resource_exhausted);
  EXPECT_EQ(errno_status(EMFILE, "open").code(), Code::resource_exhausted);
  EXPECT_EQ(errno_status(EACCES, "open").code(), Code::permission_denied);
  EXPECT_EQ(errno_status(EROFS, "open").code(), Code::permission_denied);
  EXPECT_EQ(errno_status(ENOENT, "open").code(), Code::not_found);
  EXPECT_EQ(errno_status(EIO, "read").code(), Code::internal);
  const Status s = errno_status(ENOSPC, "write", "/cache/ab/cd");
  EXPECT_NE(s.message().find("'/cache/ab/cd'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space"), std::string::npos) << s.message();
}

TEST(Bytes, HexRoundTripAndErrors) {
  EXPECT_EQ(to_hex(std::string("\x00\xff\x10", 3)), "00ff10");
  EXPECT_EQ(*from_hex("00FF10"), std::string("\x00\xff\x10", 3));
  auto odd = from_hex("abc");
  EXPECT_EQ(odd.status().code(), Code::invalid_argument);
  auto bad = from_hex("zz");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("position 0"), std::string::npos);
}

TEST(Bytes, CopiesShareStorageAndSlicesStayAlive) {
  Bytes a = Bytes::copy_of("hello world");
  Bytes b = a;
  EXPECT_EQ(a.data(), b.data());  // no payload copy
  Bytes s = a.slice(6, 5);
  a = Bytes();
  b = Bytes();
  EXPECT_EQ(s.view(), "world");
}

}  // namespace
}  // namespace progcache
