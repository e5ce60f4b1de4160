#include "progcache/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "progcache/remote_store.h"

namespace progcache {

namespace {

std::optional<std::string> env(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// A setting that takes one of a few words, the first being the default.
template <typename E>
Status pick_word(const char* name, const std::optional<std::string>& text,
                 std::initializer_list<std::pair<std::string_view, E>> words, E* out, std::string* shown) {
  if (!text) {
    *out = words.begin()->second;
    *shown = words.begin()->first;
    return {};
  }
  std::string choices;
  for (const auto& [word, value] : words) {
    if (*text == word) {
      *out = value;
      *shown = *text;
      return {};
    }
    choices += (choices.empty() ? "" : " or ") + std::string(word);
  }
  return invalid_argument(std::string(name) + ": invalid value '" + *text + "': use " + choices);
}

// A secret read from the file a variable names, trailing newlines dropped.
Result<std::string> read_secret(const std::string& path, const char* what) {
  auto text = read_regular_file(Env::posix(), path, 1 << 16, OpenMode::read_follow);
  if (!text.ok()) return text.status().with_context(what);
  std::string v = std::move(*text);
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v;
}

// One row per setting, in the order `progcache config` lists them (as
// ccache's config key table): the variable, the command-line flag that
// overrides it, and how its text is applied. `apply` gets the text (nullopt:
// not set, use the default), fills the Config and says what to show (secrets
// never) in `shown`, whose source it may refine.
struct SettingRow {
  std::string_view name;
  std::optional<std::string> ConfigOverrides::*flag;  // nullptr: environment only
  std::string_view flag_name;
  Status (*apply)(Config& c, const std::optional<std::string>& text, Setting& shown);
};

Status apply_dir(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (text) {
    c.dir = *text;
  } else {
    std::string from;
    c.dir = default_cache_root(&from);
    shown.source = "default (from " + from + ")";
  }
  shown.value = c.dir;
  return {};
}

Status apply_max_size(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (text) {
    std::optional<std::uint64_t> n;  // unlimited
    if (*text != "none" && *text != "unlimited") {
      auto parsed = parse_size(*text);
      if (!parsed.ok()) return parsed.status().with_context("PROGCACHE_MAX_SIZE");
      if (*parsed != 0) n = *parsed;  // "0" (or "0.0", "0G") is no limit
    }
    c.max_size_bytes = n;
  }
  shown.value = c.max_size_bytes ? format_size(*c.max_size_bytes) : "unlimited";
  return {};
}

Status apply_max_entries(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (text && *text != "0" && *text != "none") {
    const bool digits =
        !text->empty() && std::all_of(text->begin(), text->end(), [](unsigned char ch) { return std::isdigit(ch); });
    if (!digits || text->size() > 18) {
      return invalid_argument("PROGCACHE_MAX_ENTRIES: invalid entry count '" + *text + "': use a positive integer");
    }
    c.max_entries = std::stoull(*text);
  }
  shown.value = c.max_entries ? std::to_string(*c.max_entries) : "unlimited";
  return {};
}

// A zstd level for one tier: "off" or 0, else 1 to 19.
Status parse_level(const char* name, const std::optional<std::string>& text, int& level, Setting& shown) {
  if (text) {
    const bool digits = !text->empty() && text->size() <= 2 &&
                        std::all_of(text->begin(), text->end(), [](unsigned char ch) { return std::isdigit(ch); });
    const int v = digits ? std::stoi(*text) : -1;
    if (*text == "off" || *text == "none") {
      level = 0;
    } else if (v >= 0 && v <= k_max_compression_level) {
      level = v;
    } else {
      return invalid_argument(std::string(name) + ": invalid compression level '" + *text +
                              "': use off, or a zstd level from 1 to " + std::to_string(k_max_compression_level));
    }
  }
  shown.value = level == 0 ? "off" : "zstd level " + std::to_string(level);
  return {};
}

Status apply_compression(Config& c, const std::optional<std::string>& text, Setting& shown) {
  return parse_level("PROGCACHE_COMPRESSION", text, c.compression_level, shown);
}

Status apply_remote_compression(Config& c, const std::optional<std::string>& text, Setting& shown) {
  return parse_level("PROGCACHE_REMOTE_COMPRESSION", text, c.remote_compression_level, shown);
}

Status apply_disable(Config& c, const std::optional<std::string>& text, Setting& shown) {
  c.disabled = text && truthy(*text);
  shown.value = c.disabled ? "yes" : "no";
  return {};
}

Status apply_durability(Config& c, const std::optional<std::string>& text, Setting& shown) {
  return pick_word("PROGCACHE_DURABILITY", text, {{"none", Durability::none}, {"fsync", Durability::fsync}},
                   &c.durability, &shown.value);
}

// Group: a group-writable root that a team shares.
Status apply_sharing(Config& c, const std::optional<std::string>& text, Setting& shown) {
  return pick_word("PROGCACHE_SHARING", text, {{"private", Sharing::private_only}, {"group", Sharing::group}},
                   &c.sharing, &shown.value);
}

// URLs are validated here; only their redacted form is shown.
Status apply_remote(Config& c, const std::optional<std::string>& text, Setting& shown) {
  std::string list;
  if (text) {
    for (const std::string& url : split_remote_urls(*text)) {
      auto checked = check_remote_url(url);
      if (!checked.ok()) return checked.status().with_context("PROGCACHE_REMOTE");
      list += (list.empty() ? "" : ",") + checked->shown;
      if (checked->has_password && shown.source.starts_with("command line")) {
        c.warnings.push_back(
            "the password in --remote is visible to every local user (ps, /proc); "
            "put it in a file named by PROGCACHE_REMOTE_PASSWORD_FILE instead");
      }
      c.remote_urls.push_back(url);
    }
  }
  shown.value = list.empty() ? "(none)" : list;
  return {};
}

// The password for remote URLs that carry none: preferably from a file
// (never on a command line, never in the environment of child processes).
// Shown only as where it came from.
Status apply_remote_password_file(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (!text) {
    shown.value = "(unset)";
    return {};
  }
  PROGCACHE_ASSIGN_OR_RETURN(c.remote_password, read_secret(*text, "PROGCACHE_REMOTE_PASSWORD_FILE"));
  if (c.remote_password.empty()) return invalid_argument("PROGCACHE_REMOTE_PASSWORD_FILE: '" + *text + "' is empty");
  shown.value = *text + " (password loaded, not shown)";
  return {};
}

Status apply_remote_password(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (!text) {
    shown.value = "(unset)";
  } else if (!c.remote_password.empty()) {
    shown.value = "(set, not shown; ignored: PROGCACHE_REMOTE_PASSWORD_FILE wins)";
  } else {
    c.remote_password = *text;
    shown.value = "(set, not shown)";
  }
  return {};
}

Status apply_read_only(Config& c, const std::optional<std::string>& text, Setting& shown) {
  c.read_only = text && truthy(*text);
  shown.value = c.read_only ? "yes" : "no";
  return {};
}

// Signing key: the file's path is shown, its content never.
Status apply_hmac_key_file(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (!text) {
    shown.value = "(unset: entries unsigned)";
    return {};
  }
  PROGCACHE_ASSIGN_OR_RETURN(c.hmac_key, read_secret(*text, "PROGCACHE_HMAC_KEY_FILE: cannot read the key file"));
  if (c.hmac_key.size() < 16) {
    return invalid_argument("PROGCACHE_HMAC_KEY_FILE: key in '" + *text + "' is shorter than 16 bytes");
  }
  shown.value = *text + " (key loaded, not shown)";
  return {};
}

// Ed25519 keys: the files' paths are shown, with the public keys'
// fingerprints; a private key never.
Status apply_signing_key_file(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (!text) {
    shown.value = "(unset)";
    return {};
  }
  PROGCACHE_ASSIGN_OR_RETURN(std::string pem,
                             read_secret(*text, "PROGCACHE_SIGNING_KEY_FILE: cannot read the key file"));
  auto keys = SigningKeys::from_pem(pem, "");
  if (!keys.ok()) return keys.status().with_context("PROGCACHE_SIGNING_KEY_FILE: '" + *text + "'");
  c.signing_keys = std::move(*keys);
  shown.value =
      *text + " (Ed25519 key " + SigningKeys::fingerprint(c.signing_keys->public_key()) + ", loaded, not shown)";
  return {};
}

Status apply_trusted_keys_file(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (!text) {
    shown.value = c.signing_keys ? "(unset: only the signing key's own)" : "(unset)";
    return {};
  }
  PROGCACHE_ASSIGN_OR_RETURN(std::string pem, read_secret(*text, "PROGCACHE_TRUSTED_KEYS_FILE: cannot read the file"));
  auto keys = c.signing_keys ? c.signing_keys->trusting(pem) : SigningKeys::from_pem("", pem);
  if (!keys.ok()) return keys.status().with_context("PROGCACHE_TRUSTED_KEYS_FILE: '" + *text + "'");
  c.signing_keys = std::move(*keys);
  std::string list;
  for (const auto& k : c.signing_keys->trusted()) list += (list.empty() ? "" : ", ") + SigningKeys::fingerprint(k);
  shown.value = *text + " (trusted: " + list + ")";
  return {};
}

// A library override is read by the compile layer when it loads the
// library; here it is only shown, with what happens when it is unset.
Status apply_library(Config& /*c*/, const std::optional<std::string>& text, Setting& shown) {
  shown.value =
      text ? *text
           : "(unset: searched for in CUDA_HOME, CUDA_PATH, the toolkit, LD_LIBRARY_PATH, NVIDIA wheels, system)";
  return {};
}

constexpr SettingRow k_rows[] = {
    {"PROGCACHE_DIR", &ConfigOverrides::dir, "--dir", apply_dir},
    {"PROGCACHE_MAX_SIZE", &ConfigOverrides::max_size, "--max-size", apply_max_size},
    {"PROGCACHE_MAX_ENTRIES", &ConfigOverrides::max_entries, "--max-entries", apply_max_entries},
    {"PROGCACHE_DISABLE", nullptr, "", apply_disable},
    {"PROGCACHE_DURABILITY", nullptr, "", apply_durability},
    {"PROGCACHE_COMPRESSION", nullptr, "", apply_compression},
    {"PROGCACHE_SHARING", nullptr, "", apply_sharing},
    {"PROGCACHE_REMOTE", &ConfigOverrides::remote, "--remote", apply_remote},
    {"PROGCACHE_REMOTE_PASSWORD_FILE", nullptr, "", apply_remote_password_file},
    {"PROGCACHE_REMOTE_PASSWORD", nullptr, "", apply_remote_password},
    {"PROGCACHE_READONLY", nullptr, "", apply_read_only},
    {"PROGCACHE_REMOTE_COMPRESSION", nullptr, "", apply_remote_compression},
    {"PROGCACHE_HMAC_KEY_FILE", nullptr, "", apply_hmac_key_file},
    {"PROGCACHE_SIGNING_KEY_FILE", nullptr, "", apply_signing_key_file},
    {"PROGCACHE_TRUSTED_KEYS_FILE", nullptr, "", apply_trusted_keys_file},
};

constexpr LibraryOverride k_library_overrides[] = {
    {"nvrtc", "PROGCACHE_NVRTC"},
    {"nvJitLink", "PROGCACHE_NVJITLINK"},
    {"nvvm", "PROGCACHE_LIBNVVM"},
    {"cuda", "PROGCACHE_LIBCUDA"},
};

// Runs one row: the flag wins over the environment, which wins over the
// default.
Status apply_row(Config& c, const ConfigOverrides& overrides, std::string_view name,
                 std::optional<std::string> ConfigOverrides::*flag, std::string_view flag_name,
                 Status (*apply)(Config&, const std::optional<std::string>&, Setting&)) {
  Setting shown{std::string(name), "", "default"};
  std::optional<std::string> text;
  if (flag != nullptr && (overrides.*flag).has_value()) {
    text = overrides.*flag;
    shown.source = "command line (" + std::string(flag_name) + ")";
  } else if ((text = env(name))) {
    shown.source = "environment";
  }
  PROGCACHE_TRY(apply(c, text, shown));
  c.settings.push_back(std::move(shown));
  return {};
}

}  // namespace

std::span<const LibraryOverride> library_overrides() {
  return k_library_overrides;
}

std::string_view library_override_variable(std::string_view library) {
  for (const auto& o : k_library_overrides) {
    if (o.library == library) return o.variable;
  }
  return {};
}

bool truthy(std::string_view value) {
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

FileStoreOptions Config::file_store_options() const {
  FileStoreOptions o;
  o.root = dir;
  o.max_size_bytes = max_size_bytes;
  o.max_entries = max_entries;
  o.durability = durability;
  o.sharing = sharing;
  o.codec.hmac_key = hmac_key;
  o.codec.keys = disk_signing_keys(signing_keys, sharing);
  o.codec.compression_level = compression_level;
  return o;
}

std::shared_ptr<const SigningKeys> disk_signing_keys(std::shared_ptr<const SigningKeys> keys, Sharing sharing) {
  if (keys == nullptr || keys->can_sign() || sharing == Sharing::group) return keys;
  return nullptr;
}

RemoteStoreOptions Config::remote_store_options() const {
  return {.urls = remote_urls,
          .password = remote_password,
          .read_only = read_only,
          .codec = {.hmac_key = hmac_key, .keys = signing_keys, .compression_level = remote_compression_level}};
}

Result<Config> resolve_config(const ConfigOverrides& overrides) {
  Config c;
  for (const auto& row : k_rows) PROGCACHE_TRY(apply_row(c, overrides, row.name, row.flag, row.flag_name, row.apply));
  if (!c.hmac_key.empty() && c.signing_keys != nullptr) {
    return invalid_argument(
        "PROGCACHE_HMAC_KEY_FILE and PROGCACHE_SIGNING_KEY_FILE/PROGCACHE_TRUSTED_KEYS_FILE are both set: entries are "
        "signed one way, so set one (Ed25519 lets readers verify without being able to sign)");
  }
  for (const auto& o : k_library_overrides) {
    PROGCACHE_TRY(apply_row(c, overrides, o.variable, nullptr, "", apply_library));
  }
  return c;
}

}  // namespace progcache
