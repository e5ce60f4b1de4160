// The nvcc launcher's manifests (src/nvcc/manifest.h): several results per
// manifest, newest first and bounded, files and places held once; the
// result that holds now is the one served; anything not a whole manifest
// is refused.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "nvcc/manifest.h"
#include "progcache/hash.h"
#include "testing/test_util.h"

namespace progcache::nvcc {
namespace {

std::string digest_of(const std::string& text) {
  const auto d = sha256(text);
  return std::string(as_view(d));
}

Key mkey() {
  return KeyBuilder("test-manifest").add_string("command", "nvcc -cubin k.cu").finish();
}

// A record of the files at `paths` as they are now, leading to the result
// a compile of them is stored under.
ManifestRecord record_now(const std::vector<std::string>& paths, std::vector<std::string> absent = {}) {
  ManifestRecord r;
  for (const auto& p : paths) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    // Written just now: recent, so hashed on every lookup (as the launcher
    // records a file changed in the last two seconds).
    r.files.push_back({p, detail::stamp_of(st), true, digest_of(testing::read_all(p))});
  }
  for (auto& a : absent) r.absent.push_back({std::move(a), {}});
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& f : r.files) files.emplace_back(f.path, f.sha256);
  r.result = result_key(mkey(), files);
  return r;
}

// The result key serve_first_holding offers first, or nullopt.
std::optional<Key> first_holding(const Manifest& m) {
  std::optional<Key> got;
  serve_first_holding(m, [&](const Key& k) {
    got = k;
    return true;
  });
  return got;
}

Key key_of(const ManifestRecord& r) {
  return r.result;
}

TEST(NvccManifest, AHeaderSwitchedBackAndForthFindsEachVersionsResult) {
  testing::TempDir tmp;
  const std::string src = tmp.sub("k.cu");
  const std::string header = tmp.sub("params.h");
  testing::write_all(src, "#include \"params.h\"\n");
  testing::write_all(header, "#define SCALE 1\n");
  const ManifestRecord one = record_now({src, header});
  testing::write_all(header, "#define SCALE 2\n");
  const ManifestRecord two = record_now({src, header});
  const Manifest m = add_result(add_result(std::nullopt, one), two);
  ASSERT_EQ(m.results.size(), 2U);
  // The source is held once; the header twice (two contents).
  EXPECT_EQ(m.files.size(), 3U);
  auto decoded = decode_manifest(encode_manifest(m));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(first_holding(*decoded), key_of(two));
  testing::write_all(header, "#define SCALE 1\n");
  EXPECT_EQ(first_holding(*decoded), key_of(one)) << "the first version's result was not found again";
  testing::write_all(header, "#define SCALE 3\n");
  EXPECT_FALSE(first_holding(*decoded)) << "a result served for a header neither compile read";
  // Each result's record, found by its key: the files and contents it read.
  for (const ManifestRecord* r : {&one, &two}) {
    const auto found = decoded->find(r->result);
    ASSERT_TRUE(found);
    ASSERT_EQ(found->files.size(), r->files.size());
    for (std::size_t i = 0; i < r->files.size(); ++i) {
      EXPECT_EQ(found->files[i].path, r->files[i].path);
      EXPECT_EQ(found->files[i].sha256, r->files[i].sha256);
    }
  }
  EXPECT_FALSE(decoded->find(mkey()));
}

TEST(NvccManifest, AResultWhosePlacesChangedIsPassedOverForOneThatHolds) {
  testing::TempDir tmp;
  const std::string src = tmp.sub("k.cu");
  testing::write_all(src, "x\n");
  const ManifestRecord empty_place = record_now({src}, {tmp.sub("shadow.h")});
  Manifest m = add_result(std::nullopt, empty_place);
  testing::write_all(tmp.sub("shadow.h"), "y\n");
  EXPECT_FALSE(first_holding(m)) << "served though a place that must stay empty holds a file";
  // When the first result offered is not in the store, the next that holds is tried.
  const ManifestRecord other = record_now({src});
  m = add_result(m, other);
  int offered = 0;
  EXPECT_FALSE(serve_first_holding(m, [&](const Key&) {
    ++offered;
    return false;
  }));
  EXPECT_EQ(offered, 1);  // only `other` holds
}

TEST(NvccManifest, ResultsAreBoundedNewestFirstAndTheSameResultIsNotKeptTwice) {
  testing::TempDir tmp;
  const std::string header = tmp.sub("h.h");
  std::optional<Manifest> m;
  std::vector<ManifestRecord> records;
  for (int i = 0; i < 20; ++i) {
    testing::write_all(header, "#define V " + std::to_string(i) + "\n");
    records.push_back(record_now({header}));
    m = add_result(m, records.back());
  }
  ASSERT_EQ(m->results.size(), k_manifest_results);
  EXPECT_EQ(m->files.size(), k_manifest_results) << "rows of dropped results were kept";
  EXPECT_EQ(key_of(m->record(0)), key_of(records.back()));
  // The same result again moves to the front, once.
  m = add_result(m, records[10]);
  EXPECT_EQ(m->results.size(), k_manifest_results);
  EXPECT_EQ(key_of(m->record(0)), key_of(records[10]));
  EXPECT_EQ(key_of(m->record(1)), key_of(records.back()));
}

TEST(NvccManifest, ManyResultsOverTheSameHeadersCostLittleMoreThanOne) {
  // 200 headers read by every compile, one that changes: sixteen results
  // hold the 200 rows once and a row and an index line each.
  testing::TempDir tmp;
  std::vector<std::string> paths;
  for (int i = 0; i < 200; ++i) {
    paths.push_back(tmp.sub("toolkit_include_header_" + std::to_string(i) + ".h"));
    testing::write_all(paths.back(), "// " + std::to_string(i) + "\n");
  }
  const std::string changing = tmp.sub("params.h");
  paths.push_back(changing);
  std::optional<Manifest> m;
  std::size_t one = 0;
  for (std::size_t i = 0; i < k_manifest_results; ++i) {
    testing::write_all(changing, "#define V " + std::to_string(i) + "\n");
    m = add_result(m, record_now(paths));
    if (i == 0) one = encode_manifest(*m).size();
  }
  const std::size_t all = encode_manifest(*m).size();
  EXPECT_LT(all, one * 2) << one << " bytes for one result, " << all << " for " << k_manifest_results;
}

TEST(NvccManifest, AWatchedPlaceIsNotLookedAtWhileItsDirectoryIsAsRecordedAndOnlyInItsEpoch) {
  testing::TempDir tmp;
  const std::string src = tmp.sub("k.cu");
  testing::write_all(src, "x\n");
  // A watch that says the directory is as it was although a file was made
  // in it since (the stamp is taken after): only a watch can be that wrong,
  // so the check shows whether the watch or the place decides.
  testing::write_all(tmp.sub("shadow.h"), "y\n");
  struct stat st {};
  ASSERT_EQ(detail::identity_stat(tmp.path(), st), 0);
  ManifestRecord r = record_now({src});
  r.absent.push_back({tmp.sub("shadow.h"), {tmp.path(), detail::stamp_of(st)}});
  const Manifest m = add_result(std::nullopt, r);
  ASSERT_EQ(m.watches.size(), 1U);
  auto decoded = decode_manifest(encode_manifest(m));
  ASSERT_TRUE(decoded);
  ASSERT_EQ(decoded->watches.size(), 1U);
  EXPECT_EQ(decoded->watches[0], m.watches[0]);
  EXPECT_EQ(decoded->record(0).absent, r.absent);
  EXPECT_TRUE(first_holding(*decoded)) << "the directory as recorded did not stand for its places";
  // The directory changed: the place itself is looked at.
  testing::write_all(tmp.sub("other.h"), "z\n");
  EXPECT_FALSE(first_holding(*decoded)) << "a changed directory stood for a place that holds a file";
  // Identities of another boot name other mounts: not used, and not kept.
  Manifest old = m;
  old.epoch = "boot another";
  EXPECT_FALSE(first_holding(old)) << "a watch of another epoch was used";
  EXPECT_TRUE(old.record(0).absent[0].watch.path.empty());
}

TEST(NvccManifest, RunsOfIndexesAreWrittenAsRangesAndReadBackExactly) {
  testing::TempDir tmp;
  std::vector<std::string> headers;
  for (int i = 0; i < 5; ++i) {
    headers.push_back(tmp.sub("h" + std::to_string(i) + ".h"));
    testing::write_all(headers.back(), std::to_string(i) + "\n");
  }
  const ManifestRecord r = record_now(headers, {tmp.sub("x.h"), tmp.sub("y.h")});
  const std::string text = encode_manifest(add_result(std::nullopt, r));
  EXPECT_NE(text.find(" 0~4 0,1 -\n"), std::string::npos) << text;
  auto decoded = decode_manifest(text);
  ASSERT_TRUE(decoded);
  ASSERT_EQ(decoded->record(0).files.size(), r.files.size());
  for (std::size_t i = 0; i < r.files.size(); ++i) EXPECT_EQ(decoded->record(0).files[i].path, r.files[i].path);
  EXPECT_EQ(decoded->record(0).absent, r.absent);
  // A range past its table, backwards, or of two (written "0,1") is refused,
  // and so is a list of more indexes than its table has rows (ranges
  // repeated would let a few bytes stand for any number of them).
  for (const char* bad : {" 0~5 0,1 -\n", " 4~0 0,1 -\n", " 0~4 0~1 -\n", " 0~ 0,1 -\n", " 0~4~4 0,1 -\n",
                          " 0~4,0~4 0,1 -\n", " 0,0,0,0,0,0 0,1 -\n", " 0~4 0,1,0 -\n"}) {
    std::string damaged = text;
    damaged.replace(damaged.find(" 0~4 0,1 -\n"), std::string(" 0~4 0,1 -\n").size(), bad);
    EXPECT_FALSE(decode_manifest(damaged)) << bad;
  }
  // No more results than a manifest keeps (k_manifest_results).
  const std::string row = text.substr(text.rfind("R "));
  std::string many = text;
  for (std::size_t i = 1; i < k_manifest_results; ++i) many += row;
  EXPECT_TRUE(decode_manifest(many));
  EXPECT_FALSE(decode_manifest(many + row)) << "one result more than a manifest keeps";
}

// A place found in a branch not taken (or by __has_include) and read by
// no compile step only has to hold a file: another file there (another
// checkout's copy, an edit) holds; none, a directory or a FIFO does not. A place
// kept as it is (a zero stamp: a directory) still needs its own identity.
TEST(NvccManifest, APlaceThatOnlyHasToHoldAFileHoldsForAnyFileAndNothingElse) {
  testing::TempDir tmp;
  testing::write_all(tmp.sub("k.cu"), "#ifdef NEVER\n#include \"unused.h\"\n#endif\n");
  testing::write_all(tmp.sub("unused.h"), "#define U 1\n");
  testing::write_all(tmp.sub("kept.h"), "#define K 1\n");
  ManifestRecord r = record_now({tmp.sub("k.cu")});
  struct stat st {};
  ASSERT_EQ(::stat(tmp.sub("kept.h").c_str(), &st), 0);
  r.present.push_back({tmp.sub("unused.h"), {}, /*any_file=*/true});
  r.present.push_back({tmp.sub("kept.h"), detail::stamp_of(st)});
  const std::string text = encode_manifest(add_result(std::nullopt, r));
  EXPECT_NE(text.find("P - " + tmp.sub("unused.h") + "\n"), std::string::npos) << text;
  auto m = decode_manifest(text);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->present.size(), 2U);
  EXPECT_TRUE(m->present[0].any_file);
  EXPECT_FALSE(m->present[1].any_file);
  EXPECT_EQ(m->record(0).present, r.present) << "read back otherwise than written";
  EXPECT_EQ(first_holding(*m), key_of(r));
  // Another file of that name, of another size and content: holds.
  ::unlink(tmp.sub("unused.h").c_str());
  testing::write_all(tmp.sub("unused.h"), "#define U 22222\n");
  EXPECT_EQ(first_holding(*m), key_of(r)) << "what an unread file holds decided the hit";
  // None there, or a directory: a __has_include would say otherwise.
  ::unlink(tmp.sub("unused.h").c_str());
  EXPECT_FALSE(first_holding(*decode_manifest(text))) << "served with the file gone";
  ASSERT_EQ(::mkdir(tmp.sub("unused.h").c_str(), 0755), 0);
  EXPECT_FALSE(first_holding(*decode_manifest(text))) << "served with a directory in its place";
  ::rmdir(tmp.sub("unused.h").c_str());
  // A FIFO, which gcc's __has_include would block on opening: not a file.
  ASSERT_EQ(::mkfifo(tmp.sub("unused.h").c_str(), 0644), 0);
  EXPECT_FALSE(first_holding(*decode_manifest(text))) << "served with a FIFO in its place";
  ::unlink(tmp.sub("unused.h").c_str());
  testing::write_all(tmp.sub("unused.h"), "#define U 1\n");
  ASSERT_EQ(first_holding(*decode_manifest(text)), key_of(r));
  // Unreadable to whoever asks: gcc's __has_include stops with an error.
  // Asked as an ordinary user (root reads every file).
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(tmp.sub("unused.h").c_str(), 0644), 0);
  const auto holds_as_user = [&]() -> int {
    const pid_t child = ::fork();
    if (child == 0) {
      if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(3);
      ::_exit(first_holding(*decode_manifest(text)) ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(holds_as_user(), 0) << "a readable file did not hold";
  ASSERT_EQ(::chmod(tmp.sub("unused.h").c_str(), 0), 0);
  EXPECT_EQ(holds_as_user(), 1) << "served with the file unreadable to the user asking";
  ASSERT_EQ(::chmod(tmp.sub("unused.h").c_str(), 0644), 0);
  // The place kept as it is: an edit is a miss.
  ::unlink(tmp.sub("kept.h").c_str());
  testing::write_all(tmp.sub("kept.h"), "#define K 2\n");
  EXPECT_FALSE(first_holding(*decode_manifest(text))) << "a place kept as it is was not";
  // A damaged row: refused.
  std::string bad = text;
  bad.replace(bad.find("P - "), 4, "P -");
  EXPECT_FALSE(decode_manifest(bad));
}

// Places that must stay absent with no watch that holds (a directory that
// changed, as the source's does when the output is written there) are
// asked one by one, but a directory above them that is not there (or is a
// file) answers for every place below it. Each place created where the
// search looks, at any depth, under a missing directory or beside a place
// already answered, is still a mismatch; so is one below a file that
// becomes a directory.
TEST(NvccManifest, APlaceMadeUnderADirectoryThatWasMissingIsSeenAtAnyDepth) {
  testing::TempDir tmp;
  testing::write_all(tmp.sub("k.cu"), "int k;\n");
  testing::write_all(tmp.sub("file.h"), "not a directory\n");
  const std::vector<std::string> places = {
      "gone/a/x.h", "gone/a/y.h", "gone/b/deep/z.h", "gone/w.h", "file.h/v.h", "u.h",
  };
  std::vector<std::string> absent;
  for (const auto& p : places) absent.push_back(tmp.sub(p));
  // The same places spelled relative to the working directory, as the
  // source's own directory's are.
  for (const auto& p : places) absent.push_back("rel/" + p);
  const ManifestRecord r = record_now({tmp.sub("k.cu")}, absent);
  const std::string text = encode_manifest(add_result(std::nullopt, r));
  const auto holds = [&] { return first_holding(*decode_manifest(text)).has_value(); };
  ASSERT_EQ(::mkdir(tmp.sub("rel").c_str(), 0755), 0);
  testing::write_all(tmp.sub("rel/file.h"), "not a directory\n");
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(tmp.path().c_str()), 0);
  EXPECT_TRUE(holds()) << "every place is absent";
  for (const std::string& base : {tmp.sub(""), std::string("rel/")}) {
    for (const auto& p : places) {
      const std::string made = base + p;
      if (p.starts_with("file.h/")) {
        ::unlink((base + "file.h").c_str());
        ASSERT_EQ(::mkdir((base + "file.h").c_str(), 0755), 0);
      }
      std::filesystem::create_directories(std::filesystem::path(made).parent_path());
      testing::write_all(made, "#define MADE 1\n");
      EXPECT_FALSE(holds()) << "served with '" << made << "' made where the search looks";
      std::filesystem::remove_all(base + "gone");
      if (p.starts_with("file.h/")) {
        std::filesystem::remove_all(base + "file.h");
        testing::write_all(base + "file.h", "not a directory\n");
      }
      ::unlink(made.c_str());
      EXPECT_TRUE(holds()) << "'" << made << "' taken away again";
    }
  }
  // A loop of links where a place must stay absent: gcc stops there with
  // an error, so it is no absent place.
  ASSERT_EQ(::symlink("u.h", tmp.sub("u.h").c_str()), 0);
  EXPECT_FALSE(holds()) << "served with a loop of links where the search looks";
  ::unlink(tmp.sub("u.h").c_str());
  EXPECT_TRUE(holds());
  ASSERT_EQ(::chdir(cwd), 0);
}

TEST(NvccManifest, AnythingButAWholeManifestIsRefused) {
  testing::TempDir tmp;
  testing::write_all(tmp.sub("a.h"), "a\n");
  const std::string text = encode_manifest(add_result(std::nullopt, record_now({tmp.sub("a.h")}, {tmp.sub("b.h")})));
  ASSERT_TRUE(decode_manifest(text));
  EXPECT_FALSE(decode_manifest(text.substr(0, text.size() - 1))) << "cut short";
  EXPECT_FALSE(decode_manifest(""));
  EXPECT_FALSE(decode_manifest("progcache-nvcc-manifest 2\n"));
  // The versions before (4: no watches; 5: watched places written whole;
  // 6: no place that only has to hold a file): a miss, which the next
  // compile replaces.
  const std::size_t magic = std::string("progcache-nvcc-manifest 7\n").size();
  ASSERT_EQ(text.substr(0, magic), "progcache-nvcc-manifest 7\n");
  std::string v4 = text;
  v4.replace(0, magic, "progcache-nvcc-manifest 4\n");
  EXPECT_FALSE(decode_manifest(v4));
  for (const char* older : {"progcache-nvcc-manifest 5\n", "progcache-nvcc-manifest 6\n"}) {
    std::string v = text;
    v.replace(0, magic, older);
    EXPECT_FALSE(decode_manifest(v)) << older;
    EXPECT_TRUE(of_another_manifest_version(v)) << older;
  }
  std::string no_epoch = text;
  no_epoch.erase(no_epoch.find("E "), no_epoch.find('\n', no_epoch.find("E ")) - no_epoch.find("E ") + 1);
  EXPECT_FALSE(decode_manifest(no_epoch)) << "no epoch line";
  EXPECT_FALSE(of_another_manifest_version(text));
  EXPECT_TRUE(of_another_manifest_version(v4)) << "an older launcher's manifest is a miss, not damage";
  EXPECT_FALSE(of_another_manifest_version("Z junk\n"));
  std::string bad_watch = text;
  bad_watch.replace(bad_watch.find("A - "), 4, "A 3 ");
  EXPECT_FALSE(decode_manifest(bad_watch)) << "a watch index past its table";
  // A watched place is written below its watch, and read back whole; a row
  // that names nothing below it (damaged, or planted) is refused.
  ASSERT_EQ(::mkdir(tmp.sub("d").c_str(), 0700), 0);
  struct stat st {};
  ASSERT_EQ(detail::identity_stat(tmp.sub("d"), st), 0);
  ManifestRecord watched = record_now({tmp.sub("a.h")});
  watched.absent.push_back({tmp.sub("d/b.h"), {tmp.sub("d"), detail::stamp_of(st)}});
  const std::string with_watch = encode_manifest(add_result(std::nullopt, watched));
  EXPECT_NE(with_watch.find("\nA 0 b.h\n"), std::string::npos) << with_watch;
  auto round = decode_manifest(with_watch);
  ASSERT_TRUE(round);
  EXPECT_EQ(round->record(0).absent, watched.absent);
  std::string nothing_below = with_watch;
  nothing_below.replace(nothing_below.find("\nA 0 b.h\n"), 9, "\nA 0 \n");
  EXPECT_FALSE(decode_manifest(nothing_below)) << "a watched row that names no place";
  std::string bad_index = text;
  bad_index.replace(bad_index.rfind(" 0 0 -"), 6, " 7 0 -");
  EXPECT_FALSE(decode_manifest(bad_index)) << "an index past its table";
  std::string no_result = text.substr(0, text.rfind("R "));
  EXPECT_FALSE(decode_manifest(no_result)) << "a manifest of no result";
  EXPECT_FALSE(decode_manifest(text + "Z junk\n"));
}

}  // namespace
}  // namespace progcache::nvcc
