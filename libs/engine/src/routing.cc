#include "routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace colibri::engine {

RouteParams RouteParams::FromConfig(const model::ModelConfig& c) {
  RouteParams p;
  p.n_experts = c.n_experts;
  p.top_k = c.top_k;
  p.scoring = c.router_scoring;
  p.n_groups = c.n_expert_groups;
  p.topk_groups = c.topk_groups;
  p.group_scoring = c.group_scoring;
  p.renormalize = c.norm_topk_prob;
  p.scale = static_cast<float>(c.routed_scaling_factor);
  p.softmax_after_topk = c.softmax_after_topk;
  return p;
}

void Route(const float* logits, const float* bias, int64_t n, const RouteParams& params,
           bool keep_probs, Routing* out) {
  const int64_t E = params.n_experts, K = params.top_k;
  out->n = n;
  out->n_experts = E;
  out->top_k = K;
  out->experts.resize(static_cast<size_t>(n * K));
  out->weights.resize(static_cast<size_t>(n * K));
  out->probs.resize(keep_probs ? static_cast<size_t>(n * E) : 0);
  const bool grouped = params.n_groups > 1 && params.topk_groups < params.n_groups;
  const int64_t per_group = E / std::max<int64_t>(params.n_groups, 1);
  constexpr float kExcluded = -std::numeric_limits<float>::infinity();
  std::vector<float> scores(static_cast<size_t>(E));
  std::vector<std::pair<float, int32_t>> choice(static_cast<size_t>(E));  // (choice value, expert)
  std::vector<std::pair<float, int32_t>> groups(static_cast<size_t>(params.n_groups));
  auto before = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // softmax_after_topk: the bias belongs to the logits (the router's output bias), not to the choice.
  const float* choice_bias = params.softmax_after_topk ? nullptr : bias;
  std::vector<float> biased(params.softmax_after_topk && bias ? static_cast<size_t>(E) : 0);
  for (int64_t t = 0; t < n; ++t) {
    const float* r = logits + t * E;
    if (!biased.empty()) {
      for (int64_t e = 0; e < E; ++e) biased[static_cast<size_t>(e)] = r[e] + bias[e];
      r = biased.data();
    }
    if (params.scoring == model::RouterScoring::kSoftmax) {
      float mx = r[0];
      for (int64_t e = 1; e < E; ++e) mx = std::max(mx, r[e]);
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += std::exp(static_cast<double>(r[e] - mx));
      for (int64_t e = 0; e < E; ++e) {
        scores[static_cast<size_t>(e)] =
            static_cast<float>(std::exp(static_cast<double>(r[e] - mx)) / z);
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        scores[static_cast<size_t>(e)] =
            static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(r[e]))));
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      const float s = scores[static_cast<size_t>(e)];
      choice[static_cast<size_t>(e)] = {choice_bias ? s + choice_bias[e] : s,
                                        static_cast<int32_t>(e)};
      if (keep_probs) out->probs[static_cast<size_t>(t * E + e)] = s;
    }
    if (grouped) {
      for (int64_t g = 0; g < params.n_groups; ++g) {
        float best = kExcluded, second = kExcluded;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          const float v = choice[static_cast<size_t>(e)].first;
          if (v > best) {
            second = best;
            best = v;
          } else if (v > second) {
            second = v;
          }
        }
        const float value =
            params.group_scoring == model::GroupScoring::kMax ? best : best + second;
        groups[static_cast<size_t>(g)] = {value, static_cast<int32_t>(g)};
      }
      std::partial_sort(groups.begin(), groups.begin() + params.topk_groups, groups.end(), before);
      for (int64_t g = params.topk_groups; g < params.n_groups; ++g) {
        const int64_t dropped = groups[static_cast<size_t>(g)].second;
        for (int64_t e = dropped * per_group; e < (dropped + 1) * per_group; ++e) {
          choice[static_cast<size_t>(e)].first = kExcluded;
        }
      }
    }
    std::partial_sort(choice.begin(), choice.begin() + K, choice.end(), before);
    if (params.softmax_after_topk) {
      const float mx = r[choice[0].second];
      double z = 0;
      for (int64_t k = 0; k < K; ++k)
        z += std::exp(static_cast<double>(r[choice[static_cast<size_t>(k)].second] - mx));
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = choice[static_cast<size_t>(k)].second;
        out->experts[static_cast<size_t>(t * K + k)] = e;
        out->weights[static_cast<size_t>(t * K + k)] =
            static_cast<float>(std::exp(static_cast<double>(r[e] - mx)) / z);
      }
      continue;
    }
    double sum = 0;
    for (int64_t k = 0; k < K; ++k)
      sum += scores[static_cast<size_t>(choice[static_cast<size_t>(k)].second)];
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = choice[static_cast<size_t>(k)].second;
      double w = scores[static_cast<size_t>(e)];
      if (params.renormalize) w /= sum;
      out->experts[static_cast<size_t>(t * K + k)] = e;
      out->weights[static_cast<size_t>(t * K + k)] = static_cast<float>(w * params.scale);
    }
  }
}

}  // namespace colibri::engine
