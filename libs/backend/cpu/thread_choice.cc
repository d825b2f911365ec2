#include "thread_choice.h"

#include <algorithm>
#include <bit>

namespace colibri::backend::internal {

uint32_t ThreadChoice::Key(int kind, int64_t size_a, int64_t size_b) {
  auto bucket = [](int64_t v) {
    return static_cast<uint32_t>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(0, v))));
  };
  return static_cast<uint32_t>(kind & 0xff) << 16 | bucket(size_a) << 8 | bucket(size_b);
}

int ThreadChoice::Pick(uint32_t key) {
  Class& c = classes_[key];
  const int64_t call = c.calls++;
  // Warm-up and arm 0's first samples, then arm 1's.
  if (c.records < options_.warmup_calls || c.arm[0].samples < options_.first_samples) return 0;
  if (c.arm[1].samples < options_.first_samples) return 1;
  const int other = 1 - c.current;
  if (c.arm[other].per_unit < options_.switch_margin * c.arm[c.current].per_unit) {
    c.current = other;
  }
  if (options_.explore_every > 0 && call % options_.explore_every == 0) return 1 - c.current;
  return c.current;
}

void ThreadChoice::Record(uint32_t key, int arm, double seconds, int64_t units) {
  if (units <= 0) return;
  Class& c = classes_[key];
  if (c.records++ < options_.warmup_calls) return;
  Arm& a = c.arm[arm == 1 ? 1 : 0];
  const double per_unit = seconds / static_cast<double>(units);
  a.per_unit = a.samples == 0 ? per_unit : a.per_unit + options_.alpha * (per_unit - a.per_unit);
  a.samples++;
}

}  // namespace colibri::backend::internal
