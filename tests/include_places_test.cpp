// The places a later file would be read from first
// (src/compile/include_places.h), and the dependency-file reader
// (src/compile/depfile.h): the core progcache.torch's g++ builds use.
#include "compile/include_places.h"

#include <gtest/gtest.h>

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
  const bool named = (static_cast<std::uint64_t>(w->st.st_dev) >> 63) == 0;
  EXPECT_EQ(dt::watch_settled(*w, dt::now_ns() + 10 * dt::k_recent_ns), local && named);
}
