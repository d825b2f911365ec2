#include "colibri/expert_source/pinning.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/routing_heat.h"
#include "colibri/expert_source/testing/recording_source.h"

namespace colibri::expert_source {
namespace {

using testing::RecordingSource;
const ExpertId kA{0, 0}, kB{0, 1}, kC{1, 0}, kD{1, 1};

std::vector<uint64_t> Keys(const std::vector<ExpertId>& ids) {
  std::vector<uint64_t> out;
  for (const auto& id : ids) out.push_back(id.Key());
  return out;
}

TEST(PinnedExperts, ParsesBothEntryFormsAndTheWrappedList) {
  auto ids = ParsePinnedExperts(R"([[0, 1], {"layer": 1, "expert": 0}, [0, 1]])", 2, 4);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(Keys(*ids), Keys({kB, kC}));  // the duplicate is dropped
  auto wrapped = ParsePinnedExperts(R"({"pinned_experts": [[1, 1]]})", 2, 4);
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(Keys(*wrapped), Keys({kD}));
}

TEST(PinnedExperts, ErrorsNameTheEntry) {
  auto out_of_range = ParsePinnedExperts("[[0, 0], [2, 0]]", 2, 4);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out_of_range.status().message().find("entry 1"), std::string::npos)
      << out_of_range.status();
  for (const char* bad :
       {"[[0]]", "[{\"layer\": 0}]", "[[\"0\", 1]]", "{\"pins\": []}", "nope", "7"}) {
    auto r = ParsePinnedExperts(bad, 2, 4);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto missing = LoadPinnedExperts("/nonexistent/pins.json", 2, 4);
  EXPECT_FALSE(missing.ok());
}

TEST(Pinning, PinnedBlocksAreLoadedAndNeverEvicted) {
  RecordingSource src(100);
  CacheTierOptions o;
  o.capacity_bytes = 400;
  CacheTier tier(&src, o);  // reads on the calling thread: pins load inside SetPinned
  const std::vector<ExpertId> pins = {kA, kB};
  ASSERT_TRUE(tier.SetPinned(pins).ok());
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_TRUE(tier.Contains(kB));
  for (int round = 0; round < 3; ++round) {
    for (int e = 2; e < 8; ++e) ASSERT_TRUE(tier.Fetch(ExpertId{3, e}, Priority::kDemand).ok());
  }
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_TRUE(tier.Contains(kB));
  EXPECT_EQ(src.Count(kA), 1u);
  CacheStats s = tier.Stats();
  EXPECT_EQ(s.blocks_pinned, 2u);
  EXPECT_EQ(s.bytes_pinned, 200u);
  EXPECT_EQ(s.pins, 2u);
  EXPECT_LE(s.bytes_cached, 400u);
  // Unpinned, they are ordinary blocks again.
  ASSERT_TRUE(tier.SetPinned({}).ok());
  for (int e = 2; e < 8; ++e) ASSERT_TRUE(tier.Fetch(ExpertId{3, e}, Priority::kDemand).ok());
  EXPECT_FALSE(tier.Contains(kA));
  EXPECT_EQ(tier.Stats().blocks_pinned, 0u);
}

TEST(Pinning, RefusesAPinSetThatLeavesNoRoom) {
  RecordingSource src(100);
  CacheTier tier(&src, 400);
  const std::vector<ExpertId> too_many = {kA, kB, kC};  // 300 pinned + 2 x 100 > 400
  auto st = tier.SetPinned(too_many);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(tier.Pinned().empty());
  EXPECT_EQ(src.Count(kA), 0u);
}

TEST(Pinning, ClearedPinsAreReadAgainOnUseAndStayPinned) {
  RecordingSource src(100);
  CacheTier tier(&src, 400);
  const std::vector<ExpertId> pins = {kA};
  ASSERT_TRUE(tier.SetPinned(pins).ok());
  tier.Clear();
  EXPECT_FALSE(tier.Contains(kA));
  ASSERT_TRUE(tier.Fetch(kA, Priority::kDemand).ok());
  EXPECT_EQ(tier.Stats().blocks_pinned, 1u);
}

TEST(LearnedPins, TakesTheHottestThatFit) {
  const std::vector<std::pair<ExpertId, double>> ranked = {{kC, 50}, {kA, 40}, {kD, 30}, {kB, 0.5}};
  auto size = [](ExpertId) -> uint64_t { return 100; };
  auto set = PlanLearnedPins(ranked, {}, 250, size, 0.25, 1.0, {});
  EXPECT_EQ(Keys(set), Keys({kA, kC}));  // sorted by key
  // Below min_heat never; excluded (file-pinned) never.
  set = PlanLearnedPins(ranked, {}, 1000, size, 0.25, 1.0, {kC.Key()});
  EXPECT_EQ(Keys(set), Keys({kA, kD}));
}

TEST(LearnedPins, HysteresisKeepsTheSetStable) {
  auto size = [](ExpertId) -> uint64_t { return 100; };
  const std::vector<ExpertId> current = {kA, kB};
  // C is a little hotter than B: not enough to displace it.
  std::vector<std::pair<ExpertId, double>> ranked = {{kA, 50}, {kC, 22}, {kB, 20}};
  EXPECT_EQ(Keys(PlanLearnedPins(ranked, current, 200, size, 0.25, 1.0, {})), Keys({kA, kB}));
  // Clearly hotter: it replaces the coldest member.
  ranked = {{kA, 50}, {kC, 30}, {kB, 20}};
  EXPECT_EQ(Keys(PlanLearnedPins(ranked, current, 200, size, 0.25, 1.0, {})), Keys({kA, kC}));
}

TEST(RoutingHeat, CountsSelectionsAndDecays) {
  RoutingHeat heat("m", 2, 4, /*top_k=*/1, /*half_life_tokens=*/10);
  // 10 tokens pick (0, 0) at layer 0 and (1, 1) at layer 1.
  for (int t = 0; t < 10; ++t) {
    const std::vector<RoutingHint> h = {{kA, 0.9f, 1}, {kB, 0.1f, 0}, {kD, 0.8f, 1}};
    heat.Record(h);
  }
  EXPECT_DOUBLE_EQ(heat.tokens(), 10);
  EXPECT_GT(heat.Heat(kA), 5);
  EXPECT_EQ(heat.Heat(kB), 0);
  const double before = heat.Heat(kA);
  // 10 more tokens elsewhere halve it.
  for (int t = 0; t < 10; ++t) {
    const std::vector<RoutingHint> h = {{kB, 0.9f, 1}};
    heat.Record(h);
  }
  EXPECT_NEAR(heat.Heat(kA), before / 2, 1e-9);
  EXPECT_EQ(heat.Ranked().front().first, kB);
}

TEST(RoutingHeat, SurvivesASaveAndLoad) {
  const auto path =
      std::filesystem::temp_directory_path() / ("colibri_heat_test_" + std::to_string(::getpid()));
  RoutingHeat heat("m", 2, 4, 1);
  const std::vector<RoutingHint> h = {{kC, 0.9f, 3}, {kB, 0.9f, 1}};
  heat.Record(h);
  ASSERT_TRUE(heat.Save(path).ok());
  RoutingHeat again("m", 2, 4, 1);
  ASSERT_TRUE(again.Load(path).ok());
  EXPECT_NEAR(again.Heat(kC), heat.Heat(kC), 1e-3);
  EXPECT_EQ(again.Ranked().front().first, kC);
  RoutingHeat other("other model", 2, 4, 1);
  auto st = other.Load(path);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  RoutingHeat other_shape("m", 3, 4, 1);
  EXPECT_EQ(other_shape.Load(path).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.Load(path.string() + ".missing").code(), absl::StatusCode::kNotFound);
  std::filesystem::remove(path);
}

TEST(PinController, PinsFileAndLearnedExpertsAndFollowsTheHeat) {
  RecordingSource src(100);
  CacheTier tier(&src, 1000);
  RoutingHeat heat("m", 2, 4, 1);
  for (int t = 0; t < 5; ++t) {
    const std::vector<RoutingHint> h = {{kC, 0.9f, 1}};
    heat.Record(h);
  }
  PinControllerOptions o;
  o.fixed = {kA};
  o.learned_budget_bytes = 100;  // one learned pin
  o.interval = std::chrono::milliseconds(0);
  auto c = PinController::Start(&tier, &heat, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Keys(tier.Pinned()), Keys({kA, kC}));
  EXPECT_EQ(Keys((*c)->learned()), Keys({kC}));
  EXPECT_TRUE(tier.Contains(kC));
  // D becomes much hotter: the learned pin moves, the file pin stays.
  for (int t = 0; t < 50; ++t) {
    const std::vector<RoutingHint> h = {{kD, 0.9f, 1}};
    heat.Record(h);
  }
  auto changed = (*c)->Rebalance();
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(*changed, 2);
  EXPECT_EQ(Keys(tier.Pinned()), Keys({kA, kD}));
  EXPECT_EQ((*c)->changes(), 3u);  // C in, then C out and D in
}

}  // namespace
}  // namespace colibri::expert_source
