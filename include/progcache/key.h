// progcache/key.h — cache keys.
//
// A Key is 32 bytes: the SHA-256 of a canonical, length-framed encoding of
// everything that decides a compiled program. Three ways to get one:
//   * KeyBuilder: labelled, typed fields, for any caller-defined identity;
//   * make_program_cache_key(): the inputs of an NVRTC / nvJitLink compile,
//     with options canonicalised and unsafe options refused;
//   * KernelKey: pyptx's CacheKey(fn_id, template_kwargs, input_shapes, arch).
// `key_from_user()` turns what a user gives (a raw 32-byte digest, 64 hex
// digits, or any other string) into a Key, so "k" (str) and b"k" (bytes)
// name one entry, and a digest and its hex spelling name the same one.
//
// Encoding (schema 1). Every field is: a one-byte type tag, the label as
// u64-LE length + bytes, then the value. Values: string 's' / bytes 'b':
// u64-LE length + bytes; int 'i': 8 bytes two's-complement LE; uint 'u';
// bool 'B': one byte; float 'f': the 8 IEEE-754 bytes of the double, LE;
// none 'n': nothing; list 'l': u64-LE count then values; map 'm': u64-LE count
// then (u64 length + key bytes, value) pairs sorted by key bytes. Because every
// variable part is length-prefixed and typed, two different inputs never
// encode alike, and "1" (string) never equals 1 (int).
//
// Thread safety: Key and KeyValue are values. A KeyBuilder is single-threaded.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "progcache/hash.h"
#include "progcache/status.h"

namespace progcache {

struct Key {
  std::array<std::uint8_t, 32> bytes{};

  [[nodiscard]] std::string hex() const;
  [[nodiscard]] std::string_view view() const { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }
  // Parses exactly 64 hex digits.
  static Result<Key> from_hex(std::string_view hex);
  // Requires raw.size() == 32.
  static Result<Key> from_raw(std::string_view raw);
  // The first 8 bytes as an integer: keys are uniform, so this is a hash.
  [[nodiscard]] std::uint64_t prefix64() const;

  friend bool operator==(const Key&, const Key&) = default;
  friend auto operator<=>(const Key&, const Key&) = default;
};

struct KeyHash {
  std::size_t operator()(const Key& k) const noexcept { return static_cast<std::size_t>(k.prefix64()); }
};

// Turns a user-supplied key into a Key: exactly 32 bytes are the key itself
// (the digest make_program_cache_key returns), exactly 64 hex digits are its
// hex spelling; anything else (any bytes, any UTF-8 string) is hashed with
// SHA-256 (key_from_string). The three forms cannot collide unless SHA-256
// does. Never fails.
Key key_from_user(std::string_view text);
// Always hashes `text` (domain "user", field "key"), even 64 hex digits.
Key key_from_string(std::string_view text);

// A typed value for KeyBuilder and KernelKey. Floats are hashed by their exact
// bits (so -0.0 != 0.0 and each NaN payload is distinct).
struct KeyValue {
  struct None {
    friend bool operator==(None, None) { return true; }
  };
  struct Blob {  // bytes, distinct from a string
    std::string data;
    friend bool operator==(const Blob&, const Blob&) = default;
  };
  using List = std::vector<KeyValue>;
  using Map = std::map<std::string, KeyValue>;  // sorted by key bytes
  std::variant<None, bool, std::int64_t, std::uint64_t, double, std::string, Blob, List, Map> v;

  KeyValue() = default;
  KeyValue(None n) : v(n) {}                               // NOLINT
  KeyValue(bool b) : v(b) {}                               // NOLINT
  KeyValue(int i) : v(std::int64_t{i}) {}                  // NOLINT
  KeyValue(long i) : v(std::int64_t{i}) {}                 // NOLINT
  KeyValue(long long i) : v(std::int64_t{i}) {}            // NOLINT
  KeyValue(unsigned long long u) : v(std::uint64_t{u}) {}  // NOLINT
  KeyValue(unsigned long u) : v(std::uint64_t{u}) {}       // NOLINT
  KeyValue(double d) : v(d) {}                             // NOLINT
  KeyValue(std::string s) : v(std::move(s)) {}             // NOLINT
  KeyValue(const char* s) : v(std::string(s)) {}           // NOLINT
  KeyValue(Blob b) : v(std::move(b)) {}                    // NOLINT
  KeyValue(List l) : v(std::move(l)) {}                    // NOLINT
  KeyValue(Map m) : v(std::move(m)) {}                     // NOLINT
  static KeyValue bytes(std::string data) { return KeyValue(Blob{std::move(data)}); }
};

// Builds a key from labelled fields. The schema version is written first.
class KeyBuilder {
 public:
  // `domain` separates key families ("program", "kernel", "user"): the same
  // fields under two domains give two keys.
  explicit KeyBuilder(std::string_view domain);

  KeyBuilder& add(std::string_view label, const KeyValue& value);
  KeyBuilder& add_string(std::string_view label, std::string_view value);
  KeyBuilder& add_bytes(std::string_view label, std::string_view value);
  KeyBuilder& add_int(std::string_view label, std::int64_t value);
  KeyBuilder& add_bool(std::string_view label, bool value);
  // Finishes; the builder must not be used afterwards.
  Key finish();

 private:
  void write_label(char tag, std::string_view label);
  void write_value(const KeyValue& value);
  void write_u64(std::uint64_t n);
  Sha256 m_sha;
};

inline constexpr std::uint32_t k_key_schema_version = 1;

// What the program is written in. NVVM IR is keyed (cuda.core's contract)
// but not compiled: progcache does not drive libNVVM.
enum class CodeType { cxx, ptx, ltoir, nvvm };
// What the compile produces.
enum class TargetType { ptx, cubin, ltoir, fatbin };

std::string_view code_type_name(CodeType t);      // "c++", "ptx", "ltoir", "nvvm"
std::string_view target_type_name(TargetType t);  // "ptx", "cubin", "ltoir", "fatbin"
// Accepts cuda.core's spellings in any case ("c++", "PTX", "nvvm") and
// progcache's ("cxx", "cuda", "ltoir"). Errors name the value and the
// accepted ones.
Result<CodeType> parse_code_type(std::string_view s);
Result<TargetType> parse_target_type(std::string_view s);

// The compilers that would run. Filled by the compile layer; callers that
// derive keys by hand pass what they know. Empty fields are still hashed (as
// empty), so a key made without identity never equals one made with it.
struct CompilerIdentity {
  std::string nvrtc_version;      // "13.0"
  std::string nvrtc_fingerprint;  // build fingerprint of libnvrtc (see compile layer)
  std::string nvjitlink_version;  // "13.0"
  std::string driver_version;     // only where the driver compiles
  // For NVVM IR: the SHA-256 of the libNVVM file, or a fixed "not found"
  // marker (a key made without libNVVM never equals one made with it).
  std::string nvvm_fingerprint;
};

struct InMemoryHeader {
  std::string name;
  std::string content;
};

struct ProgramKeyInputs {
  std::string_view code;  // source, PTX text or LTO-IR bytes
  CodeType code_type = CodeType::cxx;
  TargetType target = TargetType::cubin;
  std::vector<std::string> options;
  std::vector<std::string> name_expressions;
  std::vector<InMemoryHeader> headers;
  // Digest of inputs the key cannot see (include directories, PCH, libdevice).
  // Required when options read files; empty means none given.
  std::optional<std::string> extra_digest;
  // Digest of every file the compiler can read from the filesystem (headers
  // through the source's directory, -I directories, pre-includes), computed
  // by compile() for C++ programs. When present, options that read files are
  // accepted without extra_digest: this digest covers them.
  std::optional<std::string> source_deps_digest;
  std::string name;  // program name (NVRTC uses it in diagnostics and line info)
  CompilerIdentity compiler;
  // Further inputs for several-module links (PTX / LTO-IR); each is hashed in
  // order after `code`.
  std::vector<std::string_view> extra_inputs;
  // NVVM only: further named modules, hashed in the order given (NVVM
  // module linking is order-dependent), and whether libdevice is linked
  // (which reads a file the key cannot see: extra_digest is then required).
  std::vector<InMemoryHeader> nvvm_extra_sources;
  bool use_libdevice = false;
  // The compiler's working directory. NVRTC writes it into the debug
  // information of -G and -lineinfo compiles, so for those it is keyed
  // (and only for those: other outputs do not depend on it).
  std::string working_directory;
};

// One option in its canonical spelling: "--gpu-architecture=sm_90" whether it
// was written "-arch sm_90", "-arch=sm_90" or "--gpu-architecture sm_90".
// Options that read files the key cannot see (include paths, pre-includes,
// PCH use) are refused unless `have_extra_digest`; options with side effects
// (creating a PCH, timing files) are always refused. Messages say what to do.
Result<std::vector<std::string>> canonicalize_options(const std::vector<std::string>& options, bool have_extra_digest);

// True when `word` is an option that takes its value as the next word
// ("-I", "--include-path", "-arch", "-Xptxas"), by the same table
// canonicalize_options reads; "-Ipath" and "--std=c++17" are not. Front ends
// that pass options through use it to keep each option with its value.
bool option_takes_next_word(std::string_view word);

// Derives the program key. Fails with invalid_argument for refused options
// for duplicate header names with different contents, and for code/target
// pairs no compiler produces. Pairs (cuda.core's table, plus LTO-IR):
// C++ → ptx, cubin, ltoir, fatbin; PTX → cubin, ptx; LTO-IR → cubin, ptx;
// NVVM → ptx, ltoir.
Result<Key> make_program_cache_key(const ProgramKeyInputs& in);

// pyptx-shaped kernel specialisation key. template_kwargs is a map, so the
// order keyword arguments were given in does not matter.
struct InputShape {
  std::vector<std::int64_t> shape;
  std::string dtype;
};
struct KernelKey {
  std::string fn_id;
  std::map<std::string, KeyValue> template_kwargs;
  std::vector<InputShape> input_shapes;
  std::string arch;

  [[nodiscard]] Key key() const;
  // pyptx's CacheKey.hash() form: 32 hex digits (the first 128 bits of the
  // key). Stores use the whole key().
  [[nodiscard]] std::string hash() const { return key().hex().substr(0, 32); }
};

}  // namespace progcache
