// libFuzzer target: option canonicalisation and program key derivation on
// arbitrary option lists. Canonicalisation must be idempotent: options that
// are already canonical canonicalise to themselves.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "progcache/key.h"

using namespace progcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Input: options separated by '\n'; the first byte picks code and target.
  if (size == 0) return 0;
  std::vector<std::string> options;
  std::string cur;
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] == '\n') {
      options.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) options.push_back(cur);
  const bool digest = (data[0] & 1) != 0;
  auto canon = canonicalize_options(options, digest);
  if (canon.ok()) {
    auto twice = canonicalize_options(*canon, digest);
    if (!twice.ok() || *twice != *canon) __builtin_trap();
  }
  ProgramKeyInputs in;
  in.code = "__global__ void k() {}";
  in.code_type = static_cast<CodeType>((data[0] >> 1) % 4);  // c++, ptx, ltoir, nvvm
  in.target = static_cast<TargetType>((data[0] >> 3) % 4);
  in.options = options;
  if (digest) in.extra_digest = "d";
  in.use_libdevice = (data[0] & 0x40) != 0;
  auto k1 = make_program_cache_key(in);
  auto k2 = make_program_cache_key(in);
  if (k1.ok() != k2.ok() || (k1.ok() && *k1 != *k2)) __builtin_trap();  // deterministic
  KeyBuilder b("fuzz");
  for (const auto& o : options) b.add_string("o", o);
  b.finish();
  return 0;
}
