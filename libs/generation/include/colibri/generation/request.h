// What a generation request is, for every layer that carries one: the HTTP and gRPC APIs, the
// router, compute and the engine. One definition of each type and of its defaults, so the
// router needs neither the engine nor a backend to speak to compute.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "colibri/core/cancel.h"

namespace colibri::generation {

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;  // <= 0 or >= 1: disabled
  int32_t top_k = 0;   // <= 0: disabled
  float min_p = 0.0f;  // <= 0: disabled
  uint64_t seed = 0;
  float repetition_penalty =
      1.0f;  // <= 0 or 1: disabled (divides positive logits, multiplies negative)
  float presence_penalty = 0.0f;   // subtracted once per token id present in the history
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the history
  int32_t top_logprobs = 0;        // report this many alternatives (0..20)
  bool logprobs = false;           // report the sampled token's logprob
};

// Checks every parameter against its accepted range (finite, and OpenAI's ranges: temperature
// 0..2, top_p and min_p 0..1, top_k 0..2^20, repetition_penalty 0.01..10, presence and frequency
// penalties -2..2, top_logprobs 0..20). The one check for every transport (HTTP, the Router and
// Compute gRPC APIs, the CLI): the engine runs it on every request, the router before it
// forwards one. InvalidArgument naming the field by its API name, e.g. "'top_p': must be ...".
absl::Status ValidateSamplingParams(const SamplingParams& params);

struct SampledToken {
  int32_t id = 0;
  float logprob = 0.0f;                        // when logprobs requested
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
};

enum class FinishReason { kStop, kLength, kCancelled };

// A request for tokens from compute: what the router sends over gRPC or in-process, and the
// engine's GenerationRequest adds its own options to.
struct Request {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 256;          // 0: score the prompt only
  std::vector<int32_t> stop_tokens;  // in addition to the model's EOS ids unless ignore_eos
  bool ignore_eos = false;
  // Until this many tokens are generated, EOS and the stop tokens are masked out of sampling
  // (vLLM's and llama-server's min_tokens); at most max_tokens.
  int64_t min_tokens = 0;
  // Optional: the output must be a sentence of this grammar (colibri/grammar/grammar.h's
  // syntax; the router compiles JSON schemas and forced tool calls into it). At each step only
  // tokens that continue a valid output may be sampled, EOS only where it is complete, and the
  // output completes within max_tokens. Empty: unconstrained.
  std::string grammar;
  // Optional: prefer the pooled KV of this session (any pooled prefix still matches).
  std::string session_id;
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  // Optional: the client's cancel signal (its connection closed, its call cancelled). Checked at
  // admission and before every step, so a request cancelled while queued or in a long prefill
  // does no more work; it finishes as kCancelled with the tokens it had.
  CancelToken cancel;
};

}  // namespace colibri::generation
