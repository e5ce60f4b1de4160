// Settings files (progcache.conf): precedence, what each file may hold, the
// trust of each file, bad input, and `config set`'s atomic rewrite.
#include "config/config_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "progcache/config.h"
#include "testing/test_util.h"

namespace progcache {
namespace {

// Sets (or unsets) a variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, const std::optional<std::string>& value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvVar() {
    if (m_old) {
      ::setenv(m_name, m_old->c_str(), 1);
    } else {
      ::unsetenv(m_name);
    }
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* m_name;
  std::optional<std::string> m_old;
};

class ConfigFileTest : public ::testing::Test {
 protected:
  ConfigFileTest()
      : m_xdg("XDG_CONFIG_HOME", m_tmp.sub("xdg")),
        m_dir("PROGCACHE_DIR", std::nullopt),
        m_size("PROGCACHE_MAX_SIZE", std::nullopt),
        m_cache("XDG_CACHE_HOME", m_tmp.sub("cache")),
        m_sharing("PROGCACHE_SHARING", std::nullopt),
        m_compression("PROGCACHE_COMPRESSION", std::nullopt) {}

  std::string user_file(const std::string& text) {
    std::filesystem::create_directories(m_tmp.sub("xdg/progcache"));
    testing::write_all(user_config_path(), text);
    ::chmod(user_config_path().c_str(), 0600);
    return user_config_path();
  }
  std::string root() const { return m_tmp.sub("root"); }
  std::string root_file(const std::string& text) {
    std::filesystem::create_directories(root());
    ::chmod(root().c_str(), 0700);
    testing::write_all(root_config_path(root()), text);
    ::chmod(root_config_path(root()).c_str(), 0600);
    return root_config_path(root());
  }
  static const Setting& shown(const Config& c, std::string_view name) {
    for (const auto& s : c.settings) {
      if (s.name == name) return s;
    }
    static const Setting none;
    ADD_FAILURE() << "no setting " << name;
    return none;
  }
  // The message of a strict resolution, which must fail; and a lenient
  // one, which must warn and apply the defaults.
  std::string refused() {
    ConfigOverrides strict;
    strict.strict_files = true;
    auto r = resolve_config(strict);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return {};
    EXPECT_EQ(r.status().code(), Code::invalid_argument);
    auto lenient = resolve_config();
    EXPECT_TRUE(lenient.ok()) << lenient.status().to_string();
    if (lenient.ok()) {
      EXPECT_GE(lenient->warnings.size(), 1u);
      EXPECT_EQ(lenient->skipped_files.size(), 1u);
      EXPECT_EQ(lenient->max_size_bytes, k_default_max_size);
    }
    return r.status().message();
  }

  testing::TempDir m_tmp;
  EnvVar m_xdg, m_dir, m_size, m_cache, m_sharing, m_compression;
};

TEST_F(ConfigFileTest, EnvironmentWinsOverTheRootsFileWhichWinsOverTheUsersFile) {
  const std::string user = user_file("# mine\ndir = " + root() + "\nmax_size = 3G\ncompression = 5\n");
  const std::string rootf = root_file("max_size = 2G\n");
  auto c = resolve_config();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->dir, root());
  EXPECT_EQ(shown(*c, "PROGCACHE_DIR").source, user + ":2");
  EXPECT_EQ(c->max_size_bytes, 2ULL << 30);
  EXPECT_EQ(shown(*c, "PROGCACHE_MAX_SIZE").source, rootf + ":1");
  EXPECT_EQ(c->compression_level, 5);
  EXPECT_EQ(shown(*c, "PROGCACHE_COMPRESSION").source, user + ":4");
  // What the file store is opened with is what the files say.
  EXPECT_EQ(c->file_store_options().max_size_bytes, 2ULL << 30);
  {
    EnvVar env("PROGCACHE_MAX_SIZE", "1G");
    auto e = resolve_config();
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->max_size_bytes, 1ULL << 30);
    EXPECT_EQ(shown(*e, "PROGCACHE_MAX_SIZE").source, "environment");
  }
  ConfigOverrides flag;
  flag.max_size = "512M";
  auto f = resolve_config(flag);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->max_size_bytes, 512ULL << 20);
  // Another root's file is not this root's.
  flag.max_size.reset();
  flag.dir = m_tmp.sub("other");
  auto o = resolve_config(flag);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->max_size_bytes, 3ULL << 30);
}

TEST_F(ConfigFileTest, PathsInAFileAreAbsoluteOrUnderHome) {
  EnvVar home("HOME", m_tmp.path());
  user_file("dir = ~/caches/pc\n");
  auto c = resolve_config();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->dir, m_tmp.sub("caches/pc"));
  user_file("dir = caches/pc\n");
  EXPECT_NE(refused().find(":1: dir 'caches/pc' is not an absolute path"), std::string::npos);
}

TEST_F(ConfigFileTest, BadFilesAreNamedWithTheirLine) {
  const std::string path = user_file("max_size = 2G\n\nnonsense\n");
  std::string m = refused();
  EXPECT_NE(m.find(path + ":3: the line is not 'name = value'"), std::string::npos) << m;
  // The line itself is not repeated (it may hold a password).
  user_file("remote redis://user:s3cret@host\n");
  m = refused();
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  user_file("readonly = enabled\n");
  m = refused();
  EXPECT_NE(m.find(path + ":1: readonly 'enabled' is not yes or no"), std::string::npos) << m;
  user_file("remote = redis://user:s3cret@127.0.0.1:1\n");
  m = refused();
  EXPECT_NE(m.find("a URL with a password is not kept in a settings file"), std::string::npos) << m;
  EXPECT_EQ(m.find("s3cret"), std::string::npos) << m;
  user_file("max_sise = 2G\n");
  m = refused();
  EXPECT_NE(m.find(path + ":1: unknown setting 'max_sise'"), std::string::npos) << m;
  user_file("max_size = 2G\nmax_size = 3G\n");
  m = refused();
  EXPECT_NE(m.find(path + ":2: max_size is set a second time (first on line 1)"), std::string::npos) << m;
  user_file("max_size =\n");
  m = refused();
  EXPECT_NE(m.find(path + ":1: max_size has no value"), std::string::npos) << m;
  // ccache reads "max_size = 5" as 5 GB: refused, never a 5-byte cap.
  user_file("max_size = 5\n");
  m = refused();
  EXPECT_NE(m.find(path + ":1: max_size '5' has no unit"), std::string::npos) << m;
  user_file("compression = 30\n");
  m = refused();
  EXPECT_NE(m.find(path + ":1: PROGCACHE_COMPRESSION: invalid compression level '30'"), std::string::npos) << m;
  user_file("remote_password = hunter2\n");
  m = refused();
  EXPECT_NE(m.find("remote_password cannot be set here"), std::string::npos) << m;
  EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
  user_file("torch = 1\n");
  m = refused();
  EXPECT_NE(m.find("set PROGCACHE_TORCH=1 in the environment"), std::string::npos) << m;
  user_file(std::string("max_size = 2G\n") + std::string(70 * 1024, '#'));
  m = refused();
  EXPECT_NE(m.find("larger than 64 KiB"), std::string::npos) << m;
}

TEST_F(ConfigFileTest, TheRootsFileHoldsOnlyWhatDescribesTheRoot) {
  user_file("dir = " + root() + "\n");
  const std::string path = root_file("max_size = 2G\nremote = redis://127.0.0.1:1\n");
  std::string m = refused();
  EXPECT_NE(m.find(path + ":2: remote cannot be set here: a root's file holds only"), std::string::npos) << m;
  root_file("trusted_keys_file = /etc/keys.pem\n");
  m = refused();
  EXPECT_NE(m.find("trusted_keys_file cannot be set here"), std::string::npos) << m;
  root_file("dir = /elsewhere\n");
  m = refused();
  EXPECT_NE(m.find("dir cannot be set here"), std::string::npos) << m;
}

TEST_F(ConfigFileTest, FilesOthersCanWriteAreNotRead) {
  const std::string path = user_file("max_size = 2G\n");
  ::chmod(path.c_str(), 0620);
  std::string m = refused();
  EXPECT_NE(m.find("'" + path + "' is writable by other users (mode 0620)"), std::string::npos) << m;
  ::chmod(path.c_str(), 0602);
  EXPECT_NE(refused().find("writable by other users"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  if (::geteuid() == 0) {
    // Another user's file (made so by chown, which needs root).
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    m = refused();
    EXPECT_NE(m.find("belongs to another user (uid 65534)"), std::string::npos) << m;
    ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  }
  // A user's file may be a link (a dotfiles repository); a root's may not.
  std::filesystem::rename(path, m_tmp.sub("real.conf"));
  std::filesystem::create_symlink(m_tmp.sub("real.conf"), path);
  testing::write_all(m_tmp.sub("real.conf"), "dir = " + root() + "\n");
  ::chmod(m_tmp.sub("real.conf").c_str(), 0600);
  auto c = resolve_config();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->dir, root());
  root_file("max_size = 2G\n");
  std::filesystem::rename(root_config_path(root()), m_tmp.sub("root.conf"));
  std::filesystem::create_symlink(m_tmp.sub("root.conf"), root_config_path(root()));
  EXPECT_NE(refused().find("is a symbolic link"), std::string::npos);
  std::filesystem::remove(root_config_path(root()));
  std::filesystem::create_directory(root_config_path(root()));
  EXPECT_NE(refused().find("is not a regular file"), std::string::npos);
}

TEST_F(ConfigFileTest, AGroupRootsFileMayBeGroupWritableButNotWorldWritable) {
  EnvVar sharing("PROGCACHE_SHARING", "group");
  user_file("dir = " + root() + "\n");
  const std::string path = root_file("max_size = 2G\n");
  ::chmod(path.c_str(), 0660);
  auto c = resolve_config();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->max_size_bytes, 2ULL << 30);
  ::chmod(path.c_str(), 0662);
  EXPECT_NE(refused().find("writable by every user (mode 0662)"), std::string::npos);
  // Skipped in a group root, the cache is off: the file could have named keys.
  auto lenient = resolve_config();
  ASSERT_TRUE(lenient.ok());
  EXPECT_TRUE(lenient->disabled);
}

TEST_F(ConfigFileTest, ASkippedFileTurnsTheCacheOffWhereItCouldHaveNamedWhomToTrust) {
  // The user's file names the key entries of the remote tier are checked
  // with; a typo makes the library skip the file. With the remote tier set
  // in the environment, its defaults would read unsigned entries: the cache
  // is off instead, and says why.
  testing::write_all(m_tmp.sub("hmac.key"), "0123456789abcdef0123456789");
  user_file("hmac_key_file = " + m_tmp.sub("hmac.key") + "\nreadonly = yes\nmax_sise = 5G\n");
  {
    EnvVar remote("PROGCACHE_REMOTE", "redis://127.0.0.1:1");
    auto c = resolve_config();
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE(c->disabled);
    EXPECT_TRUE(c->hmac_key.empty());
    EXPECT_NE(c->warnings.back().find("the cache is off until the settings file is fixed"), std::string::npos);
    EXPECT_EQ(shown(*c, "PROGCACHE_DISABLE").value, "yes");
  }
  // With neither a remote tier nor a group root, the defaults are safe.
  auto c = resolve_config();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->disabled);
  // Fixed, the file applies again.
  user_file("hmac_key_file = " + m_tmp.sub("hmac.key") + "\nreadonly = yes\n");
  EnvVar remote("PROGCACHE_REMOTE", "redis://127.0.0.1:1");
  auto fixed = resolve_config();
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->disabled);
  EXPECT_TRUE(fixed->read_only);
  EXPECT_FALSE(fixed->hmac_key.empty());
}

TEST_F(ConfigFileTest, ARelativeHomeNeverMakesTheUsersFileRelative) {
  EnvVar xdg("XDG_CONFIG_HOME", std::nullopt);
  EnvVar home("HOME", ".");
  EXPECT_EQ(user_config_path().front(), '/') << user_config_path();
  EXPECT_EQ(user_config_path().find("/./"), std::string::npos) << user_config_path();
}

TEST_F(ConfigFileTest, SetRewritesOneLineAtomicallyAndKeepsTheRest) {
  const std::string user =
      user_file("# my settings\nremote_compression = 3   \n\n# the team's server\nreadonly = yes\n");
  auto cfg = resolve_config();
  ASSERT_TRUE(cfg.ok());
  auto change = set_config_value("remote_compression", "7", ConfigFileScope::automatic, *cfg);
  ASSERT_TRUE(change.ok()) << change.status().to_string();
  EXPECT_EQ(change->path, user);
  EXPECT_EQ(testing::read_all(user), "# my settings\nremote_compression = 7\n\n# the team's server\nreadonly = yes\n");
  // A root's setting goes to the root's file (made with the root), the
  // variable's name works too.
  change = set_config_value("PROGCACHE_MAX_SIZE", "20G", ConfigFileScope::automatic, *cfg);
  ASSERT_TRUE(change.ok()) << change.status().to_string();
  const std::string rootf = root_config_path(cfg->dir);
  EXPECT_EQ(change->path, rootf);
  EXPECT_EQ(change->shown, "20.0 GiB");
  EXPECT_EQ(testing::read_all(rootf), "max_size = 20G\n");
  struct stat st {};
  ASSERT_EQ(::stat(rootf.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  auto now = resolve_config();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->max_size_bytes, 20ULL << 30);
  EXPECT_EQ(now->remote_compression_level, 7);
  // A bad value changes nothing.
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"max_size", "20"},
                                                        {"max_size", "20Q"},
                                                        {"compression", "99"},
                                                        {"durability", "always"},
                                                        {"max_sise", "1G"},
                                                        {"hmac_key_file", "/no/such/key"},
                                                        {"hmac_key_file", "relative.key"},
                                                        {"remote_password", "x"},
                                                        {"nvrtc", "/x.so"},
                                                        {"compression", "1\nmax_size = 1K"}}) {
    auto bad = set_config_value(name, value, ConfigFileScope::automatic, *cfg);
    EXPECT_FALSE(bad.ok()) << name << " = " << value;
    EXPECT_EQ(bad.status().code(), Code::invalid_argument) << bad.status().to_string();
  }
  EXPECT_FALSE(set_config_value("remote", "redis://127.0.0.1:1", ConfigFileScope::root, *cfg).ok());
  EXPECT_EQ(testing::read_all(rootf), "max_size = 20G\n");
  EXPECT_EQ(testing::read_all(user), "# my settings\nremote_compression = 7\n\n# the team's server\nreadonly = yes\n");
  // --user puts a root's setting in the user's file; unset removes a line.
  ASSERT_TRUE(set_config_value("max_size", "1G", ConfigFileScope::user, *cfg).ok());
  ASSERT_TRUE(set_config_value("remote_compression", std::nullopt, ConfigFileScope::automatic, *cfg).ok());
  EXPECT_EQ(testing::read_all(user), "# my settings\n\n# the team's server\nreadonly = yes\nmax_size = 1G\n");
  // Nothing but the file is left in the directory (the temp was renamed).
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(m_tmp.sub("xdg/progcache"))) files += e.exists() ? 1 : 0;
  EXPECT_EQ(files, 1u);
}

TEST_F(ConfigFileTest, SetRepairsABadValueButNeverRewritesAFileItDoesNotTrust) {
  const std::string user = user_file("# mine\r\nreadonly = yes\r\nremote_compression = 5\r\nmax_size = 5\r\n");
  auto cfg = resolve_config();  // lenient: the file skipped
  ASSERT_TRUE(cfg.ok());
  ASSERT_EQ(cfg->skipped_files.size(), 1u);
  auto change = set_config_value("max_size", " 5G ", ConfigFileScope::user, *cfg);
  ASSERT_TRUE(change.ok()) << change.status().to_string();
  // Trimmed as it will be read; the file's line ends kept.
  EXPECT_EQ(testing::read_all(user), "# mine\r\nreadonly = yes\r\nremote_compression = 5\r\nmax_size = 5G\r\n");
  ConfigOverrides strict;
  strict.strict_files = true;
  auto now = resolve_config(strict);
  ASSERT_TRUE(now.ok()) << now.status().to_string();
  EXPECT_EQ(now->max_size_bytes, 5ULL << 30);
  ::chmod(user.c_str(), 0666);
  auto refused_change = set_config_value("remote_compression", "3", ConfigFileScope::automatic, *cfg);
  ASSERT_FALSE(refused_change.ok());
  EXPECT_NE(refused_change.status().message().find("writable by other users"), std::string::npos);
  EXPECT_EQ(testing::read_all(user), "# mine\r\nreadonly = yes\r\nremote_compression = 5\r\nmax_size = 5G\r\n");
}

TEST_F(ConfigFileTest, UnsetOfWhatIsNotSetWritesNothingAndALinkedFileIsWrittenWhereItLeads) {
  auto cfg = resolve_config();
  ASSERT_TRUE(cfg.ok());
  auto none = set_config_value("max_size", std::nullopt, ConfigFileScope::automatic, *cfg);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->changed);
  EXPECT_FALSE(std::filesystem::exists(cfg->dir)) << "unset made the root";
  EXPECT_FALSE(std::filesystem::exists(user_config_path()));
  // A dotfiles repository's file, linked: the link stays, the file changes.
  testing::write_all(m_tmp.sub("dotfiles.conf"), "readonly = no\n");
  ::chmod(m_tmp.sub("dotfiles.conf").c_str(), 0600);
  std::filesystem::create_directories(m_tmp.sub("xdg/progcache"));
  std::filesystem::create_symlink(m_tmp.sub("dotfiles.conf"), user_config_path());
  ASSERT_TRUE(set_config_value("readonly", "yes", ConfigFileScope::automatic, *cfg).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(user_config_path()));
  EXPECT_EQ(testing::read_all(m_tmp.sub("dotfiles.conf")), "readonly = yes\n");
  // A yes/no setting takes only yes or no.
  EXPECT_FALSE(set_config_value("readonly", "enabled", ConfigFileScope::automatic, *cfg).ok());
}

TEST_F(ConfigFileTest, SetsAtOnceKeepEveryLine) {
  // Six processes' worth of `config set` at once, each a different line:
  // none is lost (each read, change and replace holds the directory's lock).
  auto cfg = resolve_config();
  ASSERT_TRUE(cfg.ok());
  const std::vector<std::pair<std::string, std::string>> sets = {{"readonly", "yes"},     {"remote_compression", "4"},
                                                                 {"compression", "3"},    {"max_entries", "100"},
                                                                 {"durability", "fsync"}, {"max_size", "3G"}};
  for (int round = 0; round < 10; ++round) {
    std::filesystem::remove(user_config_path());
    std::vector<std::thread> threads;
    for (const auto& [name, value] : sets) {
      threads.emplace_back([&cfg, name = name, value = value] {
        EXPECT_TRUE(set_config_value(name, value, ConfigFileScope::user, *cfg).ok());
      });
    }
    for (auto& t : threads) t.join();
    auto f = config_file::load(user_config_path(), config_file::Rules::user);
    ASSERT_TRUE(f.ok() && *f);
    EXPECT_EQ((*f)->lines.size(), sets.size()) << testing::read_all(user_config_path());
  }
}

TEST(ConfigFileRewrite, ReplacesInPlaceAppendsAndRemoves) {
  EXPECT_EQ(config_file::rewrite("", "a", "1"), "a = 1\n");
  EXPECT_EQ(config_file::rewrite("b = 2", "a", "1"), "b = 2\na = 1\n");
  EXPECT_EQ(config_file::rewrite("# a = 0\n  a=0 \nb = 2\n", "a", "1"), "# a = 0\na = 1\nb = 2\n");
  EXPECT_EQ(config_file::rewrite("a = 0\nb = 2\n", "a", std::nullopt), "b = 2\n");
  EXPECT_EQ(config_file::rewrite("ab = 0\n", "a", "1"), "ab = 0\na = 1\n");
}

}  // namespace
}  // namespace progcache
