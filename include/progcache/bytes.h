// progcache/bytes.h — immutable, shared byte buffers and the one hex codec.
//
// `Bytes` is a read-only view that keeps its storage alive. Copying a Bytes
// copies a pointer, never the payload, which is how memory-tier hits avoid a
// copy. Slices share the parent's storage.
//
// Thread safety: a Bytes is immutable; copies may be used concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "progcache/status.h"

namespace progcache {

class Bytes {
 public:
  Bytes() = default;

  // Copies `data` into a new buffer.
  static Bytes copy_of(std::string_view data);
  // Takes ownership of `data` without copying.
  static Bytes adopt(std::string&& data);
  // Wraps memory kept alive by `owner` (any shared object); no copy.
  static Bytes wrap(std::shared_ptr<const void> owner, const char* data, std::size_t size) {
    Bytes b;
    b.m_owner = std::move(owner);
    b.m_data = data;
    b.m_size = size;
    return b;
  }
  // A buffer of `size` uninitialised bytes the caller fills through
  // `mutable_data` before sharing it. The data starts `phase` bytes (mod 64)
  // past a 64-byte boundary: a buffer that a file is read into should have
  // the phase of the file offset it is read from (see bytes.cpp).
  static Bytes allocate(std::size_t size, char** mutable_data, std::uint64_t phase);
  static Bytes allocate(std::size_t size, char** mutable_data);  // phase 0

  [[nodiscard]] const char* data() const noexcept { return m_data; }
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  [[nodiscard]] std::string_view view() const noexcept { return {m_data, m_size}; }
  [[nodiscard]] std::string str() const { return std::string(view()); }
  // Requires offset + length <= size().
  [[nodiscard]] Bytes slice(std::size_t offset, std::size_t length) const {
    return wrap(m_owner, m_data + offset, length);
  }
  // The object keeping the storage alive (for bindings that export buffers).
  [[nodiscard]] const std::shared_ptr<const void>& owner() const noexcept { return m_owner; }

  friend bool operator==(const Bytes& a, const Bytes& b) noexcept { return a.view() == b.view(); }

 private:
  std::shared_ptr<const void> m_owner;
  const char* m_data = "";
  std::size_t m_size = 0;
};

// One destination of a vectored read: `size` bytes at `data`.
struct ReadPiece {
  char* data;
  std::size_t size;
};

// Lower-case hex of `data`.
std::string to_hex(std::string_view data);
// Decodes hex (either case). Fails with invalid_argument naming the first bad
// character or an odd length.
Result<std::string> from_hex(std::string_view hex);

}  // namespace progcache
