#include "routing.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace colibri::engine {

void Route(const float* logits, int64_t n, int64_t E, int64_t K, bool renormalize, bool keep_probs, Routing* out) {
  out->n = n;
  out->n_experts = E;
  out->top_k = K;
  out->experts.resize(static_cast<size_t>(n * K));
  out->weights.resize(static_cast<size_t>(n * K));
  out->probs.resize(keep_probs ? static_cast<size_t>(n * E) : 0);
  std::vector<std::pair<float, int32_t>> probs(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* r = logits + t * E;
    float mx = r[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, r[e]);
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(static_cast<double>(r[e] - mx));
    for (int64_t e = 0; e < E; ++e) {
      const float p = static_cast<float>(std::exp(static_cast<double>(r[e] - mx)) / z);
      probs[static_cast<size_t>(e)] = {p, static_cast<int32_t>(e)};
      if (keep_probs) out->probs[static_cast<size_t>(t * E + e)] = p;
    }
    std::partial_sort(probs.begin(), probs.begin() + K, probs.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += probs[static_cast<size_t>(k)].first;
    for (int64_t k = 0; k < K; ++k) {
      float p = probs[static_cast<size_t>(k)].first;
      if (renormalize) p = static_cast<float>(p / sum);
      out->experts[static_cast<size_t>(t * K + k)] = probs[static_cast<size_t>(k)].second;
      out->weights[static_cast<size_t>(t * K + k)] = p;
    }
  }
}

void RouteTopKSoftmax(const float* logits, int64_t n, int64_t E, int64_t K, bool keep_probs, Routing* out) {
  // The probabilities over all experts come from Route; only the selection weights differ.
  Route(logits, n, E, K, /*renormalize=*/false, keep_probs, out);
  for (int64_t t = 0; t < n; ++t) {
    const float* r = logits + t * E;
    const int32_t* ids = out->experts.data() + t * K;
    float* w = out->weights.data() + t * K;
    const float mx = r[ids[0]];
    double z = 0;
    for (int64_t k = 0; k < K; ++k) z += std::exp(static_cast<double>(r[ids[k]] - mx));
    for (int64_t k = 0; k < K; ++k) w[k] = static_cast<float>(std::exp(static_cast<double>(r[ids[k]] - mx)) / z);
  }
}

void RouteFor(const model::ModelConfig& c, const float* logits, int64_t n, bool keep_probs, Routing* out) {
  if (c.softmax_after_topk) {
    RouteTopKSoftmax(logits, n, c.n_experts, c.top_k, keep_probs, out);
  } else {
    Route(logits, n, c.n_experts, c.top_k, c.norm_topk_prob, keep_probs, out);
  }
}

}  // namespace colibri::engine
