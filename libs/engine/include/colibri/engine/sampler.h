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

namespace colibri::engine {

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;              // <= 0 or >= 1: disabled
  int32_t top_k = 0;               // <= 0: disabled
  float min_p = 0.0f;              // <= 0: disabled
  uint64_t seed = 0;
  float repetition_penalty = 1.0f; // <= 0 or 1: disabled (divides positive logits, multiplies negative)
  float presence_penalty = 0.0f;   // subtracted once per token id present in the history
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the history
  int32_t top_logprobs = 0;        // report this many alternatives (0..20)
  bool logprobs = false;           // report the sampled token's logprob
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;                            // when logprobs requested
  std::vector<std::pair<int32_t, float>> top;      // top_logprobs alternatives, best first
};

// Checks every parameter against its accepted range (finite, and OpenAI's ranges: temperature
// 0..2, top_p and min_p 0..1, top_k 0..2^20, repetition_penalty 0.01..10, presence and frequency
// penalties -2..2, top_logprobs 0..20). The one check for every transport (HTTP, the Router and
// Compute gRPC APIs, the CLI): the engine runs it on every request, the router before it
// forwards one. InvalidArgument naming the field by its API name, e.g. "'top_p': must be ...".
absl::Status ValidateSamplingParams(const SamplingParams& params);

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
