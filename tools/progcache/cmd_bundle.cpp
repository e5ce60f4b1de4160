// progcache export / import: warm-cache bundles (progcache/bundle.h). An
// export writes the entries of the root's stores as stored (signed entries
// stay signed); an import hands each to its store's put_encoded, which
// refuses whatever that store would not serve, so a refused entry changes
// nothing.
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "cli.h"
#include "progcache/bundle.h"

namespace progcache::cli {

namespace {

struct BundleArgs {
  std::string output;
  std::string input;
  std::string since;
  std::string name_glob;
};

int run_export(const BundleArgs& a, const pc::Config& cfg) {
  std::optional<std::int64_t> since_ns;
  if (!a.since.empty()) {
    auto d = parse_age("--since", a.since);
    if (!d.ok()) return fail(d.status());
    since_ns = *d;
  }
  auto stores = open_stores(cfg);
  if (!stores.ok()) return fail(stores.status());
  // What goes in: every entry (of the selection) of every store, listed first
  // so the progress bar knows the total.
  struct Chosen {
    NamedFileStore* store;
    pc::Key key;
    std::int64_t last_used_ns;
  };
  std::vector<Chosen> chosen;
  const auto now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& named : *stores) {
    auto entries = named.store->list();
    if (!entries.ok()) return fail(entries.status());
    for (const auto& e : *entries) {
      if (since_ns && e.created_unix_ns < now - *since_ns) continue;
      if (!a.name_glob.empty()) {
        // The name `ls --long` shows, or the one the writer recorded.
        const std::string shown = describe_entry(named.name, e.kind, e.name).second;
        const auto matches = [&](const std::string& n) {
          return !n.empty() && ::fnmatch(a.name_glob.c_str(), n.c_str(), 0) == 0;
        };
        if (!matches(shown) && !matches(e.name)) continue;
      }
      chosen.push_back({&named, e.key, e.last_used_ns});
    }
  }
  // Least recently used first: an import adds entries in bundle order, so
  // where the importing store's cap cannot hold them all, its LRU trim
  // evicts what was used least here and keeps what was used most (in key
  // order the survivors were merely the highest keys).
  std::stable_sort(chosen.begin(), chosen.end(),
                   [](const Chosen& x, const Chosen& y) { return x.last_used_ns < y.last_used_ns; });
  // Written where the user asked and only there (OutputFile): a file gets
  // the bundle whole or not at all; a device or FIFO takes the stream.
  if (const pc::Status st = check_output_path(a.output); !st.ok()) return fail(st);
  OutputFile out;
  if (const pc::Status st = out.open(a.output, pc::Durability::fsync); !st.ok()) return fail(st);
  pc::BundleWriter writer([&out](std::string_view data) { return out.write(data); });
  if (const pc::Status st = writer.begin(); !st.ok()) return fail(st);
  const auto progress = progress_bar("export", ProgressUnit::entries);
  std::uint64_t skipped = 0;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    if (progress) progress(i, chosen.size());
    auto encoded = chosen[i].store->store->get_encoded(chosen[i].key);
    if (!encoded.ok() || !*encoded) {
      // Removed since the listing (evicted, pruned), or damaged: left out.
      if (!encoded.ok()) {
        erase_progress_line();
        std::fprintf(stderr, "progcache: export: left out %s%s: %s\n",
                     chosen[i].store->name == "programs" ? "" : (chosen[i].store->name + ": ").c_str(),
                     chosen[i].key.hex().c_str(), plain(encoded.status()).c_str());
      }
      ++skipped;
      continue;
    }
    if (const pc::Status st = writer.add(chosen[i].store->name, chosen[i].key, **encoded); !st.ok()) return fail(st);
  }
  if (progress) progress(chosen.size(), chosen.size());
  if (const pc::Status st = writer.finish(); !st.ok()) return fail(st);
  if (const pc::Status st = out.commit(); !st.ok()) return fail(st);
  std::fprintf(stderr, "exported %llu entries (%s)%s\n", static_cast<unsigned long long>(writer.entries()),
               pc::format_size(writer.bytes()).c_str(),
               skipped != 0 ? (", " + std::to_string(skipped) + " gone or damaged, left out").c_str() : "");
  return k_exit_ok;
}

// The store of the root that `name` names, opened (made if needed) once.
class ImportTargets {
 public:
  explicit ImportTargets(const pc::Config& cfg) : m_cfg(cfg) {}

  pc::Result<pc::FileStore*> get(const std::string& name) {
    if (auto it = m_open.find(name); it != m_open.end()) return it->second.get();
    std::string subdir;
    if (name != "programs") {
      for (const auto& c : pc::companion_stores()) {
        if (c.name == name) subdir = std::string(c.subdir);
      }
      if (subdir.empty()) return pc::invalid_argument("no store called '" + printable(name) + "' in a cache root");
    }
    PROGCACHE_ASSIGN_OR_RETURN(auto own, open_store(m_cfg));
    if (subdir.empty()) return (m_open[name] = std::move(own)).get();
    pc::FileStoreOptions o = m_cfg.file_store_options();
    o.root = pc::join_path(own->root(), subdir);
    PROGCACHE_ASSIGN_OR_RETURN(auto store, pc::FileStore::open(o));
    return (m_open[name] = std::move(store)).get();
  }

 private:
  const pc::Config& m_cfg;
  std::map<std::string, std::unique_ptr<pc::FileStore>> m_open;
};

int run_import(const BundleArgs& a, const pc::Config& cfg) {
  const bool std_in = a.input == "-";
  const int fd = std_in ? 0 : ::open(a.input.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return fail(pc::errno_status(errno, "cannot read the bundle", a.input));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd > 0) ::close(fd);
    }
  } closer{std_in ? -1 : fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(pc::errno_status(errno, "cannot read the bundle", a.input));
  if (S_ISDIR(st.st_mode)) return fail(pc::failed_precondition("'" + a.input + "' is a directory, not a bundle"));
  const std::uint64_t total = S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;

  pc::BundleReader reader([fd](char* dst, std::size_t n) -> pc::Result<std::size_t> {
    for (;;) {
      const ssize_t got = ::read(fd, dst, n);
      if (got >= 0) return static_cast<std::size_t>(got);
      if (errno != EINTR) return pc::errno_status(errno, "cannot read the bundle");
    }
  });
  ImportTargets targets(cfg);
  // Every entry is checked against every key this machine trusts, as the
  // remote tier checks what it serves: a machine that reads signed entries
  // takes no unsigned or foreign one from a bundle either (its private disk
  // store alone would not ask, trusting what its remote tier verified).
  const pc::EntryCodecOptions trusted{.hmac_key = cfg.hmac_key, .keys = cfg.signing_keys};
  const auto progress = total != 0 ? progress_bar("import", ProgressUnit::bytes) : pc::ProgressFn();
  std::uint64_t imported = 0;
  // What was imported, to tell afterwards how much of it the importing
  // store's cap let stay.
  std::vector<std::pair<pc::FileStore*, pc::Key>> taken;
  std::uint64_t present = 0;
  std::uint64_t refused = 0;
  std::uint64_t bytes = 0;
  pc::Status bundle_error;
  for (;;) {
    if (progress) progress(reader.bytes(), total);
    auto record = reader.next();
    if (!record.ok()) {
      bundle_error = record.status();
      break;
    }
    if (!*record) break;
    auto& r = **record;
    const std::string where = (r.store == "programs" ? "" : printable(r.store) + ": ") + r.key.hex();
    auto store = targets.get(r.store);
    if (!store.ok()) {
      erase_progress_line();
      std::fprintf(stderr, "progcache: import: refused %s: %s\n", where.c_str(), plain(store.status()).c_str());
      ++refused;
      continue;
    }
    if (::access((*store)->entry_path(r.key).c_str(), F_OK) == 0) {
      ++present;
      continue;
    }
    const std::size_t size = r.encoded.size();
    pc::Status put = pc::verify_encoded_entry(r.key, r.encoded, trusted);
    if (put.ok()) put = (*store)->put_encoded(r.key, std::move(r.encoded));
    if (!put.ok()) {
      erase_progress_line();
      std::fprintf(stderr, "progcache: import: refused %s: %s\n", where.c_str(), plain(put).c_str());
      ++refused;
      continue;
    }
    ++imported;
    bytes += size;
    taken.emplace_back(*store, r.key);
  }
  if (progress) progress(total, total);
  std::uint64_t evicted = 0;
  for (const auto& [store, key] : taken) evicted += ::access(store->entry_path(key).c_str(), F_OK) != 0 ? 1 : 0;
  std::printf("imported %llu entries (%s), %llu already present, %llu refused",
              static_cast<unsigned long long>(imported), pc::format_size(bytes).c_str(),
              static_cast<unsigned long long>(present), static_cast<unsigned long long>(refused));
  if (evicted != 0) {
    // Imported, then trimmed away by the cap (least recently used first):
    // said, so that "imported" never stands for "kept".
    std::printf("; the cache's cap kept %llu of the %llu imported (%llu evicted, least recently used first)",
                static_cast<unsigned long long>(imported - evicted), static_cast<unsigned long long>(imported),
                static_cast<unsigned long long>(evicted));
  }
  std::printf("\n");
  if (!bundle_error.ok()) {
    erase_progress_line();
    std::fprintf(stderr, "progcache: import: %s%s\n", plain(bundle_error).c_str(),
                 imported != 0 ? " (the entries before it were checked one by one and imported)" : "");
    return k_exit_error;
  }
  return refused != 0 ? k_exit_error : k_exit_ok;
}

}  // namespace

void add_bundle_commands(CLI::App& app, std::vector<Command>& out) {
  auto a = std::make_shared<BundleArgs>();

  auto* exp = app.add_subcommand("export", "Write the cache's entries to one bundle file, for `import` elsewhere");
  exp->add_option("-o,--output", a->output, "The bundle to write ('-': standard output)")
      ->required()
      ->type_name("FILE");
  exp->add_option("--since", a->since, "Only entries created in the last DURATION (e.g. 7d, 12h)")
      ->type_name("DURATION");
  exp->add_option("--name", a->name_glob, "Only entries whose program name matches GLOB (as `ls --long` shows it)")
      ->type_name("GLOB");
  out.push_back({exp, [a](const pc::Config& cfg, const std::vector<std::string>&) { return run_export(*a, cfg); }});

  auto* imp = app.add_subcommand(
      "import", "Add a bundle's entries to the cache; each is checked as a read would check it, and refused if bad");
  imp->add_option("FILE", a->input, "The bundle to read ('-': standard input)")->required();
  out.push_back({imp, [a](const pc::Config& cfg, const std::vector<std::string>&) { return run_import(*a, cfg); }});
}

}  // namespace progcache::cli
