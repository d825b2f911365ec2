#include "colibri/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"

namespace colibri::engine {

int32_t ArgMax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

float Sampler::Penalise(std::span<float> logits, std::span<const int32_t> history) {
  const size_t n = logits.size();
  const auto& p = params_;
  const bool rep = p.repetition_penalty > 0 && p.repetition_penalty != 1.0f;
  if (rep || p.presence_penalty != 0 || p.frequency_penalty != 0) {
    counts_.assign(n, 0);
    for (int32_t t : history) {
      if (t >= 0 && static_cast<size_t>(t) < n) counts_[static_cast<size_t>(t)]++;
    }
    for (size_t i = 0; i < n; ++i) {
      const int32_t c = counts_[i];
      if (c == 0) continue;
      float& l = logits[i];
      if (rep) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      l -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
    }
  }
  // Log-softmax of the penalised logits, for reporting.
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  return max_logit + static_cast<float>(std::log(sum));
}

size_t Sampler::Candidates(std::span<const float> logits) {
  const size_t n = logits.size();
  const auto& p = params_;
  candidates_.clear();
  candidates_.reserve(n);
  for (size_t i = 0; i < n; ++i) candidates_.emplace_back(logits[i], static_cast<int32_t>(i));
  // Sort descending by logit, ties by id, so results do not depend on the sort's stability.
  auto better = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = n;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep),
                      candidates_.end(), better);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), better);
  }
  // Tokens a mask removed (-inf: a grammar's, min_tokens') can never be drawn, not even as the
  // rounding remainder of the draw.
  while (keep > 1 && candidates_[keep - 1].first == -std::numeric_limits<float>::infinity()) --keep;
  candidates_.resize(keep);
  // Probabilities at temperature 1 decide the top-p / min-p cut (as llama.cpp's chain).
  std::vector<double> probs(keep);
  double z = 0;
  for (size_t i = 0; i < keep; ++i)
    z += probs[i] = std::exp(static_cast<double>(candidates_[i].first - candidates_[0].first));
  for (auto& q : probs) q /= z;
  if (p.top_p > 0 && p.top_p < 1) {
    double cum = 0;
    size_t cut = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += probs[i];
      if (cum >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (p.min_p > 0) {
    const double threshold = p.min_p * probs[0];
    size_t cut = 1;
    while (cut < keep && probs[cut] >= threshold) ++cut;
    keep = cut;
  }
  // Temperature.
  weights_.resize(keep);
  for (size_t i = 0; i < keep; ++i) {
    weights_[i] =
        std::exp(static_cast<double>(candidates_[i].first - candidates_[0].first) / p.temperature);
  }
  return keep;
}

int32_t Sampler::Draw(size_t keep, double total, ptrdiff_t skip) {
  std::uniform_real_distribution<double> uni(0.0, total);
  double r = uni(rng_);
  int32_t chosen = -1;
  for (size_t i = 0; i < keep; ++i) {
    if (static_cast<ptrdiff_t>(i) == skip) continue;
    chosen = candidates_[i].second;  // the last one left takes any rounding remainder
    r -= weights_[i];
    if (r < 0) break;
  }
  return chosen;
}

SampledToken Sampler::Report(std::span<const float> logits, float log_z, int32_t chosen) const {
  const auto& p = params_;
  const size_t n = logits.size();
  SampledToken out;
  out.id = chosen;
  if (p.logprobs || p.top_logprobs > 0) out.logprob = logits[static_cast<size_t>(chosen)] - log_z;
  if (p.top_logprobs > 0) {
    const size_t k = std::min<size_t>(static_cast<size_t>(std::min(p.top_logprobs, 20)), n);
    std::vector<int32_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
    std::partial_sort(
        idx.begin(), idx.begin() + static_cast<ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
          return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                 (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
        });
    for (size_t i = 0; i < k; ++i)
      out.top.emplace_back(idx[i], logits[static_cast<size_t>(idx[i])] - log_z);
  }
  return out;
}

SampledToken Sampler::Sample(std::span<float> logits, std::span<const int32_t> history) {
  const float log_z = Penalise(logits, history);
  if (params_.temperature <= 0) return Report(logits, log_z, ArgMax(logits));
  const size_t keep = Candidates(logits);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += weights_[i];
  return Report(logits, log_z, Draw(keep, total, -1));
}

SampledToken Sampler::SampleDraft(std::span<float> logits, std::span<const int32_t> history,
                                  int32_t draft, bool* accepted) {
  const float log_z = Penalise(logits, history);
  if (params_.temperature <= 0) {
    const int32_t best = ArgMax(logits);
    *accepted = best == draft;
    return Report(logits, log_z, best);
  }
  const size_t keep = Candidates(logits);
  double total = 0;
  ptrdiff_t at = -1;  // the draft's index among the candidates (-1: filtered out, p = 0)
  for (size_t i = 0; i < keep; ++i) {
    total += weights_[i];
    if (candidates_[i].second == draft) at = static_cast<ptrdiff_t>(i);
  }
  const double p_draft = at >= 0 ? weights_[static_cast<size_t>(at)] / total : 0.0;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  if (at >= 0 && uni(rng_) < p_draft) {
    *accepted = true;
    return Report(logits, log_z, draft);
  }
  *accepted = false;
  const double rest = at >= 0 ? total - weights_[static_cast<size_t>(at)] : total;
  return Report(logits, log_z, Draw(keep, rest, at));
}

}  // namespace colibri::engine
