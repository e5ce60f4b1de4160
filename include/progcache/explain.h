// progcache/explain.h — why did a program miss?
//
// Every entry compile() stores carries a record of what its key was made of
// (artifact "key-inputs", JSON, compressed when large: the code's digest, each canonical option,
// each header by name and digest, each file the compiler can read by path,
// digest and the include operand that found it, name expressions, target,
// compiler identity, ...). explain() makes the same record for a program
// now, without compiling, looks its key up, and on a miss compares the
// record with those of the stored entries of the same program name: the
// nearest one (fewest differences, then the newest) is reported with every
// input that differs. Nothing is counted and no entry's recency changes.
//
// Thread safety: safe to call from many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "progcache/compile.h"
#include "progcache/file_store.h"
#include "progcache/key.h"
#include "progcache/status.h"

namespace progcache {

// The name of the artifact that holds an entry's key record: JSON, or, when
// that saves an eighth or more, one zstd frame of the JSON.
inline constexpr std::string_view k_key_record_artifact = "key-inputs";
inline constexpr std::string_view k_key_record_artifact_zstd = "key-inputs.zst";

// One input that differs between a stored entry and the program now.
struct InputDifference {
  // What kind of input: "code", "code type", "target", "option",
  // "name expression", "header" (in memory), "file" (read from disk),
  // "include directories" (fingerprinted whole), "link input",
  // "extra digest", "compiler", "working directory", "libdevice",
  // "nvvm module".
  std::string component;
  // "edited", "added", "removed", "changed", "shadowed", "reordered".
  std::string change;
  // Which one: the option's name, the header's path, the compiler field...
  std::string subject;
  // The stored entry's value and the value now ("" where there is none); a
  // digest is given as its first 16 hex digits.
  std::string before;
  std::string after;
};

struct Explanation {
  enum class Outcome {
    hit,      // an entry under the key that serves this program
    miss,     // no entry under the key
    damaged,  // an entry under the key that would not be served (see detail)
  };
  Key key;
  Outcome outcome = Outcome::miss;
  std::string detail;        // why an entry is damaged
  std::string program_name;  // the program's name (from the entry, for explain_key)
  std::string target;        // "cubin", ... (from the entry, for explain_key)
  // Entries of the same program name other than `key`'s, and how many of
  // those carry no key record (stored by an older progcache or by put()).
  std::uint64_t same_name = 0;
  std::uint64_t without_record = 0;
  // The stored entry nearest the program, and what differs (a miss only).
  std::optional<Key> nearest;
  std::vector<InputDifference> differences;
  // The record of the program now (explain) or of the entry (explain_key,
  // a hit): JSON text.
  std::string record;
};

// Explains a lookup of `program` compiled to `target` in `store` (its
// on-disk entries; the options' state_dir holds the scan's memos, as for
// compile()). Errors: what program_key() returns for a bad program; I/O
// errors listing the store.
Result<Explanation> explain(const Program& program, TargetType target, FileStore& store,
                            const CompileOptions& options = {});

// Explains a key alone: hit, miss or damaged, and for a hit the entry's
// program name, target and key record.
Result<Explanation> explain_key(const Key& key, FileStore& store);

}  // namespace progcache
