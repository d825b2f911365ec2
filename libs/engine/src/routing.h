// MoE routing on the host: softmax over all experts of a layer, top-k (ties to the lowest id),
// optional renormalisation of the k weights. Shared by the MoE block and the lookahead
// predictor so both pick experts exactly the same way.
#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace colibri::engine
