// nvcc/counters_file.cpp — the launcher's counters in
// <root>/nvcc/launcher-stats.json: counted under a bounded lock, read and
// zeroed only where the root is trusted.
#include "nvcc/counters_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "nvcc/counters.h"
#include "nvcc/launcher.h"
#include "progcache/config.h"

namespace progcache::nvcc {

namespace {

namespace pc = progcache;
using nlohmann::json;

// `why` with each quoted name replaced by '…', so reasons count together.
std::string reason_class(const std::string& why) {
  std::string out;
  bool quoted = false;
  for (char c : why) {
    if (c == '\'') {
      if (!quoted) out += "'...'";
      quoted = !quoted;
    } else if (!quoted) {
      out += c;
    }
  }
  return out;
}

// An open counters file is used only when it is a regular file this user
// owns, or, in a group-shared root, one of the root's group; never writable
// by others. A FIFO, a device or another user's file planted there is left
// alone: counting is best effort, a build must not wait on it.
bool trusted_stats_file(const struct stat& st, const StatsFile& where) {
  if (!S_ISREG(st.st_mode)) return false;
  if (where.sharing == pc::Sharing::private_only) return st.st_uid == ::geteuid() && (st.st_mode & 022) == 0;
  return (st.st_uid == ::geteuid() || st.st_gid == where.group) && (st.st_mode & 002) == 0;
}

// Opens the counters file and takes its advisory lock, waited on for a
// bounded time; -1 when it cannot be used. Best effort: a counter that
// cannot be kept costs nothing, and never a wait on someone else's file.
int open_counters(const StatsFile& where) {
  const bool group = where.sharing == pc::Sharing::group;
  const int fd = ::open(where.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
                        group ? 0660 : 0600);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !trusted_stats_file(st, where)) {
    ::close(fd);
    return -1;
  }
  // Group members count in one file: it must stay writable by the group
  // whatever the umask of whoever made it.
  if (group && st.st_uid == ::geteuid() && (st.st_mode & 0660) != 0660) (void)::fchmod(fd, 0660);
  // Another process holds the lock only for a read and a write; one that
  // holds it longer (stopped, or holding it on purpose) costs this count.
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    ::usleep(2000);
  }
  ::close(fd);
  return -1;
}

// The counters as the open file holds them (at most 1 MiB read); null when
// they are not a JSON object.
json read_counters(int fd) {
  std::string text;
  std::array<char, 4096> buf{};
  ssize_t n = 0;
  while ((n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(text.size()))) > 0 && text.size() < (1U << 20)) {
    text.append(buf.data(), static_cast<std::size_t>(n));
  }
  json j = json::parse(text, nullptr, false);
  return j.is_object() ? j : json(nullptr);
}

// Adds one to each of `counters`, or to `tally`'s count of `reason`, in
// <root>/nvcc/launcher-stats.json: one locked read and write.
void add_counts(const StatsFile& where, std::initializer_list<Counter> counters,
                std::optional<std::pair<Tally, std::string>> tally = std::nullopt) {
  const int fd = open_counters(where);
  if (fd < 0) return;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  json j = read_counters(fd);
  if (j.is_null()) j = json::object();
  auto bump = [](json& obj, const std::string& k) {
    if (!obj.contains(k) || !obj[k].is_number_unsigned()) obj[k] = 0U;
    obj[k] = obj[k].get<std::uint64_t>() + 1;
  };
  for (const Counter c : counters) bump(j, std::string(counter_name(c)));
  if (tally) {
    const std::string group(tally_name(tally->first));
    if (!j.contains(group) || !j[group].is_object()) j[group] = json::object();
    bump(j[group], reason_class(tally->second));
  }
  const std::string out = j.dump(1);
  if (::ftruncate(fd, 0) == 0) (void)::pwrite(fd, out.data(), out.size(), 0);
}

// The counters file of `root`'s nvcc store; nullopt when the store does
// not exist (the launcher never ran there).
std::optional<StatsFile> stats_file_of(const std::string& root, pc::Sharing sharing) {
  StatsFile where;
  where.path = pc::join_path(pc::join_path(root, std::string(k_store)), std::string(k_stats_file));
  where.sharing = sharing;
  struct stat st {};
  if (::stat(pc::join_path(root, std::string(k_store)).c_str(), &st) != 0) return std::nullopt;
  where.group = st.st_gid;
  return where;
}

}  // namespace

void count(const StatsFile& where, std::initializer_list<Counter> counters) {
  add_counts(where, counters);
}

void count(const StatsFile& where, Tally tally, const std::string& reason) {
  add_counts(where, {}, std::pair{tally, reason});
}

void zero_launcher_stats(const std::string& root, const pc::Config& cfg) {
  const auto where = stats_file_of(root, cfg.sharing);
  if (!where) return;  // nothing to zero, nothing made
  const int fd = open_counters(*where);
  if (fd < 0) return;
  if (::ftruncate(fd, 0) == 0) (void)::pwrite(fd, "{}", 2, 0);
  ::close(fd);
}

json launcher_stats_json(const std::string& root, pc::Sharing sharing) {
  // Read only where counting and zeroing would write: a file others could
  // have written (or a FIFO planted in a shared root, which must not hang
  // `stats`) is not reported.
  const auto where = stats_file_of(root, sharing);
  if (!where) return nullptr;
  const int fd = ::open(where->path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return nullptr;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !trusted_stats_file(st, *where)) return nullptr;
  return read_counters(fd);
}

}  // namespace progcache::nvcc
