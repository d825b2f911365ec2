#include "expert_cache.h"

#include <gtest/gtest.h>

namespace colibri::compute {
namespace {

using expert_source::ExpertId;
using expert_source::RoutingHint;

// 2 layers x 3 experts of 100 bytes, stored in the experts file out of id order.
model::Manifest SmallManifest() {
  model::Manifest m;
  m.name = "m";
  m.config.n_layers = 2;
  m.config.n_experts = 3;
  m.config.top_k = 1;
  const uint64_t offsets[2][3] = {{500, 0, 100}, {200, 300, 400}};
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t e = 0; e < 3; ++e) {
      model::ExpertBlock b;
      b.id = {l, e};
      b.file = "experts.bin";
      b.offset = offsets[l][e];
      b.size = b.padded_size = 100;
      m.experts.push_back(b);
    }
  }
  return m;
}

void Route(expert_source::RoutingHeat* heat, int expert_l0, int expert_l1) {
  std::vector<RoutingHint> hints;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 3; ++e) {
      hints.push_back(
          {ExpertId{l, e}, 0.0f, static_cast<uint32_t>(e == (l == 0 ? expert_l0 : expert_l1))});
    }
  }
  heat->Record(hints);
}

TEST(WarmOrder, AFittingModelIsReadInFileOrderWithoutHeat) {
  const model::Manifest m = SmallManifest();
  expert_source::RoutingHeat heat("m", 2, 3, 1);
  const auto order = WarmOrder(m, heat, 600);
  const std::vector<ExpertId> want = {{0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {0, 0}};
  EXPECT_EQ(order, want);
}

TEST(WarmOrder, HottestFirstThenTheRestInFileOrder) {
  const model::Manifest m = SmallManifest();
  expert_source::RoutingHeat heat("m", 2, 3, 1);
  Route(&heat, 0, 2);
  Route(&heat, 0, 2);
  Route(&heat, 2, 2);
  const auto order = WarmOrder(m, heat, 600);
  ASSERT_EQ(order.size(), 6u);
  // (1, 2) picked 3 times, (0, 0) twice, (0, 2) once; then the cold ones in file order.
  const std::vector<ExpertId> want = {{1, 2}, {0, 0}, {0, 2}, {0, 1}, {1, 0}, {1, 1}};
  EXPECT_EQ(order, want);
}

TEST(WarmOrder, AModelLargerThanTheCacheWarmsOnlyItsHotSet) {
  const model::Manifest m = SmallManifest();
  expert_source::RoutingHeat heat("m", 2, 3, 1);
  EXPECT_TRUE(WarmOrder(m, heat, 599).empty());  // no heat: nothing to go on
  Route(&heat, 1, 0);
  const std::vector<ExpertId> want = {{0, 1}, {1, 0}};
  EXPECT_EQ(WarmOrder(m, heat, 599), want);
}

}  // namespace
}  // namespace colibri::compute
