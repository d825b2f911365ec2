#include "colibri/core/progress.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "colibri/core/units.h"

namespace colibri {
namespace {

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::ceil(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrCat(s, "s");
}

}  // namespace

ProgressMeter::ProgressMeter(std::string label, std::FILE* out, bool tty, double line_interval)
    : label_(std::move(label)), out_(out), tty_(tty), line_interval_(line_interval) {}

std::string ProgressMeter::Line(std::string_view label, uint64_t done, uint64_t total, double rate,
                                std::string_view what, bool bar) {
  done = std::min(done, total);
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  std::string out(label);
  if (bar) {
    const int width = 24, filled = static_cast<int>(fraction * width);
    absl::StrAppend(&out, " [", std::string(static_cast<size_t>(filled), '#'),
                    std::string(static_cast<size_t>(width - filled), '.'), "]");
  }
  absl::StrAppend(&out, absl::StrFormat(" %3d%% ", static_cast<int>(fraction * 100)),
                  FormatSize(done), " / ", FormatSize(total));
  if (rate > 0) {
    absl::StrAppend(&out, "  ", FormatSize(static_cast<uint64_t>(rate)), "/s");
    if (done < total)
      absl::StrAppend(&out, "  ETA ", Duration(static_cast<double>(total - done) / rate));
  }
  if (!what.empty()) absl::StrAppend(&out, "  ", std::string(what));
  return out;
}

void ProgressMeter::Update(uint64_t done, uint64_t total, std::string_view what) {
  done_ = done;
  total_ = total;
  what_ = std::string(what);
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (since >= (tty_ ? 0.2 : line_interval_) || !printed_) Print(false);
}

void ProgressMeter::Finish() { Print(true); }

void ProgressMeter::Print(bool final) {
  last_print_ = Clock::now();
  printed_ = true;
  if (out_ == nullptr) return;
  const double secs = std::chrono::duration<double>(last_print_ - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0;
  const std::string line = Line(label_, done_, total_, rate, what_, tty_);
  if (tty_) {
    std::fprintf(out_, "\r%-100s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace colibri
