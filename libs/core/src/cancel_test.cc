#include "colibri/core/cancel.h"

#include <thread>

#include "gtest/gtest.h"

namespace colibri {
namespace {

TEST(CancelFlagTest, CallbacksRunOnceOnCancel) {
  auto flag = std::make_shared<CancelFlag>();
  int runs = 0;
  auto reg = CancelFlag::OnCancel(flag, [&] { ++runs; });
  EXPECT_FALSE(flag->cancelled());
  EXPECT_FALSE(IsCancelled(flag));
  flag->Cancel();
  flag->Cancel();
  EXPECT_TRUE(IsCancelled(flag));
  EXPECT_EQ(runs, 1);
}

TEST(CancelFlagTest, RegisteringOnACancelledFlagRunsAtOnce) {
  auto flag = std::make_shared<CancelFlag>();
  flag->Cancel();
  int runs = 0;
  auto reg = CancelFlag::OnCancel(flag, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
}

TEST(CancelFlagTest, RemovedRegistrationDoesNotRun) {
  auto flag = std::make_shared<CancelFlag>();
  int runs = 0;
  {
    auto reg = CancelFlag::OnCancel(flag, [&] { ++runs; });
  }
  auto kept = CancelFlag::OnCancel(flag, [&] { runs += 10; });
  flag->Cancel();
  EXPECT_EQ(runs, 10);
}

TEST(CancelFlagTest, NullTokenIsNeverCancelled) {
  CancelToken none;
  EXPECT_FALSE(IsCancelled(none));
  int runs = 0;
  auto reg = CancelFlag::OnCancel(none, [&] { ++runs; });
  EXPECT_EQ(runs, 0);
}

TEST(CancelFlagTest, CancelFromAnotherThreadIsSeen) {
  auto flag = std::make_shared<CancelFlag>();
  std::thread t([&] { flag->Cancel(); });
  t.join();
  EXPECT_TRUE(flag->cancelled());
}

}  // namespace
}  // namespace colibri
