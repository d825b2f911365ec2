#include "thread_choice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace colibri::backend::internal {
namespace {

// Runs `passes` passes of one class of 10 rows whose time per row is `arm0` microseconds on
// arm 0 and `arm1` on arm 1; returns the arm each pass was given.
std::vector<int> Passes(ThreadChoice& choice, uint32_t key, int passes, double arm0, double arm1) {
  std::vector<int> picked;
  for (int i = 0; i < passes; ++i) {
    const int arm = choice.Pick(key);
    picked.push_back(arm);
    choice.Record(key, arm, (arm == 1 ? arm1 : arm0) * 10e-6, 10);
  }
  return picked;
}

// Passes from `from` on that ran `arm`.
int64_t Count(const std::vector<int>& v, int arm, size_t from = 0) {
  return std::count(v.begin() + static_cast<std::ptrdiff_t>(from), v.end(), arm);
}

// Options with no warm-up passes, so the counts below are of measured passes only.
ThreadChoice::Options Measured(int first_samples, int explore_every) {
  ThreadChoice::Options o;
  o.warmup_calls = 0;
  o.first_samples = first_samples;
  o.explore_every = explore_every;
  return o;
}

TEST(ThreadChoice, SamplesBothArmsFirstThenKeepsTheFasterOne) {
  ThreadChoice choice(Measured(3, 16));
  // A quiet machine: arm 0 (every thread) twice as fast.
  const std::vector<int> quiet = Passes(choice, 1, 6 + 160, 1.0, 2.0);
  EXPECT_EQ(std::vector<int>(quiet.begin(), quiet.begin() + 6),
            (std::vector<int>{0, 0, 0, 1, 1, 1}));
  // After the first samples, one pass in 16 explores arm 1.
  EXPECT_EQ(Count(quiet, 1, 6), 10);
  EXPECT_EQ(Count(quiet, 0, 6), 150);
}

TEST(ThreadChoice, MovesToArm1WhenItIsFasterAndBackWhenTheLoadGoes) {
  ThreadChoice::Options o = Measured(2, 8);
  o.alpha = 0.25;
  ThreadChoice choice(o);
  Passes(choice, 3, 100, 1.0, 2.0);  // quiet: arm 0
  // A busy machine: arm 0's parallel regions wait for a descheduled worker (6x slower), arm 1
  // is not. Every pass after the average has moved runs arm 1, except one in 8 that explores.
  const std::vector<int> busy = Passes(choice, 3, 200, 6.0, 2.0);
  EXPECT_EQ(busy[0], 0);
  EXPECT_GE(Count(busy, 1, 10), 160);
  EXPECT_LE(Count(busy, 0, 10), 30);
  // Quiet again: exploration sees arm 0 fast again, and the class goes back to it.
  const std::vector<int> again = Passes(choice, 3, 200, 1.0, 2.0);
  EXPECT_GE(Count(again, 0, 100), 85);
}

TEST(ThreadChoice, StaysPutWithinTheMargin) {
  ThreadChoice::Options o = Measured(2, 4);
  o.switch_margin = 0.9;
  ThreadChoice choice(o);
  // Arm 1 5% faster: not enough to leave arm 0.
  const std::vector<int> v = Passes(choice, 5, 100, 1.0, 0.95);
  EXPECT_EQ(Count(v, 1, 4), 24);  // exploration only
}

TEST(ThreadChoice, ClassesAreIndependent) {
  ThreadChoice choice(Measured(2, 0));  // no exploration: the choice is just the faster arm
  const uint32_t decode = ThreadChoice::Key(0, 1), prefill = ThreadChoice::Key(0, 512);
  EXPECT_NE(decode, prefill);
  Passes(choice, decode, 10, 3.0, 1.0);
  Passes(choice, prefill, 10, 1.0, 3.0);
  EXPECT_EQ(choice.Pick(decode), 1);
  EXPECT_EQ(choice.Pick(prefill), 0);
}

TEST(ThreadChoice, WarmUpPassesAreNotMeasured) {
  ThreadChoice::Options o;
  o.warmup_calls = 2;
  o.first_samples = 1;
  o.explore_every = 0;
  ThreadChoice choice(o);
  // The two warm-up passes are slow (cold caches) and do not count.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(choice.Pick(9), 0);
    choice.Record(9, 0, 1e-3, 10);
  }
  EXPECT_EQ(Passes(choice, 9, 3, 1.0, 2.0), (std::vector<int>{0, 1, 0}));
}

TEST(ThreadChoice, KeysBucketSizesByPowersOfTwo) {
  EXPECT_EQ(ThreadChoice::Key(2, 64, 1000), ThreadChoice::Key(2, 127, 1023));
  EXPECT_NE(ThreadChoice::Key(2, 64, 1000), ThreadChoice::Key(2, 128, 1000));
  EXPECT_NE(ThreadChoice::Key(2, 64, 1000), ThreadChoice::Key(2, 64, 1024));
  EXPECT_NE(ThreadChoice::Key(2, 64, 1000), ThreadChoice::Key(3, 64, 1000));
  EXPECT_EQ(ThreadChoice::Key(0, -5, 0), ThreadChoice::Key(0, 0, 0));
}

}  // namespace
}  // namespace colibri::backend::internal
