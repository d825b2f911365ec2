// Token sampling: penalties, top-k, top-p, min-p, temperature, seeded RNG, logprobs.
// Order (as llama.cpp and vLLM apply them): repetition/presence/frequency penalties on the
// logits, then log-probabilities are taken for reporting, then top-k, top-p and min-p filter
// the candidates, temperature scales them, and one is drawn. temperature <= 0 is greedy
// (argmax of the penalised logits, ties to the lowest id).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "colibri/generation/request.h"

namespace colibri::engine {

// The request's parts are defined once for every layer (colibri/generation/request.h).
using generation::SampledToken;
using generation::SamplingParams;
using generation::ValidateSamplingParams;

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Samples from `logits` (modified in place by penalties). `history` holds the tokens the
  // penalties look at (prompt and generated so far, as llama.cpp's penalty window).
  SampledToken Sample(std::span<float> logits, std::span<const int32_t> history);

  // Speculative decoding's acceptance rule for a drafted token `draft` (a drafter proposes one
  // token per position: a point mass). Greedy: accepted when it is the argmax, else the argmax
  // is returned. Sampling (standard rejection sampling with q = the point mass on `draft`):
  // accepted with probability p(draft), p being the distribution Sample draws from; when
  // rejected, a token is drawn from p with `draft` removed (the residual max(p - q, 0),
  // renormalised). Either way the returned token is distributed exactly as Sample's.
  // *accepted says whether the result is `draft`.
  SampledToken SampleDraft(std::span<float> logits, std::span<const int32_t> history, int32_t draft,
                           bool* accepted);

  const SamplingParams& params() const { return params_; }

 private:
  // Penalties on `logits`; returns log Z of the penalised logits (for the logprobs).
  float Penalise(std::span<float> logits, std::span<const int32_t> history);
  // The candidates Sample draws from (top-k, top-p, min-p kept) into candidates_[0, size) with
  // their temperature weights (unnormalised, descending) in weights_. Sampling only.
  size_t Candidates(std::span<const float> logits);
  // Draws one of candidates_[0, keep) by weights_, skipping index `skip` (-1: none).
  int32_t Draw(size_t keep, double total, ptrdiff_t skip);
  SampledToken Report(std::span<const float> logits, float log_z, int32_t chosen) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<double> weights_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<int32_t> counts_;
};

// Index of the largest value, ties to the lowest index.
int32_t ArgMax(std::span<const float> values);

}  // namespace colibri::engine
