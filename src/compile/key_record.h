// The key record: what one program's key was made of, as JSON, stored with
// its entry (artifact "key-inputs") and compared by explain(). Written only
// on a miss (beside a compile, it costs nothing measurable) and never read
// on a hit.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/compile.h"
#include "progcache/entry.h"
#include "progcache/explain.h"
#include "progcache/status.h"
#include "source_deps.h"

namespace progcache::detail {

// The record of `p` compiled to `target` by `id`, having read `deps` (C++),
// in the working directory `working_directory` ("" when not keyed).
std::string key_record(const Program& p, TargetType target, const CompilerIdentity& id,
                       const std::optional<SourceDeps>& deps, const std::string& working_directory);

// What differs from the record `before` (stored) to `after` (now), in a
// fixed order of components. invalid_argument when either is not a record
// of this version (damage, a foreign writer, a newer progcache).
Result<std::vector<InputDifference>> compare_key_records(std::string_view before, std::string_view after);

// Implemented in compile.cpp, by the code compile() runs:
// The key compile() would use and the record it would store.
struct KeyAndRecord {
  Key key;
  std::string record;
};
Result<KeyAndRecord> key_and_record(const Program& program, TargetType target, const CompileOptions& options);
// Whether compile() would serve `entry` under `key` for `target` (its
// metadata names the target, the artifact is there, a cubin is an ELF).
bool entry_serves(const Entry& entry, const Key& key, TargetType target);

}  // namespace progcache::detail
