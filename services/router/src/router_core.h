// The router's domain logic, shared by the OpenAI HTTP API and the gRPC Router service:
// prompts (chat messages, text, token ids) -> token ids with the model's tokenizer and chat
// format; generation through a ComputeClient; text streamed as UTF-8-safe deltas; stop strings
// matched across token boundaries. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/tokenizer/chat.h"
#include "colibri/tokenizer/tokenizer.h"
#include "compute_client.h"
#include "compute_pool.h"
#include "expert_heat.h"

namespace colibri::router {

// A request as the APIs give it to the router: what compute gets (generation::Request; its
// min_tokens also holds off stop strings, and session_id is scoped by the key, ScopedSessionId)
// plus what the router itself acts on.
struct TextRequest : generation::Request {
  std::vector<std::string> stop_strings;
  uint64_t affinity_key = 0;  // which compute node (compute_pool.h); 0: from session_id / prompt
};

// A client's session id as compute sees it: scoped by the API key identity that sent it
// (auth::ApiKeys), so two keys using the same id never share a conversation's KV. Unchanged
// without keys or without an id.
inline std::string ScopedSessionId(const std::string& owner, const std::string& id) {
  return owner.empty() || id.empty() ? id : owner + "/" + id;
}

// Limits on a request's stop conditions (OpenAI's 4 stop strings), for every transport.
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopStringBytes = 512;
inline constexpr size_t kMaxStopTokens = 64;
inline constexpr int64_t kMaxTokensLimit = int64_t{1} << 24;

// Validates what every transport's request carries before it runs: sampling parameters
// (generation::ValidateSamplingParams), max_tokens, stop strings and stop token ids (against
// `vocab_size`). InvalidArgument naming the field by its OpenAI name.
absl::Status ValidateTextRequest(const TextRequest& request, int64_t vocab_size);

struct Delta {
  std::string text;                              // new text (complete UTF-8 characters only)
  std::vector<generation::SampledToken> tokens;  // tokens sampled since the previous delta
};

struct TextResult {
  generation::FinishReason finish = generation::FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV compute reused
  std::string text;                  // everything emitted
  std::string stop_string;           // the stop string that ended it, if one did
};

class RouterCore {
 public:
  RouterCore(std::string model_name, std::unique_ptr<tokenizer::Tokenizer> tok,
             std::unique_ptr<ComputeClient> compute, int64_t context_length);
  // Several compute nodes: each request goes to its conversation's node (compute_pool.h).
  RouterCore(std::string model_name, std::unique_ptr<tokenizer::Tokenizer> tok,
             std::vector<std::unique_ptr<ComputeClient>> computes, int64_t context_length);

  // The name responses carry: the first served name (SetServedNames), else the model's own.
  const std::string& model_name() const {
    return served_names_.empty() ? model_name_ : served_names_[0];
  }
  // The names clients may ask for (/v1/models lists them): the served names, else the model's.
  std::vector<std::string> served_names() const {
    return served_names_.empty() ? std::vector<std::string>{model_name_} : served_names_;
  }
  // --served-model-name: aliases clients configured with a fixed model name use. Once set, the
  // model's own name is accepted only if listed (as vLLM). Each is 1..256 printable bytes,
  // no two alike (InvalidArgument naming the bad one). Call before serving.
  absl::Status SetServedNames(std::vector<std::string> names);
  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  int64_t context_length() const { return context_length_; }
  int64_t vocab_size() const { return vocab_size_; }
  // The model's vocabulary (compute's; the tokenizer's may be smaller): stop ids are checked on it.
  void set_vocab_size(int64_t n) { vocab_size_ = n; }

  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const std::vector<tokenizer::ChatMessage>& messages,
      const tokenizer::ChatOptions& options = {}) const;
  absl::StatusOr<std::vector<int32_t>> EncodeText(const std::string& text) const;
  // Checks a model name given by a client: empty or a served name is fine, anything else is
  // NotFound.
  absl::Status CheckModel(const std::string& name) const;

  // Runs one request. on_delta returning false cancels it (FinishReason::kCancelled), as does
  // request.cancel (at once, even while queued or prefilling). The request is validated first
  // (ValidateTextRequest); prompts that leave no room to generate are InvalidArgument naming
  // both lengths.
  absl::StatusOr<TextResult> Run(const TextRequest& request,
                                 const std::function<bool(const Delta&)>& on_delta);

  // Prefetch hints: before a request of a conversation compute has served before, tell compute
  // to warm up to `max_experts` of the experts its earlier turns used most (0: off; the binaries
  // default to 64, which bench/hint_bench.py measured to pay).
  void set_prefetch_hints(size_t max_experts) { hint_experts_ = max_experts; }
  const ExpertHeat& heat() const { return heat_; }
  ComputePool& computes() { return *computes_; }

 private:
  // The compute request: the prompt checked against the context (InvalidArgument naming both
  // lengths), max_tokens and min_tokens clamped to the room left.
  absl::StatusOr<ComputeRequest> FitToContext(const TextRequest& request) const;
  // The experts to warm up before a conversation's request (set_prefetch_hints).
  std::vector<expert_source::ExpertId> HintsFor(const TextRequest& request) const;

  std::string model_name_;
  std::vector<std::string> served_names_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<ComputePool> computes_;
  int64_t context_length_;
  int64_t vocab_size_ = 0;  // the model's (compute's), at least the tokenizer's
  ExpertHeat heat_;
  size_t hint_experts_ = 0;
};

// Loads the tokenizer from `model_dir` and builds a core over `compute`.
absl::StatusOr<std::unique_ptr<RouterCore>> MakeRouterCore(const std::string& model_dir,
                                                           std::unique_ptr<ComputeClient> compute);
// Over several compute nodes, which must all serve the same model (FailedPrecondition naming the
// odd one otherwise).
absl::StatusOr<std::unique_ptr<RouterCore>> MakeRouterCore(
    const std::string& model_dir, std::vector<std::unique_ptr<ComputeClient>> computes);

}  // namespace colibri::router
