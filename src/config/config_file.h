// config/config_file.h — reading and rewriting a settings file
// (progcache.conf): lines of `name = value`, `#` comments and blank lines,
// as ccache.conf. Only the syntax and the file's trust live here; which
// names exist and what their values mean is config.cpp's table.
//
// A file is read through one descriptor: its type, owner and mode are
// judged on that descriptor (fstat), so the file judged is the file read.
// Thread safety: free functions with no shared state.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "progcache/status.h"

namespace progcache::config_file {

struct Line {
  std::string name;
  std::string value;
  int number = 0;  // 1-based, for messages
};

struct File {
  std::string path;
  std::string text;  // as read, for a rewrite that keeps the other lines
  std::vector<Line> lines;
  // The first line that does not parse (invalid_argument naming the file
  // and line), or OK. `lines` holds the lines before it.
  Status problem;

  // The line setting `name`, or null.
  [[nodiscard]] const Line* find(std::string_view name) const;
  // "<path>:<line>", the source shown for a value read from the file.
  [[nodiscard]] std::string where(const Line& line) const;
};

// Who may have written a file that is trusted.
enum class Rules {
  user,        // the user's own file: owned by this user (or root), writable by no one else;
               // a symlink is followed (files kept in a dotfiles repository)
  root,        // a private root's file: the same, and never a symlink
  group_root,  // a group root's file: never a symlink, not writable by others
};

// Reads and parses `path`. nullopt when there is no file (or no directory
// that could hold one). invalid_argument naming the file when it cannot be
// trusted or read: unreadable, not a regular file, writable by someone it
// should not be, larger than 64 KiB. A line that is not `name = value`, or
// a name set twice, is File::problem: the text is still returned, so that
// `config set` can repair it.
Result<std::optional<File>> load(const std::string& path, Rules rules);

// `text` with `name` set to `value` (its first line replaced in place, or
// a line appended, ending as the file's lines end), or with its lines
// removed when `value` is nullopt.
std::string rewrite(std::string_view text, std::string_view name, const std::optional<std::string>& value);

// Makes `dir` and the directories above it that are missing (mode 0700).
Status make_private_dirs(const std::string& dir);

// Holds an exclusive lock on the directory that holds a settings file, so
// that two `config set` runs never lose one another's line.
class DirLock {
 public:
  explicit DirLock(const std::string& file_path);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int m_fd = -1;
};

// Replaces `path` with `text` atomically (a temp file beside it, fsynced,
// renamed over it, the directory fsynced), with permission bits `perms`.
// Makes the directory holding it (mode 0700) when `make_dir` is set and it
// is missing. Temp files a killed run left beside it are removed.
Status replace(const std::string& path, std::string_view text, unsigned perms, bool make_dir);

}  // namespace progcache::config_file
