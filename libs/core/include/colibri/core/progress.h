// Progress of long work (conversion, store import, model load) as bytes, rate and ETA: a bar
// redrawn in place on a terminal (at most 5 times a second), plain lines elsewhere (logs,
// pipes: one line every `line_interval` seconds and at the end) so logs stay readable.
// Not thread-safe: one meter per task, updated from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace colibri {

class ProgressMeter {
 public:
  // `out` null: nothing is printed (Line() still works).
  ProgressMeter(std::string label, std::FILE* out, bool tty, double line_interval = 5.0);
  void Update(uint64_t done_bytes, uint64_t total_bytes, std::string_view what = "");
  // Prints the final state (and ends a terminal's bar line).
  void Finish();

  // The text of one report: "label [#####.....]  42% 1.20 GiB / 2.86 GiB  310 MiB/s  ETA 5s  what"
  // (without the bar when `bar` is false). `rate` in bytes/s; ETA omitted when rate is 0.
  static std::string Line(std::string_view label, uint64_t done, uint64_t total, double rate,
                          std::string_view what, bool bar);

 private:
  using Clock = std::chrono::steady_clock;
  void Print(bool final);

  std::string label_;
  std::FILE* out_;
  bool tty_;
  double line_interval_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_print_{};
  uint64_t done_ = 0, total_ = 0;
  std::string what_;
  bool printed_ = false;
};

}  // namespace colibri
