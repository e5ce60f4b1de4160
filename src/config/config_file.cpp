#include "config_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "progcache/env.h"

namespace progcache::config_file {

namespace {

constexpr std::size_t k_max_file_bytes = std::size_t{64} * 1024;
// Temp files of `replace`, beside the file they replace.
constexpr std::string_view k_conf_temp_prefix = ".progcache.conf.tmp.";
// A temp file older than this was left by a killed run.
constexpr std::int64_t k_stale_temp_s = 3600;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool valid_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string octal_mode(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777U);
  return buf;
}

// The file's trust, judged on the descriptor read.
Status judge(const std::string& path, const struct stat& st, Rules rules) {
  if (!S_ISREG(st.st_mode)) return invalid_argument("settings file '" + path + "' is not a regular file");
  const unsigned mode = st.st_mode & 07777U;
  if (rules == Rules::group_root) {
    if ((mode & S_IWOTH) != 0) {
      return invalid_argument("settings file '" + path + "' is writable by every user (mode " + octal_mode(mode) +
                              "): not read; make it writable by the group at most (chmod o-w)");
    }
    return {};
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return invalid_argument("settings file '" + path + "' belongs to another user (uid " + std::to_string(st.st_uid) +
                            "): not read; a file that decides where this user's programs come from must be "
                            "this user's own");
  }
  if ((mode & (S_IWGRP | S_IWOTH)) != 0) {
    return invalid_argument("settings file '" + path + "' is writable by other users (mode " + octal_mode(mode) +
                            "): not read; make it private (chmod go-w)");
  }
  return {};
}

Result<std::string> read_fd(int fd, const std::string& path) {
  std::string text;
  char buf[8192];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return invalid_argument(errno_status(errno, "cannot read settings file", path).message());
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > k_max_file_bytes) {
      return invalid_argument("settings file '" + path + "' is larger than 64 KiB: not read");
    }
  }
  return text;
}

Status parse(File& f) {
  std::string_view rest = f.text;
  if (rest.starts_with("\xEF\xBB\xBF")) rest.remove_prefix(3);  // a UTF-8 byte order mark, as editors write
  int number = 0;
  while (!rest.empty()) {
    ++number;
    const std::size_t end = rest.find('\n');
    const std::string_view raw = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto at = [&] { return f.path + ":" + std::to_string(number) + ": "; };
    if (line.find('\0') != std::string_view::npos) return invalid_argument(at() + "a NUL byte in the line");
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      // The line is not repeated: it may hold a secret or bytes that drive
      // a terminal.
      return invalid_argument(at() + "the line is not 'name = value' (e.g. max_size = 20G)");
    }
    const std::string_view name = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    if (!valid_name(name)) {
      return invalid_argument(at() + "'" + std::string(name) +
                              "' is not a setting name (lower-case letters, digits and '_', e.g. max_size)");
    }
    if (value.empty()) {
      return invalid_argument(at() + std::string(name) + " has no value (delete the line for the default)");
    }
    if (const Line* first = f.find(name)) {
      return invalid_argument(at() + std::string(name) + " is set a second time (first on line " +
                              std::to_string(first->number) + ")");
    }
    f.lines.push_back({std::string(name), std::string(value), number});
  }
  return {};
}

}  // namespace

const Line* File::find(std::string_view name) const {
  for (const auto& l : lines) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

std::string File::where(const Line& line) const {
  return path + ":" + std::to_string(line.number);
}

Result<std::optional<File>> load(const std::string& path, Rules rules) {
  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (rules != Rules::user) flags |= O_NOFOLLOW;
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    struct stat link {};
    if (err == ELOOP && rules != Rules::user && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      return invalid_argument("settings file '" + path +
                              "' is a symbolic link: not read (a root's file must be the "
                              "file itself)");
    }
    // No file, or no directory to hold one (the root is a file, a loop of
    // links, or missing): nothing to read here; the store judges the root.
    if (err == ENOENT || err == ENOTDIR || err == ELOOP) return std::optional<File>();
    return invalid_argument(errno_status(err, "cannot read settings file", path).message());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return invalid_argument(errno_status(errno, "cannot read settings file", path).message());
  PROGCACHE_TRY(judge(path, st, rules));
  File f;
  f.path = path;
  PROGCACHE_ASSIGN_OR_RETURN(f.text, read_fd(fd, path));
  f.problem = parse(f);
  return std::optional<File>(std::move(f));
}

std::string rewrite(std::string_view text, std::string_view name, const std::optional<std::string>& value) {
  const std::string_view eol = text.find("\r\n") != std::string_view::npos ? "\r\n" : "\n";
  std::string out;
  bool placed = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    const std::string_view raw = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const std::string_view line = trim(raw);
    const std::size_t eq = line.find('=');
    const bool ours =
        !line.empty() && line.front() != '#' && eq != std::string_view::npos && trim(line.substr(0, eq)) == name;
    if (!ours) {
      out.append(raw);
      out += '\n';
    } else if (value && !placed) {
      out += std::string(name) + " = " + *value;
      out += eol;
      placed = true;
    }
  }
  if (value && !placed) {
    out += std::string(name) + " = " + *value;
    out += eol;
  }
  return out;
}

Status make_private_dirs(const std::string& dir) {
  // One level at a time, as mkdir -p.
  for (std::size_t i = 1; i <= dir.size(); ++i) {
    if (i != dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return errno_status(errno, "cannot make the settings directory", part);
    }
  }
  return {};
}

DirLock::DirLock(const std::string& file_path) {
  const std::string dir = file_path.substr(0, file_path.rfind('/'));
  m_fd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (m_fd >= 0) {
    while (::flock(m_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
}

DirLock::~DirLock() {
  if (m_fd >= 0) ::close(m_fd);
}

namespace {

// Removes temp files of `replace` that a killed run left in `dir`.
void sweep_temps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::int64_t now = ::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (!name.starts_with(k_conf_temp_prefix)) continue;
    const std::string p = join_path(dir, name);
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime > k_stale_temp_s) {
      ::unlink(p.c_str());
    }
  }
  ::closedir(d);
}

}  // namespace

Status replace(const std::string& path, std::string_view text, unsigned perms, bool make_dir) {
  const std::string dir = path.substr(0, path.rfind('/'));
  if (make_dir) PROGCACHE_TRY(make_private_dirs(dir));
  const std::string tmp = temp_path_beside(path, k_conf_temp_prefix);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perms);
  if (fd < 0) return errno_status(errno, "cannot write settings file", tmp);
  Status st;
  if (::fchmod(fd, perms) != 0) st = errno_status(errno, "cannot set the mode of", tmp);
  for (std::string_view left = text; st.ok() && !left.empty();) {
    const ssize_t n = ::write(fd, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = errno_status(errno, "cannot write settings file", tmp);
      break;
    }
    left.remove_prefix(static_cast<std::size_t>(n));
  }
  if (st.ok() && ::fsync(fd) != 0) st = errno_status(errno, "cannot write settings file", tmp);
  if (::close(fd) != 0 && st.ok()) st = errno_status(errno, "cannot write settings file", tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = errno_status(errno, "cannot replace", path);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename itself made durable, as the file's bytes were.
  if (const int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  sweep_temps(dir.empty() ? "/" : dir);
  return {};
}

}  // namespace progcache::config_file
