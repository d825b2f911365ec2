#include "colibri/core/progress.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(ProgressMeter, LineHasBytesRateAndEta) {
  const std::string l =
      ProgressMeter::Line("convert", 1ull << 30, 4ull << 30, 512.0 * (1 << 20), "layer 3", true);
  EXPECT_EQ(
      l,
      "convert [######..................]  25% 1.00 GiB / 4.00 GiB  512.00 MiB/s  ETA 6s  layer 3");
  EXPECT_EQ(ProgressMeter::Line("import", 10, 10, 100, "", false),
            "import 100% 10 B / 10 B  100 B/s");
  // Past the total (an estimate that was low) is shown as done; no rate, no ETA.
  EXPECT_EQ(ProgressMeter::Line("x", 20, 10, 0, "", false), "x 100% 10 B / 10 B");
  EXPECT_NE(ProgressMeter::Line("x", 0, 7200ull << 20, 1 << 20, "", false).find("ETA 2h00m"),
            std::string::npos);
}

TEST(ProgressMeter, PlainLinesAreThrottledAndFinished) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressMeter m("load", f, /*tty=*/false, /*line_interval=*/3600);
  m.Update(1, 100);
  m.Update(50, 100);  // within the interval: not printed
  m.Finish();
  std::rewind(f);
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const std::string text(buf, n);
  EXPECT_NE(text.find("load   1% 1 B / 100 B"), std::string::npos) << text;
  EXPECT_NE(text.find("load  50% 50 B / 100 B"), std::string::npos) << text;
  // The update inside the interval printed nothing: one line for the first update, one at the end.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

}  // namespace
}  // namespace colibri
