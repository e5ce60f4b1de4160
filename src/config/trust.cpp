#include "progcache/trust.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "progcache/config.h"
#include "progcache/env.h"
#include "store/file/permissions.h"

namespace progcache {

namespace {

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i) {
    char c = s[s.size() - suffix.size() + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

bool host_name(std::string_view name) {
  static constexpr std::array<std::string_view, 13> k_suffixes = {
      ".so", ".o", ".obj", ".a", ".dll", ".dylib", ".pyd", ".py", ".pyc", ".pkl", ".pickle", ".pt", ".lib"};
  for (auto s : k_suffixes) {
    if (ends_with_ci(name, s)) return true;
  }
  // A versioned shared library: libfoo.so.1, libfoo.so.1.2
  const auto so = name.find(".so.");
  return so != std::string_view::npos && so + 4 < name.size();
}

bool host_bytes(std::string_view d) {
  auto at = [&d](std::size_t i) { return static_cast<unsigned char>(d[i]); };
  if (d.size() >= 20 && d.substr(0, 4) ==
                            "\x7f"
                            "ELF") {
    // e_machine at offset 18, in the file's byte order (EI_DATA at 5).
    const unsigned machine = at(5) == 2 ? (at(18) << 8U) | at(19) : at(18) | (at(19) << 8U);
    constexpr unsigned k_em_cuda = 190;
    constexpr unsigned k_em_amdgpu = 224;
    return machine != k_em_cuda && machine != k_em_amdgpu;
  }
  if (d.size() >= 4) {
    const std::uint32_t magic = at(0) | (at(1) << 8U) | (at(2) << 16U) | (static_cast<std::uint32_t>(at(3)) << 24U);
    // Mach-O (32/64-bit, both orders) and fat binaries.
    if (magic == 0xfeedfaceU || magic == 0xfeedfacfU || magic == 0xcefaedfeU || magic == 0xcffaedfeU ||
        magic == 0xbebafecaU) {
      return true;
    }
    // Python 3 bytecode: a magic number (3000 to 3999, little-endian), then "\r\n".
    const unsigned pyc = at(0) | (at(1) << 8U);
    if (at(2) == '\r' && at(3) == '\n' && pyc >= 3000 && pyc < 4000) return true;
  }
  if (d.size() >= 2 && d[0] == 'M' && d[1] == 'Z') return true;  // PE
  // A pickle of protocol 2 and up opens with PROTO (0x80) and its number.
  if (d.size() >= 2 && at(0) == 0x80 && at(1) >= 2 && at(1) <= 5) return true;
  return false;
}

}  // namespace

CodeKind classify_artifact(std::string_view name, std::string_view data) {
  return host_name(name) || host_bytes(data) ? CodeKind::host : CodeKind::device;
}

bool entries_signed(const Config& cfg) {
  return !cfg.hmac_key.empty() || cfg.signing_keys != nullptr;
}

CodeTrust host_code_trust(const Config& cfg) {
  CodeTrust t;
  const bool sig = entries_signed(cfg);
  t.disk = cfg.sharing == Sharing::private_only || sig;
  if (!t.disk) {
    t.disk_reason =
        "the cache root is shared with a group (PROGCACHE_SHARING=group) and entries are not signed: host code "
        "(shared libraries, objects, Python modules) is not loaded from it; set PROGCACHE_HMAC_KEY_FILE (or "
        "Ed25519 keys) to share it";
  }
  t.remote = sig;
  if (!t.remote && !cfg.remote_urls.empty()) {
    t.remote_reason =
        "PROGCACHE_REMOTE is not used for host code (shared libraries, objects, Python modules) while entries are "
        "not signed; set PROGCACHE_HMAC_KEY_FILE (or Ed25519 keys) to share it";
  }
  return t;
}

Status prepare_private_dir(const std::string& dir) {
  if (dir.empty()) return invalid_argument("an empty directory name");
  return file_store::DirPolicy(Env::posix(), Sharing::private_only).check_root(dir);
}

}  // namespace progcache
