// progcache/config.h — the resolved configuration, and where each value came
// from. All settings are optional:
//
//   PROGCACHE_DIR          cache root (else $XDG_CACHE_HOME/progcache, else
//                          ~/.cache/progcache)
//   PROGCACHE_MAX_SIZE     byte cap of the disk tier, e.g. 10G (default 10G)
//   PROGCACHE_MAX_ENTRIES  entry cap of the disk tier (default: none)
//   PROGCACHE_DISABLE      1/true/yes: bypass the cache entirely
//   PROGCACHE_DURABILITY   none (default) | fsync
//   PROGCACHE_LOCK_TIMEOUT  seconds the nvcc launcher waits for an identical
//                          command compiling elsewhere (default 600)
//   PROGCACHE_BASE_DIR     the nvcc launcher keys paths under it relative to
//                          the working directory (ccache's base_dir; unset: none)
//   PROGCACHE_COMPRESSION  zstd level 1-19 for the disk tier's entries, or off (default)
//   PROGCACHE_REMOTE_COMPRESSION  the same for the remote tier (default 1)
//   PROGCACHE_SHARING      private (default) | group: a group-writable root
//                          (setgid 2770, entries 0660) shared by a team
//   PROGCACHE_HMAC_KEY_FILE  file holding the signing key (never printed)
//   PROGCACHE_SIGNING_KEY_FILE  Ed25519 private key (PEM) a writer signs with
//   PROGCACHE_TRUSTED_KEYS_FILE  Ed25519 public keys (PEM) readers accept
//                          (signing.h; not together with the HMAC key)
//   PROGCACHE_REMOTE       comma-separated redis:// URLs (passwords never printed)
//   PROGCACHE_REMOTE_PASSWORD_FILE  file holding the password for remote URLs
//                          that carry none (never printed; preferred)
//   PROGCACHE_REMOTE_PASSWORD  the same password, from the environment
//   PROGCACHE_READONLY     1/true/yes: never write to the remote tier
//   PROGCACHE_NVRTC, PROGCACHE_NVJITLINK, PROGCACHE_LIBNVVM, PROGCACHE_LIBCUDA
//                          the library file to use, skipping the search
//                          (library_overrides(); read when a library is loaded)
//
// resolve_config applies one table of settings (config.cpp), so every front
// end reads each variable the same way, and `settings` lists every row with
// its source, secrets masked.
//
// Settings files (progcache.conf; config_file.cpp): one per user
// (user_config_path()) and one per root (root_config_path()), lines of
// `name = value` where the name is the variable's, lower case, without
// PROGCACHE_ (max_size = 20G). Command-line flags override the environment,
// which overrides the root's file, which overrides the user's file, which
// overrides the defaults. The root's file holds only what describes the
// root (its caps, compression, durability): it is shared by every user of a
// group root, so nothing that decides whom to trust is read from it.
//
// Thread safety: resolve_config reads the environment; call it before
// starting threads that set variables.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/file_store.h"
#include "progcache/remote_store.h"
#include "progcache/signing.h"
#include "progcache/status.h"

namespace progcache {

struct Setting {
  std::string name;    // "PROGCACHE_MAX_SIZE"
  std::string value;   // as shown (secrets are masked)
  std::string source;  // "default", "environment", "command line", "<file>:<line>", ...
};

struct Config {
  std::string dir;
  std::optional<std::uint64_t> max_size_bytes = k_default_max_size;
  std::optional<std::uint64_t> max_entries;
  bool disabled = false;
  // What turned the cache off, for messages: "PROGCACHE_DISABLE is set", or
  // "disable = yes in FILE:LINE" when a settings file did.
  [[nodiscard]] std::string disabled_by() const;
  Durability durability = Durability::none;
  Sharing sharing = Sharing::private_only;
  std::string hmac_key;  // the key itself, loaded from the file
  // Ed25519 keys (PROGCACHE_SIGNING_KEY_FILE, PROGCACHE_TRUSTED_KEYS_FILE),
  // or null.
  std::shared_ptr<const SigningKeys> signing_keys;
  // zstd levels entries are written at (0: off): the disk tier's, off by
  // default (a local hit would pay decompression), and the remote tier's,
  // on by default (docs/benchmarks.md, "Compression").
  int compression_level = 0;
  // Whether PROGCACHE_COMPRESSION (or a settings file) gave the level.
  bool compression_given = false;
  // The level of the stores whose entries compress well (the nvcc
  // launcher's, Triton's, torch's): the level given, else
  // k_compressed_store_level.
  int compressing_store_level() const { return compression_given ? compression_level : k_compressed_store_level; }
  int remote_compression_level = 1;
  std::vector<std::string> remote_urls;
  std::string remote_password;  // for URLs that carry none
  bool read_only = false;
  // How long the nvcc launcher waits for another process compiling the same
  // command before it compiles too (PROGCACHE_LOCK_TIMEOUT, seconds).
  std::chrono::milliseconds lock_timeout = std::chrono::minutes(10);
  // Where the nvcc launcher's checkouts live (PROGCACHE_BASE_DIR): an
  // absolute, lexically normal directory other than "/", or empty (none).
  std::string base_dir;
  std::vector<Setting> settings;
  // Things the user should hear about (a password on the command line, a
  // settings file skipped).
  std::vector<std::string> warnings;
  // Settings files that could not be used and were skipped (lenient
  // resolution only). With a remote tier or a group root in use, the cache
  // is then disabled: the file may have named the keys entries are checked
  // with.
  std::vector<std::string> skipped_files;

  // FileStoreOptions for this configuration.
  [[nodiscard]] FileStoreOptions file_store_options() const;
  // RemoteStoreOptions for this configuration's remote tier.
  [[nodiscard]] RemoteStoreOptions remote_store_options() const;
};

// Values given on the command line, which win over the environment.
struct ConfigOverrides {
  std::optional<std::string> dir;
  std::optional<std::string> max_size;
  std::optional<std::string> max_entries;
  std::optional<std::string> remote;  // comma-separated URLs
  // A settings file that cannot be used (unreadable, malformed, writable by
  // another user): true (the CLI) makes it an error; false (the library,
  // the launcher) skips the file with a warning in Config::warnings.
  bool strict_files = false;
};

// Where the settings files are: the user's ($XDG_CONFIG_HOME/progcache/
// progcache.conf, else ~/.config/progcache/progcache.conf) and a root's
// (<root>/progcache.conf).
std::string user_config_path();
std::string root_config_path(std::string_view root);

// Which settings file `config set` writes.
enum class ConfigFileScope { automatic, user, root };

// What set_config_value wrote.
struct ConfigChange {
  std::string path;           // the file written
  std::string name;           // the setting's name in files ("max_size")
  std::string variable;       // and in the environment ("PROGCACHE_MAX_SIZE")
  std::string shown;          // the new value as `progcache config` shows it ("" when unset)
  bool changed = true;        // false: unset of a setting the file did not hold (nothing written)
  std::string overridden_by;  // "<file>:<line>" of a file that wins over the line written, or ""
};

// Sets `setting` (its file name, max_size, or its variable,
// PROGCACHE_MAX_SIZE) to `value` in a settings file, or removes it when
// `value` is nullopt, after checking the value as resolve_config would read
// it from there. `current` is the configuration resolved now (its root and
// sharing say which root file, and by which rules). automatic: the root's
// file for what describes the root, the user's for the rest. The file is
// judged as a reader judges it, then replaced atomically with its other
// lines kept; a root that does not exist yet is made by the root's rules.
// invalid_argument for an unknown setting, a bad value, a setting the file
// cannot hold, or an existing file that cannot be used.
Result<ConfigChange> set_config_value(std::string_view setting, const std::optional<std::string>& value,
                                      ConfigFileScope scope, const Config& current);

// invalid_argument naming the variable and its bad value (PROGCACHE_MAX_SIZE=10Q),
// or the settings file and line.
Result<Config> resolve_config(const ConfigOverrides& overrides = {});

// The variables that name a CUDA library's file directly: one row per
// library ("nvrtc", "nvJitLink", "nvvm", "cuda"). The compile layer reads
// them when it loads a library; resolve_config lists them.
struct LibraryOverride {
  std::string_view library;
  std::string_view variable;
};
std::span<const LibraryOverride> library_overrides();
// The variable for `library`, or "" when there is none.
std::string_view library_override_variable(std::string_view library);

// The Ed25519 keys a disk store's codec uses: all of them where this machine
// signs, or where the root is shared with a group (only signed entries are
// then read from it); none for a private root of a machine that only reads
// signed entries (from the remote tier, verified there) and cannot sign its
// own.
std::shared_ptr<const SigningKeys> disk_signing_keys(std::shared_ptr<const SigningKeys> keys, Sharing sharing);

// True for "1", "true", "yes", "on" (any case, spaces around ignored).
bool truthy(std::string_view value);

}  // namespace progcache
