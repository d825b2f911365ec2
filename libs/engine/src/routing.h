// MoE routing on the host: softmax over all experts of a layer, top-k (ties to the lowest id),
// optional renormalisation of the k weights; or (gpt-oss) top-k of the logits, then a softmax
// over the k selected. Shared by the MoE block and the lookahead predictor so both pick
// experts exactly the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "colibri/model/model_config.h"

namespace colibri::engine {

struct Routing {
  int64_t n = 0, n_experts = 0, top_k = 0;
  std::vector<int32_t> experts;  // [n, top_k], in descending probability
  std::vector<float> weights;    // [n, top_k] gate weights applied to the expert outputs
  std::vector<float> probs;      // [n, n_experts] softmax (kept only when asked for)
};

// `logits` is [n, n_experts] row-major.
void Route(const float* logits, int64_t n, int64_t n_experts, int64_t top_k, bool renormalize, bool keep_probs,
           Routing* out);

// gpt-oss: the k largest logits (ties to the lowest id), weights = softmax over those k. `probs`
// (when kept) is the softmax over all experts: the routing hint of experts not selected.
void RouteTopKSoftmax(const float* logits, int64_t n, int64_t n_experts, int64_t top_k, bool keep_probs,
                      Routing* out);

// The routing `config` defines: RouteTopKSoftmax when softmax_after_topk, else Route. `logits`
// already hold the router bias when the config has one.
void RouteFor(const model::ModelConfig& config, const float* logits, int64_t n, bool keep_probs, Routing* out);

}  // namespace colibri::engine
