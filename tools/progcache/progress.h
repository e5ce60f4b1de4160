// The CLI's progress line: what a long scan (verify, prune, export, import)
// draws on a terminal. Pure functions and a small clock-driven state, so the
// line's layout is tested apart from any terminal (tests/progress_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace progcache::cli {

// What `done` and `total` count.
enum class ProgressUnit {
  bytes,    // shown as sizes, with a rate in bytes per second
  entries,  // shown as counts, with a rate in entries per second
  steps,    // shown as a percentage only (the steps mean nothing to a user)
};

// One line, at most `columns - 1` characters (the last column of a terminal
// wraps on some terminals), built from the label, a bar, the percentage, the
// amount done of the total, the rate and the time left: the parts on the
// right are dropped first when the terminal is narrow, then the bar. Rate and
// time left appear once there is something to estimate them from (half a
// second and some progress).
std::string progress_line(const std::string& label, ProgressUnit unit, std::uint64_t done, std::uint64_t total,
                          double elapsed_s, int columns);

// "1.5 GiB", "812 KiB", "17 B": binary units, three significant digits.
std::string human_bytes(double bytes);
// "0:07", "12:03", "1:02:03".
std::string human_duration(double seconds);

// Redraws at most every `interval` (and always for the first and the last
// call): a scan reports thousands of steps a second, a terminal needs a few.
class ProgressThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ProgressThrottle(Clock::duration interval = std::chrono::milliseconds(100)) : m_interval(interval) {}
  bool should_draw(Clock::time_point now, bool last);

 private:
  Clock::duration m_interval;
  bool m_drawn = false;
  Clock::time_point m_last{};
};

// The terminal's width on file descriptor `fd` (TIOCGWINSZ), else $COLUMNS,
// else 80.
int terminal_columns(int fd);

}  // namespace progcache::cli
