// The CLI's progress line (tools/progcache/progress.h): never wider than the
// terminal, the parts a user reads when there is room, redrawn a few times a
// second at most.
#include "progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace cli = progcache::cli;
using cli::ProgressUnit;

namespace {

constexpr std::uint64_t k_gib = std::uint64_t{1} << 30;

}  // namespace

TEST(ProgressTest, NeverWiderThanTheTerminalLessOneColumn) {
  for (int columns = 1; columns <= 220; ++columns) {
    for (auto unit : {ProgressUnit::bytes, ProgressUnit::entries, ProgressUnit::steps}) {
      for (std::uint64_t done : {std::uint64_t{0}, std::uint64_t{1}, 3 * k_gib / 2, 3 * k_gib}) {
        const auto line = cli::progress_line("verify ", unit, done, 3 * k_gib, 12.5, columns);
        EXPECT_LE(static_cast<int>(line.size()), columns - 1) << columns << " " << line;
        // Whole fields or none: the percentage is never cut short (13 % shown
        // as "1" reads as another number).
        const std::string percent = std::to_string(done * 100 / (3 * k_gib)) + "%";
        EXPECT_TRUE(line.empty() || line.find(percent) != std::string::npos) << columns << " '" << line << "'";
      }
    }
  }
}

TEST(ProgressTest, AWideTerminalShowsAmountRateAndTimeLeft) {
  const auto line = cli::progress_line("verify ", ProgressUnit::bytes, k_gib, 4 * k_gib, 10.0, 120);
  EXPECT_NE(line.find("verify"), std::string::npos) << line;
  EXPECT_NE(line.find("[##########"), std::string::npos) << line;  // a quarter of a 40-column bar
  EXPECT_NE(line.find(" 25%"), std::string::npos) << line;
  EXPECT_NE(line.find("1.00 GiB/4.00 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find("102 MiB/s"), std::string::npos) << line;  // 1 GiB in 10 s
  EXPECT_NE(line.find("0:30 left"), std::string::npos) << line;  // 3 GiB more at that rate
}

TEST(ProgressTest, ANarrowTerminalDropsTheTimeAndRateFirstThenTheBar) {
  const auto wide = cli::progress_line("verify ", ProgressUnit::bytes, k_gib, 4 * k_gib, 10.0, 80);
  EXPECT_NE(wide.find("left"), std::string::npos) << wide;
  const auto narrow = cli::progress_line("verify ", ProgressUnit::bytes, k_gib, 4 * k_gib, 10.0, 40);
  EXPECT_EQ(narrow.find("left"), std::string::npos) << narrow;
  EXPECT_NE(narrow.find(" 25%"), std::string::npos) << narrow;
  const auto tiny = cli::progress_line("verify ", ProgressUnit::bytes, k_gib, 4 * k_gib, 10.0, 20);
  EXPECT_EQ(tiny.find('['), std::string::npos) << tiny;
  EXPECT_NE(tiny.find("25%"), std::string::npos) << tiny;
}

TEST(ProgressTest, NoEstimateBeforeThereIsSomethingToEstimateFrom) {
  const auto early = cli::progress_line("prune  ", ProgressUnit::bytes, k_gib, 4 * k_gib, 0.1, 200);
  EXPECT_EQ(early.find("/s"), std::string::npos) << early;
  EXPECT_EQ(early.find("left"), std::string::npos) << early;
  const auto none = cli::progress_line("prune  ", ProgressUnit::bytes, 0, 4 * k_gib, 30, 200);
  EXPECT_EQ(none.find("left"), std::string::npos) << none;
  // Steps carry no amount and no rate: only the percentage and time left.
  const auto steps = cli::progress_line("prune  ", ProgressUnit::steps, 128, 512, 2.0, 200);
  EXPECT_EQ(steps.find('/'), std::string::npos) << steps;
  EXPECT_NE(steps.find("0:06 left"), std::string::npos) << steps;
}

TEST(ProgressTest, UnitsReadAsAPersonWritesThem) {
  EXPECT_EQ(cli::human_bytes(17), "17 B");
  EXPECT_EQ(cli::human_bytes(812 * 1024.0), "812 KiB");
  EXPECT_EQ(cli::human_bytes(1.5 * k_gib), "1.50 GiB");
  EXPECT_EQ(cli::human_duration(7), "0:07");
  EXPECT_EQ(cli::human_duration(723), "12:03");
  EXPECT_EQ(cli::human_duration(3723), "1:02:03");
  EXPECT_EQ(cli::human_duration(-1), "--:--");
}

TEST(ProgressTest, RedrawnAtMostTenTimesASecondButAlwaysFirstAndLast) {
  using namespace std::chrono_literals;
  cli::ProgressThrottle throttle(100ms);
  const auto t0 = cli::ProgressThrottle::Clock::time_point{} + 1h;
  EXPECT_TRUE(throttle.should_draw(t0, false));
  int drawn = 0;
  for (int ms = 1; ms < 1000; ++ms) drawn += throttle.should_draw(t0 + std::chrono::milliseconds(ms), false) ? 1 : 0;
  EXPECT_EQ(drawn, 9);  // at 100, 200, ... 900 ms
  EXPECT_TRUE(throttle.should_draw(t0 + 999ms, true));
}
