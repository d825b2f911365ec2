// Engine: runs generation requests on a Model — prefill in chunks, then decode token by token
// with sampling and stop conditions, streaming each token to the caller.
// Thread-safe: concurrent Generate calls are serialised on the model (one forward at a time).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/engine/model.h"
#include "colibri/engine/sampler.h"

namespace colibri::engine {

enum class FinishReason { kStop, kLength, kCancelled };

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 256;         // 0: score the prompt only
  std::vector<int32_t> stop_tokens; // in addition to the model's EOS ids unless ignore_eos
  bool ignore_eos = false;
  // Record the logits of every fed position (prompt and generated, teacher forcing): row i is
  // the distribution after token seq[i]. The last generated token is fed too, so the result
  // has prompt + generated rows.
  bool record_logits = false;
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  std::vector<float> logits;  // [rows, vocab] when record_logits
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

struct EngineOptions {
  int64_t prefill_chunk = 512;  // tokens per prefill forward
};

struct EngineCounters {
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> generated_tokens{0};
  std::atomic<uint64_t> requests{0};
};

class Engine {
 public:
  Engine(Model* model, EngineOptions options) : model_(model), options_(options) {}

  // on_token is called for each sampled token; returning false cancels the request
  // (FinishReason::kCancelled). Errors: InvalidArgument for bad prompts (empty, ids outside the
  // vocabulary, longer than the context), and whatever the expert source reports.
  absl::StatusOr<GenerationResult> Generate(const GenerationRequest& request,
                                            const std::function<bool(const SampledToken&)>& on_token);

  const Model& model() const { return *model_; }
  const EngineCounters& counters() const { return counters_; }

 private:
  Model* model_;
  EngineOptions options_;
  std::mutex mu_;
  EngineCounters counters_;
};

}  // namespace colibri::engine
