#include "deps_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <tuple>

#include "compile/empty_places.h"
#include "progcache/env.h"
#include "progcache/hash.h"
#include "util/coding.h"

namespace progcache::detail {

namespace {

// The scan memo's format. 2: directives found on logical lines (comments,
// literals and digraphs understood); memos of version 1 may lack some.
// 3: trigraphs, and __has_include named through a macro. 4: macros whose
// body is a header name.
constexpr int k_memo_version = 4;
constexpr std::size_t k_max_memo_files = 50000;
// A memo file larger than this is not read (50 000 entries take about 10 MiB).
constexpr std::size_t k_max_memo_bytes = std::size_t{64} << 20;

}  // namespace

// ---------------------------------------------------------------- scan memo

namespace {

ScanMemo& memo_of(const std::string& file, bool own_file_only, const std::string& epoch) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, bool, std::string>, std::unique_ptr<ScanMemo>> memos;
  std::lock_guard lock(mu);
  auto& m = memos[{file, own_file_only, epoch}];
  if (!m) m = std::make_unique<ScanMemo>(file, own_file_only, epoch);
  return *m;
}

// A memo file of this user's that no one else may write, read through one
// descriptor opened without following a link (the checks and the read see
// the same file); nullopt otherwise.
std::optional<std::string> read_own_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || static_cast<std::uint64_t>(st.st_size) > k_max_memo_bytes) {
    return std::nullopt;
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > k_max_memo_bytes) return std::nullopt;
  }
  return out;
}

// Whether a string can be written as JSON text (valid UTF-8): a name that
// cannot is left out of the memo (it is read again next time).
bool json_writable(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

ScanMemo& ScanMemo::for_dir(const std::string& state_dir) {
  // Kept for other processes under the epoch its identities hold in.
  return memo_of(state_dir.empty() ? std::string() : join_path(state_dir, "deps-memo.json"), false, identity_epoch());
}

ScanMemo& ScanMemo::for_file(const std::string& file, const std::string& epoch) {
  return memo_of(file, true, epoch);
}

std::optional<ScannedFile> ScanMemo::find(const std::string& path, const FileStamp& stamp) {
  MutexLock lock(m_mu);
  load_once();  // only programs that include files pay for the memo
  auto it = m_files.find(path);
  if (it == m_files.end() || !(it->second.stamp == stamp)) return std::nullopt;
  it->second.used = true;
  return it->second;
}

void ScanMemo::add(const std::string& path, ScannedFile f) {
  MutexLock lock(m_mu);
  f.used = true;
  m_files[path] = std::move(f);
  m_dirty = true;
}

void ScanMemo::save() {
  MutexLock lock(m_mu);
  if (!m_dirty || m_file.empty()) return;
  m_dirty = false;
  // What another process wrote since this one read the file is kept (this
  // process's own entries first), so that processes saving in turn do not
  // drop each other's.
  for (auto& [path, f] : read()) m_files.emplace(path, std::move(f));
  // Bounded: past the cap, only what this process used is kept.
  if (m_files.size() > k_max_memo_files) std::erase_if(m_files, [](const auto& kv) { return !kv.second.used; });
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [path, f] : m_files) {
    if (!json_writable(path)) continue;
    nlohmann::json incs = nlohmann::json::array();
    bool writable = true;
    for (const auto& d : f.directives) {
      writable = writable && json_writable(d.name);
      incs.push_back({static_cast<int>(d.kind), d.name, d.line});
    }
    if (!writable) continue;
    files[path] = {{"stamp", {f.stamp.dev, f.stamp.ino, f.stamp.size, f.stamp.mtime, f.stamp.ctime}},
                   {"sha256", to_hex(f.sha256)},
                   {"includes", std::move(incs)}};
  }
  nlohmann::json doc{{"version", k_memo_version}, {"files", std::move(files)}};
  if (!m_epoch.empty()) doc["epoch"] = m_epoch;
  Env* env = Env::posix();
  const std::string dir = parent_of(m_file);
  if (Status s = env->mkdir(dir.empty() ? "." : dir, 0700); !s.ok() && s.code() != Code::failed_precondition) return;
  std::string text;
  try {
    text = doc.dump();
  } catch (const nlohmann::json::exception&) {
    return;  // best effort: the next process reads the headers again
  }
  write_file_atomic(env, m_file, temp_path_beside(m_file), text, 0600, Durability::none).ignore();
}

void ScanMemo::load_once() {
  if (m_loaded) return;
  m_loaded = true;
  if (m_file.empty()) return;
  for (auto& [path, f] : read()) m_files.emplace(path, std::move(f));  // what this process added first
}

std::map<std::string, ScannedFile> ScanMemo::read() const {
  std::map<std::string, ScannedFile> out;
  std::optional<std::string> text;
  if (m_own_file_only) {
    text = read_own_file(m_file);
  } else if (auto r = read_regular(m_file); r.ok()) {
    text = std::move(*r);
  }
  if (!text) return out;
  const auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.value("version", nlohmann::json()) != k_memo_version) return out;
  // A memo kept for one epoch (a boot) is no memo in another.
  if (!m_epoch.empty() && doc.value("epoch", nlohmann::json()) != m_epoch) return out;
  auto files = doc.find("files");
  if (files == doc.end() || !files->is_object()) return out;
  for (const auto& [path, f] : files->items()) {
    if (!f.is_object()) continue;
    auto st = f.find("stamp");
    auto sha = f.find("sha256");
    auto incs = f.find("includes");
    if (st == f.end() || sha == f.end() || incs == f.end() || !st->is_array() || st->size() != 5 || !sha->is_string() ||
        !incs->is_array()) {
      continue;
    }
    bool ok = std::all_of(st->begin(), st->end(), [](const auto& v) { return v.is_number_integer(); });
    auto raw = from_hex(sha->get<std::string>());
    if (!ok || !raw.ok() || raw->size() != 32) continue;
    ScannedFile sf;
    sf.stamp = {(*st)[0].get<std::uint64_t>(), (*st)[1].get<std::uint64_t>(), (*st)[2].get<std::int64_t>(),
                (*st)[3].get<std::int64_t>(), (*st)[4].get<std::int64_t>()};
    sf.sha256 = std::move(*raw);
    for (const auto& d : *incs) {
      if (!d.is_array() || d.size() != 3 || !d[0].is_number_integer() || !d[1].is_string() ||
          !d[2].is_number_integer() || d[0].get<int>() < 0 || d[0].get<int>() > 2) {
        ok = false;
        break;
      }
      sf.directives.push_back({static_cast<Operand>(d[0].get<int>()), d[1].get<std::string>(), d[2].get<int>()});
    }
    if (ok) out.emplace(path, std::move(sf));
  }
  return out;
}

// ---------------------------------------------------------------- manifest

void CheckLog::empty_place(const std::string& path) {
  // Where no directory can watch it, no manifest: every lookup scans.
  const auto w = watch_of_empty(path);
  if (!w) {
    m_broken = true;
    return;
  }
  exists(w->dir, w->st);
}

namespace manifest {

namespace {

constexpr std::uint32_t k_magic = 0x4d44'4350;  // "PCDM"
// 2: each file read carries its content digest and the operand that found it.
// 3: identities name the mount (identity_stat), under the epoch they hold in.
constexpr std::uint32_t k_version = 3;
constexpr std::uint64_t k_max_bytes = std::uint64_t{64} << 20;
constexpr std::size_t k_max_manifests = 4096;

std::string path_of(const std::string& state_dir, const std::string& key) {
  return join_path(join_path(state_dir, "deps"), key);
}

bool same(const Check& a, const Check& b) {
  return a.exists == b.exists && (!a.exists || (a.stamp == b.stamp && a.type == b.type));
}

void put32(std::string& o, std::uint32_t v) {
  put_fixed(o, v);
}
void put64(std::string& o, std::uint64_t v) {
  put_fixed(o, v);
}
void put_str(std::string& o, std::string_view s) {
  put32(o, static_cast<std::uint32_t>(s.size()));
  o.append(s);
}

// Reads what write() wrote, every length checked against what is left.
class Reader {
 public:
  explicit Reader(std::string_view s) : m_s(s) {}
  bool u8(std::uint8_t& v) { return fixed(v); }
  bool u32(std::uint32_t& v) { return fixed(v); }
  bool u64(std::uint64_t& v) { return fixed(v); }
  bool str(std::string& v) {
    std::uint32_t n = 0;
    if (!u32(n) || n > m_s.size() - m_at) return false;
    v.assign(m_s.substr(m_at, n));
    m_at += n;
    return true;
  }
  bool done() const { return m_at == m_s.size(); }

 private:
  template <typename T>
  bool fixed(T& v) {
    if (sizeof(T) > m_s.size() - m_at) return false;
    v = decode_fixed<T>(m_s.data() + m_at);
    m_at += sizeof(T);
    return true;
  }
  std::string_view m_s;
  std::size_t m_at = 0;
};

std::optional<SourceDeps> verify(std::string_view text) {
  if (text.size() < 8 + 8) return std::nullopt;
  const auto sum = decode_fixed<std::uint64_t>(text.data() + text.size() - 8);
  const std::string_view body = text.substr(0, text.size() - 8);
  if (xxh3_64(body) != sum) return std::nullopt;  // damaged
  Reader r(body);
  std::uint32_t magic = 0, version = 0, n_files = 0, n_dirs = 0;
  SourceDeps deps;
  std::string epoch;
  // Identities taken in another boot vouch for nothing now.
  if (!r.u32(magic) || !r.u32(version) || magic != k_magic || version != k_version || !r.str(epoch) || epoch.empty() ||
      epoch != identity_epoch() || !r.str(deps.digest) || !r.u32(n_files)) {
    return std::nullopt;
  }
  for (std::uint32_t i = 0; i < n_files; ++i) {
    DepFile f;
    if (!r.str(f.path) || !r.str(f.sha256) || !r.str(f.operand)) return std::nullopt;
    deps.files.push_back(std::move(f));
  }
  if (!r.u32(n_dirs)) return std::nullopt;
  for (std::uint32_t d = 0; d < n_dirs; ++d) {
    std::string dir;
    std::uint32_t n = 0;
    if (!r.str(dir) || !r.u32(n)) return std::nullopt;
    const int dfd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return std::nullopt;
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{dfd};
    for (std::uint32_t i = 0; i < n; ++i) {
      std::string name;
      std::uint8_t exists = 0;
      std::uint64_t dev = 0, ino = 0, size = 0, mtime = 0, ctime = 0;
      std::uint32_t type = 0;
      if (!r.str(name) || !r.u8(exists) || !r.u64(dev) || !r.u64(ino) || !r.u64(size) || !r.u64(mtime) ||
          !r.u64(ctime) || !r.u32(type)) {
        return std::nullopt;
      }
      struct stat st {};
      const int rc = identity_stat(dfd, name.c_str(), name.empty() ? AT_EMPTY_PATH : 0, st);
      if (exists == 0) {
        // Still nothing the compiler can open (the scan treats every
        // failure to stat a place as its absence).
        if (rc == 0) return std::nullopt;
        continue;
      }
      const FileStamp want{dev, ino, static_cast<std::int64_t>(size), static_cast<std::int64_t>(mtime),
                           static_cast<std::int64_t>(ctime)};
      if (rc != 0 || !(stamp_of(st) == want) || (st.st_mode & S_IFMT) != type) return std::nullopt;
    }
  }
  if (!r.done()) return std::nullopt;
  return deps;
}

// Keeps the directory to k_max_manifests files, now and then.
void bound(const std::string& dir) {
  static std::atomic<unsigned> writes{0};
  if (writes.fetch_add(1) % 32 == 0) keep_newest_files(dir, k_max_manifests);
}

}  // namespace

std::string key_of(const Program& p, const std::vector<std::string>& canonical_options) {
  Sha256 sha;
  add_field(sha, "deps-manifest", std::to_string(k_version));
  // The rules that found the includes: a manifest of an older scanner
  // must not vouch for what a newer one would find.
  add_field(sha, "scanner", std::to_string(k_memo_version));
  std::string cwd(4096, '\0');
  if (::getcwd(cwd.data(), cwd.size()) != nullptr)
    cwd.resize(std::strlen(cwd.c_str()));
  else
    cwd = "?";
  add_field(sha, "cwd", cwd);
  // One manifest per mount namespace: its identities are of its mounts.
  add_field(sha, "mounts", mount_namespace_id());
  // And per credentials: what the compiler may search and read depends on
  // them, and a missing place is recorded by the directory above it, whose
  // identity does not change with who asks.
  const std::string credentials = credentials_id();
  if (credentials.empty()) return std::string();  // who asks cannot be told: no manifest
  add_field(sha, "credentials", credentials);
  add_field(sha, "name", p.name);
  add_field(sha, "code", p.code);
  for (const auto& o : canonical_options) add_field(sha, "option", o);
  for (const auto& h : p.headers) {
    add_field(sha, "header", h.name);
    add_field(sha, "content", h.content);
  }
  return digest_hex(sha.finish());
}

std::optional<SourceDeps> check(const std::string& state_dir, const std::string& key) {
  if (state_dir.empty()) return std::nullopt;
  auto text = read_regular_file(Env::posix(), path_of(state_dir, key), k_max_bytes);
  if (!text.ok()) return std::nullopt;
  return verify(*text);
}

void write(const std::string& state_dir, const std::string& key, const SourceDeps& deps, const CheckLog& log) {
  if (state_dir.empty() || log.broken()) return;
  const std::int64_t now = now_ns();
  // Grouped by directory, so a check opens each directory once.
  std::map<std::string, std::map<std::string, const Check*>> groups;
  for (const Check& c : log.checks()) {
    if (c.exists && (now - c.stamp.mtime < k_recent_ns || now - c.stamp.ctime < k_recent_ns)) return;
    std::string dir, name;
    if (c.exists && c.type == S_IFDIR) {
      dir = c.path;  // a directory stands for itself: its own identity
    } else {
      dir = parent_of(c.path);
      if (dir.empty()) dir = ".";
      const auto slash = c.path.rfind('/');
      name = slash == std::string::npos ? c.path : c.path.substr(slash + 1);
      if (name.empty() || name == "." || name == "..") return;  // cannot be checked by name: no manifest
    }
    auto [it, inserted] = groups[dir].emplace(name, &c);
    if (!inserted && !same(*it->second, c)) return;  // changed during the scan: no manifest
  }
  std::string out;
  put32(out, k_magic);
  put32(out, k_version);
  put_str(out, identity_epoch());
  put_str(out, deps.digest);
  put32(out, static_cast<std::uint32_t>(deps.files.size()));
  for (const auto& f : deps.files) {
    put_str(out, f.path);
    put_str(out, f.sha256);
    put_str(out, f.operand);
  }
  put32(out, static_cast<std::uint32_t>(groups.size()));
  for (const auto& [dir, entries] : groups) {
    put_str(out, dir);
    put32(out, static_cast<std::uint32_t>(entries.size()));
    for (const auto& [name, c] : entries) {
      put_str(out, name);
      out.push_back(c->exists ? 1 : 0);
      put64(out, c->stamp.dev);
      put64(out, c->stamp.ino);
      put64(out, static_cast<std::uint64_t>(c->stamp.size));
      put64(out, static_cast<std::uint64_t>(c->stamp.mtime));
      put64(out, static_cast<std::uint64_t>(c->stamp.ctime));
      put32(out, c->type);
    }
  }
  put64(out, xxh3_64(out));
  Env* env = Env::posix();
  const std::string dir = join_path(state_dir, "deps");
  for (const std::string& d : {state_dir, dir}) {
    if (Status st = env->mkdir(d, 0700); !st.ok() && st.code() != Code::failed_precondition) return;
  }
  const std::string path = path_of(state_dir, key);
  write_file_atomic(env, path, temp_path_beside(path), out, 0600, Durability::none).ignore();
  bound(dir);
}

}  // namespace manifest

}  // namespace progcache::detail
