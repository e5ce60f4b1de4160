// EnvWrapper: a derived Env overrides only what it changes; every other call
// reaches the wrapped Env.
#include "progcache/env.h"

#include <gtest/gtest.h>

#include "testing/test_util.h"

namespace progcache {
namespace {

class FixedClockEnv final : public EnvWrapper {
 public:
  FixedClockEnv() : EnvWrapper(Env::posix()) {}
  std::int64_t now_ns() override { return 42; }
};

TEST(EnvWrapper, ForwardsEveryCallItDoesNotOverride) {
  testing::TempDir tmp;
  FixedClockEnv env;
  EXPECT_EQ(env.target(), Env::posix());
  EXPECT_EQ(env.now_ns(), 42);
  const std::string path = tmp.sub("f");
  ASSERT_TRUE(write_file_atomic(&env, path, tmp.sub(".f.tmp"), "through the wrapper", 0600, Durability::fsync).ok());
  auto text = read_regular_file(&env, path, 1 << 10);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "through the wrapper");
  auto info = env.lstat(path);
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->is_regular());
  auto names = env.list_dir(tmp.path());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 1u);
  ASSERT_TRUE(env.unlink(path).ok());
  EXPECT_EQ(env.lstat(path).status().code(), Code::not_found);
}

}  // namespace
}  // namespace progcache
