// What a command-line front end (the progcache tool, the nvcc launcher)
// tells its user and writes for them: see user_io.h.
#include "util/user_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "progcache/env.h"

namespace progcache::cli {

// The message alone: it names the file, key or option and what is wrong;
// the code's name ("invalid_argument") is the library's, not the user's
// word, and decides only the exit code. A status without a message (none
// should have one) says what its code means, in words.
std::string plain(const pc::Status& st) {
  // Messages may quote a file's text (a settings file, an entry's name, a
  // server's reply): control characters are shown as '?', never sent to the
  // terminal, line breaks included (a name holding one could forge a line of
  // its own). A compiler's log is printed apart (log_text).
  if (!st.message().empty()) return printable(st.message());
  std::string words(pc::code_name(st.code()));
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

namespace {
// Set and read by the thread that draws and prints (the CLI's main thread);
// atomic so a progress callback on another thread stays well defined.
std::atomic<bool> g_progress_line_drawn{false};
}  // namespace

void set_progress_line_drawn(bool drawn) {
  g_progress_line_drawn.store(drawn);
}

void erase_progress_line() {
  if (g_progress_line_drawn.exchange(false)) {
    std::fputs("\r\x1b[K", stderr);
    std::fflush(stderr);
  }
}

int fail(const pc::Status& st) {
  erase_progress_line();
  std::cerr << "progcache: " << plain(st) << "\n";
  return st.code() == pc::Code::invalid_argument ? k_exit_usage : k_exit_error;
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

// Where an output lands is decided once, on open, by what `path` is now:
// standard output ("-"); a regular file or a new one, written to a temp file
// beside it and renamed over it on commit (a command that fails or is
// interrupted leaves the old file, never a part); a symbolic link, followed,
// its target written so and the link kept; anything else (a device such as
// /dev/null, a FIFO) opened and written in place, never renamed over, since a
// rename would put a regular file where the user keeps a device.
OutputFile::~OutputFile() {
  if (m_fd > 1) ::close(m_fd);
  if (!m_temp.empty()) ::unlink(m_temp.c_str());
}

pc::Status OutputFile::open(const std::string& path, pc::Durability durability) {
  m_path = path;
  m_durability = durability;
  if (path == "-") {
    m_fd = 1;
    return {};
  }
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
  m_target = target;
  if (S_ISDIR(st.st_mode)) return pc::Status(pc::Code::failed_precondition, "output '" + path + "' is a directory");
  if (!S_ISREG(st.st_mode)) return open_in_place(O_WRONLY);
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
  pc::Env* env = pc::Env::posix();
  const std::string temp = pc::temp_path_beside(target, ".progcache-out.");
  auto fd = env->open_file(temp, pc::OpenMode::create_new, mode);
  if (!fd.ok()) {
    // A file the user may write in a directory they may not: written in
    // place (not atomically), as cp would.
    if (fd.status().code() == pc::Code::permission_denied && exists && ::access(target.c_str(), W_OK) == 0) {
      return open_in_place(O_WRONLY | O_TRUNC);
    }
    return fd.status().with_context("output '" + path + "'");
  }
  m_fd = *fd;
  m_temp = temp;
  // The umask must not widen or narrow the mode.
  if (pc::Status s = env->fchmod(m_fd, mode); !s.ok()) return s.with_context("output '" + path + "'");
  return {};
}

pc::Status OutputFile::open_in_place(int flags) {
  const int fd = ::open(m_target.c_str(), flags | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return pc::errno_status(errno, "cannot open output", m_target);
  m_fd = fd;
  return {};
}

pc::Status OutputFile::write(std::string_view data) {
  if (m_fd < 0) return pc::failed_precondition("output '" + m_path + "' is not open");
  return write_all_to(m_fd, data, m_path == "-" ? "standard output" : m_target);
}

pc::Status OutputFile::commit() {
  if (m_fd < 0) return pc::failed_precondition("output '" + m_path + "' is not open");
  if (m_fd == 1) {
    m_fd = -1;
    return {};
  }
  const int fd = m_fd;
  m_fd = -1;
  pc::Status st;
  if (!m_temp.empty() && m_durability == pc::Durability::fsync && ::fsync(fd) != 0) {
    st = pc::errno_status(errno, "cannot write", m_target);
  }
  if (::close(fd) != 0 && st.ok()) st = pc::errno_status(errno, "cannot write", m_target);
  if (!st.ok() || m_temp.empty()) return st;
  if (::rename(m_temp.c_str(), m_target.c_str()) != 0) return pc::errno_status(errno, "cannot write", m_target);
  m_temp.clear();
  return {};
}

// `s` with control characters shown as '?': a name read from an entry
// (anyone who can write the cache can write one) never drives the terminal.
std::string log_text(const std::string& log) {
  std::string out;
  std::size_t start = 0;
  while (start < log.size()) {
    const std::size_t nl = std::min(log.find('\n', start), log.size());
    const std::string line = log.substr(start, nl - start);
    for (std::size_t i = 0, from = 0; i <= line.size(); ++i) {
      if (i == line.size() || line[i] == '\t') {
        out += printable(line.substr(from, i - from));
        if (i < line.size()) out += '\t';
        from = i + 1;
      }
    }
    if (nl < log.size()) out += '\n';
    start = nl + 1;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string printable(std::string s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += '?';
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      // U+0080 to U+009F in UTF-8: the C1 controls, which a UTF-8 terminal
      // acts on as it does on ESC (U+009B introduces a control sequence).
      out += '?';
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace progcache::cli
