#include "progcache/bytes.h"

#include <cstring>
#include <limits>
#include <memory>
#include <new>

namespace progcache {

Bytes Bytes::copy_of(std::string_view data) {
  char* out = nullptr;
  Bytes b = allocate(data.size(), &out);
  if (!data.empty()) std::memcpy(out, data.data(), data.size());
  return b;
}

Bytes Bytes::adopt(std::string&& data) {
  auto owner = std::make_shared<const std::string>(std::move(data));
  return wrap(owner, owner->data(), owner->size());
}

// Where a read lands decides what it costs. The kernel's copy from the page
// cache and the checksum's 32-byte vector loads run fastest when the bytes
// keep the alignment they have in the file; on some CPUs (AMD EPYC here) a
// copy whose destination sits 1-31 bytes past its source, modulo a page, runs
// about ten times slower, and a fresh large allocation from glibc starts
// exactly 16 bytes past a page boundary, so a process's first whole read of
// a 900 000-byte entry from offset 0 took 784 us instead of 537 us. Buffers
// are 64-byte aligned and start at the phase the caller names
// (docs/benchmarks.md, "Where a read lands").
Bytes Bytes::allocate(std::size_t size, char** mutable_data, std::uint64_t phase) {
  constexpr std::size_t k_align = 64;
  const std::size_t skip = static_cast<std::size_t>(phase % k_align);
  if (size > std::numeric_limits<std::size_t>::max() - k_align) throw std::bad_alloc();
  // make_shared_for_overwrite is C++20 but missing from libstdc++ 12 for
  // arrays; the buffer is handed to a shared_ptr (one extra allocation) and
  // left uninitialised (no memset of large payloads).
  struct Free {
    void operator()(char* p) const { ::operator delete[](p, std::align_val_t{k_align}); }
  };
  std::unique_ptr<char[], Free> buf(
      static_cast<char*>(::operator new[](skip + (size == 0 ? 1 : size), std::align_val_t{k_align})));
  *mutable_data = buf.get() + skip;
  std::shared_ptr<char> owner(buf.release(), Free{});
  const char* data = owner.get() + skip;
  return wrap(std::shared_ptr<const void>(owner, data), data, size);
}

Bytes Bytes::allocate(std::size_t size, char** mutable_data) {
  return allocate(size, mutable_data, 0);
}

std::string to_hex(std::string_view data) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out(data.size() * 2, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) {
    const auto c = static_cast<unsigned char>(data[i]);
    out[2 * i] = k_digits[c >> 4];
    out[2 * i + 1] = k_digits[c & 0xf];
  }
  return out;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Result<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return invalid_argument("hex string has odd length " + std::to_string(hex.size()));
  }
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      const std::size_t bad = hi < 0 ? 2 * i : 2 * i + 1;
      return invalid_argument("not a hex digit at position " + std::to_string(bad) + ": '" + std::string(1, hex[bad]) +
                              "'");
    }
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

}  // namespace progcache
