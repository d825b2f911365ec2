#include "colibri/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"

namespace colibri::engine {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<GenerationResult> Engine::Generate(const GenerationRequest& request,
                                                  const std::function<bool(const SampledToken&)>& on_token) {
  const auto& c = model_->config();
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt == 0) return absl::InvalidArgumentError("prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", t, " is outside the vocabulary (size ",
                                                     c.vocab_size, ")"));
    }
  }
  if (n_prompt >= c.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", n_prompt, " tokens does not fit the context length ",
                                                   c.context_length));
  }
  if (request.max_tokens < 0) return absl::InvalidArgumentError("max_tokens must be >= 0");
  const int64_t budget = std::min(request.max_tokens, c.context_length - n_prompt - (request.record_logits ? 1 : 0));
  std::vector<int32_t> stops = request.stop_tokens;
  if (!request.ignore_eos) {
    for (int64_t e : c.eos_token_ids) stops.push_back(static_cast<int32_t>(e));
  }

  std::lock_guard<std::mutex> lock(mu_);
  counters_.requests++;
  GenerationResult result;
  result.prompt_tokens = n_prompt;
  auto cache = model_->NewCache();
  std::vector<float> logits;
  std::vector<float>* record = request.record_logits ? &result.logits : nullptr;

  // Prefill in chunks; only the last prompt position's logits are needed to sample.
  auto t0 = std::chrono::steady_clock::now();
  std::vector<BatchItem> batch;
  for (int64_t begin = 0; begin < n_prompt; begin += options_.prefill_chunk) {
    const int64_t end = std::min(n_prompt, begin + options_.prefill_chunk);
    batch.clear();
    for (int64_t i = begin; i < end; ++i) {
      batch.push_back(BatchItem{cache.get(), request.prompt[static_cast<size_t>(i)], static_cast<int32_t>(i),
                                request.record_logits || i == n_prompt - 1});
    }
    logits.clear();
    RETURN_IF_ERROR(model_->Forward(batch, &logits));
    if (record) record->insert(record->end(), logits.begin(), logits.end());
  }
  counters_.prompt_tokens += static_cast<uint64_t>(n_prompt);
  result.prefill_seconds = SecondsSince(t0);

  // `logits` ends with the last position's row.
  std::vector<float> last(logits.end() - c.vocab_size, logits.end());
  std::vector<int32_t> history(request.prompt.begin(), request.prompt.end());
  Sampler sampler(request.sampling);
  auto t1 = std::chrono::steady_clock::now();
  result.finish = FinishReason::kLength;
  for (int64_t step = 0; step < budget; ++step) {
    SampledToken tok = sampler.Sample(last, history);
    result.tokens.push_back(tok.id);
    history.push_back(tok.id);
    counters_.generated_tokens++;
    if (!on_token(tok)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    const bool stop = std::find(stops.begin(), stops.end(), tok.id) != stops.end();
    const bool more = !stop && step + 1 < budget;
    if (!more && !record) {
      if (stop) result.finish = FinishReason::kStop;
      break;
    }
    BatchItem item{cache.get(), tok.id, static_cast<int32_t>(cache->n_past()), true};
    logits.clear();
    RETURN_IF_ERROR(model_->Forward(std::span<const BatchItem>(&item, 1), &logits));
    if (record) record->insert(record->end(), logits.begin(), logits.end());
    if (stop) {
      result.finish = FinishReason::kStop;
      break;
    }
    last.assign(logits.begin(), logits.end());
  }
  result.decode_seconds = SecondsSince(t1);
  return result;
}

}  // namespace colibri::engine
