#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace progcache::cli {

namespace {

std::string printf_string(const char* format, double a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, a);
  return buf;
}

std::string human_count(double n) {
  if (n < 10'000) return printf_string("%.0f", n);
  if (n < 10'000'000) return printf_string("%.0fk", n / 1e3);
  return printf_string("%.0fM", n / 1e6);
}

std::string amount(ProgressUnit unit, double v) {
  return unit == ProgressUnit::bytes ? human_bytes(v) : human_count(v);
}

}  // namespace

std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  if (u == 0) return printf_string("%.0f", bytes) + " B";
  const char* format = bytes < 10 ? "%.2f" : bytes < 100 ? "%.1f" : "%.0f";
  return printf_string(format, bytes) + " " + units[u];
}

std::string human_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 359'999) return "--:--";
  const auto s = static_cast<long>(std::lround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

std::string progress_line(const std::string& label, ProgressUnit unit, std::uint64_t done, std::uint64_t total,
                          double elapsed_s, int columns) {
  const int room = columns - 1;  // 0 or less: nothing fits
  done = std::min(done, total);
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  // The parts right of the bar, most important first.
  std::vector<std::string> parts;
  parts.push_back(printf_string("%3.0f%%", std::floor(fraction * 100)));
  if (unit != ProgressUnit::steps) {
    parts.push_back(amount(unit, static_cast<double>(done)) + "/" + amount(unit, static_cast<double>(total)));
  }
  const bool estimable = elapsed_s >= 0.5 && done > 0;
  if (estimable && unit != ProgressUnit::steps) {
    parts.push_back(amount(unit, static_cast<double>(done) / elapsed_s) + "/s");
  }
  if (estimable && done < total) {
    parts.push_back(human_duration(elapsed_s * static_cast<double>(total - done) / static_cast<double>(done)) +
                    " left");
  }
  const auto text_width = [&](std::size_t n) {
    std::size_t w = label.size();
    for (std::size_t i = 0; i < n; ++i) w += 2 + parts[i].size();
    return static_cast<int>(w);
  };
  constexpr int k_min_bar = 10, k_max_bar = 40;
  std::size_t kept = parts.size();
  while (kept > 1 && text_width(kept) + 3 + k_min_bar > room) --kept;
  // Whole parts or none: a number cut short reads as another number.
  while (kept > 0 && text_width(kept) > room) --kept;
  if (kept == 0) {
    // Not even the label and the percentage: the percentage alone, or nothing.
    std::string percent = parts[0];
    percent.erase(0, percent.find_first_not_of(' '));
    return static_cast<int>(percent.size()) <= room ? percent : std::string();
  }
  std::string line = label;
  const int bar = std::min(k_max_bar, room - text_width(kept) - 3);
  if (bar >= k_min_bar) {
    const int filled = static_cast<int>(std::floor(fraction * bar));
    line += " [" + std::string(static_cast<std::size_t>(filled), '#') +
            std::string(static_cast<std::size_t>(bar - filled), '.') + "]";
  }
  for (std::size_t i = 0; i < kept; ++i) line += "  " + parts[i];
  if (static_cast<int>(line.size()) > room) line.resize(static_cast<std::size_t>(room));
  return line;
}

bool ProgressThrottle::should_draw(Clock::time_point now, bool last) {
  if (!last && m_drawn && now - m_last < m_interval) return false;
  m_drawn = true;
  m_last = now;
  return true;
}

int terminal_columns(int fd) {
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v > 0 && v < 10'000) return static_cast<int>(v);
  }
  return 80;
}

}  // namespace progcache::cli
