// The store layer's shared helpers: size and duration parsing.
#include "progcache/store.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace progcache {
namespace {

TEST(ParseSize, UnitsArePowersOf1024AndTheArithmeticIsExact) {
  EXPECT_EQ(*parse_size("1000"), 1000u);
  EXPECT_EQ(*parse_size("64k"), 65536u);
  EXPECT_EQ(*parse_size("512M"), 512u << 20);
  EXPECT_EQ(*parse_size("10G"), std::uint64_t{10} << 30);
  EXPECT_EQ(*parse_size("1.5GiB"), std::uint64_t{3} << 29);
  EXPECT_EQ(*parse_size("2 TB"), std::uint64_t{2} << 40);
  EXPECT_EQ(*parse_size("0"), 0u);  // callers read it as "no limit"
  EXPECT_EQ(*parse_size("0.5k"), 512u);
  EXPECT_EQ(*parse_size("1.0009765625k"), 1025u);  // exact, where a double would round
  EXPECT_EQ(*parse_size("9223372036854775807"), static_cast<std::uint64_t>(INT64_MAX));
}

TEST(ParseSize, RefusesWhatIsNotASizeOrCannotBeMeant) {
  for (const char* bad : {"", "-1", "10Q", "1e9", ".", "1..2", "G", "0x10", " 1"}) {
    auto r = parse_size(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' was accepted as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::invalid_argument);
    }
  }
  // 2^63 and beyond: never silently 8 EiB.
  for (const char* huge : {"9223372036854775808", "18446744073709551615", "8388608T", "99999999999999999999999"}) {
    auto r = parse_size(huge);
    ASSERT_FALSE(r.ok()) << huge;
    EXPECT_NE(r.status().message().find("too large"), std::string::npos);
  }
  // A nonzero size below one byte is not a cap of zero.
  auto tiny = parse_size("0.4");
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("less than one byte"), std::string::npos);
}

TEST(ParseDuration, UnitsAndRefusals) {
  EXPECT_EQ(*parse_duration("30s"), std::int64_t{30} * 1000000000);
  EXPECT_EQ(*parse_duration("2h"), std::int64_t{7200} * 1000000000);
  EXPECT_EQ(*parse_duration("7d"), std::int64_t{7} * 86400 * 1000000000);
  EXPECT_FALSE(parse_duration("3y").ok());
  EXPECT_FALSE(parse_duration("-1s").ok());
}

}  // namespace
}  // namespace progcache
