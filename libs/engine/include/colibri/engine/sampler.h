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

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<int32_t> counts_;
};

// Index of the largest value, ties to the lowest index.
int32_t ArgMax(std::span<const float> values);

}  // namespace colibri::engine
