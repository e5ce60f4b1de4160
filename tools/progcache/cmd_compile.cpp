// progcache compile: CUDA C++, PTX and LTO-IR through the cache.
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "progcache/compile.h"

namespace progcache::cli {

namespace {

// sm_/compute_/lto_ followed by a two- or three-digit version and an
// optional 'a' or 'f' suffix: what NVRTC and nvJitLink accept as -arch. Other
// text is a usage error naming itself, before any compiler runs.
bool arch_like(const std::string& arch) {
  std::string_view v(arch);
  for (std::string_view prefix : {"sm_", "compute_", "lto_"}) {
    if (!v.starts_with(prefix)) continue;
    v.remove_prefix(prefix.size());
    if (v.ends_with('a') || v.ends_with('f')) v.remove_suffix(1);
    return (v.size() == 2 || v.size() == 3) &&
           std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  return false;
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

}  // namespace

pc::Result<CompileWords> split_words(const std::vector<std::string>& extras, std::string arch) {
  CompileWords w;
  w.arch = std::move(arch);
  for (std::size_t i = 0; i < extras.size(); ++i) {
    const std::string& t = extras[i];
    if (t.empty() || t[0] != '-') {
      w.files.push_back(t);
      continue;
    }
    std::string value;
    bool separate = pc::option_takes_next_word(t) && i + 1 < extras.size();
    if (separate) value = extras[i + 1];
    if (t == "-arch" || t == "--gpu-architecture") {
      if (!separate) return pc::invalid_argument("option '" + t + "' needs a value");
      w.arch = value;
      ++i;
      continue;
    }
    if (t.starts_with("-arch=") || t.starts_with("--gpu-architecture=")) {
      w.arch = t.substr(t.find('=') + 1);
      continue;
    }
    w.opts.push_back(t);
    if (separate) {
      w.opts.push_back(value);
      ++i;
    }
  }
  return w;
}

pc::Status check_arch(const std::string& command, const std::string& arch) {
  if (arch.empty()) return pc::invalid_argument(command + ": --arch sm_XX is required");
  if (!arch_like(arch)) {
    return pc::invalid_argument(command + ": --arch '" + arch +
                                "' is not a GPU architecture (sm_90, sm_90a, sm_100f, compute_90, lto_90)");
  }
  return {};
}

pc::Status load_program(const std::string& f, const std::vector<std::string>& opts,
                        const std::vector<std::string>& name_exprs, pc::Program* p) {
  auto type = code_type_of(f);
  if (!type.ok()) return type.status();
  auto src = read_file(f);
  if (!src.ok()) return src.status();
  p->code = std::move(*src);
  p->code_type = *type;
  p->options = opts;
  p->name = f;
  if (*type == pc::CodeType::cxx) p->name_expressions = name_exprs;
  return {};
}

namespace {

int run_compile(const CompileArgs& a, const std::vector<std::string>& extras, const pc::Config& cfg) {
  auto words = split_words(extras, a.arch);
  if (!words.ok()) return fail(words.status());
  const std::vector<std::string>& files = words->files;
  std::vector<std::string> opts = std::move(words->opts);
  const std::string arch = words->arch;
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
  if (pc::Status st = check_arch("compile", arch); !st.ok()) return fail(st);
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
      std::cerr << "progcache: warning: compiling without the cache: " << plain(s.status()) << "\n";
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
    const std::string shown = printable(label);  // a file's name, as given: no control character reaches the terminal
    if (!r.ok()) {
      j["error"] = plain(r.status());
      j["log"] = failure.log;
      // A compile error's message ends with the compiler's log: shown in its
      // own lines, the message before it on one.
      const std::string msg = r.status().message();
      const std::string tail = ":\n" + failure.log;
      if (r.status().code() == pc::Code::compile_error && !failure.log.empty() && msg.size() > tail.size() &&
          msg.ends_with(tail)) {
        std::cerr << "progcache: " << shown << ": " << printable(msg.substr(0, msg.size() - tail.size())) << ":\n"
                  << log_text(failure.log) << "\n";
      } else {
        std::cerr << "progcache: " << shown << ": " << plain(r.status()) << "\n";
      }
      rc = r.status().code() == pc::Code::invalid_argument ? k_exit_usage : k_exit_error;
    } else {
      // What could not be keyed was compiled all the same, uncached.
      const bool keyed = r->uncacheable.empty();
      j["key"] = keyed ? json(r->key.hex()) : json(nullptr);
      j["hit"] = r->from_cache;
      if (!keyed) {
        j["uncacheable"] = r->uncacheable;
        std::cerr << "progcache: warning: " << shown << ": not cached: " << printable(r->uncacheable) << "\n";
      }
      j["target"] = pc::target_type_name(r->kind);
      j["bytes"] = r->code.size();
      j["symbols"] = r->symbol_mapping;
      if (!out_path.empty()) {
        pc::Status st = write_output(out_path, r->code.view());
        if (!st.ok()) {
          std::cerr << "progcache: " << plain(st) << "\n";
          rc = k_exit_error;
        }
        j["output"] = out_path;
      }
      if (!a.json_out) {
        // With -o - the program itself is on standard output.
        FILE* human = a.output == "-" ? stderr : stdout;
        std::fprintf(human, "%-28s %-4s %9.3f ms  %8zu B  %s\n", shown.c_str(),
                     r->from_cache ? "hit" : (keyed ? "miss" : "off"), secs * 1e3, r->code.size(),
                     keyed ? r->key.hex().c_str() : "(not cached)");
        for (const auto& [expr, lowered] : r->symbol_mapping) {
          std::fprintf(human, "    %s -> %s\n", expr.c_str(), lowered.c_str());
        }
      }
    }
    report.push_back(j);
  };

  auto load = [&](const std::string& f, pc::Program* p) { return load_program(f, opts, a.name_exprs, p); };

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

void add_compile_command(CLI::App& app, std::vector<Command>& out) {
  auto a = std::make_shared<CompileArgs>();
  auto* compile = app.add_subcommand(
      "compile",
      "Compile CUDA C++ (.cu), PTX (.ptx) or LTO-IR (.ltoir) through the cache.\n"
      "Other options (-D, -std=, --use_fast_math, -lineinfo, -I, ...) are passed to NVRTC / nvJitLink.");
  compile->add_option("--arch", a->arch, "Target architecture, e.g. sm_90")->type_name("sm_XX");
  compile->add_option("--target", a->target, "cubin (default), ptx or ltoir");
  compile->add_option("-o,--output", a->output, "Output file (one input or --link) or directory (several)");
  compile->add_option("--name-expr", a->name_exprs, "Name expression to lower (repeatable), e.g. 'k<float>'");
  compile->add_flag("--link", a->link, "Link all inputs (C++ via LTO-IR, PTX, LTO-IR) into one program");
  compile->add_flag("--json", a->json_out, "Per input: key, hit or miss, seconds, symbol mapping");
  compile->allow_extras();
  compile->positionals_at_end(false);
  out.push_back(
      {compile,
       [a](const pc::Config& cfg, const std::vector<std::string>& extras) { return run_compile(*a, extras, cfg); },
       /*takes_extras=*/true});
}

}  // namespace progcache::cli
