#include "colibri/expert_source/synthetic_routing.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace colibri::expert_source {
namespace {

TEST(SyntheticRouting, SameSeedSameTrace) {
  auto m = SyntheticRouterPreset("mixtral-8x7b");
  ASSERT_TRUE(m.ok());
  m->prompts = 1;
  m->min_tokens = m->max_tokens = 10;
  auto a = SynthesizeTrace(*m, 7), b = SynthesizeTrace(*m, 7), c = SynthesizeTrace(*m, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->records.size(), 320u);
  EXPECT_EQ(a->header.lookahead_layers, 2);
  bool same = true, differs = false;
  for (size_t i = 0; i < a->records.size(); ++i) {
    same = same && a->records[i].experts == b->records[i].experts &&
           a->records[i].lookahead == b->records[i].lookahead;
    differs = differs || a->records[i].experts != c->records[i].experts;
    ASSERT_EQ(a->records[i].experts.size(), 2u);
    ASSERT_EQ(a->records[i].probs.size(), 8u);
    // Predictions stop at the last layer.
    EXPECT_EQ(a->records[i].lookahead.size(),
              static_cast<size_t>(std::min(2, 31 - a->records[i].layer)));
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(differs);
}

TEST(SyntheticRouting, RejectsRoutersThatCannotRoute) {
  SyntheticRouter m;
  m.top_k = 9;
  auto t = SynthesizeTrace(m, 1);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SyntheticRouterPreset("gpt-5").ok());
}

TEST(SyntheticRouting, MeasuresRepetitionAndPredictions) {
  Trace t;
  t.header = {"m", 2, 4, 2, 0, 1};
  // Layer 0: {0,1} then {0,2} (first choice repeats, overlap) then {3,2} (overlap only).
  // Predictions for layer 1: {1,2} vs picked {1,3}: 1 of 2 right, twice.
  TraceRecord a{0, 0, 0, 0, {0, 1}, {}, {}}, b{1, 0, 1, 0, {0, 2}, {}, {}},
      c{2, 0, 2, 0, {3, 2}, {}, {}};
  a.lookahead = b.lookahead = {{1, 2}};
  t.records = {a, {0, 0, 0, 1, {1, 3}, {}, {}}, b, {1, 0, 1, 1, {1, 3}, {}, {}},
               c, {2, 0, 2, 1, {0, 2}, {}, {}}};
  const RoutingStats s = MeasureRouting(t);
  EXPECT_DOUBLE_EQ(s.repeat_first[0], 0.5);
  EXPECT_DOUBLE_EQ(s.repeat_any[0], 1.0);
  EXPECT_DOUBLE_EQ(s.repeat_first[1], 0.5);  // 1 -> 1, 1 -> 0
  EXPECT_DOUBLE_EQ(s.repeat_any[1], 0.5);
  EXPECT_DOUBLE_EQ(s.top_expert_share[0], 2.0 / 6);
  EXPECT_DOUBLE_EQ(s.lookahead_precision, 0.5);
}

// The default policy on the generated traces (the presets at seed 1, as the bench runs them;
// the two fine-grained ones cut to 4 prompts to keep this a unit test): never more than half a
// point behind the better of lru and lfu, at 25, 50 and 75% caches, with the router's full
// probabilities and with only the chosen experts' gate weights.
TEST(SyntheticRouting, DefaultPolicyIsNeverBehindLruOrLfu) {
  for (const SyntheticRouter& preset : SyntheticRouterPresets()) {
    for (bool partial : {false, true}) {
      SyntheticRouter m = preset;
      m.partial_probs = partial;
      if (m.n_experts > 8) m.prompts = 4;
      auto t = SynthesizeTrace(m, 1);
      ASSERT_TRUE(t.ok());
      const auto accesses = TraceAccesses(*t);
      const int L = m.n_layers, E = m.n_experts, K = m.top_k;
      for (double share : {0.25, 0.5, 0.75}) {
        const auto blocks = static_cast<uint64_t>(share * L * E + 0.5);
        const auto params = DefaultPolicyParams(blocks, L, E, K);
        const double lru =
            ReplayWithPolicy(accesses, blocks, CachePolicyKind::kLru, params).hit_rate();
        const double lfu =
            ReplayWithPolicy(accesses, blocks, CachePolicyKind::kLfu, params).hit_rate();
        const double def =
            ReplayWithPolicy(accesses, blocks, kDefaultCachePolicy, params).hit_rate();
        EXPECT_GE(def, std::max(lru, lfu) - 0.005)
            << m.name << (partial ? " (gate weights only)" : "") << " at " << share * 100
            << "%: lru " << lru << ", lfu " << lfu << ", default " << def;
      }
    }
  }
}

}  // namespace
}  // namespace colibri::expert_source
