// The nvcc launcher's manifests: for one manifest key (one command in one
// toolkit and environment), the results of its last compiles, each with
// what that compile read (every file, with its stat identity and SHA-256)
// and where a header created later would be found first (places that must
// stay absent, and places a probe found that must stay present).
//
// Several results per manifest (ccache's direct mode keeps them too): a
// header switched back and forth between two versions (a branch checkout,
// a generated header) finds each version's result without a compile. Files
// and places are held once in tables that the results index, so a manifest
// of several results over mostly the same headers grows by little more than
// the indexes. The newest results are kept, up to a bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/scan_files.h"
#include "progcache/key.h"

namespace progcache::nvcc {

// A file a compile read.
struct ManifestFile {
  std::string path;  // as nvcc's dependency output spells it
  detail::FileStamp stamp;
  bool recent = false;  // changed just before it was recorded: hashed on every lookup
  std::string sha256;   // raw
};

// A place a probe found (a __has_include, an include in a branch not
// taken, an include skipped by #pragma once as a copy of one read): it
// must stay there, as it was (gcc skips a #pragma once file whose size,
// time and text match one already read). A zero stamp: a directory, which
// only has to be there. `any_file`: a file no compile step read, in a
// branch not taken or named by __has_include, which only has to be there,
// as a regular file this process may read, whatever it holds
// (Launcher::build_record says which places are such).
struct ManifestPlace {
  std::string path;
  detail::FileStamp stamp;
  bool any_file = false;
  friend bool operator==(const ManifestPlace&, const ManifestPlace&) = default;
};

// A place that must stay absent, and the directory that watches it
// (compile/empty_places.h): while that directory's identity and times are
// as recorded, the place is still empty and is not looked at. A watch with
// an empty path: none (the place is looked at on every lookup).
struct ManifestAbsent {
  std::string path;
  ManifestPlace watch;
  friend bool operator==(const ManifestAbsent&, const ManifestAbsent&) = default;
};

// What one compile read and where the places are, and the result they
// lead to: one result. A compile names its result by what it read
// (result_key); a result found by its preprocessed text (a comment edit)
// is recorded with the files read now and the result found.
struct ManifestRecord {
  std::vector<ManifestFile> files;
  std::vector<ManifestAbsent> absent;
  std::vector<ManifestPlace> present;
  Key result;
};

// The most results one manifest keeps (the newest).
inline constexpr std::size_t k_manifest_results = 16;

struct Manifest {
  // What the watches' identities hold in (identity_epoch: this boot); in
  // any other, the watches are not used.
  std::string epoch;
  std::vector<ManifestFile> files;
  std::vector<ManifestPlace> watches;  // the directories that watch absent places
  struct Absent {
    std::string path;
    std::uint32_t watch = k_no_watch;  // an index into watches
  };
  static constexpr std::uint32_t k_no_watch = 0xffffffff;
  std::vector<Absent> absent;
  std::vector<ManifestPlace> present;
  struct Result {
    Key result;
    std::vector<std::uint32_t> files, absent, present;  // indexes into the tables
  };
  std::vector<Result> results;  // newest first

  // Result `i` as a record (its watches only where the epoch is this one).
  [[nodiscard]] ManifestRecord record(std::size_t i) const;
  // The record of the result whose key is `result`; nullopt if none has it.
  [[nodiscard]] std::optional<ManifestRecord> find(const Key& result) const;
};

// The manifest as text (see manifest.cpp); decode gives nullopt for
// anything that is not one whole manifest of this version.
std::string encode_manifest(const Manifest& m);
std::optional<Manifest> decode_manifest(std::string_view text);
// Whether `text` is a manifest of another version (an older launcher's):
// a miss, which the next compile replaces, not damage.
bool of_another_manifest_version(std::string_view text);

// `old` (if any) with `r` as its newest result: an older result that read
// the same files with the same contents and the same places (and so leads
// to the same output) is replaced;
// the newest `limit` are kept, and table rows no result uses are dropped.
Manifest add_result(const std::optional<Manifest>& old, const ManifestRecord& r,
                    std::size_t limit = k_manifest_results);

// The result key of a compile under manifest key `mkey` that read `files`
// (path, raw SHA-256), in order.
Key result_key(const Key& mkey, const std::vector<std::pair<std::string, std::string>>& files);

// Why a result does not hold now: the first of its files or places that
// is not as recorded.
struct Mismatch {
  enum class Kind {
    edited,   // a file read holds other bytes
    gone,     // a file read is gone or cannot be read
    created,  // a file now exists where the search found none (it would be found first)
    changed,  // a place a probe found is gone or changed
  };
  Kind kind;
  std::string path;
};

// Checks a manifest's results against the files as they are now. Each file
// and place is looked at once, whichever results share it: a file whose
// stat is unchanged is not read again; one whose stat changed is hashed.
class HoldingCheck {
 public:
  explicit HoldingCheck(const Manifest& m);
  // nullopt when result `i` holds (every file and place as recorded).
  std::optional<Mismatch> first_mismatch(std::size_t i);

 private:
  const std::optional<std::string>& digest_now(const ManifestFile& f);
  bool absent_now(const std::string& path);
  const Manifest& m_manifest;
  // Directories above absent places, as found in this check: true, one
  // (the search stops there); false, none, nor anything below it (gone, or
  // a file).
  std::map<std::string, bool> m_above;
  std::map<std::string, std::optional<std::string>> m_digests;  // by path; nullopt: gone or unreadable
  std::vector<std::optional<bool>> m_watch_holds, m_absent_holds, m_present_holds;
  bool m_watches_usable = false;  // the manifest's epoch is this one
};

// Tries the results that hold now, newest first: for each whose files all
// hold their recorded contents (a file whose stat is unchanged is not read
// again; one whose stat changed is hashed) and whose places are as
// recorded, calls `serve` with its result key, until `serve` returns true.
// Each file and place is looked at once per call, whichever results share
// it. True when one did.
bool serve_first_holding(const Manifest& m, const std::function<bool(const Key&)>& serve);

}  // namespace progcache::nvcc
