#include "colibri/rpc/pending_limit.h"

#include <vector>

#include "gtest/gtest.h"

namespace colibri::rpc {
namespace {

TEST(PendingLimitTest, RefusesPastTheLimitAndTicketsGiveTheirPlaceBack) {
  PendingLimit limit(3);
  std::vector<std::shared_ptr<PendingLimit::Ticket>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(limit.TryAcquire());
    ASSERT_NE(held.back(), nullptr);
  }
  EXPECT_EQ(limit.pending(), 3);
  EXPECT_EQ(limit.TryAcquire(), nullptr);  // the 4th is refused
  EXPECT_EQ(limit.pending(), 3);           // and leaves no trace
  auto copy = held[0];                     // a ticket shared with a producer's closure
  held.erase(held.begin());
  EXPECT_EQ(limit.pending(), 3);  // still held by the copy
  copy.reset();
  EXPECT_EQ(limit.pending(), 2);
  EXPECT_NE(limit.TryAcquire(), nullptr);
  EXPECT_EQ(limit.pending(), 2);  // that temporary ticket was released at once
  EXPECT_EQ(limit.limit(), 3);
}

}  // namespace
}  // namespace colibri::rpc
