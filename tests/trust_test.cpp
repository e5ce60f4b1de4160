// The one rule for code (progcache/trust.h): what counts as host code, where
// it may come from under each configuration, and which directories an
// integration may load it from.
#include "progcache/trust.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "progcache/config.h"
#include "progcache/file_store.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

using testing::TempDir;

std::string elf(unsigned machine, bool big_endian = false) {
  std::string d(64, '\0');
  d[0] = '\x7f';
  d[1] = 'E';
  d[2] = 'L';
  d[3] = 'F';
  d[4] = 2;
  d[5] = big_endian ? 2 : 1;
  if (big_endian) {
    d[18] = static_cast<char>(machine >> 8U);
    d[19] = static_cast<char>(machine & 0xffU);
  } else {
    d[18] = static_cast<char>(machine & 0xffU);
    d[19] = static_cast<char>(machine >> 8U);
  }
  return d;
}

TEST(TrustTest, HostCodeIsKnownByNameOrByContent) {
  // Names Triton, tilelang, nvcc and Python give host code.
  for (const char* name : {"cuda_utils.cpython-312-x86_64-linux-gnu.so", "__triton_launcher.so", "kernel_lib.so",
                           "executable.so", "libfoo.so.1", "libfoo.so.1.2", "k.o", "K.OBJ", "libk.a", "kernel.py",
                           "mod.pyc", "graph.pkl", "x.pickle", "m.pt", "k.dll", "k.dylib"}) {
    EXPECT_EQ(classify_artifact(name, "text"), CodeKind::host) << name;
  }
  // Device code and data by name, with device or data bytes.
  for (const char* name : {"softmax.cubin", "k.ptx", "k.fatbin", "k.ltoir", "k.json", "k.ttir", "k.source", "k.llir",
                           "params.json", "kernel.cu", "so", "x.solution"}) {
    EXPECT_EQ(classify_artifact(name, "// PTX\n.version 8.0\n"), CodeKind::device) << name;
  }
  // By content, whatever the name: an x86-64 or AArch64 ELF (either byte
  // order) is host code; a CUDA cubin (EM_CUDA, 190) and an AMD GPU image
  // (EM_AMDGPU, 224) are not.
  EXPECT_EQ(classify_artifact("softmax.cubin", elf(62)), CodeKind::host);
  EXPECT_EQ(classify_artifact("softmax.cubin", elf(183)), CodeKind::host);
  EXPECT_EQ(classify_artifact("softmax.cubin", elf(62, true)), CodeKind::host);
  EXPECT_EQ(classify_artifact("softmax.cubin", elf(190)), CodeKind::device);
  EXPECT_EQ(classify_artifact("k.hsaco", elf(224)), CodeKind::device);
  EXPECT_EQ(classify_artifact("data", std::string("\xcf\xfa\xed\xfe", 4) + "macho"), CodeKind::host);
  EXPECT_EQ(classify_artifact("data", "MZ\x90"), CodeKind::host);
  EXPECT_EQ(classify_artifact("data", std::string("\xa7\x0d\x0d\x0a", 4) + "pyc"), CodeKind::host);  // 3.11
  EXPECT_EQ(classify_artifact("data", std::string("\x80\x04\x95", 3)), CodeKind::host);              // pickle 4
  EXPECT_EQ(classify_artifact("data", "ab\r\nplain text"), CodeKind::device);
  EXPECT_EQ(classify_artifact("data", ""), CodeKind::device);
}

TEST(TrustTest, HostCodeComesOnlyFromAPrivateRootOrSignedStores) {
  Config c;
  c.remote_urls = {"redis://127.0.0.1:1"};
  // Private, unsigned: the disk store only.
  CodeTrust t = host_code_trust(c);
  EXPECT_TRUE(t.disk);
  EXPECT_FALSE(t.remote);
  EXPECT_NE(t.remote_reason.find("PROGCACHE_HMAC_KEY_FILE"), std::string::npos);
  // Group-shared, unsigned: nowhere.
  c.sharing = Sharing::group;
  t = host_code_trust(c);
  EXPECT_FALSE(t.disk);
  EXPECT_FALSE(t.remote);
  EXPECT_NE(t.disk_reason.find("PROGCACHE_SHARING=group"), std::string::npos);
  // Signed (HMAC): everywhere, the reader refusing unsigned entries.
  c.hmac_key = "0123456789abcdef0123456789abcdef";
  t = host_code_trust(c);
  EXPECT_TRUE(t.disk);
  EXPECT_TRUE(t.remote);
  EXPECT_TRUE(t.disk_reason.empty() && t.remote_reason.empty());
  EXPECT_TRUE(entries_signed(c));
  // Without a remote tier there is nothing to say about one.
  Config plain;
  EXPECT_TRUE(host_code_trust(plain).remote_reason.empty());
}

TEST(TrustTest, APrivateDirectoryIsMadeAndAcceptedAndOthersAreRefused) {
  TempDir tmp;
  const std::string mine = tmp.sub("a/b/triton");
  ASSERT_TRUE(prepare_private_dir(mine).ok());
  struct stat st {};
  ASSERT_EQ(::stat(mine.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700U);
  EXPECT_TRUE(prepare_private_dir(mine).ok());  // and again, as it is

  // A directory others may write, or one under such a directory (not sticky).
  const std::string open_dir = tmp.sub("open");
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  EXPECT_EQ(prepare_private_dir(open_dir).code(), Code::permission_denied);
  EXPECT_EQ(prepare_private_dir(open_dir + "/cache").code(), Code::permission_denied);
  // Sticky, as /tmp: a directory of one's own under it is fine.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  EXPECT_TRUE(prepare_private_dir(open_dir + "/cache").ok());
  // Group-writable.
  const std::string group_dir = tmp.sub("group");
  ASSERT_EQ(::mkdir(group_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(group_dir.c_str(), 0770), 0);
  EXPECT_EQ(prepare_private_dir(group_dir).code(), Code::permission_denied);
  // A file, and a path through a file.
  const std::string file = tmp.sub("file");
  std::ofstream(file) << "x";
  EXPECT_FALSE(prepare_private_dir(file).ok());
  EXPECT_FALSE(prepare_private_dir(file + "/sub").ok());
  EXPECT_EQ(prepare_private_dir("").code(), Code::invalid_argument);
  // Another user's directory (needs root to make one).
  if (::geteuid() == 0) {
    const std::string theirs = tmp.sub("theirs");
    ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_EQ(prepare_private_dir(theirs).code(), Code::permission_denied);
    EXPECT_EQ(prepare_private_dir(theirs + "/cache").code(), Code::permission_denied);
  }
}

TEST(TrustTest, ALinkAnotherUserOwnsIsNeverOnTheWayToATrustedDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a link another uid owns";
  TempDir tmp;
  const std::string mine = tmp.sub("mine");
  ASSERT_TRUE(prepare_private_dir(mine).ok());
  // A sticky shared directory, as /tmp, holding links to the user's own
  // directory: one the user made, and one another uid made (its owner can
  // point it at a tree of theirs at any time).
  const std::string shared = tmp.sub("shared");
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  const std::string own_link = shared + "/own";
  ASSERT_EQ(::symlink(mine.c_str(), own_link.c_str()), 0);
  EXPECT_TRUE(prepare_private_dir(own_link).ok());
  EXPECT_TRUE(prepare_private_dir(own_link + "/sub").ok());
  const std::string their_link = shared + "/theirs";
  ASSERT_EQ(::symlink(mine.c_str(), their_link.c_str()), 0);
  ASSERT_EQ(::lchown(their_link.c_str(), 65534, 65534), 0);
  EXPECT_EQ(prepare_private_dir(their_link).code(), Code::permission_denied);
  EXPECT_EQ(prepare_private_dir(their_link + "/sub").code(), Code::permission_denied);
  // The same rule for a file store's root.
  FileStoreOptions o;
  o.root = their_link;
  EXPECT_EQ(FileStore::open(o).status().code(), Code::permission_denied);
  o.root = own_link;
  EXPECT_TRUE(FileStore::open(o).ok());
}

}  // namespace
}  // namespace progcache
