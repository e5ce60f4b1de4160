#include "progcache/compile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cuda_libs.h"
#include "entry/zstd_codec.h"
#include "key_record.h"
#include "progcache/env.h"
#include "progcache/file_store.h"
#include "progcache/hash.h"
#include "progcache/lock_file.h"
#include "source_deps.h"
#include "util/coding.h"
#include "util/latency.h"
#include "util/lru.h"
#include "util/mutex.h"
#include "util/single_flight.h"

namespace progcache {

namespace {

using nlohmann::json;

struct Counters {
  std::atomic<std::uint64_t> compiles{0}, compile_errors{0}, hits{0}, shared_waits{0}, lock_waits{0}, cache_errors{0},
      unstable_inputs{0}, bytes_served{0}, uncacheable{0};
  LatencyHistogram hit_time, compile_time;
};
constexpr int k_compile_hit_site = 200;  // sample_this_call's site for compile()

Counters& counters() {
  static Counters c;
  return c;
}

std::string state_dir_of(const CompileOptions& o) {
  return o.state_dir.empty() ? default_cache_root() : o.state_dir;
}

bool uses_nvrtc(const Program& p) {
  return p.code_type == CodeType::cxx;
}

// nvJitLink wants "-arch=sm_90"; users write NVRTC spellings. Everything else
// is passed as given.
std::vector<std::string> jitlink_options(const std::vector<std::string>& opts, const Program& p, TargetType target) {
  std::vector<std::string> out;
  bool lto = false, ptx = false;
  for (std::size_t i = 0; i < opts.size(); ++i) {
    const std::string& o = opts[i];
    if ((o == "-arch" || o == "--gpu-architecture") && i + 1 < opts.size()) {
      out.push_back("-arch=" + opts[++i]);
    } else if (o.starts_with("--gpu-architecture=")) {
      out.push_back("-arch=" + o.substr(19));
    } else {
      lto |= o == "-lto";
      ptx |= o == "-ptx";
      out.push_back(o);
    }
  }
  if (p.code_type == CodeType::ltoir && !lto) out.emplace_back("-lto");
  if (target == TargetType::ptx && !ptx) out.emplace_back("-ptx");
  return out;
}

// What any key needs; `for_compile` adds what this library's compilers can
// run (program_key also keys inputs cuda.core's contract accepts).
Status check_program(const Program& p, TargetType target, bool for_compile) {
  if (for_compile && p.code_type == CodeType::nvvm) {
    return invalid_argument(
        "NVVM IR is compiled by libNVVM, which progcache does not drive; compile it "
        "elsewhere (cuda.core's Program) and cache the result under program_key()'s key");
  }
  if (for_compile && target == TargetType::fatbin) {
    return invalid_argument("target fatbin is not supported: compile to cubin per architecture (or ptx)");
  }
  if (for_compile && p.code_type == CodeType::ptx && target == TargetType::ptx) {
    return invalid_argument("nvJitLink emits PTX only from LTO-IR: PTX compiles to cubin");
  }
  if (p.code_type != CodeType::cxx && !p.name_expressions.empty()) {
    return invalid_argument("name expressions need C++ source; " + std::string(code_type_name(p.code_type)) +
                            " has no C++ names to lower");
  }
  if (p.code_type == CodeType::cxx && !p.link_inputs.empty()) {
    return invalid_argument("link inputs are PTX or LTO-IR modules; compile C++ to ltoir first, then link");
  }
  if (p.code.empty()) return invalid_argument("program '" + p.name + "' is empty");
  // The compiler takes options as C strings: one holding a NUL would reach
  // it cut short.
  for (std::size_t i = 0; i < p.options.size(); ++i) {
    if (p.options[i].find('\0') != std::string::npos) {
      return invalid_argument("option at position " + std::to_string(i) + " contains a NUL byte");
    }
  }
  return {};
}

// The library that compiles `p` (or, for NVVM IR, whose file keys it).
std::string_view library_of(const Program& p) {
  return uses_nvrtc(p) ? "nvrtc" : (p.code_type == CodeType::nvvm ? "nvvm" : "nvJitLink");
}

CompilerIdentity identity_of(std::string_view library, const cuda::LibraryIdentity& li) {
  CompilerIdentity id;
  if (library == "nvrtc") {
    id.nvrtc_version = li.version;
    id.nvrtc_fingerprint = li.fingerprint;
  } else if (library == "nvvm") {
    id.nvvm_fingerprint = li.fingerprint;
  } else {
    // The fingerprint field names NVRTC for C++ programs and nvJitLink here.
    id.nvjitlink_version = li.version;
    id.nvrtc_fingerprint = li.fingerprint;
  }
  return id;
}

// The identity of the compiler that would run (cuda::compiler_identity).
Result<CompilerIdentity> identity_for(const Program& p, const CompileOptions& o, bool tolerate_missing) {
  const std::string_view library = library_of(p);
  cuda::LibraryIdentity scratch;
  PROGCACHE_ASSIGN_OR_RETURN(const cuda::LibraryIdentity* li,
                             cuda::compiler_identity(library, state_dir_of(o), tolerate_missing, scratch));
  return identity_of(library, *li);
}

// What the compiler can read from the filesystem: C++ only (PTX and LTO-IR
// read nothing but their inputs).
Result<std::optional<detail::SourceDeps>> deps_for(const Program& p, const CompileOptions& o) {
  if (!uses_nvrtc(p)) return std::optional<detail::SourceDeps>();
  PROGCACHE_ASSIGN_OR_RETURN(detail::SourceDeps deps, detail::scan_source_deps(p, state_dir_of(o)));
  return std::optional<detail::SourceDeps>(std::move(deps));
}

std::optional<std::string> digest_of(const std::optional<detail::SourceDeps>& deps) {
  return deps ? std::optional<std::string>(deps->digest) : std::nullopt;
}

// The working directory is keyed only for -G and -lineinfo (see
// ProgramKeyInputs); every spelling of those options names "G", "debug" or
// "line", so other programs skip the getcwd.
bool may_key_working_directory(const Program& p) {
  return std::any_of(p.options.begin(), p.options.end(), [](const std::string& o) {
    return o.find('G') != std::string::npos || o.find("debug") != std::string::npos ||
           o.find("line") != std::string::npos;
  });
}

std::string keyed_working_directory(const Program& p) {
  if (!may_key_working_directory(p)) return {};
  std::error_code ec;
  return std::filesystem::current_path(ec).string();
}

Result<Key> key_for(const Program& p, TargetType target, const CompilerIdentity& id,
                    const std::optional<std::string>& deps) {
  ProgramKeyInputs in;
  in.source_deps_digest = deps;
  in.code = p.code;
  in.code_type = p.code_type;
  in.target = target;
  in.options = p.options;
  in.name_expressions = p.name_expressions;
  in.headers = p.headers;
  in.extra_digest = p.extra_digest;
  in.name = p.name;
  in.compiler = id;
  for (const auto& m : p.link_inputs) in.extra_inputs.push_back(m);
  in.nvvm_extra_sources = p.nvvm_extra_sources;
  in.use_libdevice = p.use_libdevice;
  in.working_directory = keyed_working_directory(p);
  return make_program_cache_key(in);
}

// ------------------------------------------------------------ key memo

// A key is a pure function of the program, the target, the compiler's
// identity, the digest of what the source reads and (for -G and -lineinfo)
// the working directory. A warm call has all of these but the key: this
// memo maps their exact bytes to it, so repeated calls skip option parsing
// and SHA-256. Its index is every byte of the inputs, length-prefixed, so
// two calls share a key only when their inputs are equal.
class KeyMemo {
 public:
  static KeyMemo& instance() {
    static auto* memo = new KeyMemo();  // never destroyed: used until exit
    return *memo;
  }

  // Every field of Program and CompilerIdentity is in the index: they are
  // taken apart by structured bindings, which stop compiling when either
  // gains a field, until it is added here too.
  static std::string index_of(const Program& p, TargetType target, const CompilerIdentity& id,
                              const std::optional<std::string>& deps) {
    const auto& [code, code_type, options, headers, name_expressions, name, link_inputs, extra_digest,
                 nvvm_extra_sources, use_libdevice] = p;
    const auto& [nvrtc_version, nvrtc_fingerprint, nvjitlink_version, driver_version, nvvm_fingerprint] = id;
    std::string out;
    out.reserve(code.size() + 512);
    auto field = [&out](std::string_view v) {
      put_fixed<std::uint64_t>(out, v.size());
      out.append(v);
    };
    auto list = [&](const std::vector<std::string>& v) {
      put_fixed<std::uint64_t>(out, v.size());
      for (const auto& s : v) field(s);
    };
    auto named = [&](const std::vector<InMemoryHeader>& v) {
      put_fixed<std::uint64_t>(out, v.size());
      for (const auto& [header_name, content] : v) {
        field(header_name);
        field(content);
      }
    };
    auto optional = [&](const std::optional<std::string>& v) {
      out.push_back(v ? '1' : '0');
      if (v) field(*v);
    };
    out.push_back(static_cast<char>(target));
    out.push_back(static_cast<char>(code_type));
    out.push_back(use_libdevice ? '1' : '0');
    field(code);
    list(options);
    named(headers);
    list(name_expressions);
    field(name);
    list(link_inputs);
    optional(extra_digest);
    named(nvvm_extra_sources);
    for (const std::string* s :
         {&nvrtc_version, &nvrtc_fingerprint, &nvjitlink_version, &driver_version, &nvvm_fingerprint})
      field(*s);
    optional(deps);
    return out;
  }

  std::optional<Key> find(const std::string& index) {
    MutexLock lock(m_mu);
    const Key* k = m_keys.find(index);
    return k != nullptr ? std::optional<Key>(*k) : std::nullopt;
  }

  void remember(std::string index, const Key& key) {
    const std::uint64_t charge = index.size() + sizeof(Key);
    MutexLock lock(m_mu);
    m_keys.put(std::move(index), key, charge, k_limits);
  }

 private:
  // Each index is held twice (list and map): 16 MiB at most in all.
  static constexpr LruLimits k_limits{.bytes = 8u << 20, .entries = 4096};
  Mutex m_mu;
  LruMap<std::string, Key> m_keys PROGCACHE_GUARDED_BY(m_mu);
};

// key_for through the memo. A program whose key names the working
// directory is keyed afresh each time.
Result<Key> memo_key_for(const Program& p, TargetType target, const CompilerIdentity& id,
                         const std::optional<std::string>& deps) {
  if (may_key_working_directory(p)) return key_for(p, target, id, deps);
  std::string index = KeyMemo::index_of(p, target, id, deps);
  if (auto known = KeyMemo::instance().find(index)) return *known;
  PROGCACHE_ASSIGN_OR_RETURN(Key key, key_for(p, target, id, deps));
  KeyMemo::instance().remember(std::move(index), key);
  return key;
}

// ------------------------------------------------------------ entry <-> object

// `record`: the key record (key_record.h), kept beside the code so a later
// miss can be explained.
Entry to_entry(const ObjectCode& oc, std::string record) {
  json meta{{"kind", target_type_name(oc.kind)},
            {"name", oc.name},
            {"symbols", oc.symbol_mapping},
            {"log", oc.log},
            {"compiler",
             {{"nvrtc_version", oc.compiler.nvrtc_version},
              {"fingerprint", oc.compiler.nvrtc_fingerprint},
              {"nvjitlink_version", oc.compiler.nvjitlink_version}}}};
  std::vector<Artifact> arts;
  arts.push_back({std::string(target_type_name(oc.kind)), oc.code});
  // A record that lists hundreds of headers shrinks several times under zstd.
  if (auto small = zstd::shrink(record, 3)) {
    arts.push_back({std::string(k_key_record_artifact_zstd), Bytes::adopt(std::move(*small))});
  } else {
    arts.push_back({std::string(k_key_record_artifact), Bytes::adopt(std::move(record))});
  }
  return Entry(meta.dump(), std::move(arts));
}

// A string field of metadata read from disk or the network; nullopt when it
// is missing or of another type (never an exception: the bytes are not ours).
std::optional<std::string> string_field(const json& meta, const char* name) {
  auto it = meta.find(name);
  if (it == meta.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// An entry's metadata, parsed: what from_entry reads of it.
struct ParsedMeta {
  std::string kind;
  std::string name;
  std::string log;
  std::map<std::string, std::string> symbols;
};

// nullptr when the metadata is not what progcache writes (damage, a foreign
// writer): never an exception, the bytes are not ours.
std::shared_ptr<const ParsedMeta> parse_meta(const std::string& text) {
  const auto meta = json::parse(text, nullptr, false);
  if (!meta.is_object()) return nullptr;
  auto out = std::make_shared<ParsedMeta>();
  const auto kind = string_field(meta, "kind");
  const auto name = string_field(meta, "name");
  const auto log = string_field(meta, "log");
  if (!kind || !name || !log) return nullptr;  // written by progcache, these are always strings
  out->kind = *kind;
  out->name = *name;
  out->log = *log;
  if (auto it = meta.find("symbols"); it != meta.end()) {
    if (!it->is_object()) return nullptr;
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) return nullptr;
      out->symbols.emplace(k, v.get<std::string>());
    }
  }
  return out;
}

// The same metadata bytes parse the same way: a thread's recent parses are
// kept, indexed by every byte of the text, so a warm hit skips the parser.
std::shared_ptr<const ParsedMeta> parsed_meta(const std::string& text) {
  static constexpr LruLimits k_limits{.bytes = 1u << 20, .entries = 64};
  thread_local LruMap<std::string, std::shared_ptr<const ParsedMeta>> recent;
  if (auto* known = recent.find(text)) return *known;
  auto parsed = parse_meta(text);
  if (parsed != nullptr) recent.put(text, parsed, 2 * text.size(), k_limits);
  return parsed;
}

// A hit whose metadata does not describe the requested object is treated as
// damage (a miss), never returned.
std::optional<ObjectCode> from_entry(const Entry& e, const Key& key, TargetType target, const CompilerIdentity& id) {
  const auto meta = parsed_meta(e.metadata());
  if (meta == nullptr || meta->kind != target_type_name(target)) return std::nullopt;
  const Artifact* art = e.find(target_type_name(target));
  if (art == nullptr) return std::nullopt;
  // A cubin is an ELF image: anything else under a cubin key was not
  // written by a compiler.
  if (target == TargetType::cubin && !art->data.view().starts_with("\x7f"
                                                                   "ELF"))
    return std::nullopt;
  ObjectCode oc;
  oc.code = art->data;
  oc.kind = target;
  oc.name = meta->name;
  oc.log = meta->log;
  oc.symbol_mapping = meta->symbols;
  oc.compiler = id;
  oc.key = key;
  oc.from_cache = true;
  return oc;
}

// ------------------------------------------------------------ compilers

std::string nvrtc_log(const cuda::Nvrtc* api, cuda::nvrtcProgram prog) {
  std::size_t n = 0;
  if (api->get_program_log_size(prog, &n) != 0 || n <= 1) return {};
  std::string log(n, '\0');
  api->get_program_log(prog, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

Result<ObjectCode> run_nvrtc(const Program& p, TargetType target, CompileFailure* failure) {
  PROGCACHE_ASSIGN_OR_RETURN(const cuda::Nvrtc* api, cuda::nvrtc());
  std::vector<const char*> header_src, header_names;
  for (const auto& h : p.headers) {
    header_src.push_back(h.content.c_str());
    header_names.push_back(h.name.c_str());
  }
  cuda::nvrtcProgram prog = nullptr;
  if (int r = api->create_program(&prog, p.code.c_str(), p.name.c_str(), static_cast<int>(p.headers.size()),
                                  header_src.data(), header_names.data());
      r != 0) {
    return internal_error(std::string("nvrtcCreateProgram: ") + api->get_error_string(r));
  }
  struct Guard {
    const cuda::Nvrtc* api;
    cuda::nvrtcProgram* prog;
    ~Guard() { api->destroy_program(prog); }
  } guard{api, &prog};
  for (const auto& n : p.name_expressions) {
    if (int r = api->add_name_expression(prog, n.c_str()); r != 0) {
      return invalid_argument("name expression '" + n + "': " + api->get_error_string(r));
    }
  }
  std::vector<std::string> opts = p.options;
  if (target == TargetType::ltoir) {
    bool dlto = false;
    for (const auto& o : opts) dlto |= (o == "-dlto" || o == "--dlink-time-opt");
    if (!dlto) opts.emplace_back("-dlto");
  }
  std::vector<const char*> argv;
  argv.reserve(opts.size());
  for (const auto& o : opts) argv.push_back(o.c_str());
  const int rc = api->compile_program(prog, static_cast<int>(argv.size()), argv.data());
  ObjectCode oc;
  oc.log = nvrtc_log(api, prog);
  if (rc != 0) {
    if (failure != nullptr) *failure = CompileFailure{oc.log, p.options, p.name};
    std::string msg = "NVRTC failed to compile '" + p.name + "' (" + api->get_error_string(rc) + ")";
    if (!oc.log.empty()) msg += ":\n" + oc.log;
    return Status(Code::compile_error, msg);
  }
  std::size_t n = 0;
  char* out = nullptr;
  auto take = [&](auto size_fn, auto get_fn, const char* what) -> Status {
    if (size_fn == nullptr || get_fn == nullptr) {
      return unavailable(std::string("this NVRTC cannot produce ") + what + "; upgrade the CUDA toolkit");
    }
    if (int r = size_fn(prog, &n); r != 0) return internal_error(std::string(what) + ": " + api->get_error_string(r));
    oc.code = Bytes::allocate(n, &out);
    if (int r = get_fn(prog, out); r != 0) return internal_error(std::string(what) + ": " + api->get_error_string(r));
    return {};
  };
  switch (target) {
    case TargetType::ptx:
      PROGCACHE_TRY(take(api->get_ptx_size, api->get_ptx, "PTX"));
      break;
    case TargetType::cubin:
      PROGCACHE_TRY(take(api->get_cubin_size, api->get_cubin, "cubin"));
      break;
    case TargetType::ltoir:
      PROGCACHE_TRY(take(api->get_ltoir_size, api->get_ltoir, "LTO-IR"));
      break;
    case TargetType::fatbin:
      return invalid_argument("fatbin is not supported");
  }
  if (target == TargetType::cubin && oc.code.size() == 0) {
    return invalid_argument("NVRTC produced no cubin for '" + p.name +
                            "': give a real architecture (-arch=sm_XX), not a virtual one (compute_XX)");
  }
  for (const auto& name : p.name_expressions) {
    const char* lowered = nullptr;
    if (api->get_lowered_name(prog, name.c_str(), &lowered) == 0 && lowered != nullptr) {
      oc.symbol_mapping.emplace(name, lowered);
    }
  }
  oc.kind = target;
  oc.name = p.name;
  return oc;
}

std::string jit_log(const cuda::NvJitLink* api, cuda::nvJitLinkHandle h, bool error) {
  std::size_t n = 0;
  if ((error ? api->get_error_log_size(h, &n) : api->get_info_log_size(h, &n)) != 0 || n <= 1) return {};
  std::string log(n, '\0');
  if (error)
    api->get_error_log(h, log.data());
  else
    api->get_info_log(h, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

Result<ObjectCode> run_nvjitlink(const Program& p, TargetType target, CompileFailure* failure) {
  PROGCACHE_ASSIGN_OR_RETURN(const cuda::NvJitLink* api, cuda::nvjitlink());
  const std::vector<std::string> opts = jitlink_options(p.options, p, target);
  std::vector<const char*> argv;
  argv.reserve(opts.size());
  for (const auto& o : opts) argv.push_back(o.c_str());
  cuda::nvJitLinkHandle h = nullptr;
  if (int r = api->create(&h, static_cast<std::uint32_t>(argv.size()), argv.data()); r != 0) {
    const std::string log = h != nullptr ? jit_log(api, h, true) : "";
    if (h != nullptr) api->destroy(&h);
    if (failure != nullptr) *failure = CompileFailure{log, p.options, p.name};
    return Status(Code::compile_error, "nvJitLink rejected the options for '" + p.name + "' (error " +
                                           std::to_string(r) + ")" + (log.empty() ? "" : ":\n" + log));
  }
  struct Guard {
    const cuda::NvJitLink* api;
    cuda::nvJitLinkHandle* h;
    ~Guard() { api->destroy(h); }
  } guard{api, &h};
  auto input_type = [](std::string_view data, CodeType declared) {
    // PTX is text that starts with comments or directives; LTO-IR is binary.
    if (declared == CodeType::ptx) return cuda::jit_input_ptx;
    const bool text = !data.empty() && (data.starts_with("//") || data.starts_with(".version") ||
                                        data.starts_with("\n") || data.starts_with("."));
    return text ? cuda::jit_input_ptx : cuda::jit_input_ltoir;
  };
  std::vector<std::string_view> inputs{p.code};
  for (const auto& m : p.link_inputs) inputs.push_back(m);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = p.name + "#" + std::to_string(i);
    const int type = i == 0 ? (p.code_type == CodeType::ptx ? cuda::jit_input_ptx : cuda::jit_input_ltoir)
                            : input_type(inputs[i], CodeType::ltoir);
    if (int r = api->add_data(h, type, inputs[i].data(), inputs[i].size(), name.c_str()); r != 0) {
      const std::string log = jit_log(api, h, true);
      if (failure != nullptr) *failure = CompileFailure{log, p.options, p.name};
      return Status(Code::compile_error, "nvJitLink could not read input " + std::to_string(i) + " of '" + p.name +
                                             "'" + (log.empty() ? "" : ":\n" + log));
    }
  }
  if (int r = api->complete(h); r != 0) {
    const std::string log = jit_log(api, h, true);
    if (failure != nullptr) *failure = CompileFailure{log, p.options, p.name};
    return Status(Code::compile_error, "nvJitLink failed to link '" + p.name + "' (error " + std::to_string(r) + ")" +
                                           (log.empty() ? "" : ":\n" + log));
  }
  ObjectCode oc;
  oc.log = jit_log(api, h, false);
  std::size_t n = 0;
  char* out = nullptr;
  if (target == TargetType::cubin) {
    if (int r = api->get_linked_cubin_size(h, &n); r != 0) return internal_error("nvJitLinkGetLinkedCubinSize failed");
    oc.code = Bytes::allocate(n, &out);
    if (int r = api->get_linked_cubin(h, out); r != 0) return internal_error("nvJitLinkGetLinkedCubin failed");
  } else {
    if (int r = api->get_linked_ptx_size(h, &n); r != 0) return internal_error("nvJitLinkGetLinkedPtxSize failed");
    oc.code = Bytes::allocate(n, &out);
    if (int r = api->get_linked_ptx(h, out); r != 0) return internal_error("nvJitLinkGetLinkedPtx failed");
  }
  oc.kind = target;
  oc.name = p.name;
  return oc;
}

Result<ObjectCode> run_compiler(const Program& p, TargetType target, CompileFailure* failure) {
  SampledTimer timer(true);  // every compile: they are few, and slow
  auto r = uses_nvrtc(p) ? run_nvrtc(p, target, failure) : run_nvjitlink(p, target, failure);
  timer.finish(counters().compile_time);
  (r.ok() ? counters().compiles : counters().compile_errors).fetch_add(1);
  return r;
}

// ------------------------------------------------------------ single flight

// Threads of this process asking for one key share one compile: the
// leader's result and its failure detail.
using CompileOutcome = std::pair<Result<ObjectCode>, CompileFailure>;
FlightTable<Key, CompileOutcome>& flights() {
  static auto* table = new FlightTable<Key, CompileOutcome>();  // never destroyed: used until exit
  return *table;
}

// `missed`, when given, is set where the store answered "absent" (and so
// counted a miss), not where it failed or held an entry this key refuses.
std::optional<ObjectCode> lookup(Store* cache, const Key& key, TargetType target, const CompilerIdentity& id,
                                 bool* missed = nullptr) {
  if (cache == nullptr) return std::nullopt;
  auto got = cache->get(key);
  if (!got.ok()) {
    counters().cache_errors.fetch_add(1);
    return std::nullopt;
  }
  if (!got->has_value()) {
    if (missed != nullptr) *missed = true;
    return std::nullopt;
  }
  auto oc = from_entry(**got, key, target, id);
  if (!oc) {
    cache->erase(key).status().ignore();  // not what this key promises: drop it
    return std::nullopt;
  }
  counters().hits.fetch_add(1);
  counters().bytes_served.fetch_add(oc->code.size(), std::memory_order_relaxed);
  return oc;
}

// The leader's work: cross-process lock, look again, compile, store.
Result<ObjectCode> lead(const Program& p, TargetType target, const CompileOptions& o, const Key& key,
                        const CompilerIdentity& id, const std::optional<detail::SourceDeps>& deps, bool first_missed,
                        CompileFailure* failure) {
  std::optional<LockFile> lock;
  if (o.cache != nullptr && o.process_lock) {
    bool waited = false;
    auto l = LockFile::acquire(Env::posix(), join_path(state_dir_of(o), "locks"), key.hex(), o.lock_timeout, &waited);
    if (waited) counters().lock_waits.fetch_add(1);
    if (l.ok()) {
      lock.emplace(std::move(*l));
    }  // else: a lock we cannot take (timeout, unwritable dir) must not stop the compile
    if (waited) {
      // Another process compiled it meanwhile, perhaps: look again. One
      // lookup counts once, as what it ended as: where the first look
      // counted a miss, it is taken back if this one hits, and this one's is
      // if it misses again (nothing is taken back that was never counted).
      bool again_missed = false;
      auto hit = lookup(o.cache, key, target, id, &again_missed);
      if (first_missed && (hit || again_missed)) o.cache->uncount_miss();
      if (hit) return std::move(*hit);
    }
  }
  PROGCACHE_ASSIGN_OR_RETURN(ObjectCode oc, run_compiler(p, target, failure));
  oc.compiler = id;
  oc.key = key;
  oc.from_cache = false;
  // The key named the library found before the compile (from the identity
  // memo, without loading it). If the compile loaded another file (the path
  // replaced meanwhile, during a wait for the lock, say), its output is not
  // what the key says: returned, never stored.
  if (auto ran = cuda::loaded_identity(library_of(p), state_dir_of(o)); ran.ok() && *ran != nullptr) {
    const CompilerIdentity actual = identity_of(library_of(p), **ran);
    if (actual.nvrtc_fingerprint != id.nvrtc_fingerprint || actual.nvrtc_version != id.nvrtc_version ||
        actual.nvjitlink_version != id.nvjitlink_version) {
      oc.compiler = actual;
      counters().unstable_inputs.fetch_add(1);
      return oc;
    }
  }
  if (o.cache != nullptr) {
    // A header edited while the compiler ran may or may not be in the
    // output: such a result is returned but never stored under a key that
    // names one version of the headers.
    if (deps) {
      auto after = deps_for(p, o);
      if (!after.ok() || digest_of(*after) != digest_of(deps)) {
        counters().unstable_inputs.fetch_add(1);
        return oc;
      }
    }
    // A failed store is counted, never fatal: the compile is not lost.
    const std::string record = detail::key_record(p, target, id, deps, keyed_working_directory(p));
    if (!o.cache->put(key, to_entry(oc, record)).ok()) counters().cache_errors.fetch_add(1);
  }
  return oc;
}

// What cannot be keyed (an include named through a macro outside the -I
// directories, a tree the scan cannot list, an option with side effects) is
// compiled all the same, neither looked up nor stored: the compiler, not the
// cache, decides whether the program compiles.
Result<ObjectCode> compile_uncached(const Program& p, TargetType target, const CompilerIdentity& id, const Status& why,
                                    CompileFailure* failure) {
  counters().uncacheable.fetch_add(1);
  PROGCACHE_ASSIGN_OR_RETURN(ObjectCode oc, run_compiler(p, target, failure));
  oc.compiler = id;
  oc.key = Key{};
  oc.from_cache = false;
  oc.uncacheable = why.message();
  return oc;
}

}  // namespace

CompileStats compile_stats() {
  const Counters& c = counters();
  CompileStats s{c.compiles.load(),        c.compile_errors.load(), c.hits.load(),
                 c.shared_waits.load(),    c.lock_waits.load(),     c.cache_errors.load(),
                 c.unstable_inputs.load(), c.bytes_served.load()};
  s.uncacheable = c.uncacheable.load();
  const LatencySummary h = c.hit_time.summary(), k = c.compile_time.summary();
  s.hit_samples = h.samples;
  s.hit_p50_ns = h.p50_ns;
  s.hit_p99_ns = h.p99_ns;
  s.compile_p50_ns = k.p50_ns;
  s.compile_p99_ns = k.p99_ns;
  return s;
}

Result<Key> program_key(const Program& program, TargetType target, const CompileOptions& options) {
  PROGCACHE_TRY(check_program(program, target, /*for_compile=*/false));
  PROGCACHE_ASSIGN_OR_RETURN(CompilerIdentity id, identity_for(program, options, /*tolerate_missing=*/true));
  PROGCACHE_ASSIGN_OR_RETURN(auto deps, deps_for(program, options));
  return key_for(program, target, id, digest_of(deps));
}

Result<ObjectCode> compile(const Program& program, TargetType target, const CompileOptions& options,
                           CompileFailure* failure) {
  SampledTimer timer(sample_this_call<k_compile_hit_site>());
  PROGCACHE_TRY(check_program(program, target, /*for_compile=*/true));
  PROGCACHE_ASSIGN_OR_RETURN(CompilerIdentity id, identity_for(program, options, /*tolerate_missing=*/false));
  auto deps_or = deps_for(program, options);
  if (!deps_or.ok()) return compile_uncached(program, target, id, deps_or.status(), failure);
  const std::optional<detail::SourceDeps> deps = std::move(*deps_or);
  auto key_or = memo_key_for(program, target, id, digest_of(deps));
  if (!key_or.ok()) return compile_uncached(program, target, id, key_or.status(), failure);
  const Key key = *key_or;
  bool missed = false;
  if (auto hit = lookup(options.cache, key, target, id, &missed)) {
    timer.finish(counters().hit_time);
    return std::move(*hit);
  }

  auto [flight, leader] = flights().join(key);
  if (!leader) {
    counters().shared_waits.fetch_add(1);
    flight->wait();
    const auto outcome = flight->result();  // a leader always leaves one
    if (!outcome->first.ok() && failure != nullptr) *failure = outcome->second;
    return outcome->first;
  }
  CompileFailure local_failure;
  Result<ObjectCode> result = lead(program, target, options, key, id, deps, missed, &local_failure);
  if (!result.ok() && failure != nullptr) *failure = local_failure;
  flights().finish(key, flight, CompileOutcome(result, local_failure));
  return result;
}

namespace detail {

Result<KeyAndRecord> key_and_record(const Program& program, TargetType target, const CompileOptions& options) {
  PROGCACHE_TRY(check_program(program, target, /*for_compile=*/false));
  PROGCACHE_ASSIGN_OR_RETURN(CompilerIdentity id, identity_for(program, options, /*tolerate_missing=*/true));
  PROGCACHE_ASSIGN_OR_RETURN(auto deps, deps_for(program, options));
  PROGCACHE_ASSIGN_OR_RETURN(Key key, key_for(program, target, id, digest_of(deps)));
  return KeyAndRecord{key, key_record(program, target, id, deps, keyed_working_directory(program))};
}

bool entry_serves(const Entry& entry, const Key& key, TargetType target) {
  return from_entry(entry, key, target, {}).has_value();
}

}  // namespace detail

Result<CompilerInfo> compiler_info(const CompileOptions& options) {
  CompilerInfo info;
  const std::string dir = state_dir_of(options);
  auto nv = cuda::locate("nvrtc");
  auto jl = cuda::locate("nvJitLink");
  if (!nv.ok() && !jl.ok()) return nv.status();
  if (nv.ok()) {
    info.nvrtc_path = *nv;
    PROGCACHE_ASSIGN_OR_RETURN(auto li, cuda::identity("nvrtc", *nv, dir));
    info.identity.nvrtc_version = li.version;
    info.identity.nvrtc_fingerprint = li.fingerprint;
  }
  if (jl.ok()) {
    info.nvjitlink_path = *jl;
    PROGCACHE_ASSIGN_OR_RETURN(auto li, cuda::identity("nvJitLink", *jl, dir));
    info.identity.nvjitlink_version = li.version;
  }
  return info;
}

}  // namespace progcache
