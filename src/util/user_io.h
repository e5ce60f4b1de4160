// util/user_io.h — what a command-line front end (the progcache tool, the
// nvcc launcher) tells its user and how it writes the files they name: exit
// codes, messages in plain words, names shown without control characters,
// and outputs that are whole or as they were. Not public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "progcache/env.h"
#include "progcache/status.h"

namespace progcache::cli {

namespace pc = progcache;

// Exit codes: 0 ok, 1 miss (or key absent), 2 usage error, 3 any other error.
constexpr int k_exit_ok = 0;
constexpr int k_exit_miss = 1;
constexpr int k_exit_usage = 2;
constexpr int k_exit_error = 3;

// What a user is told of `st`: its message, in plain words, without the
// code's name (which sets the exit code only).
std::string plain(const pc::Status& st);
// Prints the error and returns its exit code (usage for invalid_argument).
// A progress line on the terminal is erased first.
int fail(const pc::Status& st);
// Whether a progress line (tools/progcache/progress.h) is on stderr's
// terminal now; erase_progress_line() takes it off, so that a message
// printed next starts a line of its own instead of following the line.
void set_progress_line_drawn(bool drawn);
void erase_progress_line();
// An output of any command, written as the user asked and only there: "-"
// is standard output; a regular file (or a new one) is written to a temp
// file beside it and renamed over it by commit(), keeping an existing file's
// mode (a new one gets 0666 less the umask), so a failed or interrupted
// command leaves the old file; a symbolic link is followed and its target
// written so, the link kept; anything else (a device, a FIFO) is opened and
// written in place, never renamed over. A regular file the user may write
// in a directory they may not is written in place, as cp would. Every
// output of the tool goes through this class (write_output for one piece).
class OutputFile {
 public:
  OutputFile() = default;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Without a commit(), the temp file (if any) is removed.
  ~OutputFile();
  // Decides where the bytes go and opens it; an error names the path.
  // `durability` fsync: the temp file is synced before the rename.
  pc::Status open(const std::string& path, pc::Durability durability = pc::Durability::none);
  pc::Status write(std::string_view data);
  // Closes the output and, for a regular file, renames the temp over it.
  pc::Status commit();

 private:
  pc::Status open_in_place(int flags);
  std::string m_path;    // as the user named it
  std::string m_target;  // what is written: the link's target, or m_path
  std::string m_temp;    // empty unless a temp file is being written
  pc::Durability m_durability = pc::Durability::none;
  int m_fd = -1;
};
// Writes all of `data` to `fd` (retrying short writes and EINTR).
pc::Status write_all_to(int fd, std::string_view data, const std::string& what);
// `s` with control characters (C0, DEL, and the C1 controls U+0080 to
// U+009F as UTF-8 writes them) shown as '?'.
std::string printable(std::string s);
// A compiler's log as a terminal should show it: its lines and tabs kept,
// every other control character shown as printable() shows it.
std::string log_text(const std::string& log);
}  // namespace progcache::cli
