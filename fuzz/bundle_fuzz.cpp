// libFuzzer target: reading a bundle (what `progcache import` does with a
// file it was given). Beyond "nothing crashes and nothing allocates much
// more than the input", it checks the reader's promises: it ends (a record
// or an error each call, finished after an error or the end record); a
// bundle it accepts whole re-encodes, through the writer, to the very same
// bytes; an accepted record's entry is at most what the input held.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/bundle.h"

using namespace progcache;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::size_t at = 0;
  BundleReader reader([&](char* dst, std::size_t n) -> Result<std::size_t> {
    // Short reads, as a pipe gives them.
    const std::size_t k = std::min({n, in.size() - at, std::size_t{7}});
    in.copy(dst, k, at);
    at += k;
    return k;
  });
  std::vector<BundleRecord> records;
  bool whole = false;
  for (std::size_t calls = 0;; ++calls) {
    if (calls > size + 2) std::abort();  // each record takes input: it must end
    auto r = reader.next();
    if (!r.ok()) break;
    if (!*r) {
      whole = true;
      break;
    }
    if ((*r)->encoded.size() > size) std::abort();
    records.push_back(std::move(**r));
  }
  if (reader.next().ok()) std::abort();  // finished stays finished
  if (whole) {
    std::string again;
    BundleWriter w([&](std::string_view d) -> Status {
      again.append(d);
      return {};
    });
    if (!w.begin().ok()) std::abort();
    for (const auto& r : records) {
      if (!w.add(r.store, r.key, r.encoded).ok()) std::abort();
    }
    if (!w.finish().ok() || again != in) std::abort();
  }
  return 0;
}
