// Synthetic decode routing traces from a router model with a real MoE router's statistics, for
// tuning and testing cache policies and prefetch where real traces cannot be recorded.
//
// Router logits of token t at layer l, expert e:
//   popularity[l][e]                 fixed per model: per-layer expert skew
// + prompt[p][l][e]                  fixed per prompt: what a conversation needs
// + token_scale * z_t[l][e]          per token, persistent: z_t = rho_l z_{t-1} + sqrt(1 - rho_l^2) u_t
// where the innovation u_t[l] is correlated with the previous layer's through an expert affinity
// permutation (u_t[l][e] = c u_t[l-1][pi_l(e)] + sqrt(1 - c^2) n), which gives the cross-layer
// correlation of expert choices. rho_l rises from rho_first (layer 0) to rho_mid (middle layer)
// and falls to rho_last (last layer), the depth profile of the repetition rates published for
// Mixtral. Softmax -> top-k. Prompts of a uniform random length are decoded one after another.
// Lookahead predictions (trace format v2): for layer l + d, the true logits of that layer plus
// Gaussian noise of lookahead_noise[d - 1], top-k: what the next routers give when applied to
// layer l's hidden state.
// Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/routing_trace.h"

namespace colibri::expert_source {

struct SyntheticRouter {
  std::string name;
  int n_layers = 32, n_experts = 8, top_k = 2;
  double popularity = 0.3;   // std of the fixed per-layer expert logits
  double prompt = 0.8;       // std of the per-prompt logits
  double token_scale = 1.0;  // scale of the persistent per-token logits
  double rho_first = 0.2, rho_mid = 0.7, rho_last = 0.5;
  double cross_layer = 0.4;  // correlation of a token's innovation with the previous layer's
  int prompts = 12;
  int min_tokens = 80, max_tokens = 254;             // decode tokens per prompt (uniform)
  std::vector<double> lookahead_noise = {0.6, 0.9};  // per depth; empty: no predictions
  bool partial_probs = false;  // record only the chosen experts' gate weights, as public dumps do
  uint64_t block_bytes = 0;
};

// mixtral-8x7b (32 x 8, top-2), deepseek-v2-lite (26 x 64, top-6), qwen1.5-moe (24 x 60, top-4).
std::vector<SyntheticRouter> SyntheticRouterPresets();
absl::StatusOr<SyntheticRouter> SyntheticRouterPreset(const std::string& name);

// InvalidArgument for a model that cannot route (e.g. top_k > n_experts).
absl::StatusOr<Trace> SynthesizeTrace(const SyntheticRouter& router, uint64_t seed);

// Measured properties of a trace (to compare with published numbers).
struct RoutingStats {
  // Per layer: share of tokens whose first choice equals the previous token's first choice, and
  // whose top-k shares at least one expert with the previous token's.
  std::vector<double> repeat_first, repeat_any;
  // Per layer: the most used expert's share of the layer's picks (1/n_experts when uniform).
  std::vector<double> top_expert_share;
  double lookahead_precision = 0;  // share of depth-1 predicted experts the router then picked
};
RoutingStats MeasureRouting(const Trace& trace);

}  // namespace colibri::expert_source
