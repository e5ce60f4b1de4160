// Helpers the command groups share: configuration, stores, keys, inputs and
// outputs, and the rendering of statistics.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli.h"
#include "progcache/remote_store.h"
#include "progcache/tiered_store.h"
#include "progress.h"

namespace progcache::cli {

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

pc::Result<pc::Config> load_config(const Globals& g, bool strict_files) {
  pc::ConfigOverrides o;
  if (g.have_dir) o.dir = g.dir;
  if (!g.max_size.empty()) o.max_size = g.max_size;
  if (!g.remote.empty()) o.remote = g.remote;
  o.strict_files = strict_files;  // a settings file that cannot be used: exit 2, naming it
  auto c = pc::resolve_config(o);
  if (c.ok()) {
    for (const auto& w : c->warnings) std::cerr << "progcache: warning: " << w << "\n";
  }
  return c;
}

pc::Result<std::unique_ptr<pc::FileStore>> open_store(const pc::Config& c) {
  return pc::FileStore::open(c.file_store_options());
}

bool cache_dir_exists(const pc::Config& c) {
  struct stat st {};
  // Anything there (a file, a symlink loop) is the store's to judge.
  return ::lstat(c.dir.c_str(), &st) == 0 || errno != ENOENT;
}

// The store that serves data: the disk store, or disk + remote when a remote
// tier is configured (remote puts are flushed when the store is closed). With
// `for_reading`, no remote and no cache directory yet, there is nothing to
// read and nothing is made: null, every lookup a miss. (With a remote, a
// lookup warms the local disk, which it makes.)
pc::Result<std::unique_ptr<pc::Store>> open_data_store(const pc::Config& c, bool for_reading) {
  if (for_reading && c.remote_urls.empty() && !cache_dir_exists(c)) return std::unique_ptr<pc::Store>();
  PROGCACHE_ASSIGN_OR_RETURN(auto disk, open_store(c));
  if (c.remote_urls.empty()) return std::unique_ptr<pc::Store>(std::move(disk));
  PROGCACHE_ASSIGN_OR_RETURN(auto remote, pc::make_remote_store(c.remote_store_options()));
  pc::TieredStoreOptions o;
  o.disk = std::move(disk);
  o.remote = std::move(remote);
  return std::unique_ptr<pc::Store>(pc::make_tiered_store(std::move(o)));
}

// The tiered store treats a failing remote as a miss, so that an outage
// never fails a command; the user still hears why the remote did not serve.
// A refusal (credentials, a missing bucket, a skewed clock) the tier has
// already said itself, once: only timeouts and other failures are said here.
void warn_remote(pc::Store* store) {
  auto* tiered = dynamic_cast<pc::TieredStore*>(store);
  if (tiered == nullptr) return;
  auto rs = tiered->remote_stats();
  if (!rs || rs->last_error.empty() || (rs->timeouts == 0 && rs->failures == 0)) return;
  std::cerr << "progcache: warning: remote tier: " << rs->last_error << "\n";
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

// A progress line on stderr, only when stderr is a terminal: as wide as the
// terminal is now, redrawn at most ten times a second, erased when done.
pc::ProgressFn progress_bar(const char* label, ProgressUnit unit) {
  if (::isatty(2) == 0) return {};
  struct State {
    State() = default;
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    // A scan that stopped part-way (an error, a bundle cut short) leaves no
    // line behind for what is printed next.
    ~State() { erase_progress_line(); }
    ProgressThrottle throttle;
    ProgressThrottle::Clock::time_point start = ProgressThrottle::Clock::now();
  };
  auto state = std::make_shared<State>();
  char padded[16];
  std::snprintf(padded, sizeof padded, "%-7s", label);
  return [state, unit, name = std::string(padded)](std::uint64_t done, std::uint64_t total) {
    if (total == 0) return;
    const bool last = done >= total;
    const auto now = ProgressThrottle::Clock::now();
    if (!state->throttle.should_draw(now, last)) return;
    // Each redraw replaces the line (carriage return, the line, erase to
    // its end): nothing of a longer earlier line is left, and nothing is
    // written past the terminal's width when it narrows.
    if (last) {
      erase_progress_line();
      return;
    }
    const double elapsed = std::chrono::duration<double>(now - state->start).count();
    const std::string line = progress_line(name, unit, done, total, elapsed, terminal_columns(2));
    std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
    std::fflush(stderr);
    set_progress_line_drawn(true);
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

pc::Status write_output(const std::string& path, std::string_view data) {
  OutputFile out;
  PROGCACHE_TRY(out.open(path));
  PROGCACHE_TRY(out.write(data));
  return out.commit();
}

void add_string_flag(CLI::App* sub, bool& string_key) {
  sub->add_flag("--string", string_key, "Always hash KEY as a string, even when it is 64 hex digits");
}

json stats_json(const pc::StoreStats& s) {
  json j = json::object();
  for (const auto& f : pc::store_stat_fields()) j[f.name] = s.*f.member;
  // No lookups yet: no rate (null), not a rate of zero that an alert on a
  // low hit rate would fire on.
  j["hit_rate"] = s.hits + s.misses == 0 ? json(nullptr) : json(pc::hit_rate(s));
  return j;
}

namespace {

// "850 ns", "12.4 us", "3.10 ms", "1.20 s".
std::string format_duration(std::uint64_t ns) {
  char buf[32];
  if (ns < 1000)
    std::snprintf(buf, sizeof buf, "%llu ns", static_cast<unsigned long long>(ns));
  else if (ns < 1000000)
    std::snprintf(buf, sizeof buf, "%.1f us", static_cast<double>(ns) / 1e3);
  else if (ns < 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f ms", static_cast<double>(ns) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ns) / 1e9);
  return buf;
}

}  // namespace

void print_stats_text(const pc::StoreStats& s, StoreLookups lookups) {
  for (const auto& f : pc::store_stat_fields()) {
    const std::uint64_t v = s.*f.member;
    std::string shown = f.unit == pc::StatField::Unit::bytes         ? pc::format_size(v)
                        : f.unit == pc::StatField::Unit::nanoseconds ? format_duration(v)
                                                                     : std::to_string(v);
    if (f.unit == pc::StatField::Unit::nanoseconds && v == 0) shown = "-";
    if (lookups == StoreLookups::reads && (f.member == &pc::StoreStats::hits || f.member == &pc::StoreStats::misses)) {
      // A launcher's lookup reads a manifest, then a result: its store's
      // reads are no hit rate of anyone's (the launcher's is below).
      if (f.member == &pc::StoreStats::misses) {
        std::printf("%-17s %llu found, %llu not found (manifests and results)\n", "reads",
                    static_cast<unsigned long long>(s.hits), static_cast<unsigned long long>(s.misses));
      }
      continue;
    }
    std::printf("%-17s %s\n", f.label, shown.c_str());
    if (f.member == &pc::StoreStats::misses) {
      if (s.hits + s.misses == 0)
        std::printf("%-17s -\n", "hit rate");
      else
        std::printf("%-17s %.1f %%\n", "hit rate", 100.0 * pc::hit_rate(s));
    }
  }
}

// One disk store of the cache root: its own ("programs") or a companion.
// The root's own store, then each companion store that holds a store (its
// entry directory exists: nothing is made by looking). A companion that
// cannot be opened (another sharing mode, another owner) is skipped with a
// warning: it never costs the commands on the root's own store.
pc::Result<Stores> open_stores(const pc::Config& cfg) {
  Stores out;
  // Looking makes nothing: a cache directory that does not exist is empty.
  if (!cache_dir_exists(cfg)) return out;
  PROGCACHE_ASSIGN_OR_RETURN(auto own, open_store(cfg));
  const std::string root = own->root();
  out.push_back({"programs", std::move(own)});
  for (const auto& c : pc::companion_stores()) {
    const std::string dir = pc::join_path(root, std::string(c.subdir));
    const std::string entries = pc::join_path(dir, "v" + std::to_string(pc::k_entry_format_version));
    struct stat st {};
    if (::stat(entries.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    pc::FileStoreOptions o = cfg.file_store_options();
    o.root = dir;
    auto store = pc::FileStore::open(o);
    if (!store.ok()) {
      std::fprintf(stderr, "progcache: skipping the %s store in '%s': %s\n", std::string(c.name).c_str(), dir.c_str(),
                   plain(store.status()).c_str());
      continue;
    }
    out.push_back({std::string(c.name), std::move(*store)});
  }
  return out;
}

pc::Result<std::int64_t> parse_age(const std::string& option, const std::string& text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return pc::invalid_argument(option + " '" + text + "' needs a unit: s, m, h or d (e.g. 30d, 12h)");
  }
  auto d = pc::parse_duration(text);
  if (!d.ok()) return d.status().with_context(option);
  return *d;
}

}  // namespace progcache::cli
