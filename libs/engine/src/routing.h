// MoE routing on the host, shared by the MoE block and the lookahead predictor so both pick
// experts exactly the same way. Per token:
//   scores  = softmax(logits) over the layer's experts, or sigmoid(logits) per expert
//   choice  = scores + bias (bias: selection only; absent = 0)
//   groups  = with n_groups > 1, only experts of the topk_groups best groups are eligible
//             (a group's score: its best choice value, or the sum of its two best)
//   experts = the top_k eligible experts by choice value (ties to the lowest id)
//   weights = their scores, renormalised to sum to 1 if asked, times scale
//   (softmax_after_topk, gpt-oss: the bias is the router's output bias, added to the logits;
//   the top_k largest logits are picked and their weights are the softmax over those k.)
#pragma once

#include <cstdint>
#include <vector>

#include "colibri/model/model_config.h"

namespace colibri::engine {

struct RouteParams {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  model::RouterScoring scoring = model::RouterScoring::kSoftmax;
  int64_t n_groups = 1;
  int64_t topk_groups = 1;
  model::GroupScoring group_scoring = model::GroupScoring::kTopTwoSum;
  bool renormalize = false;
  float scale = 1.0f;
  bool softmax_after_topk = false;

  static RouteParams FromConfig(const model::ModelConfig& c);
};

struct Routing {
  int64_t n = 0, n_experts = 0, top_k = 0;
  std::vector<int32_t> experts;  // [n, top_k], in descending choice value
  std::vector<float> weights;    // [n, top_k] gate weights applied to the expert outputs
  std::vector<float> probs;  // [n, n_experts] scores (softmax or sigmoid; kept only when asked for)
};

// `logits` is [n, n_experts] row-major; `bias` is [n_experts] or null. With softmax_after_topk,
// `probs` (when kept) is the softmax over all experts: the routing hint of experts not selected.
void Route(const float* logits, const float* bias, int64_t n, const RouteParams& params,
           bool keep_probs, Routing* out);

}  // namespace colibri::engine
