// progcache/trust.h — the one rule for code that progcache hands to a
// loader or a linker, asked by every front end (the nvcc launcher, Triton,
// tilelang, PyTorch).
//
// Device code (cubin, PTX, LTO-IR, fatbin) runs on the GPU under the
// driver's checks and follows the stores' usual rules. Host code (a shared
// library, an object file linked into a program, a Python module, bytecode
// or a pickle) runs as the user who loads it, so it is served only from
//   - the user's private disk store (a root that passed the file store's
//     owner, mode and ancestor checks with Sharing::private_only), or
//   - a store or tier whose entries are signed and verified on read
//     (PROGCACHE_HMAC_KEY_FILE, or Ed25519 keys): an unsigned entry is then
//     refused by the entry reader, whoever wrote it.
// A group-shared root or a remote tier without signing can be written by
// others, so host code is never read from them.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "progcache/status.h"

namespace progcache {

struct Config;

enum class CodeKind {
  device,  // GPU code or plain data: the stores' usual rules
  host,    // runs on the CPU as the loading user: host_code_trust()
};

// Host when the name says so (.so, .o, .obj, .a, .dll, .dylib, .py, .pyc,
// .pkl, .pickle, .pt, and versioned .so.N) or the bytes do (an ELF file that
// is not a CUDA cubin, Mach-O, PE, Python bytecode, a pickle). Either is
// enough; everything else is device code or data.
[[nodiscard]] CodeKind classify_artifact(std::string_view name, std::string_view data);

// Where host code may come from under a configuration.
struct CodeTrust {
  bool disk = false;    // the configured root's disk stores
  bool remote = false;  // the remote tier (PROGCACHE_REMOTE)
  // Why not, for a one-time warning; empty where allowed.
  std::string disk_reason;
  std::string remote_reason;
};

// The rule above applied to `cfg`: disk when the root is private or entries
// are signed; remote when entries are signed.
[[nodiscard]] CodeTrust host_code_trust(const Config& cfg);

// A directory an integration materialises code into and loads it from
// (Triton's TRITON_CACHE_DIR, tilelang's cache directory): its missing
// components are created private (0700), then it is judged by the file
// store's rules for a private root: a real directory owned by this user and
// writable by nobody else, and every directory above it (as written and as
// resolved) owned by this user or root and writable by nobody else unless
// sticky. permission_denied (or failed_precondition, not_found) saying why
// when another user could create, swap or replace what is loaded from it.
[[nodiscard]] Status prepare_private_dir(const std::string& dir);

// Whether `cfg` signs and verifies entries (an HMAC key, or Ed25519 keys).
[[nodiscard]] bool entries_signed(const Config& cfg);

}  // namespace progcache
