// progcache — the operator's command-line tool.
//
// Exit codes: 0 ok, 1 miss (or key absent), 2 usage error, 3 any other error.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "progcache/compile.h"
#include "progcache/config.h"
#include "progcache/hash.h"
#ifdef PROGCACHE_WITH_REDIS
#include "progcache/redis_store.h"
#endif
#include "progcache/file_store.h"
#include "progcache/version.h"

namespace pc = progcache;
using nlohmann::json;

namespace {

constexpr int k_exit_ok = 0;
constexpr int k_exit_miss = 1;
constexpr int k_exit_usage = 2;
constexpr int k_exit_error = 3;

struct Globals {
  std::string dir;
  std::string max_size;
  std::string remote;
  bool have_dir = false;
};

int fail(const pc::Status& st) {
  std::cerr << "progcache: " << st.to_string() << "\n";
  return st.code() == pc::Code::invalid_argument ? k_exit_usage : k_exit_error;
}

// KEY is 64 hex digits (the key itself) or any other string, mapped as the
// library maps keys (key_from_user: 32 bytes are a raw key, others hashed), so
// the CLI and Python name one entry alike. A 64-character KEY that is not hex
// is almost certainly a mistyped key, so it is refused rather than hashed.
pc::Result<pc::Key> parse_key(const std::string& text, bool as_string) {
  if (as_string) return pc::key_from_string(text);
  if (text.size() != 64) return pc::key_from_user(text);
  auto k = pc::Key::from_hex(text);
  if (!k.ok()) {
    return pc::invalid_argument(k.status().message() + " (a 64-character KEY must be hex; pass --string to hash it)");
  }
  return *k;
}

pc::Result<pc::Config> load_config(const Globals& g) {
  pc::ConfigOverrides o;
  if (g.have_dir) o.dir = g.dir;
  if (!g.max_size.empty()) o.max_size = g.max_size;
  if (!g.remote.empty()) o.remote = g.remote;
  auto c = pc::resolve_config(o);
  if (c.ok()) {
    for (const auto& w : c->warnings) std::cerr << "progcache: warning: " << w << "\n";
  }
  return c;
}

pc::Result<std::unique_ptr<pc::FileStore>> open_store(const pc::Config& c) {
  return pc::FileStore::open(c.file_store_options());
}

// The store that serves data: the disk store, or disk + remote when a remote
// tier is configured (remote puts are flushed when the store is closed).
pc::Result<std::unique_ptr<pc::Store>> open_data_store(const pc::Config& c) {
  PROGCACHE_ASSIGN_OR_RETURN(auto disk, open_store(c));
  if (c.remote_urls.empty()) return std::unique_ptr<pc::Store>(std::move(disk));
#ifdef PROGCACHE_WITH_REDIS
  PROGCACHE_ASSIGN_OR_RETURN(
      auto remote,
      pc::make_redis_store(
          {.urls = c.remote_urls, .password = c.remote_password, .read_only = c.read_only, .codec = {c.hmac_key}}));
  pc::TieredStoreOptions o;
  o.disk = std::move(disk);
  o.remote = std::move(remote);
  return std::unique_ptr<pc::Store>(pc::make_tiered_store(std::move(o)));
#else
  return pc::unavailable("a remote tier is configured but this progcache was built without Redis support");
#endif
}

// The tiered store treats a failing remote as a miss, so that an outage
// never fails a command; the user still hears why the remote did not serve.
void warn_remote(pc::Store* store) {
#ifdef PROGCACHE_WITH_REDIS
  auto* tiered = dynamic_cast<pc::TieredStore*>(store);
  if (tiered == nullptr) return;
  auto rs = tiered->remote_stats();
  if (rs && !rs->last_error.empty()) std::cerr << "progcache: warning: remote tier: " << rs->last_error << "\n";
#else
  (void)store;
#endif
}

std::string format_time(std::int64_t ns) {
  if (ns <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A progress bar on stderr, only when stderr is a terminal.
pc::ProgressFn progress_bar(const char* label) {
  if (::isatty(2) == 0) return {};
  return [label](std::uint64_t done, std::uint64_t total) {
    if (total == 0) return;
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r%-7s [%.*s%*s] %3d%%", label, filled, "##############################", width - filled, "",
                 static_cast<int>(100 * done / total));
    if (done >= total) std::fprintf(stderr, "\r%*s\r", width + 16, "");
    std::fflush(stderr);
  };
}

// Reads an input whole ("-" is standard input). Every read is checked: an
// error part-way is an error, never a shorter value; a directory is refused.
pc::Result<std::string> read_file(const std::string& path) {
  const bool std_in = path == "-";
  const int fd = std_in ? 0 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return pc::errno_status(errno, "cannot read input file", path);
  struct Closer {
    int fd;
    bool own;
    ~Closer() {
      if (own) ::close(fd);
    }
  } closer{fd, !std_in};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return pc::errno_status(errno, "cannot read input file", path);
  if (S_ISDIR(st.st_mode)) {
    return pc::Status(pc::Code::failed_precondition, "input '" + path + "' is a directory, not a file");
  }
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return pc::errno_status(errno, "error reading input file after " + std::to_string(out.size()) + " bytes", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Checked before any work: "-" (standard output) is fine; otherwise the
// directory that will hold the file must exist, and the path must not be a
// directory.
pc::Status check_output_path(const std::string& path) {
  if (path.empty() || path == "-") return {};
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return pc::Status(pc::Code::failed_precondition, "output '" + path + "' is a directory");
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty() && (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
    return pc::Status(pc::Code::failed_precondition,
                      "output directory '" + dir + "' does not exist: create it first (nothing was done)");
  }
  return {};
}

pc::Status write_all_to(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return pc::errno_status(errno, "cannot write", what);
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

// Writes an output. A regular file (or a new one) is replaced atomically
// (temp file + rename in its directory); a symbolic link is followed and its
// target replaced, the link kept; anything else (a device such as /dev/null,
// a FIFO) is written in place, never renamed over. "-" is standard output.
pc::Status write_output(const std::string& path, std::string_view data) {
  if (path == "-") return write_all_to(1, data, "standard output");
  std::string target = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const auto resolved = std::filesystem::canonical(path, ec);
    if (ec) return pc::errno_status(ec.value(), "output is a symbolic link that cannot be followed", path);
    target = resolved.string();
    if (::stat(target.c_str(), &st) != 0) return pc::errno_status(errno, "cannot stat output", target);
  } else if (::stat(path.c_str(), &st) != 0) {
    st.st_mode = S_IFREG;  // new file
  }
  if (S_ISDIR(st.st_mode)) return pc::Status(pc::Code::failed_precondition, "output '" + path + "' is a directory");
  if (!S_ISREG(st.st_mode)) {
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return pc::errno_status(errno, "cannot open output", target);
    pc::Status s = write_all_to(fd, data, target);
    if (::close(fd) != 0 && s.ok()) s = pc::errno_status(errno, "cannot write", target);
    return s;
  }
  // The mode a user expects: an existing file keeps its own; a new one gets
  // 0666 less the umask, as any tool's output would.
  const bool exists = (st.st_mode & 07777) != 0 || ::access(target.c_str(), F_OK) == 0;
  std::uint32_t mode = 0;
  if (exists) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  const auto slash = target.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : target.substr(0, slash);
  const std::string temp = pc::join_path(dir, ".progcache-out." + std::to_string(::getpid()));
  pc::Status published = pc::write_file_atomic(pc::Env::posix(), target, temp, data, mode, pc::Durability::none);
  if (published.code() == pc::Code::permission_denied && exists && ::access(target.c_str(), W_OK) == 0) {
    // A file the user may write in a directory they may not: written in
    // place (not atomically), as cp would.
    const int fd = ::open(target.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return pc::errno_status(errno, "cannot open output", target);
    pc::Status s = write_all_to(fd, data, target);
    if (::close(fd) != 0 && s.ok()) s = pc::errno_status(errno, "cannot write", target);
    return s;
  }
  return published;
}

json stats_json(const pc::StoreStats& s) {
  return json{{"hits", s.hits},
              {"misses", s.misses},
              {"puts", s.puts},
              {"evictions", s.evictions},
              {"corrupt_dropped", s.corrupt_dropped},
              {"rejected", s.rejected},
              {"errors", s.errors},
              {"entries", s.entries},
              {"bytes_stored", s.bytes_stored}};
}

pc::Result<pc::CodeType> code_type_of(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".cu" || ext == ".cuh" || ext == ".cpp" || ext == ".cxx" || ext == ".cc") return pc::CodeType::cxx;
  if (ext == ".ptx") return pc::CodeType::ptx;
  if (ext == ".ltoir" || ext == ".lto") return pc::CodeType::ltoir;
  if (ext == ".nvvm" || ext == ".ll" || ext == ".bc") {
    // NVVM IR is compiled by libNVVM, which progcache does not drive; it is
    // not LTO-IR, and passing it to the linker as such would fail or worse.
    return pc::invalid_argument("'" + path +
                                "' is NVVM IR, which progcache cannot compile (libNVVM is not "
                                "supported); use .cu (CUDA C++), .ptx or .ltoir");
  }
  return pc::invalid_argument("cannot tell the code type of '" + path +
                              "' from its extension: use .cu (CUDA C++), .ptx or .ltoir");
}

struct CompileArgs {
  std::string arch;
  std::string target = "cubin";
  std::string output;
  std::vector<std::string> name_exprs;
  bool link = false;
  bool json_out = false;
};

// Options of NVRTC that take their value as the next word.
bool takes_value(const std::string& o) {
  static const char* k_names[] = {"-arch",
                                  "--gpu-architecture",
                                  "-D",
                                  "--define-macro",
                                  "-U",
                                  "--undefine-macro",
                                  "-I",
                                  "--include-path",
                                  "-include",
                                  "--pre-include",
                                  "-std",
                                  "--std",
                                  "-maxrregcount",
                                  "--maxrregcount",
                                  "-Xptxas",
                                  "--ptxas-options",
                                  "-dopt",
                                  "--dopt",
                                  "-split",
                                  "--split-compile"};
  for (const char* n : k_names) {
    if (o == n) return true;
  }
  return false;
}

int run_compile(const CompileArgs& a, const std::vector<std::string>& extras, const pc::Config& cfg) {
  std::vector<std::string> files, opts;
  std::string arch = a.arch;
  for (std::size_t i = 0; i < extras.size(); ++i) {
    const std::string& t = extras[i];
    if (t.empty() || t[0] != '-') {
      files.push_back(t);
      continue;
    }
    std::string value;
    bool separate = takes_value(t) && i + 1 < extras.size();
    if (separate) value = extras[i + 1];
    if (t == "-arch" || t == "--gpu-architecture") {
      if (!separate) return fail(pc::invalid_argument("option '" + t + "' needs a value"));
      arch = value;
      ++i;
      continue;
    }
    if (t.starts_with("-arch=") || t.starts_with("--gpu-architecture=")) {
      arch = t.substr(t.find('=') + 1);
      continue;
    }
    opts.push_back(t);
    if (separate) {
      opts.push_back(value);
      ++i;
    }
  }
  if (files.empty()) return fail(pc::invalid_argument("compile: no input files"));
  // Where the output goes is checked before any compile.
  if (a.output == "-" && (a.json_out || (files.size() > 1 && !a.link))) {
    return fail(
        pc::invalid_argument("compile: -o - writes one program to standard output: not with --json or "
                             "several inputs without --link"));
  }
  if (files.size() > 1 && !a.link && !a.output.empty()) {
    struct stat st {};
    if (::stat(a.output.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail(pc::Status(pc::Code::failed_precondition,
                             "output directory '" + a.output + "' does not exist: create it first (nothing was done)"));
    }
  } else if (pc::Status st = check_output_path(a.output); !st.ok()) {
    return fail(st);
  }
  if (arch.empty()) return fail(pc::invalid_argument("compile: --arch sm_XX is required"));
  auto target = pc::parse_target_type(a.target);
  if (!target.ok()) return fail(target.status());
  opts.insert(opts.begin(), "-arch=" + arch);

  std::unique_ptr<pc::Store> store;
  // Lock files and memos live in the cache root, unless the root was
  // refused (foreign-owned, open to others): then nothing of it is read,
  // and they live in a private directory of this run's, removed at exit.
  std::string state_dir = cfg.dir;
  struct PrivateState {
    std::string dir;
    ~PrivateState() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } private_state;
  const auto use_private_state = [&] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "progcache-state-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) private_state.dir = state_dir = tmpl;
  };
  if (cfg.disabled) {
    use_private_state();  // bypass the cache entirely: its directory too
  } else {
    auto s = open_data_store(cfg);
    if (!s.ok()) {
      // A cache that cannot open must not stop a compile.
      std::cerr << "progcache: warning: compiling without the cache: " << s.status().to_string() << "\n";
      use_private_state();
    } else {
      store = std::move(*s);
    }
  }
  pc::CompileOptions co;
  co.cache = store.get();
  co.state_dir = state_dir;

  json report = json::array();
  int rc = k_exit_ok;
  auto emit = [&](const std::string& label, const pc::Result<pc::ObjectCode>& r, double secs,
                  const pc::CompileFailure& failure, const std::string& out_path) {
    json j{{"input", label}, {"seconds", secs}};
    if (!r.ok()) {
      j["error"] = r.status().to_string();
      j["log"] = failure.log;
      std::cerr << "progcache: " << label << ": " << r.status().to_string() << "\n";
      rc = r.status().code() == pc::Code::invalid_argument ? k_exit_usage : k_exit_error;
    } else {
      j["key"] = r->key.hex();
      j["hit"] = r->from_cache;
      j["target"] = pc::target_type_name(r->kind);
      j["bytes"] = r->code.size();
      j["symbols"] = r->symbol_mapping;
      if (!out_path.empty()) {
        pc::Status st = write_output(out_path, r->code.view());
        if (!st.ok()) {
          std::cerr << "progcache: " << st.to_string() << "\n";
          rc = k_exit_error;
        }
        j["output"] = out_path;
      }
      if (!a.json_out) {
        // With -o - the program itself is on standard output.
        FILE* human = a.output == "-" ? stderr : stdout;
        std::fprintf(human, "%-28s %-4s %9.3f ms  %8zu B  %s\n", label.c_str(), r->from_cache ? "hit" : "miss",
                     secs * 1e3, r->code.size(), r->key.hex().c_str());
        for (const auto& [expr, lowered] : r->symbol_mapping) {
          std::fprintf(human, "    %s -> %s\n", expr.c_str(), lowered.c_str());
        }
      }
    }
    report.push_back(j);
  };

  auto load = [&](const std::string& f, pc::Program* p) -> pc::Status {
    auto type = code_type_of(f);
    if (!type.ok()) return type.status();
    auto src = read_file(f);
    if (!src.ok()) return src.status();
    p->code = std::move(*src);
    p->code_type = *type;
    p->options = opts;
    // The path as given, as nvcc would: NVRTC looks for quoted includes in
    // the program's directory, and __FILE__ names it.
    p->name = f;
    if (*type == pc::CodeType::cxx) p->name_expressions = a.name_exprs;
    return {};
  };

  const bool many = files.size() > 1;
  if (!a.link) {
    for (const auto& f : files) {
      pc::Program p;
      if (pc::Status st = load(f, &p); !st.ok()) {
        emit(f, st, 0, {}, "");
        continue;
      }
      std::string out = a.output;
      if (many && !out.empty()) {
        out = (std::filesystem::path(a.output) / std::filesystem::path(f).stem()).string() + "." + a.target;
      }
      pc::CompileFailure failure;
      const auto t0 = std::chrono::steady_clock::now();
      auto r = pc::compile(p, *target, co, &failure);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      emit(f, r, secs, failure, out);
    }
  } else {
    // Link: C++ inputs become LTO-IR (each cached), then all link into one.
    if (*target != pc::TargetType::cubin && *target != pc::TargetType::ptx) {
      return fail(pc::invalid_argument("--link produces cubin or ptx"));
    }
    std::vector<std::string> modules;
    pc::CodeType first_type = pc::CodeType::ltoir;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& f : files) {
      pc::Program p;
      if (pc::Status st = load(f, &p); !st.ok()) {
        emit(f, st, 0, {}, "");
        return rc;
      }
      if (p.code_type == pc::CodeType::cxx) {
        pc::CompileFailure failure;
        const auto t1 = std::chrono::steady_clock::now();
        auto r = pc::compile(p, pc::TargetType::ltoir, co, &failure);
        emit(f, r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), failure, "");
        if (!r.ok()) return rc;
        modules.push_back(r->code.str());
      } else {
        if (modules.empty()) first_type = p.code_type;
        modules.push_back(std::move(p.code));
      }
    }
    pc::Program linked;
    linked.code = std::move(modules.front());
    linked.code_type = first_type;
    linked.link_inputs.assign(std::make_move_iterator(modules.begin() + 1), std::make_move_iterator(modules.end()));
    linked.options = {"-arch=" + arch};
    linked.name = "link";
    pc::CompileFailure failure;
    auto r = pc::compile(linked, *target, co, &failure);
    emit("(link)", r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), failure, a.output);
  }
  if (store) {
    store->close().ignore();  // remote puts are flushed before the warning
    warn_remote(store.get());
  }
  if (a.json_out) std::cout << report.dump(2) << "\n";
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "progcache: a cache for compiled GPU programs.\n\n"
      "KEY arguments are either exactly 64 hex digits (the key itself, as printed by\n"
      "'progcache ls' and 'compile'), or a string: 32 bytes are taken as a raw key\n"
      "(as Python's make_program_cache_key returns), any other length is hashed\n"
      "(SHA-256) into a key.\n\n"
      "Exit codes: 0 ok, 1 miss, 2 usage error, 3 error.",
      "progcache"};
  app.set_version_flag("--version", std::string("progcache ") + PROGCACHE_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();  // global options (--dir) may follow the subcommand
  Globals g;
  app.add_option_function<std::string>(
         "--dir", [&](const std::string& d) { g.dir = d, g.have_dir = true; }, "Cache root (overrides PROGCACHE_DIR)")
      ->type_name("DIR");
  app.add_option("--remote", g.remote, "Remote tier URLs, comma-separated (overrides PROGCACHE_REMOTE)")
      ->type_name("URL[,URL]");

  bool string_key = false;
  auto add_string_flag = [&](CLI::App* sub) {
    sub->add_flag("--string", string_key, "Always hash KEY as a string, even when it is 64 hex digits");
  };

  // put
  std::string key_text, file_path, out_path, artifact_name = "code";
  auto* put = app.add_subcommand("put", "Store FILE's bytes under KEY");
  put->add_option("KEY", key_text, "Key: 64 hex digits, or any string (hashed)")->required();
  put->add_option("FILE", file_path, "File to store")->required();
  add_string_flag(put);

  // get
  auto* get = app.add_subcommand("get", "Write the raw artifact stored under KEY (to stdout or -o FILE)");
  get->add_option("KEY", key_text, "Key: 64 hex digits, or any string (hashed)")->required();
  get->add_option("-o,--output", out_path, "Output file (written atomically)");
  get->add_option("--artifact", artifact_name, "Artifact name (default: code, else the first)");
  add_string_flag(get);

  // rm
  auto* rm = app.add_subcommand("rm", "Remove the entry under KEY (exit 1 if absent)");
  rm->add_option("KEY", key_text, "Key: 64 hex digits, or any string (hashed)")->required();
  add_string_flag(rm);

  // ls
  bool long_fmt = false, as_json = false;
  auto* ls = app.add_subcommand("ls", "List entries");
  ls->add_flag("-l,--long", long_fmt, "Show size, creation and last use");
  ls->add_flag("--json", as_json, "JSON output");

  // stats
  auto* stats = app.add_subcommand("stats", "Show host-wide counters of the disk store");
  stats->add_flag("--json", as_json, "JSON output");

  // verify
  bool repair = false;
  auto* verify = app.add_subcommand("verify", "Check every entry; list damaged ones with the reason");
  verify->add_flag("--repair", repair, "Remove damaged entries");
  verify->add_flag("--json", as_json, "JSON output");

  // prune
  std::string prune_size, prune_age;
  auto* prune = app.add_subcommand("prune", "Remove least recently used entries");
  prune->add_option("--max-size", prune_size, "Trim to at most SIZE (e.g. 2G); default: the configured cap")
      ->type_name("SIZE");
  prune->add_option("--older-than", prune_age, "Remove entries unused for DURATION (e.g. 7d, 12h)")
      ->type_name("DURATION");

  // clear
  auto* clear = app.add_subcommand("clear", "Remove every entry");

  // compile
  CompileArgs cargs;
  auto* compile = app.add_subcommand(
      "compile",
      "Compile CUDA C++ (.cu), PTX (.ptx) or LTO-IR (.ltoir) through the cache.\n"
      "Other options (-D, -std=, --use_fast_math, -lineinfo, -I, ...) are passed to NVRTC / nvJitLink.");
  compile->add_option("--arch", cargs.arch, "Target architecture, e.g. sm_90")->type_name("sm_XX");
  compile->add_option("--target", cargs.target, "cubin (default), ptx or ltoir");
  compile->add_option("-o,--output", cargs.output, "Output file (one input or --link) or directory (several)");
  compile->add_option("--name-expr", cargs.name_exprs, "Name expression to lower (repeatable), e.g. 'k<float>'");
  compile->add_flag("--link", cargs.link, "Link all inputs (C++ via LTO-IR, PTX, LTO-IR) into one program");
  compile->add_flag("--json", cargs.json_out, "Per input: key, hit or miss, seconds, symbol mapping");
  compile->allow_extras();
  compile->positionals_at_end(false);

  // config
  auto* config = app.add_subcommand("config", "Show each resolved setting and where it came from");
  config->add_flag("--json", as_json, "JSON output");

  app.allow_extras();  // only `compile` takes any: checked below
  try {
    app.parse(argc, argv);
    if (!compile->parsed() && !app.remaining().empty()) {
      throw CLI::ExtrasError(app.remaining());
    }
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? k_exit_ok : k_exit_usage;
  }

  auto cfg = load_config(g);
  if (!cfg.ok()) return fail(cfg.status());

  if (config->parsed()) {
    if (as_json) {
      json j = json::array();
      for (const auto& s : cfg->settings) j.push_back({{"name", s.name}, {"value", s.value}, {"source", s.source}});
      std::cout << j.dump(2) << "\n";
    } else {
      for (const auto& s : cfg->settings) std::cout << s.name << " = " << s.value << "  (" << s.source << ")\n";
    }
    return k_exit_ok;
  }

  if (compile->parsed()) {
    // Pass-through options may surface on either level (global options fall through).
    std::vector<std::string> extras = compile->remaining();
    for (auto& e : app.remaining()) extras.push_back(e);
    return run_compile(cargs, extras, *cfg);
  }

  auto store_or = open_store(*cfg);
  if (!store_or.ok()) return fail(store_or.status());
  auto& store = *store_or;
  // get, put and rm go through every configured tier.
  std::unique_ptr<pc::Store> data_holder;
  if (put->parsed() || get->parsed() || rm->parsed()) {
    store_or->reset();
    auto d = open_data_store(*cfg);
    if (!d.ok()) return fail(d.status());
    data_holder = std::move(*d);
  }
  pc::Store* tiers = data_holder.get();

  if (put->parsed()) {
    auto key = parse_key(key_text, string_key);
    if (!key.ok()) return fail(key.status());
    auto data = read_file(file_path);
    if (!data.ok()) return fail(data.status());
    if (cfg->disabled) {
      std::cerr << "progcache: PROGCACHE_DISABLE is set; nothing stored\n";
      return k_exit_ok;
    }
    const auto slash = file_path.find_last_of('/');
    json meta{{"source_file", slash == std::string::npos ? file_path : file_path.substr(slash + 1)}};
    std::vector<pc::Artifact> arts;
    arts.push_back({"code", pc::Bytes::adopt(std::move(*data))});
    pc::Status st = tiers->put(*key, pc::Entry(meta.dump(), std::move(arts)));
    if (st.ok()) st = tiers->close();
    warn_remote(tiers);
    if (!st.ok()) return fail(st);
    std::cout << key->hex() << "\n";
    return k_exit_ok;
  }

  if (get->parsed()) {
    auto key = parse_key(key_text, string_key);
    if (!key.ok()) return fail(key.status());
    if (pc::Status st = check_output_path(out_path); !st.ok()) return fail(st);
    if (cfg->disabled) {
      std::cerr << "progcache: PROGCACHE_DISABLE is set; miss\n";
      return k_exit_miss;
    }
    auto entry = tiers->get(*key);
    warn_remote(tiers);
    if (!entry.ok()) return fail(entry.status());
    if (!*entry) {
      std::cerr << "progcache: miss: no entry for key " << key->hex() << "\n";
      return k_exit_miss;
    }
    const pc::Artifact* art = (*entry)->find(artifact_name);
    if (art == nullptr && artifact_name == "code" && !(*entry)->artifacts().empty()) {
      art = &(*entry)->artifacts().front();
    }
    if (art == nullptr) {
      return fail(pc::not_found("entry " + key->hex() + " has no artifact named '" + artifact_name + "'"));
    }
    if (out_path.empty() || out_path == "-") {
      if (::isatty(1) != 0) {
        return fail(pc::invalid_argument("refusing to write binary data to a terminal; use -o FILE"));
      }
      std::cout.write(art->data.data(), static_cast<std::streamsize>(art->data.size()));
      std::cout.flush();
      return std::cout ? k_exit_ok : k_exit_error;
    }
    pc::Status st = write_output(out_path, art->data.view());
    if (!st.ok()) return fail(st);
    return k_exit_ok;
  }

  if (rm->parsed()) {
    auto key = parse_key(key_text, string_key);
    if (!key.ok()) return fail(key.status());
    auto removed = tiers->erase(*key);
    warn_remote(tiers);
    if (!removed.ok()) return fail(removed.status());
    if (!*removed) {
      std::cerr << "progcache: no entry for key " << key->hex() << "\n";
      return k_exit_miss;
    }
    return k_exit_ok;
  }

  if (ls->parsed()) {
    auto entries = store->list();
    if (!entries.ok()) return fail(entries.status());
    if (as_json) {
      json j = json::array();
      for (const auto& e : *entries) {
        j.push_back({{"key", e.key.hex()},
                     {"size", e.size},
                     {"created", format_time(e.created_unix_ns)},
                     {"last_used", format_time(e.last_used_ns)}});
      }
      std::cout << j.dump(2) << "\n";
    } else {
      for (const auto& e : *entries) {
        if (long_fmt) {
          std::printf("%s  %10llu  %s  %s\n", e.key.hex().c_str(), static_cast<unsigned long long>(e.size),
                      format_time(e.created_unix_ns).c_str(), format_time(e.last_used_ns).c_str());
        } else {
          std::printf("%s\n", e.key.hex().c_str());
        }
      }
    }
    return k_exit_ok;
  }

  if (stats->parsed()) {
    const pc::StoreStats s = store->host_stats();
    json remote = json::array();
#ifdef PROGCACHE_WITH_REDIS
    for (const auto& url : cfg->remote_urls) {
      auto r = pc::make_redis_store({.urls = {url}, .password = cfg->remote_password, .read_only = true, .codec = {}});
      json j{{"url", pc::parse_redis_url(url)->redacted()}};
      auto n = (*r)->count();
      auto b = n.ok() ? (*r)->size_bytes() : pc::Result<std::uint64_t>(n.status());
      if (n.ok() && b.ok()) {
        j["reachable"] = true;
        j["entries"] = *n;
        j["bytes_stored"] = *b;
      } else {
        j["reachable"] = false;
        j["error"] = (n.ok() ? b.status() : n.status()).to_string();
      }
      remote.push_back(j);
    }
#endif
    if (as_json) {
      json j = stats_json(s);
      j["remote"] = remote;
      j["dir"] = store->root();
      j["max_size_bytes"] = cfg->max_size_bytes ? json(*cfg->max_size_bytes) : json(nullptr);
      j["max_entries"] = cfg->max_entries ? json(*cfg->max_entries) : json(nullptr);
      std::cout << j.dump(2) << "\n";
    } else {
      std::printf("cache directory   %s\n", store->root().c_str());
      std::printf("entries           %llu%s\n", static_cast<unsigned long long>(s.entries),
                  cfg->max_entries ? (" (cap " + std::to_string(*cfg->max_entries) + ")").c_str() : "");
      std::printf("size              %s%s\n", pc::format_size(s.bytes_stored).c_str(),
                  cfg->max_size_bytes ? (" (cap " + pc::format_size(*cfg->max_size_bytes) + ")").c_str() : "");
      std::printf("hits              %llu\n", static_cast<unsigned long long>(s.hits));
      std::printf("misses            %llu\n", static_cast<unsigned long long>(s.misses));
      std::printf("puts              %llu\n", static_cast<unsigned long long>(s.puts));
      std::printf("evictions         %llu\n", static_cast<unsigned long long>(s.evictions));
      std::printf("corrupt dropped   %llu\n", static_cast<unsigned long long>(s.corrupt_dropped));
      std::printf("rejected          %llu\n", static_cast<unsigned long long>(s.rejected));
      std::printf("errors            %llu\n", static_cast<unsigned long long>(s.errors));
      for (const auto& r : remote) {
        if (r["reachable"]) {
          std::printf("remote %s: %llu entries, %s\n", r["url"].get<std::string>().c_str(),
                      static_cast<unsigned long long>(r["entries"].get<std::uint64_t>()),
                      pc::format_size(r["bytes_stored"].get<std::uint64_t>()).c_str());
        } else {
          std::printf("remote %s: unreachable (%s)\n", r["url"].get<std::string>().c_str(),
                      r["error"].get<std::string>().c_str());
        }
      }
    }
    return k_exit_ok;
  }

  if (verify->parsed()) {
    auto report = store->verify(repair ? pc::Repair::yes : pc::Repair::no, progress_bar("verify"));
    if (!report.ok()) return fail(report.status());
    std::size_t remaining = 0;
    for (const auto& p : report->problems) remaining += p.removed ? 0 : 1;
    if (as_json) {
      json probs = json::array();
      for (const auto& p : report->problems)
        probs.push_back({{"path", p.path}, {"reason", p.reason}, {"removed", p.removed}});
      std::cout << json{{"checked", report->checked},
                        {"ok", report->ok},
                        {"damaged", report->problems.size()},
                        {"temps_removed", report->temps_removed},
                        {"problems", probs}}
                       .dump(2)
                << "\n";
    } else {
      for (const auto& p : report->problems) {
        std::printf("%s: %s%s\n", p.path.c_str(), p.reason.c_str(), p.removed ? " (removed)" : "");
      }
      std::printf("checked %llu, ok %llu, damaged %zu, removed %zu, stale temps swept %llu\n",
                  static_cast<unsigned long long>(report->checked), static_cast<unsigned long long>(report->ok),
                  report->problems.size(), report->problems.size() - remaining,
                  static_cast<unsigned long long>(report->temps_removed));
    }
    return remaining == 0 ? k_exit_ok : k_exit_error;
  }

  if (prune->parsed()) {
    std::optional<std::uint64_t> max_size = cfg->max_size_bytes;
    std::optional<std::int64_t> age;
    if (!prune_size.empty()) {
      auto n = pc::parse_size(prune_size);
      if (!n.ok()) return fail(n.status().with_context("--max-size"));
      max_size = *n;
    }
    if (!prune_age.empty()) {
      auto d = pc::parse_duration(prune_age);
      if (!d.ok()) return fail(d.status().with_context("--older-than"));
      age = *d;
      if (prune_size.empty()) max_size.reset();
    }
    auto report = store->prune(max_size, age, progress_bar("prune"));
    if (!report.ok()) return fail(report.status());
    std::printf("removed %llu entries (%s); %llu entries (%s) remain\n",
                static_cast<unsigned long long>(report->removed), pc::format_size(report->bytes_removed).c_str(),
                static_cast<unsigned long long>(report->remaining), pc::format_size(report->bytes_remaining).c_str());
    return k_exit_ok;
  }

  if (clear->parsed()) {
    pc::Status st = store->clear();
    if (!st.ok()) return fail(st);
    return k_exit_ok;
  }

  return k_exit_usage;
}
