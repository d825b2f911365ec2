#include "compute_metrics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colibri::compute {
namespace {

using expert_source::RoutingHint;

// One token's routing at one layer: the picked experts with equal weight.
void Route(expert_source::RoutingHeat* heat, int layer, const std::vector<int>& experts) {
  std::vector<RoutingHint> hints;
  for (int e : experts) {
    RoutingHint h;
    h.id = {layer, e};
    h.probability = 1.0f / static_cast<float>(experts.size());
    h.selected = 1;
    hints.push_back(h);
  }
  heat->Record(hints);
}

TEST(ComputeMetricsTest, HeatSummaryPerLayerIsTheWorkingSetAndTopKShare) {
  // 3 layers of 8 experts, top-2; a half-life far longer than the test so shares are exact.
  expert_source::RoutingHeat heat("m", 3, 8, 2, 1e12);
  for (int t = 0; t < 10; ++t) {
    Route(&heat, 0, {1, 2});  // layer 0: always experts 1 and 2
    // Layer 1: experts 0..4 in turn, two per token (0,1), (2,3), (4,0), (1,2), (3,4), ...
    Route(&heat, 1, {(2 * t) % 5, (2 * t + 1) % 5});
  }
  const auto layers = SummarizeHeat(heat, 3, 8, 2);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].hot_experts, 2);  // 1 and 2 take all of it
  EXPECT_DOUBLE_EQ(layers[0].top_k_share, 1.0);
  EXPECT_EQ(layers[1].hot_experts, 4);  // five equally hot experts: 4 of 5 make 80%
  EXPECT_NEAR(layers[1].top_k_share, 0.4, 1e-9);
  EXPECT_EQ(layers[2].hot_experts, 0);  // never routed
  EXPECT_EQ(layers[2].top_k_share, 0.0);
}

TEST(ComputeMetricsTest, RegistersTheQueueGauges) {
  auto registry = std::make_shared<prometheus::Registry>();
  ComputeMetrics metrics(registry);
  metrics.pending_requests_limit->Set(64);
  metrics.pending_requests->Increment();
  std::vector<std::string> names;
  for (const auto& f : registry->Collect()) names.push_back(f.name);
  // (The per-layer heat families have series only after a Refresh; tests/deploy reads them.)
  for (const std::string want :
       {"colibri_compute_pending_requests", "colibri_compute_pending_requests_limit"}) {
    EXPECT_TRUE(std::find(names.begin(), names.end(), want) != names.end()) << want;
  }
  EXPECT_EQ(metrics.pending_requests->Value(), 1.0);
  EXPECT_EQ(metrics.pending_requests_limit->Value(), 64.0);
}

}  // namespace
}  // namespace colibri::compute
