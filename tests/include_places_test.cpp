// The places a later file would be read from first
// (src/compile/include_places.h), and the dependency-file reader
// (src/compile/depfile.h): the core progcache.torch's g++ builds use.
#include "compile/include_places.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fscrypt.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compile/depfile.h"
#include "compile/empty_places.h"
#include "compile/scan_files.h"
#include "testing/test_util.h"

namespace dt = progcache::detail;
namespace pt = progcache::testing;

namespace {

void write(const std::string& path, const std::string& text) {
  pt::write_all(path, text);
}

std::vector<std::string> headers(const std::vector<std::string>& files, const std::vector<std::string>& dirs,
                                 bool precompiled = false) {
  auto found = dt::include_places(files, {dirs, precompiled, {}});
  EXPECT_TRUE(found.ok());
  return found.ok() ? found->headers : std::vector<std::string>{};
}

}  // namespace

TEST(IncludePlacesTest, AQuotedNameIsLookedForBesideItsIncluderThenInEverySearchDirectory) {
  pt::TempDir t;
  write(t.sub("a.cpp"), "#include \"q.h\"\n#include <s.h>\n#include </abs/x.h>\n");
  EXPECT_EQ(headers({t.sub("a.cpp")}, {"/i1", "/i2/"}),
            (std::vector<std::string>{t.path() + "/q.h", "/i1/q.h", "/i2/q.h", "/i1/s.h", "/i2/s.h", "/abs/x.h"}));
}

TEST(IncludePlacesTest, WhatGccFollowsAcrossASpliceOrACommentIsFound) {
  pt::TempDir t;
  write(t.sub("a.cpp"),
        "#\\\ninclude \"one.h\"\n/* c */ # /* in */ include <two.h>\n"
        "#if 0\n#include <three.h>\n#endif\n#if __has_include(<four.h>)\n#endif\n");
  EXPECT_EQ(headers({t.sub("a.cpp")}, {"/i"}),
            (std::vector<std::string>{t.path() + "/one.h", "/i/one.h", "/i/two.h", "/i/three.h", "/i/four.h"}));
}

TEST(IncludePlacesTest, ForGccEachPlaceHasItsPrecompiledHeaderPlaceAndItsOwnFirstIncludeIsLookedFor) {
  pt::TempDir t;
  write(t.sub("a.cpp"), "#include <s.h>\n#include <s.h>\n");
  auto found = dt::include_places({t.sub("a.cpp")}, {{"/i1", "/i2"}, true, {"stdc-predef.h"}});
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->headers, (std::vector<std::string>{"/i1/stdc-predef.h", "/i2/stdc-predef.h", "/i1/s.h", "/i2/s.h"}));
  EXPECT_EQ(found->precompiled,
            (std::vector<std::string>{"/i1/stdc-predef.h.gch", "/i2/stdc-predef.h.gch", "/i1/s.h.gch", "/i2/s.h.gch"}));
  auto plain = dt::include_places({t.sub("a.cpp")}, {{"/i1"}, false, {}});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->precompiled.empty());
}

TEST(IncludePlacesTest, AnIncludeThroughAMacroIsNamedAndAFileThatCannotBeReadIsAnError) {
  pt::TempDir t;
  write(t.sub("a.cpp"), "int x;\n#include NAME(v)\n");
  auto found = dt::include_places({t.sub("a.cpp")}, {{"/i"}, false, {}});
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->computed, (std::vector<std::string>{t.sub("a.cpp") + ":2"}));
  EXPECT_FALSE(dt::include_places({t.sub("gone.cpp")}, {{"/i"}, false, {}}).ok());
}

TEST(DependencyFileTest, GccsRulesWithPhonyTargetsNameEachPrerequisiteOnce) {
  // -MD -MP: the object's rule, then a rule of its own for each header.
  auto deps = dt::parse_depfile("out/unit.o: src/unit.cpp /i/a\\ b.h \\\n /i/c$$d.h\n/i/a\\ b.h:\n/i/c$$d.h:\n");
  ASSERT_TRUE(deps.ok());
  EXPECT_EQ(*deps, (std::vector<std::string>{"src/unit.cpp", "/i/a b.h", "/i/c$d.h"}));
  EXPECT_FALSE(dt::parse_depfile("src/unit.cpp\n").ok());
}

TEST(EmptyPlacesTest, AnEmptyPlaceIsWatchedByTheDeepestDirectoryOnItsPathThatExists) {
  pt::TempDir t;
  ASSERT_EQ(::mkdir(t.sub("d").c_str(), 0700), 0);
  auto w = dt::watch_of_empty(t.sub("d/x.h"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->dir, t.sub("d"));
  // Directories missing on the way: the deepest that exists.
  w = dt::watch_of_empty(t.sub("d/a/b/x.h"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->dir, t.sub("d"));
  // A relative place: from the working directory.
  w = dt::watch_of_empty("no-such-dir-here/x.h");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->dir, ".");
  // What can lead elsewhere without the directory changing watches nothing:
  // a dangling link, a file where a directory would be; nor does a place
  // that is not empty.
  ASSERT_EQ(::symlink(t.sub("nowhere").c_str(), t.sub("d/link").c_str()), 0);
  EXPECT_FALSE(dt::watch_of_empty(t.sub("d/link/x.h")));
  EXPECT_FALSE(dt::watch_of_empty(t.sub("d/link")));
  write(t.sub("d/file"), "x");
  EXPECT_FALSE(dt::watch_of_empty(t.sub("d/file/x.h")));
  EXPECT_FALSE(dt::watch_of_empty(t.sub("d/file")));
}

TEST(EmptyPlacesTest, ADirectoryChangedWithinTheRecentWindowIsNotSettled) {
  pt::TempDir t;
  ASSERT_EQ(::mkdir(t.sub("d").c_str(), 0700), 0);
  const auto w = dt::watch_of_empty(t.sub("d/x.h"));
  ASSERT_TRUE(w.has_value());
  // Made just now: a change within one timestamp tick may keep its times.
  EXPECT_FALSE(dt::watch_settled(*w, dt::now_ns()));
  // Seen from well after its last change, it is settled where its identity
  // names the mount and its file system's times follow its entries.
  const bool local = dt::times_follow_entries(w->device);
  const bool named = dt::names_mount(w->st);
  EXPECT_EQ(dt::watch_settled(*w, dt::now_ns() + 10 * dt::k_recent_ns), local && named);
}

// An encrypted directory (fscrypt) shows its entries' names once its key is
// added, and its times do not change: a place in it found empty while it
// was locked is not empty after. Such a directory watches nothing. Needs
// root, mkfs.ext4 and a loop device; skips without them.
TEST(EmptyPlacesTest, AnEncryptedDirectoryWatchesNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting an ext4 image needs root";
  pt::TempDir t;
  const std::string img = t.sub("img");
  const std::string mnt = t.sub("mnt");
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  const std::string make = "truncate -s 32M '" + img + "' && mkfs.ext4 -q -O encrypt -I 256 '" + img +
                           "' >/dev/null 2>&1 && mount -o loop '" + img + "' '" + mnt + "' 2>/dev/null";
  if (std::system(make.c_str()) != 0) GTEST_SKIP() << "no ext4 image could be made and mounted here";
  struct Unmount {
    std::string at;
    ~Unmount() { (void)std::system(("umount '" + at + "' 2>/dev/null").c_str()); }
  } unmount{mnt};
  // A v2 policy's key, added to the file system, set on `enc`, removed.
  const int root_fd = ::open(mnt.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(root_fd, 0);
  std::array<unsigned char, sizeof(fscrypt_add_key_arg) + 64> add_buf{};
  auto* add = reinterpret_cast<fscrypt_add_key_arg*>(add_buf.data());
  add->key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
  add->raw_size = 64;
  for (int i = 0; i < 64; ++i) add_buf[sizeof(fscrypt_add_key_arg) + i] = static_cast<unsigned char>(i);
  if (::ioctl(root_fd, FS_IOC_ADD_ENCRYPTION_KEY, add) != 0) {
    ::close(root_fd);
    GTEST_SKIP() << "the kernel adds no fscrypt key here: " << std::strerror(errno);
  }
  const std::string enc = mnt + "/enc";
  ASSERT_EQ(::mkdir(enc.c_str(), 0700), 0);
  fscrypt_policy_v2 policy{};
  policy.version = FSCRYPT_POLICY_V2;
  policy.contents_encryption_mode = FSCRYPT_MODE_AES_256_XTS;
  policy.filenames_encryption_mode = FSCRYPT_MODE_AES_256_CTS;
  policy.flags = FSCRYPT_POLICY_FLAGS_PAD_32;
  std::memcpy(policy.master_key_identifier, add->key_spec.u.identifier, sizeof policy.master_key_identifier);
  const int enc_fd = ::open(enc.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(enc_fd, 0);
  ASSERT_EQ(::ioctl(enc_fd, FS_IOC_SET_ENCRYPTION_POLICY, &policy), 0) << std::strerror(errno);
  ::close(enc_fd);
  write(enc + "/h.h", "#define V 2\n");
  fscrypt_remove_key_arg remove{};
  remove.key_spec = add->key_spec;
  ASSERT_EQ(::ioctl(root_fd, FS_IOC_REMOVE_ENCRYPTION_KEY, &remove), 0) << std::strerror(errno);
  ::close(root_fd);
  // Locked: the header's name is hidden, and the place reads as empty.
  struct stat st {};
  ASSERT_NE(::stat((enc + "/h.h").c_str(), &st), 0);
  EXPECT_TRUE(dt::entries_hidden(enc));
  EXPECT_FALSE(dt::watch_of_empty(enc + "/h.h")) << "an encrypted directory watched a place its key would fill";
  // The file system's root, unencrypted, still watches.
  EXPECT_FALSE(dt::entries_hidden(mnt));
  EXPECT_TRUE(dt::watch_of_empty(mnt + "/x.h"));
}
