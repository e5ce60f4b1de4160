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

// A wrapper that overrides pread alone: preadv through it is the default,
// pread per piece, so the override sees every read.
class CountingPreadEnv final : public EnvWrapper {
 public:
  CountingPreadEnv() : EnvWrapper(Env::posix()) {}
  Result<std::size_t> pread(int fd, char* buf, std::size_t n, std::uint64_t offset) override {
    ++preads;
    return target()->pread(fd, buf, n, offset);
  }
  int preads = 0;
};

// preadv fills each piece before the next, from the offset, and stops short
// at the end of the file: the posix one (one system call) and the default.
TEST(Env, PreadvFillsEachPieceInTurnAndStopsAtTheEnd) {
  testing::TempDir tmp;
  const std::string path = tmp.sub("f");
  ASSERT_TRUE(write_file_atomic(Env::posix(), path, tmp.sub(".f.tmp"), "0123456789", 0600, Durability::none).ok());
  CountingPreadEnv fallback;
  for (Env* env : {Env::posix(), static_cast<Env*>(&fallback)}) {
    auto fd = env->open_file(path, OpenMode::read, 0);
    ASSERT_TRUE(fd.ok()) << fd.status().to_string();
    char a[3] = {}, b[4] = {}, c[8] = {};
    const ReadPiece whole[] = {{a, 3}, {b, 4}};
    auto got = env->preadv(*fd, whole, 2);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, 7u);
    EXPECT_EQ(std::string_view(a, 3), "234");
    EXPECT_EQ(std::string_view(b, 4), "5678");
    const ReadPiece past_the_end[] = {{a, 3}, {c, 8}};  // 4 bytes are left at offset 6
    got = env->preadv(*fd, past_the_end, 6);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 4u);
    EXPECT_EQ(std::string_view(a, 3), "678");
    EXPECT_EQ(c[0], '9');
    got = env->preadv(*fd, past_the_end, 10);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 0u);
    EXPECT_TRUE(env->close_file(*fd).ok());
  }
  EXPECT_EQ(fallback.preads, 5);  // 2 and 2 (the second short), then 1 at the end of the file
}

}  // namespace
}  // namespace progcache
