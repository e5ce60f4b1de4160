// The reader of make-style dependency files (gcc's and nvcc's -MD), shared
// by every compiler progcache follows.
#pragma once

#include <string>
#include <vector>

#include "progcache/status.h"

namespace progcache::detail {

// The files a make-format dependency file names (every prerequisite of
// every rule, in order, without duplicates; escaped spaces and '$$'
// unescaped), or an error when it is not one.
Result<std::vector<std::string>> parse_depfile(const std::string& text);

}  // namespace progcache::detail
