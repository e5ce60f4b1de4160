#include "progcache/key.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "progcache/bytes.h"
#include "util/coding.h"

namespace progcache {

// ---------------------------------------------------------------- Key

std::string Key::hex() const {
  return to_hex(view());
}

Result<Key> Key::from_raw(std::string_view raw) {
  if (raw.size() != 32) {
    return invalid_argument("a raw key is 32 bytes, got " + std::to_string(raw.size()));
  }
  Key k;
  std::memcpy(k.bytes.data(), raw.data(), 32);
  return k;
}

Result<Key> Key::from_hex(std::string_view hex) {
  if (hex.size() != 64) {
    return invalid_argument("a key is 64 hex digits, got " + std::to_string(hex.size()) + " characters");
  }
  auto raw = progcache::from_hex(hex);
  if (!raw.ok()) return raw.status().with_context("bad key '" + std::string(hex) + "'");
  return from_raw(*raw);
}

std::uint64_t Key::prefix64() const {
  std::uint64_t v = 0;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

Key key_from_user(std::string_view text) {
  if (text.size() == 32) return *Key::from_raw(text);
  if (text.size() == 64) {
    auto k = Key::from_hex(text);
    if (k.ok()) return *k;
  }
  return key_from_string(text);
}

Key key_from_string(std::string_view text) {
  return KeyBuilder("user").add_bytes("key", text).finish();
}

// ---------------------------------------------------------------- KeyBuilder

KeyBuilder::KeyBuilder(std::string_view domain) {
  add(std::string_view("schema"), KeyValue(std::uint64_t{k_key_schema_version}));
  add_string("domain", domain);
}

void KeyBuilder::write_u64(std::uint64_t n) {
  char buf[sizeof n];
  encode_fixed(buf, n);
  m_sha.update(std::string_view(buf, sizeof buf));
}

void KeyBuilder::write_label(char tag, std::string_view label) {
  m_sha.update(std::string_view(&tag, 1));
  write_u64(label.size());
  m_sha.update(label);
}

void KeyBuilder::write_value(const KeyValue& value) {
  struct Visitor {
    KeyBuilder& b;
    void tag(char t) { b.m_sha.update(std::string_view(&t, 1)); }
    void operator()(KeyValue::None) { tag('n'); }
    void operator()(bool v) {
      tag('B');
      const char c = v ? 1 : 0;
      b.m_sha.update(std::string_view(&c, 1));
    }
    void operator()(std::int64_t v) {
      tag('i');
      b.write_u64(static_cast<std::uint64_t>(v));
    }
    void operator()(std::uint64_t v) {
      tag('u');
      b.write_u64(v);
    }
    void operator()(double v) {
      tag('f');
      b.write_u64(std::bit_cast<std::uint64_t>(v));
    }
    void operator()(const std::string& v) {
      tag('s');
      b.write_u64(v.size());
      b.m_sha.update(v);
    }
    void operator()(const KeyValue::Blob& v) {
      tag('b');
      b.write_u64(v.data.size());
      b.m_sha.update(v.data);
    }
    void operator()(const KeyValue::List& v) {
      tag('l');
      b.write_u64(v.size());
      for (const auto& item : v) b.write_value(item);
    }
    void operator()(const KeyValue::Map& v) {
      tag('m');
      b.write_u64(v.size());
      for (const auto& [k, item] : v) {  // std::map iterates in key order
        b.write_u64(k.size());
        b.m_sha.update(k);
        b.write_value(item);
      }
    }
  };
  std::visit(Visitor{*this}, value.v);
}

KeyBuilder& KeyBuilder::add(std::string_view label, const KeyValue& value) {
  write_label('F', label);
  write_value(value);
  return *this;
}

// The typed shortcuts stream straight into the digest: no KeyValue copy of a
// (possibly megabyte-sized) source is made.
KeyBuilder& KeyBuilder::add_string(std::string_view label, std::string_view value) {
  write_label('F', label);
  const char t = 's';
  m_sha.update(std::string_view(&t, 1));
  write_u64(value.size());
  m_sha.update(value);
  return *this;
}

KeyBuilder& KeyBuilder::add_bytes(std::string_view label, std::string_view value) {
  write_label('F', label);
  const char t = 'b';
  m_sha.update(std::string_view(&t, 1));
  write_u64(value.size());
  m_sha.update(value);
  return *this;
}

KeyBuilder& KeyBuilder::add_int(std::string_view label, std::int64_t value) {
  return add(label, KeyValue(static_cast<long long>(value)));
}

KeyBuilder& KeyBuilder::add_bool(std::string_view label, bool value) {
  return add(label, KeyValue(value));
}

Key KeyBuilder::finish() {
  Key k;
  k.bytes = m_sha.finish();
  return k;
}

// ---------------------------------------------------------------- types

std::string_view code_type_name(CodeType t) {
  switch (t) {
    case CodeType::cxx:
      return "c++";
    case CodeType::ptx:
      return "ptx";
    case CodeType::ltoir:
      return "ltoir";
    case CodeType::nvvm:
      return "nvvm";
  }
  return "?";
}

std::string_view target_type_name(TargetType t) {
  switch (t) {
    case TargetType::ptx:
      return "ptx";
    case TargetType::cubin:
      return "cubin";
    case TargetType::ltoir:
      return "ltoir";
    case TargetType::fatbin:
      return "fatbin";
  }
  return "?";
}

namespace {
std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}
}  // namespace

// Case-insensitive, as cuda.core's Program lower-cases both.
Result<CodeType> parse_code_type(std::string_view written) {
  const std::string s = ascii_lower(written);
  if (s == "c++" || s == "cxx" || s == "cuda" || s == "cu") return CodeType::cxx;
  if (s == "ptx") return CodeType::ptx;
  if (s == "ltoir" || s == "lto-ir" || s == "lto") return CodeType::ltoir;
  if (s == "nvvm") return CodeType::nvvm;
  return invalid_argument("unknown code type '" + std::string(written) + "': use c++, ptx, ltoir or nvvm");
}

Result<TargetType> parse_target_type(std::string_view written) {
  const std::string s = ascii_lower(written);
  if (s == "ptx") return TargetType::ptx;
  if (s == "cubin") return TargetType::cubin;
  if (s == "ltoir" || s == "lto-ir") return TargetType::ltoir;
  if (s == "fatbin") return TargetType::fatbin;
  return invalid_argument("unknown target '" + std::string(written) + "': use ptx, cubin, ltoir or fatbin");
}

// ---------------------------------------------------------------- options

namespace {

enum class Arity { flag, value };
enum class Policy { ok, needs_digest, refused };

struct OptionSpec {
  std::string_view long_name;   // without leading dashes
  std::string_view short_name;  // without leading dash; may be empty
  Arity arity;
  Policy policy;
  // Short forms that take their value glued on: -DFOO, -Ipath.
  bool glued = false;
};

// NVRTC's options (CUDA 12/13) and the nvJitLink spellings that differ. An
// option not listed is kept verbatim: it is still part of the key, only its
// spelling is not unified.
constexpr OptionSpec k_options[] = {
    {"gpu-architecture", "arch", Arity::value, Policy::ok},
    {"device-c", "dc", Arity::flag, Policy::ok},
    {"device-w", "dw", Arity::flag, Policy::ok},
    {"relocatable-device-code", "rdc", Arity::value, Policy::ok},
    {"extensible-whole-program", "ewp", Arity::flag, Policy::ok},
    {"device-debug", "G", Arity::flag, Policy::ok},
    {"generate-line-info", "lineinfo", Arity::flag, Policy::ok},
    {"dopt", "dopt", Arity::value, Policy::ok},
    {"ptxas-options", "Xptxas", Arity::value, Policy::ok},
    {"maxrregcount", "maxrregcount", Arity::value, Policy::ok},
    {"ftz", "ftz", Arity::value, Policy::ok},
    {"prec-sqrt", "prec-sqrt", Arity::value, Policy::ok},
    {"prec-div", "prec-div", Arity::value, Policy::ok},
    {"fmad", "fmad", Arity::value, Policy::ok},
    {"use_fast_math", "use_fast_math", Arity::flag, Policy::ok},
    {"extra-device-vectorization", "extra-device-vectorization", Arity::flag, Policy::ok},
    {"modify-stack-limit", "modify-stack-limit", Arity::value, Policy::ok},
    {"dlink-time-opt", "dlto", Arity::flag, Policy::ok},
    {"gen-opt-lto", "gen-opt-lto", Arity::flag, Policy::ok},
    {"optix-ir", "optix-ir", Arity::flag, Policy::ok},
    {"jump-table-density", "jtd", Arity::value, Policy::ok},
    {"device-stack-protector", "device-stack-protector", Arity::value, Policy::ok},
    {"define-macro", "D", Arity::value, Policy::ok, true},
    {"undefine-macro", "U", Arity::value, Policy::ok, true},
    {"include-path", "I", Arity::value, Policy::needs_digest, true},
    {"pre-include", "include", Arity::value, Policy::needs_digest},
    {"no-source-include", "no-source-include", Arity::flag, Policy::ok},
    {"std", "std", Arity::value, Policy::ok},
    {"builtin-move-forward", "builtin-move-forward", Arity::value, Policy::ok},
    {"builtin-initializer-list", "builtin-initializer-list", Arity::value, Policy::ok},
    {"disable-warnings", "w", Arity::flag, Policy::ok},
    {"restrict", "restrict", Arity::flag, Policy::ok},
    {"device-as-default-execution-space", "default-device", Arity::flag, Policy::ok},
    {"device-int128", "device-int128", Arity::flag, Policy::ok},
    {"optimization-info", "opt-info", Arity::value, Policy::ok},
    {"display-error-number", "err-no", Arity::flag, Policy::ok},
    {"no-display-error-number", "no-err-no", Arity::flag, Policy::ok},
    {"diag-error", "diag-error", Arity::value, Policy::ok},
    {"diag-suppress", "diag-suppress", Arity::value, Policy::ok},
    {"diag-warn", "diag-warn", Arity::value, Policy::ok},
    {"brief-diagnostics", "brief-diag", Arity::value, Policy::ok},
    {"split-compile", "split", Arity::value, Policy::ok},
    {"fdevice-syntax-only", "fdevice-syntax-only", Arity::flag, Policy::ok},
    {"minimal", "minimal", Arity::flag, Policy::ok},
    {"Ofast-compile", "Ofc", Arity::value, Policy::ok},
    {"pch-verbose", "pch-verbose", Arity::value, Policy::ok},
    {"pch-messages", "pch-messages", Arity::value, Policy::ok},
    {"instantiate-templates-in-pch", "instantiate-templates-in-pch", Arity::value, Policy::ok},
    // Reads a file the key cannot see.
    {"use-pch", "use-pch", Arity::value, Policy::needs_digest},
    // Side effects: they write files, so a cache hit would silently skip them.
    {"time", "time", Arity::value, Policy::refused},
    {"fdevice-time-trace", "fdevice-time-trace", Arity::value, Policy::refused},
    {"create-pch", "create-pch", Arity::value, Policy::refused},
    {"pch", "pch", Arity::flag, Policy::refused},
    {"pch-dir", "pch-dir", Arity::value, Policy::refused},
};

const OptionSpec* find_long(std::string_view name) {
  for (const auto& spec : k_options) {
    if (spec.long_name == name) return &spec;
  }
  return nullptr;
}

const OptionSpec* find_short(std::string_view name) {
  for (const auto& spec : k_options) {
    if (!spec.short_name.empty() && spec.short_name == name) return &spec;
  }
  return nullptr;
}

// For "-DFOO=1": the glued option whose short name prefixes the token.
const OptionSpec* find_glued(std::string_view body, std::string_view* value) {
  for (const auto& spec : k_options) {
    if (spec.glued && body.size() > spec.short_name.size() && body.starts_with(spec.short_name)) {
      *value = body.substr(spec.short_name.size());
      return &spec;
    }
  }
  return nullptr;
}

Status refusal(const OptionSpec& spec, std::string_view written) {
  if (spec.policy == Policy::refused) {
    return invalid_argument("option '" + std::string(written) +
                            "' has side effects (it writes files) that a cache hit would skip; "
                            "remove it from cached compiles");
  }
  return invalid_argument("option '" + std::string(written) +
                          "' makes the compiler read files the cache key cannot see; pass an "
                          "extra_digest that fingerprints those files (or use in-memory headers)");
}

}  // namespace

bool option_takes_next_word(std::string_view word) {
  if (!word.starts_with("-") || word.find('=') != std::string_view::npos) return false;
  const bool is_long = word.starts_with("--");
  const std::string_view body = word.substr(is_long ? 2 : 1);
  const OptionSpec* spec = is_long ? find_long(body) : find_short(body);
  if (spec == nullptr) spec = is_long ? find_short(body) : find_long(body);
  return spec != nullptr && spec->arity == Arity::value;
}

Result<std::vector<std::string>> canonicalize_options(const std::vector<std::string>& options, bool have_extra_digest) {
  std::vector<std::string> out;
  out.reserve(options.size());
  // NUL cannot reach the compiler (options are C strings): refuse it in
  // every word, values included.
  for (std::size_t i = 0; i < options.size(); ++i) {
    if (options[i].find('\0') != std::string::npos) {
      return invalid_argument("option at position " + std::to_string(i) + " contains a NUL byte");
    }
  }
  for (std::size_t i = 0; i < options.size(); ++i) {
    const std::string& tok = options[i];
    if (tok.empty()) return invalid_argument("empty option at position " + std::to_string(i));
    if (tok[0] != '-' || tok == "-" || tok == "--") {
      out.push_back(tok);  // not an option: keep verbatim
      continue;
    }
    const bool is_long = tok.starts_with("--");
    std::string_view body = std::string_view(tok).substr(is_long ? 2 : 1);
    std::optional<std::string_view> value;
    if (auto eq = body.find('='); eq != std::string_view::npos) {
      value = body.substr(eq + 1);
      body = body.substr(0, eq);
    }
    // Long spellings may also be written with one dash and vice versa
    // (NVRTC accepts both for most options), so try both tables.
    const OptionSpec* spec = is_long ? find_long(body) : find_short(body);
    if (spec == nullptr) spec = is_long ? find_short(body) : find_long(body);
    if (spec == nullptr && !is_long) {
      // "-DFOO=1": the '=' belongs to the macro, not to the option.
      std::string_view glued_value;
      spec = find_glued(std::string_view(tok).substr(1), &glued_value);
      if (spec != nullptr) value = glued_value;
    }
    if (spec == nullptr) {
      out.push_back(tok);
      continue;
    }
    if (spec->policy == Policy::refused || (spec->policy == Policy::needs_digest && !have_extra_digest)) {
      return refusal(*spec, tok);
    }

    std::string canonical = "--" + std::string(spec->long_name);
    if (spec->arity == Arity::value) {
      if (!value) {
        if (i + 1 >= options.size()) {
          return invalid_argument("option '" + tok + "' needs a value");
        }
        value = options[++i];
      }
      canonical += "=";
      canonical += *value;
    } else if (value) {
      // "-lineinfo=true" style: keep the value, it may change meaning.
      canonical += "=";
      canonical += *value;
    }
    out.push_back(std::move(canonical));
  }
  return out;
}

Result<Key> make_program_cache_key(const ProgramKeyInputs& in) {
  const bool allowed = [&] {
    switch (in.code_type) {
      case CodeType::cxx:
        return true;
      case CodeType::ptx:
      case CodeType::ltoir:
        return in.target == TargetType::cubin || in.target == TargetType::ptx;
      case CodeType::nvvm:
        return in.target == TargetType::ptx || in.target == TargetType::ltoir;
    }
    return false;
  }();
  if (!allowed) {
    return invalid_argument("cannot compile code type '" + std::string(code_type_name(in.code_type)) + "' to target '" +
                            std::string(target_type_name(in.target)) +
                            "': PTX and LTO-IR compile to cubin or ptx, NVVM IR to ptx or ltoir, C++ to any "
                            "target");
  }
  if (in.extra_digest && in.extra_digest->empty()) {
    return invalid_argument("extra_digest is empty: pass a real fingerprint or none");
  }
  if (in.code_type != CodeType::nvvm && (!in.nvvm_extra_sources.empty() || in.use_libdevice)) {
    return invalid_argument("extra sources and libdevice are NVVM inputs; code type '" +
                            std::string(code_type_name(in.code_type)) + "' has none");
  }
  if (in.use_libdevice && !in.extra_digest) {
    return invalid_argument(
        "use_libdevice links libdevice bitcode the key cannot see: pass an extra_digest that fingerprints "
        "the libdevice file, or turn use_libdevice off");
  }
  PROGCACHE_ASSIGN_OR_RETURN(
      auto opts, canonicalize_options(in.options, in.extra_digest.has_value() || in.source_deps_digest.has_value()));
  // ptxas can read further options from a file, which no scan covers: only
  // a caller's extra_digest can vouch for it.
  for (const auto& o : opts) {
    if (o.starts_with("--ptxas-options=") && !in.extra_digest &&
        (o.find("options-file") != std::string::npos || o.find("-optf") != std::string::npos)) {
      return invalid_argument("option '" + o +
                              "' makes ptxas read options from a file the cache key cannot see; pass the options "
                              "themselves, or an extra_digest that fingerprints the file");
    }
  }

  std::set<std::string> names(in.name_expressions.begin(), in.name_expressions.end());
  std::map<std::string, std::string> headers;
  for (const auto& h : in.headers) {
    auto [it, inserted] = headers.emplace(h.name, h.content);
    if (!inserted && it->second != h.content) {
      return invalid_argument("header '" + h.name + "' given twice with different contents");
    }
  }

  KeyBuilder b("program");
  b.add_string("code_type", code_type_name(in.code_type));
  b.add_string("target", target_type_name(in.target));
  b.add_bytes("code", in.code);
  b.add(std::string_view("extra_inputs_count"), KeyValue(std::uint64_t{in.extra_inputs.size()}));
  for (auto extra : in.extra_inputs) b.add_bytes("extra_input", extra);
  KeyValue::List opt_list(opts.begin(), opts.end());
  b.add("options", KeyValue(std::move(opt_list)));
  KeyValue::List name_list(names.begin(), names.end());
  b.add("name_expressions", KeyValue(std::move(name_list)));
  KeyValue::Map header_map;
  for (auto& [name, content] : headers) header_map.emplace(name, KeyValue::bytes(content));
  b.add("headers", KeyValue(std::move(header_map)));
  if (in.extra_digest) {
    b.add_bytes("extra_digest", *in.extra_digest);
  } else {
    b.add("extra_digest", KeyValue(KeyValue::None{}));
  }
  if (in.source_deps_digest) b.add_string("source_deps", *in.source_deps_digest);
  b.add_string("name", in.name);
  b.add_string("nvrtc_version", in.compiler.nvrtc_version);
  b.add_string("nvrtc_fingerprint", in.compiler.nvrtc_fingerprint);
  b.add_string("nvjitlink_version", in.compiler.nvjitlink_version);
  b.add_string("driver_version", in.compiler.driver_version);
  if (in.code_type == CodeType::cxx && std::any_of(opts.begin(), opts.end(), [](const std::string& o) {
        return o.starts_with("--device-debug") || o.starts_with("--generate-line-info");
      })) {
    b.add_string("working_directory", in.working_directory);
  }
  // NVVM fields are written only for NVVM IR, so the keys of every other
  // code type are what they were before NVVM was keyed.
  if (in.code_type == CodeType::nvvm) {
    b.add_string("nvvm_fingerprint", in.compiler.nvvm_fingerprint);
    b.add(std::string_view("nvvm_extra_sources_count"), KeyValue(std::uint64_t{in.nvvm_extra_sources.size()}));
    for (const auto& src : in.nvvm_extra_sources) {
      b.add_string("nvvm_extra_source_name", src.name);
      b.add_bytes("nvvm_extra_source", src.content);
    }
    b.add_bool("use_libdevice", in.use_libdevice);
  }
  return b.finish();
}

Key KernelKey::key() const {
  KeyBuilder b("kernel");
  b.add_string("fn_id", fn_id);
  KeyValue::Map kwargs(template_kwargs.begin(), template_kwargs.end());
  b.add("template_kwargs", KeyValue(std::move(kwargs)));
  KeyValue::List shapes;
  for (const auto& s : input_shapes) {
    KeyValue::List dims;
    for (auto d : s.shape) dims.emplace_back(static_cast<long long>(d));
    shapes.emplace_back(KeyValue::List{KeyValue(std::move(dims)), KeyValue(s.dtype)});
  }
  b.add("input_shapes", KeyValue(std::move(shapes)));
  b.add_string("arch", arch);
  return b.finish();
}

}  // namespace progcache
