// Whether a forward pass runs its small ops on every thread of the pool or on the calling thread
// alone, chosen per class of pass from the measured wall time of each (a two-armed bandit).
//
// Why: when other processes keep some cores busy, a parallel region waits for whichever worker
// the OS has descheduled while it holds a chunk, and a spinning worker takes CPU time from the
// caller's serial work as well. A decode step's small ops (a 1-2 MB matrix product, one token's
// attention) can then be slower on N threads than on one, while big ones (the experts' products,
// a prefill chunk) still gain from every thread (measured on the small all-Q8_0 shape with one
// core busy: 2 threads decode 43.0 tok/s, 1 thread 49.5; quiet, 66.2 and 47.0). Which is faster
// depends on the machine's load right now, so it is measured rather than guessed:
//   - arm 0 runs every op on every thread; arm 1 runs the small ones (CpuBackend's threshold)
//     on the caller alone, so its workers sleep between the big ones;
//   - the unit measured is a whole pass, not an op: one op's time on N threads depends on
//     whether the ops before it kept the workers awake, so per-op choices feed back on each
//     other (tried: they measured N threads slow after one-thread ops and drifted to one
//     thread on a quiet machine);
//   - a class is a pass's row count (bucketed by powers of two); its first passes only warm up
//     (caches, page faults) and are not measured;
//   - each arm's time per row is a moving average; the class keeps its current arm until the
//     other one's average is clearly (switch_margin) lower;
//   - every explore_every-th pass of a class runs the other arm, so a change in load is seen
//     (the current arm's average follows every pass; the other's every explore_every).
// The arm never changes results: on one thread an op runs its tasks as one range instead of
// chunks, and every task's result is independent of the range it is run in (a product's rows as
// quant/vec_dot.h MatVec promises, an attention task's heads, an expert tile).
//
// Not thread-safe: the backend's calls come from one thread.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace colibri::backend::internal {

class ThreadChoice {
 public:
  struct Options {
    int warmup_calls = 2;         // first passes of a class, not measured
    int explore_every = 16;       // passes of a class between two runs of its other arm
    int first_samples = 4;        // passes each arm runs before the averages are compared
    double alpha = 0.125;         // weight of a new sample in an arm's moving average
    double switch_margin = 0.92;  // switch when other < margin * current
  };
  ThreadChoice() : ThreadChoice(Options()) {}
  explicit ThreadChoice(const Options& options) : options_(options) {}

  // A class key from a kind (< 256) and up to two sizes (bucketed by their bit widths).
  static uint32_t Key(int kind, int64_t size_a, int64_t size_b = 0);

  // The arm for the next pass of class `key`: 0 (every op on every thread) or 1 (small ops on
  // one thread).
  int Pick(uint32_t key);
  // The pass of class `key` that ran on `arm` took `seconds` for `units` of work (its rows).
  void Record(uint32_t key, int arm, double seconds, int64_t units);

 private:
  struct Arm {
    double per_unit = 0;  // moving average of seconds per unit of work
    int64_t samples = 0;
  };
  struct Class {
    Arm arm[2];
    int current = 0;  // the arm in use
    int64_t calls = 0;
    int64_t records = 0;
  };

  const Options options_;
  std::unordered_map<uint32_t, Class> classes_;
};

}  // namespace colibri::backend::internal
