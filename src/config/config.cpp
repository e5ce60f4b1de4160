#include "progcache/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "progcache/remote_store.h"

namespace progcache {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// A setting that takes one of a few words from the environment, the first
// being the default: parsed into `*out` and recorded with its source.
template <typename E>
Status word_setting(Config& c, const char* name, std::initializer_list<std::pair<std::string_view, E>> words, E* out) {
  auto v = env(name);
  if (!v) {
    *out = words.begin()->second;
    c.settings.push_back({name, std::string(words.begin()->first), "default"});
    return {};
  }
  std::string choices;
  for (const auto& [word, value] : words) {
    if (*v == word) {
      *out = value;
      c.settings.push_back({name, *v, "environment"});
      return {};
    }
    choices += (choices.empty() ? "" : " or ") + std::string(word);
  }
  return invalid_argument(std::string(name) + ": invalid value '" + *v + "': use " + choices);
}

}  // namespace

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
  return o;
}

Result<Config> resolve_config(const ConfigOverrides& overrides) {
  Config c;
  // Directory.
  if (overrides.dir) {
    c.dir = *overrides.dir;
    c.settings.push_back({"PROGCACHE_DIR", c.dir, "command line (--dir)"});
  } else {
    std::string source;
    c.dir = default_cache_root(&source);
    c.settings.push_back(
        {"PROGCACHE_DIR", c.dir, source == "PROGCACHE_DIR" ? "environment" : "default (from " + source + ")"});
  }
  // Size cap.
  {
    std::optional<std::string> text = overrides.max_size;
    std::string source = "command line";
    if (!text) {
      text = env("PROGCACHE_MAX_SIZE");
      source = "environment";
    }
    if (text) {
      std::optional<std::uint64_t> n;  // unlimited
      if (*text != "none" && *text != "unlimited") {
        auto parsed = parse_size(*text);
        if (!parsed.ok()) return parsed.status().with_context("PROGCACHE_MAX_SIZE");
        if (*parsed != 0) n = *parsed;  // "0" (or "0.0", "0G") is no limit
      }
      c.max_size_bytes = n;
      c.settings.push_back({"PROGCACHE_MAX_SIZE", n ? format_size(*n) : "unlimited", source});
    } else {
      c.settings.push_back({"PROGCACHE_MAX_SIZE", format_size(k_default_max_size), "default"});
    }
  }
  // Entry cap.
  {
    std::optional<std::string> text = overrides.max_entries;
    std::string source = "command line";
    if (!text) {
      text = env("PROGCACHE_MAX_ENTRIES");
      source = "environment";
    }
    if (text && *text != "0" && *text != "none") {
      std::uint64_t n = 0;
      const bool digits =
          !text->empty() && std::all_of(text->begin(), text->end(), [](unsigned char ch) { return std::isdigit(ch); });
      if (!digits || text->size() > 18) {
        return invalid_argument("PROGCACHE_MAX_ENTRIES: invalid entry count '" + *text + "': use a positive integer");
      }
      n = std::stoull(*text);
      c.max_entries = n;
      c.settings.push_back({"PROGCACHE_MAX_ENTRIES", std::to_string(n), source});
    } else {
      c.settings.push_back({"PROGCACHE_MAX_ENTRIES", "unlimited", text ? source : "default"});
    }
  }
  // Disable.
  if (auto d = env("PROGCACHE_DISABLE")) {
    c.disabled = truthy(*d);
    c.settings.push_back({"PROGCACHE_DISABLE", c.disabled ? "yes" : "no", "environment"});
  } else {
    c.settings.push_back({"PROGCACHE_DISABLE", "no", "default"});
  }
  PROGCACHE_TRY(word_setting(c, "PROGCACHE_DURABILITY", {{"none", Durability::none}, {"fsync", Durability::fsync}},
                             &c.durability));
  // Group: a group-writable root that a team shares.
  PROGCACHE_TRY(word_setting(c, "PROGCACHE_SHARING", {{"private", Sharing::private_only}, {"group", Sharing::group}},
                             &c.sharing));
  // Remote tier: URLs are validated here; only their redacted form is shown.
  {
    std::optional<std::string> text = overrides.remote;
    std::string source = "command line (--remote)";
    if (!text) {
      text = env("PROGCACHE_REMOTE");
      source = "environment";
    }
    if (text) {
      std::stringstream ss(*text);
      std::string shown;
      for (std::string url; std::getline(ss, url, ',');) {
        if (url.empty()) continue;
        auto checked = check_remote_url(url);
        if (!checked.ok()) return checked.status().with_context("PROGCACHE_REMOTE");
        shown += (shown.empty() ? "" : ",") + checked->shown;
        if (overrides.remote && checked->has_password) {
          c.warnings.push_back(
              "the password in --remote is visible to every local user (ps, /proc); "
              "put it in a file named by PROGCACHE_REMOTE_PASSWORD_FILE instead");
        }
        c.remote_urls.push_back(url);
      }
      c.settings.push_back({"PROGCACHE_REMOTE", shown.empty() ? "(none)" : shown, source});
    } else {
      c.settings.push_back({"PROGCACHE_REMOTE", "(none)", "default"});
    }
  }
  // Remote password, for URLs that carry none: from a file (never on a
  // command line, never in the environment of child processes) or from the
  // environment. Shown only as where it came from.
  if (auto f = env("PROGCACHE_REMOTE_PASSWORD_FILE")) {
    auto text = read_regular_file(Env::posix(), *f, 1 << 16, OpenMode::read_follow);
    if (!text.ok()) return text.status().with_context("PROGCACHE_REMOTE_PASSWORD_FILE");
    c.remote_password = std::move(*text);
    while (!c.remote_password.empty() && (c.remote_password.back() == '\n' || c.remote_password.back() == '\r')) {
      c.remote_password.pop_back();
    }
    if (c.remote_password.empty()) return invalid_argument("PROGCACHE_REMOTE_PASSWORD_FILE: '" + *f + "' is empty");
    c.settings.push_back({"PROGCACHE_REMOTE_PASSWORD_FILE", *f + " (password loaded, not shown)", "environment"});
  } else if (auto pw = env("PROGCACHE_REMOTE_PASSWORD")) {
    c.remote_password = *pw;
    c.settings.push_back({"PROGCACHE_REMOTE_PASSWORD", "(set, not shown)", "environment"});
  } else {
    c.settings.push_back({"PROGCACHE_REMOTE_PASSWORD_FILE", "(unset)", "default"});
  }
  if (auto r = env("PROGCACHE_READONLY")) {
    c.read_only = truthy(*r);
    c.settings.push_back({"PROGCACHE_READONLY", c.read_only ? "yes" : "no", "environment"});
  } else {
    c.settings.push_back({"PROGCACHE_READONLY", "no", "default"});
  }
  // Signing key: the file's path is shown, its content never.
  if (auto f = env("PROGCACHE_HMAC_KEY_FILE")) {
    auto text = read_regular_file(Env::posix(), *f, 1 << 16, OpenMode::read_follow);
    if (!text.ok()) return text.status().with_context("PROGCACHE_HMAC_KEY_FILE: cannot read the key file");
    c.hmac_key = std::move(*text);
    while (!c.hmac_key.empty() && (c.hmac_key.back() == '\n' || c.hmac_key.back() == '\r')) c.hmac_key.pop_back();
    if (c.hmac_key.size() < 16) {
      return invalid_argument("PROGCACHE_HMAC_KEY_FILE: key in '" + *f + "' is shorter than 16 bytes");
    }
    c.settings.push_back({"PROGCACHE_HMAC_KEY_FILE", *f + " (key loaded, not shown)", "environment"});
  } else {
    c.settings.push_back({"PROGCACHE_HMAC_KEY_FILE", "(unset: entries unsigned)", "default"});
  }
  return c;
}

}  // namespace progcache
