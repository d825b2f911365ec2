#include "routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace colibri::engine {
namespace {

using model::GroupScoring;
using model::RouterScoring;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(RoutingTest, SoftmaxTopKRenormalised) {
  const std::vector<float> logits = {1, 2, 3, 0};
  RouteParams p;
  p.n_experts = 4;
  p.top_k = 2;
  p.renormalize = true;
  Routing r;
  Route(logits.data(), nullptr, 1, p, /*keep_probs=*/true, &r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1}));
  const double z = std::exp(1) + std::exp(2) + std::exp(3) + 1;
  EXPECT_NEAR(r.weights[0], std::exp(3) / (std::exp(3) + std::exp(2)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2) / (std::exp(3) + std::exp(2)), 1e-6);
  EXPECT_NEAR(r.probs[3], 1 / z, 1e-7);
  p.renormalize = false;
  Route(logits.data(), nullptr, 1, p, false, &r);
  EXPECT_NEAR(r.weights[0], std::exp(3) / z, 1e-6);
  EXPECT_TRUE(r.probs.empty());
}

TEST(RoutingTest, SoftmaxAfterTopKAddsTheBiasToTheLogitsAndWeighsOnlyTheChosen) {
  // gpt-oss: logits + bias = {1, 4, 3, 0.5}; the top 2 are experts 1 and 2, weighted by the softmax
  // over those two; renormalize and scale do not apply; probs are the softmax over all four.
  const std::vector<float> logits = {1, 2, 3, 0.5f};
  const std::vector<float> bias = {0, 2, 0, 0};
  RouteParams p;
  p.n_experts = 4;
  p.top_k = 2;
  p.renormalize = true;
  p.scale = 2.5f;
  p.softmax_after_topk = true;
  Routing r;
  Route(logits.data(), bias.data(), 1, p, /*keep_probs=*/true, &r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(-1.0) / (1 + std::exp(-1.0)), 1e-6);
  const double z = std::exp(1) + std::exp(4) + std::exp(3) + std::exp(0.5);
  EXPECT_NEAR(r.probs[1], std::exp(4) / z, 1e-6);
  // Without a bias: experts 2 and 1.
  Route(logits.data(), nullptr, 1, p, false, &r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1}));
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.0)), 1e-6);
}

TEST(RoutingTest, SigmoidBiasChoosesButDoesNotWeigh) {
  const std::vector<float> logits = {0, 1, -1, 2};
  const std::vector<float> bias = {0, 0, 5, -5};
  RouteParams p;
  p.n_experts = 4;
  p.top_k = 2;
  p.scoring = RouterScoring::kSigmoid;
  p.renormalize = true;
  p.scale = 2.5f;
  Routing r;
  Route(logits.data(), bias.data(), 1, p, true, &r);
  // Biased values: 0.5, 0.731, 5.269, -4.119: experts 2 then 1; weights from the unbiased scores.
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1}));
  const double s2 = Sigmoid(-1), s1 = Sigmoid(1);
  EXPECT_NEAR(r.weights[0], 2.5 * s2 / (s1 + s2), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * s1 / (s1 + s2), 1e-6);
  EXPECT_NEAR(r.probs[3], Sigmoid(2), 1e-7);  // probs are the scores, without bias
  // Without renormalisation the raw sigmoid scores are scaled.
  p.renormalize = false;
  Route(logits.data(), bias.data(), 1, p, false, &r);
  EXPECT_NEAR(r.weights[0], 2.5 * s2, 1e-6);
  // Without the bias expert 3 (the largest logit) wins.
  Route(logits.data(), nullptr, 1, p, false, &r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 1}));
}

// 8 experts in 4 groups of 2. Expert 0 is the best single expert, but its group partner is
// weak, so with the two best groups (by the sum of their two best) it is not eligible.
const std::vector<float> kGroupLogits = {3, -5, 2, 2, 1.5, 1.5, 0, 0};

TEST(RoutingTest, GroupLimitedByTopTwoSum) {
  RouteParams p;
  p.n_experts = 8;
  p.top_k = 2;
  p.scoring = RouterScoring::kSigmoid;
  p.renormalize = true;
  Routing r;
  Route(kGroupLogits.data(), nullptr, 1, p, false, &r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 2}));  // one group: plain top-k
  p.n_groups = 4;
  p.topk_groups = 2;
  Route(kGroupLogits.data(), nullptr, 1, p, false, &r);
  // Group sums: 0.959, 1.762, 1.635, 1.0: groups 1 and 2; experts 2 and 3 tie, lowest id first.
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(r.weights[0], 0.5, 1e-6);
  // A bias that lifts group 3 above group 2 moves the choice there (bias counts for groups).
  const std::vector<float> bias = {0, 0, 0, 0, 0, 0, 1, 1};
  p.top_k = 3;
  Route(kGroupLogits.data(), bias.data(), 1, p, false, &r);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{6, 7, 2}));
}

TEST(RoutingTest, GroupLimitedByBestExpertWithSoftmax) {
  RouteParams p;
  p.n_experts = 8;
  p.top_k = 2;
  p.n_groups = 4;
  p.topk_groups = 2;
  p.group_scoring = GroupScoring::kMax;
  std::vector<float> two = kGroupLogits;  // two identical tokens
  two.insert(two.end(), kGroupLogits.begin(), kGroupLogits.end());
  Routing r;
  Route(two.data(), nullptr, 2, p, false, &r);
  // Group maxima: groups 0 and 1 are kept; the top two are experts 0 and 2.
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 2, 0, 2}));
  double z = 0;
  for (float l : kGroupLogits) z += std::exp(l);
  EXPECT_NEAR(r.weights[1], std::exp(2) / z, 1e-6);
}

TEST(RoutingTest, FromConfigCarriesEveryOption) {
  model::ModelConfig c;
  c.n_experts = 16;
  c.top_k = 4;
  c.router_scoring = RouterScoring::kSigmoid;
  c.n_expert_groups = 4;
  c.topk_groups = 2;
  c.group_scoring = GroupScoring::kMax;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 16;
  const RouteParams p = RouteParams::FromConfig(c);
  EXPECT_EQ(p.n_experts, 16);
  EXPECT_EQ(p.top_k, 4);
  EXPECT_EQ(p.scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(p.n_groups, 4);
  EXPECT_EQ(p.topk_groups, 2);
  EXPECT_EQ(p.group_scoring, GroupScoring::kMax);
  EXPECT_FALSE(p.renormalize);
  EXPECT_EQ(p.scale, 16.0f);
}

}  // namespace
}  // namespace colibri::engine
