#include "progcache/config.h"

#include <limits.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "config_file.h"
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

// Whether `shown` names a settings file (or `config set`) as the source:
// there a value is checked strictly (a typo is said, never read as "no").
bool from_file(const Setting& shown) {
  return shown.source != "environment" && shown.source != "default" && !shown.source.starts_with("command line");
}

// Which settings files may hold a setting.
enum class Scope {
  env_only,   // read before any file could be (the Python switches), or a secret
  user_file,  // the user's file
  any_file,   // describes the root: the root's file too (and wins there)
};

// One row per setting, in the order `progcache config` lists them (as
// ccache's config key table): the variable, the command-line flag that
// overrides it, which files may hold it, and how its text is applied.
// `apply` gets the text (nullopt: not set, use the default), fills the
// Config and says what to show (secrets never) in `shown`, whose source it
// may refine.
struct SettingRow {
  std::string_view name;
  std::optional<std::string> ConfigOverrides::*flag;  // nullptr: no flag
  std::string_view flag_name;
  Scope scope;
  Status (*apply)(Config& c, const std::optional<std::string>& text, Setting& shown);
};

// The name a setting has in a file: the variable's, lower case, without
// PROGCACHE_ (PROGCACHE_MAX_SIZE: max_size).
std::string file_name_of(std::string_view variable) {
  std::string n(variable.substr(variable.starts_with("PROGCACHE_") ? 10 : 0));
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return n;
}

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
    // A bare number is refused wherever it is set: ccache reads
    // "max_size = 5" and CCACHE_MAXSIZE=5 as 5 GB, and a cap of 5 bytes
    // would empty the cache. 0 (no cap) needs no unit.
    if (Status st = check_size_unit(from_file(shown) ? "max_size" : "PROGCACHE_MAX_SIZE", *text); !st.ok()) {
      return st;
    }
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

// Seconds, a whole number up to a day: 0 never waits.
Status apply_lock_timeout(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (text) {
    const bool digits = !text->empty() && text->size() <= 5 &&
                        std::all_of(text->begin(), text->end(), [](unsigned char ch) { return std::isdigit(ch); });
    const long long v = digits ? std::stoll(*text) : -1;
    if (v < 0 || v > 86400) {
      return invalid_argument("PROGCACHE_LOCK_TIMEOUT: invalid wait '" + *text +
                              "': use a whole number of seconds from 0 to 86400");
    }
    c.lock_timeout = std::chrono::seconds(v);
  }
  shown.value = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(c.lock_timeout).count()) + " s";
  return {};
}

// An absolute directory other than "/", spelled without "." or ".."
// parts: the launcher compares paths with it as written.
Status apply_base_dir(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (text && !text->empty()) {
    std::string d = *text;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    const bool dotted = d.find("/./") != std::string::npos || d.find("/../") != std::string::npos ||
                        d.ends_with("/.") || d.ends_with("/..") || d.find("//") != std::string::npos;
    if (!d.starts_with("/") || d == "/" || dotted) {
      return invalid_argument("PROGCACHE_BASE_DIR: '" + *text +
                              "' is not an absolute directory other than / (spelled without . or ..)");
    }
    // The launcher relocates only paths a dependency file writes as they
    // are, and that nvcc splits nowhere.
    if (d.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-+@=~") !=
        std::string::npos) {
      return invalid_argument("PROGCACHE_BASE_DIR: '" + *text +
                              "' holds a character other than letters, digits and / . _ - + @ = ~ "
                              "(white space, a comma or a quote): the launcher cannot relocate paths under it");
    }
    c.base_dir = d;
  }
  shown.value = c.base_dir.empty() ? "(unset: paths are keyed as written)" : c.base_dir;
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
  c.compression_given = text.has_value();
  PROGCACHE_TRY(parse_level("PROGCACHE_COMPRESSION", text, c.compression_level, shown));
  if (!text)
    shown.value += " (the nvcc, Triton and torch stores: zstd level " + std::to_string(k_compressed_store_level) + ")";
  return {};
}

Status apply_remote_compression(Config& c, const std::optional<std::string>& text, Setting& shown) {
  return parse_level("PROGCACHE_REMOTE_COMPRESSION", text, c.remote_compression_level, shown);
}

// A yes/no setting's word as it is judged: spaces and tabs around it
// dropped, in lower case (truthy and check_bool read it so).
std::string yes_no_word(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v;
}

// A yes/no setting: one of the words for yes or no, in any case, spaces
// around it ignored, wherever it is set; any other word is refused (a
// mistyped PROGCACHE_READONLY=ture once read as no, and wrote to a shared
// tier). Set empty in the environment is the same as unset.
Status check_bool(std::string_view variable, const std::optional<std::string>& text, const Setting& shown) {
  if (!text) return {};
  const std::string v = yes_no_word(*text);
  if (v.empty() && !from_file(shown)) return {};
  for (const char* w : {"1", "0", "true", "false", "yes", "no", "on", "off"}) {
    if (v == w) return {};
  }
  return invalid_argument((from_file(shown) ? file_name_of(variable) : std::string(variable)) + " '" + *text +
                          "' is not yes or no (use yes/no, true/false, on/off or 1/0)");
}

Status apply_disable(Config& c, const std::optional<std::string>& text, Setting& shown) {
  PROGCACHE_TRY(check_bool("PROGCACHE_DISABLE", text, shown));
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
      if (checked->has_password && from_file(shown)) {
        return invalid_argument(
            "remote: a URL with a password is not kept in a settings file: put the password in a "
            "file of its own named by remote_password_file");
      }
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
  PROGCACHE_TRY(check_bool("PROGCACHE_READONLY", text, shown));
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

// A switch that acts in Python at the interpreter's start, through
// progcache-autoload.pth, before any settings file could be read: shown
// here so that `progcache config` lists every switch.
Status apply_python_switch(Config& /*c*/, const std::optional<std::string>& text, Setting& shown) {
  shown.value = text && truthy(*text) ? "yes" : "no";
  return {};
}

// Python's str.strip(): the switches are read by Python too.
std::string_view strip_space(std::string_view s) {
  constexpr std::string_view k_space = " \t\n\r\f\v";
  const auto first = s.find_first_not_of(k_space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(k_space) - first + 1);
}

// On by default where TRITON_CACHE_MANAGER names progcache's manager, as
// python/autoload/_progcache_autoload.py's wanted() decides; a word decides
// either way.
Status apply_triton_warm_start(Config& c, const std::optional<std::string>& text, Setting& shown) {
  if (text && !strip_space(*text).empty()) return apply_python_switch(c, text, shown);
  const char* manager = std::getenv("TRITON_CACHE_MANAGER");
  const bool ours = manager != nullptr && strip_space(manager).starts_with("progcache.triton:");
  shown.value = ours ? "yes (TRITON_CACHE_MANAGER names progcache's manager)" : "no";
  return {};
}

constexpr SettingRow k_rows[] = {
    {"PROGCACHE_DIR", &ConfigOverrides::dir, "--dir", Scope::user_file, apply_dir},
    {"PROGCACHE_MAX_SIZE", &ConfigOverrides::max_size, "--max-size", Scope::any_file, apply_max_size},
    {"PROGCACHE_MAX_ENTRIES", &ConfigOverrides::max_entries, "--max-entries", Scope::any_file, apply_max_entries},
    {"PROGCACHE_DISABLE", nullptr, "", Scope::user_file, apply_disable},
    {"PROGCACHE_DURABILITY", nullptr, "", Scope::any_file, apply_durability},
    {"PROGCACHE_LOCK_TIMEOUT", nullptr, "", Scope::user_file, apply_lock_timeout},
    {"PROGCACHE_BASE_DIR", nullptr, "", Scope::user_file, apply_base_dir},
    {"PROGCACHE_COMPRESSION", nullptr, "", Scope::any_file, apply_compression},
    {"PROGCACHE_SHARING", nullptr, "", Scope::user_file, apply_sharing},
    {"PROGCACHE_REMOTE", &ConfigOverrides::remote, "--remote", Scope::user_file, apply_remote},
    {"PROGCACHE_REMOTE_PASSWORD_FILE", nullptr, "", Scope::user_file, apply_remote_password_file},
    {"PROGCACHE_REMOTE_PASSWORD", nullptr, "", Scope::env_only, apply_remote_password},
    {"PROGCACHE_READONLY", nullptr, "", Scope::user_file, apply_read_only},
    {"PROGCACHE_REMOTE_COMPRESSION", nullptr, "", Scope::user_file, apply_remote_compression},
    {"PROGCACHE_HMAC_KEY_FILE", nullptr, "", Scope::user_file, apply_hmac_key_file},
    {"PROGCACHE_SIGNING_KEY_FILE", nullptr, "", Scope::user_file, apply_signing_key_file},
    {"PROGCACHE_TRUSTED_KEYS_FILE", nullptr, "", Scope::user_file, apply_trusted_keys_file},
    {"PROGCACHE_TRITON_WARM_START", nullptr, "", Scope::env_only, apply_triton_warm_start},
    {"PROGCACHE_TILELANG", nullptr, "", Scope::env_only, apply_python_switch},
    {"PROGCACHE_TORCH", nullptr, "", Scope::env_only, apply_python_switch},
};

// Settings whose value is a path: in a file, absolute or under ~/ (a file
// is read from any working directory).
bool is_path_setting(std::string_view name) {
  return name == "PROGCACHE_DIR" || name == "PROGCACHE_BASE_DIR" || name.ends_with("_FILE");
}

constexpr LibraryOverride k_library_overrides[] = {
    {"nvrtc", "PROGCACHE_NVRTC"},
    {"nvJitLink", "PROGCACHE_NVJITLINK"},
    {"nvvm", "PROGCACHE_LIBNVVM"},
    {"cuda", "PROGCACHE_LIBCUDA"},
};

// Why `row` cannot be set in a file of `scope`, or "".
std::string refused_in(std::string_view variable, Scope row_scope, bool root_file) {
  if (row_scope == Scope::env_only) {
    if (variable == "PROGCACHE_REMOTE_PASSWORD") {
      return "a password is not kept in a settings file: put it in a file of its own named by "
             "remote_password_file";
    }
    if (variable.starts_with("PROGCACHE_NV") || variable.starts_with("PROGCACHE_LIB")) {
      return "a library's file is named in the environment only (" + std::string(variable) + ")";
    }
    return "it acts when Python starts, before a settings file is read: set " + std::string(variable) +
           "=1 in the environment";
  }
  if (root_file && row_scope != Scope::any_file) {
    return "a root's file holds only what describes the root (max_size, max_entries, compression, durability); "
           "every user of the root reads it, so put this in your own file (" +
           user_config_path() + ")";
  }
  return {};
}

// The settings files one resolution reads.
struct Files {
  std::optional<config_file::File> user;
  std::optional<config_file::File> root;
};

// A file that cannot be used: an error for the CLI, else skipped with a
// warning.
Status file_problem(Config& c, const ConfigOverrides& o, const std::string& path, const Status& st) {
  if (o.strict_files) return st;
  c.warnings.push_back(st.message() + " (the file is ignored: defaults and the environment apply)");
  c.skipped_files.push_back(path);
  return {};
}

// The setting `name` names (its name in files, or its variable): its row,
// or the variable of a library override (which has no row), or neither.
struct NamedSetting {
  const SettingRow* row = nullptr;
  std::string_view library;
};
NamedSetting find_setting(std::string_view name) {
  NamedSetting out;
  for (const auto& r : k_rows) {
    if (r.name == name || file_name_of(r.name) == name) out.row = &r;
  }
  for (const auto& lib : k_library_overrides) {
    if (lib.variable == name || file_name_of(lib.variable) == name) out.library = lib.variable;
  }
  return out;
}

// A path setting's value as a file may hold it: absolute or under ~/.
Status check_file_path(const SettingRow& row, const std::string& value, const std::string& what) {
  if (!is_path_setting(row.name) || value.starts_with('/') || value.starts_with("~/")) return {};
  return invalid_argument(what + " '" + value + "' is not an absolute path (or one under ~/)");
}

// Checks every line of `f` names a setting its scope may hold.
Status check_names(const config_file::File& f, bool root_file) {
  for (const auto& line : f.lines) {
    const auto [row, library] = find_setting(line.name);
    if (row == nullptr && library.empty()) {
      return invalid_argument(f.where(line) + ": unknown setting '" + line.name +
                              "' (progcache config lists every setting)");
    }
    const std::string why =
        row == nullptr ? refused_in(library, Scope::env_only, root_file) : refused_in(row->name, row->scope, root_file);
    if (!why.empty()) return invalid_argument(f.where(line) + ": " + line.name + " cannot be set here: " + why);
    if (row != nullptr) PROGCACHE_TRY(check_file_path(*row, line.value, f.where(line) + ": " + line.name));
  }
  return {};
}

// The user's home directory: $HOME when it is absolute, else the password
// database's (a relative HOME would make every path below it relative to
// the working directory, where a checked-out tree could plant files).
std::string home_dir() {
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') return home;
  if (const struct passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_dir != nullptr && *pw->pw_dir == '/') {
    return pw->pw_dir;
  }
  return "/";
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string expand_home(const std::string& value) {
  if (!value.starts_with("~/")) return value;
  return join_path(home_dir(), value.substr(2));
}

// Loads one settings file, checked; a problem is an error or a warning.
Status load_file(Config& c, const ConfigOverrides& o, const std::string& path, config_file::Rules rules,
                 std::optional<config_file::File>& out) {
  auto loaded = config_file::load(path, rules);
  Status st = loaded.ok() ? Status() : loaded.status();
  if (st.ok() && *loaded) st = (*loaded)->problem;
  if (st.ok() && *loaded) st = check_names(**loaded, rules != config_file::Rules::user);
  if (!st.ok()) return file_problem(c, o, path, st);
  out = std::move(*loaded);
  return {};
}

// Runs one row: the flag wins over the environment, which wins over the
// root's file, which wins over the user's, which wins over the default. A
// value from a file that does not apply names the file and line in
// `bad_file` too.
Status apply_row(Config& c, const ConfigOverrides& overrides, const Files& files, std::string_view name,
                 std::optional<std::string> ConfigOverrides::*flag, std::string_view flag_name,
                 Status (*apply)(Config&, const std::optional<std::string>&, Setting&), std::string* bad_file) {
  Setting shown{std::string(name), "", "default"};
  std::optional<std::string> text;
  std::string file_where;
  if (flag != nullptr && (overrides.*flag).has_value()) {
    text = overrides.*flag;
    shown.source = "command line (" + std::string(flag_name) + ")";
  } else if ((text = env(name))) {
    shown.source = "environment";
  } else {
    const std::string key = file_name_of(name);
    for (const auto* f : {&files.root, &files.user}) {
      if (!*f) continue;
      if (const auto* line = (*f)->find(key)) {
        text = is_path_setting(name) ? expand_home(line->value) : line->value;
        shown.source = file_where = (*f)->where(*line);
        if (bad_file != nullptr) *bad_file = (*f)->path;
        break;
      }
    }
  }
  Status st = apply(c, text, shown);
  if (!st.ok() && !file_where.empty()) return invalid_argument(file_where + ": " + st.message());
  if (bad_file != nullptr) bad_file->clear();
  PROGCACHE_TRY(st);
  c.settings.push_back(std::move(shown));
  return {};
}

// The rules a root's file is judged by: a group root's members may all
// write it, as they may write everything else in the root.
config_file::Rules root_rules(const Files& files) {
  std::optional<std::string> sharing = env("PROGCACHE_SHARING");
  if (!sharing && files.user) {
    if (const auto* line = files.user->find("sharing")) sharing = line->value;
  }
  return sharing == "group" ? config_file::Rules::group_root : config_file::Rules::root;
}

// One resolution; a file in `skip` is not read (a lenient resolution that
// found one of its values unusable starts again without it).
Result<Config> resolve_once(const ConfigOverrides& overrides, const std::vector<std::string>& skip, Files* files_out,
                            std::string* bad_file) {
  Config c;
  Files files;
  const auto skipped = [&](const std::string& path) { return std::find(skip.begin(), skip.end(), path) != skip.end(); };
  if (!skipped(user_config_path())) {
    PROGCACHE_TRY(load_file(c, overrides, user_config_path(), config_file::Rules::user, files.user));
  }
  bool root_read = false;
  for (const auto& row : k_rows) {
    if (!root_read && row.name != "PROGCACHE_DIR") {
      // The root is known once PROGCACHE_DIR is resolved; its file is read
      // before any setting it may hold.
      if (!skipped(root_config_path(c.dir))) {
        PROGCACHE_TRY(load_file(c, overrides, root_config_path(c.dir), root_rules(files), files.root));
      }
      root_read = true;
    }
    PROGCACHE_TRY(apply_row(c, overrides, files, row.name, row.flag, row.flag_name, row.apply, bad_file));
  }
  if (!c.hmac_key.empty() && c.signing_keys != nullptr) {
    return invalid_argument(
        "PROGCACHE_HMAC_KEY_FILE and PROGCACHE_SIGNING_KEY_FILE/PROGCACHE_TRUSTED_KEYS_FILE are both set: entries are "
        "signed one way, so set one (Ed25519 lets readers verify without being able to sign)");
  }
  for (const auto& o : k_library_overrides) {
    PROGCACHE_TRY(apply_row(c, overrides, files, o.variable, nullptr, "", apply_library, nullptr));
  }
  if (files_out != nullptr) *files_out = std::move(files);
  return c;
}

Result<Config> resolve(const ConfigOverrides& overrides, Files* files_out) {
  std::vector<std::string> skip;
  std::vector<std::string> warnings;
  while (true) {
    std::string bad_file;
    auto c = resolve_once(overrides, skip, files_out, &bad_file);
    if (c.ok()) {
      c->warnings.insert(c->warnings.begin(), warnings.begin(), warnings.end());
      c->skipped_files.insert(c->skipped_files.begin(), skip.begin(), skip.end());
      // A skipped file may have named the keys that entries from shared
      // places are checked with, or readonly: with a remote tier or a
      // group root in use, its defaults would trust what the file did not.
      // Failing closed: the cache is off until the file is fixed.
      if (!c->skipped_files.empty() && !c->disabled && (!c->remote_urls.empty() || c->sharing == Sharing::group)) {
        c->disabled = true;
        c->warnings.push_back(
            "the cache is off until the settings file is fixed: it may name the keys that a remote tier or a group "
            "root's entries are checked with");
        for (auto& s : c->settings) {
          if (s.name == "PROGCACHE_DISABLE") s = {s.name, "yes", "a settings file that cannot be used"};
        }
      }
      return c;
    }
    // Lenient: a file with a value that does not apply is skipped whole,
    // as a file that does not parse is (at most two files: this ends).
    if (overrides.strict_files || bad_file.empty() || skip.size() >= 2) return c;
    skip.push_back(bad_file);
    warnings.push_back(c.status().message() + " (the file is ignored: defaults and the environment apply)");
  }
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
  const std::string v = yes_no_word(value);
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string Config::disabled_by() const {
  for (const auto& s : settings) {
    if (s.name == "PROGCACHE_DISABLE" && from_file(s)) return "disable = yes in " + s.source;
  }
  return "PROGCACHE_DISABLE is set";
}

FileStoreOptions Config::file_store_options() const {
  FileStoreOptions o;
  o.root = dir;
  o.cap_root = dir;  // one cap for every store of the root
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
  return resolve(overrides, nullptr);
}

std::string user_config_path() {
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x != nullptr && *x == '/') {
    return join_path(join_path(x, "progcache"), "progcache.conf");
  }
  return join_path(join_path(join_path(home_dir(), ".config"), "progcache"), "progcache.conf");
}

std::string root_config_path(std::string_view root) {
  return join_path(root, "progcache.conf");
}

Result<ConfigChange> set_config_value(std::string_view setting, const std::optional<std::string>& value,
                                      ConfigFileScope scope, const Config& current) {
  const auto [row, library] = find_setting(setting);
  if (!library.empty()) {
    return invalid_argument(file_name_of(library) +
                            " cannot be set in a settings file: " + refused_in(library, Scope::env_only, false));
  }
  if (row == nullptr) {
    return invalid_argument("unknown setting '" + std::string(setting) + "' (progcache config lists every setting)");
  }
  ConfigChange change;
  change.name = file_name_of(row->name);
  change.variable = row->name;
  const bool to_root =
      scope == ConfigFileScope::root || (scope == ConfigFileScope::automatic && row->scope == Scope::any_file);
  if (const std::string why = refused_in(row->name, row->scope, to_root); !why.empty()) {
    return invalid_argument(change.name + " cannot be set in " + (to_root ? "a root's" : "a settings") +
                            " file: " + why);
  }
  change.path = to_root ? root_config_path(current.dir) : user_config_path();
  const config_file::Rules rules = !to_root                            ? config_file::Rules::user
                                   : current.sharing == Sharing::group ? config_file::Rules::group_root
                                                                       : config_file::Rules::root;
  // A value is read trimmed: it is checked and written as it will be read.
  std::optional<std::string> wanted = value;
  if (wanted) {
    const auto first = wanted->find_first_not_of(" \t");
    const auto last = wanted->find_last_not_of(" \t");
    wanted = first == std::string::npos ? std::string() : wanted->substr(first, last - first + 1);
  }
  Config scratch = current;
  if (wanted) {
    // The value is checked as it will be read: from this file.
    if (wanted->empty()) return invalid_argument(change.name + ": an empty value (config unset restores the default)");
    if (wanted->find_first_of(std::string("\n\r\0", 3)) != std::string::npos) {
      return invalid_argument(change.name + ": a value is one line");
    }
    PROGCACHE_TRY(check_file_path(*row, *wanted, change.name));
    Setting shown{std::string(row->name), "", change.path};
    const std::optional<std::string> text = is_path_setting(row->name) ? expand_home(*wanted) : *wanted;
    // A value that cannot be read (a key file missing) is a usage error.
    if (Status st = row->apply(scratch, text, shown); !st.ok()) return invalid_argument(st.message());
    change.shown = shown.value;
  }
  // A user's file that is a link (kept in a dotfiles repository) is
  // written where it leads, so the link stays.
  std::string target = change.path;
  if (!to_root) {
    struct stat st {};
    char resolved[PATH_MAX];
    if (::lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && ::realpath(target.c_str(), resolved) != nullptr) {
      target = resolved;
    }
  }
  if (to_root && !wanted && !file_exists(change.path)) {
    change.changed = false;  // nothing to remove, and no root made to say so
    return change;
  }
  if (to_root) {
    // The root is made (or judged) by its own rules before a file is put
    // in it.
    PROGCACHE_ASSIGN_OR_RETURN(auto store, FileStore::open(current.file_store_options()));
  }
  // Read, changed and replaced under a lock on the directory: two runs at
  // once each keep the other's line.
  if (!to_root && wanted) PROGCACHE_TRY(config_file::make_private_dirs(target.substr(0, target.rfind('/'))));
  config_file::DirLock lock(to_root ? change.path : target);
  // The file as it is now, judged as a reader judges it: a file that cannot
  // be trusted is an error here, never overwritten blind. One with a line
  // that does not parse is rewritten (this is how it is repaired).
  auto existing = config_file::load(change.path, rules);
  if (!existing.ok()) return existing.status();
  const bool has_line = *existing && (*existing)->find(change.name) != nullptr;
  if (!wanted && !has_line) {
    change.changed = false;
    return change;
  }
  const std::string text = config_file::rewrite(*existing ? (*existing)->text : std::string(), change.name, wanted);
  if (to_root) {
    // The root's file takes the mode its entries take.
    PROGCACHE_TRY(config_file::replace(change.path, text, current.sharing == Sharing::group ? 0660U : 0600U, false));
  } else {
    PROGCACHE_TRY(config_file::replace(target, text, 0600U, true));
  }
  // What still wins over the line written: the root's file over the user's.
  if (!to_root && row->scope == Scope::any_file) {
    auto root_file = config_file::load(root_config_path(current.dir), current.sharing == Sharing::group
                                                                          ? config_file::Rules::group_root
                                                                          : config_file::Rules::root);
    if (root_file.ok() && *root_file) {
      if (const auto* line = (*root_file)->find(change.name)) change.overridden_by = (*root_file)->where(*line);
    }
  }
  return change;
}

}  // namespace progcache
