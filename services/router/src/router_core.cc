#include "router_core.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "colibri/core/status.h"
#include "stop_strings.h"

namespace colibri::router {

namespace {

std::vector<std::unique_ptr<ComputeClient>> One(std::unique_ptr<ComputeClient> c) {
  std::vector<std::unique_ptr<ComputeClient>> v;
  v.push_back(std::move(c));
  return v;
}

}  // namespace

RouterCore::RouterCore(std::string model_name, std::unique_ptr<tokenizer::Tokenizer> tok,
                       std::unique_ptr<ComputeClient> compute, int64_t context_length)
    : RouterCore(std::move(model_name), std::move(tok), One(std::move(compute)), context_length) {}

RouterCore::RouterCore(std::string model_name, std::unique_ptr<tokenizer::Tokenizer> tok,
                       std::vector<std::unique_ptr<ComputeClient>> computes, int64_t context_length)
    : model_name_(std::move(model_name)),
      tok_(std::move(tok)),
      computes_(std::make_unique<ComputePool>(std::move(computes))),
      context_length_(context_length),
      vocab_size_(static_cast<int64_t>(tok_->vocab_size())) {}

absl::StatusOr<std::unique_ptr<RouterCore>> MakeRouterCore(const std::string& model_dir,
                                                           std::unique_ptr<ComputeClient> compute) {
  return MakeRouterCore(model_dir, One(std::move(compute)));
}

absl::StatusOr<std::unique_ptr<RouterCore>> MakeRouterCore(
    const std::string& model_dir, std::vector<std::unique_ptr<ComputeClient>> computes) {
  if (computes.empty()) return absl::InvalidArgumentError("no compute node given");
  ASSIGN_OR_RETURN(auto tok, tokenizer::LoadTokenizer(model_dir));
  ASSIGN_OR_RETURN(ModelInfo info, computes[0]->Info());
  for (size_t i = 1; i < computes.size(); ++i) {
    ASSIGN_OR_RETURN(ModelInfo other, computes[i]->Info());
    if (other.name != info.name || other.vocab_size != info.vocab_size ||
        other.context_length != info.context_length) {
      return absl::FailedPreconditionError(absl::StrCat("compute node ", i + 1, " serves model '",
                                                        other.name, "', the first one '", info.name,
                                                        "': every node must serve the same model"));
    }
  }
  if (tok->vocab_size() > info.vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer in '", model_dir, "' has ",
                                                      tok->vocab_size(), " tokens but model '",
                                                      info.name, "' only ", info.vocab_size));
  }
  auto core = std::make_unique<RouterCore>(info.name, std::move(tok), std::move(computes),
                                           info.context_length);
  core->set_vocab_size(info.vocab_size);
  return core;
}

absl::Status RouterCore::SetServedNames(std::vector<std::string> names) {
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    const bool printable = std::all_of(n.begin(), n.end(), [](char c) {
      return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
    });
    if (n.empty() || n.size() > 256 || !printable) {
      return absl::InvalidArgumentError(
          absl::StrCat("--served-model-name '", n, "': names are 1 to 256 printable bytes"));
    }
    if (std::find(names.begin(), names.begin() + static_cast<ptrdiff_t>(i), n) !=
        names.begin() + static_cast<ptrdiff_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--served-model-name '", n, "' is given twice"));
    }
  }
  served_names_ = std::move(names);
  return absl::OkStatus();
}

absl::Status RouterCore::CheckModel(const std::string& name) const {
  const std::vector<std::string> names = served_names();
  if (name.empty() || std::find(names.begin(), names.end(), name) != names.end())
    return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat("The model '", name,
                                          "' does not exist (this server serves '",
                                          absl::StrJoin(names, "', '"), "')"));
}

absl::StatusOr<std::vector<int32_t>> RouterCore::EncodeChat(
    const std::vector<tokenizer::ChatMessage>& messages,
    const tokenizer::ChatOptions& options) const {
  // Every transport's messages (HTTP maps OpenAI's "developer" to "system" first).
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return absl::InvalidArgumentError(absl::StrCat("'messages[", i, "].role': unknown role '",
                                                     role, "' (system, user, assistant or tool)"));
    }
  }
  // The model's own chat template (Mistral's format when it has none), as transformers renders it.
  ASSIGN_OR_RETURN(std::string prompt, tokenizer::RenderChat(*tok_, messages, options));
  return tok_->Encode(prompt, /*add_special=*/false);  // the rendered prompt carries BOS itself
}

absl::StatusOr<std::vector<int32_t>> RouterCore::EncodeText(const std::string& text) const {
  return tok_->Encode(text, /*add_special=*/true);
}

absl::Status ValidateTextRequest(const TextRequest& request, int64_t vocab_size) {
  RETURN_IF_ERROR(generation::ValidateSamplingParams(request.sampling));
  if (request.max_tokens < 1 || request.max_tokens > kMaxTokensLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("'max_tokens': must be between 1 and ", kMaxTokensLimit));
  }
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("'min_tokens': must be between 0 and max_tokens (", request.max_tokens, ")"));
  }
  if (request.stop_strings.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("'stop': at most ", kMaxStopStrings, " stop strings"));
  }
  for (const auto& s : request.stop_strings) {
    if (s.empty()) return absl::InvalidArgumentError("'stop': stop strings must not be empty");
    if (s.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("'stop': stop strings must be at most ", kMaxStopStringBytes, " bytes"));
    }
  }
  if (request.stop_tokens.size() > kMaxStopTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("'stop_token_ids': at most ", kMaxStopTokens, " ids"));
  }
  for (int32_t t : request.stop_tokens) {
    if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'stop_token_ids': ", t, " is outside the vocabulary (size ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

// One request's output as text: tokens decoded into UTF-8-safe deltas, stop strings matched
// across token boundaries (once min_tokens tokens are out, as vLLM), what the client took.
class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer* tok, const TextRequest& request,
             const std::function<bool(const Delta&)>& on_delta)
      : decoder_(tok),
        stops_(request.stop_strings),
        min_tokens_(request.min_tokens),
        on_delta_(on_delta) {}

  // A sampled token; false ends the generation (a stop string, or the client cancelled).
  bool Push(const generation::SampledToken& t) {
    delta_.tokens.push_back(t);
    std::string text = decoder_.Push(t.id);
    if (++tokens_out_ >= min_tokens_) {
      StopStringMatcher::Step step = stops_.Push(text);
      if (step.stopped) {
        stopped_by_string_ = true;
        result_.stop_string = std::move(step.stop);
        cancelled_by_client_ = !Emit(std::move(step.text));
        return false;
      }
      text = std::move(step.text);
      if (text.empty() && delta_.tokens.empty()) return true;
    }
    if (!Emit(std::move(text))) {
      cancelled_by_client_ = true;
      return false;
    }
    return true;
  }

  // The result once compute is done: the text held back is flushed unless the stream stopped.
  TextResult Finish(const ComputeResult& generated, int64_t n_prompt) {
    result_.prompt_tokens = generated.prompt_tokens > 0 ? generated.prompt_tokens : n_prompt;
    result_.completion_tokens = generated.completion_tokens;
    result_.cached_prompt_tokens = generated.cached_prompt_tokens;
    result_.finish = generated.finish;
    if (stopped_by_string_) {
      result_.finish = generation::FinishReason::kStop;
    } else if (!cancelled_by_client_) {
      std::string rest = stops_.Flush() + decoder_.Flush();
      if (!rest.empty() || !delta_.tokens.empty()) Emit(rest);
    }
    if (cancelled_by_client_) result_.finish = generation::FinishReason::kCancelled;
    return std::move(result_);
  }

 private:
  bool Emit(std::string text) {
    delta_.text = std::move(text);
    result_.text += delta_.text;
    const bool keep = on_delta_(delta_);
    delta_.tokens.clear();
    return keep;
  }

  tokenizer::StreamDecoder decoder_;
  StopStringMatcher stops_;
  const int64_t min_tokens_;
  const std::function<bool(const Delta&)>& on_delta_;
  TextResult result_;
  Delta delta_;
  int64_t tokens_out_ = 0;
  bool stopped_by_string_ = false, cancelled_by_client_ = false;
};

}  // namespace

absl::StatusOr<ComputeRequest> RouterCore::FitToContext(const TextRequest& request) const {
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  if (n_prompt == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (n_prompt >= context_length_) {
    return absl::InvalidArgumentError(absl::StrCat("This model's maximum context length is ",
                                                   context_length_, " tokens, but the prompt has ",
                                                   n_prompt, " tokens"));
  }
  ComputeRequest cr = request;  // the compute part of the request, clamped to the context
  cr.max_tokens = std::min(request.max_tokens, context_length_ - n_prompt);
  cr.min_tokens = std::min(request.min_tokens, cr.max_tokens);
  return cr;
}

std::vector<expert_source::ExpertId> RouterCore::HintsFor(const TextRequest& request) const {
  if (hint_experts_ == 0 || request.session_id.empty()) return {};
  return heat_.Hints(request.session_id, hint_experts_);
}

absl::StatusOr<TextResult> RouterCore::Run(const TextRequest& request,
                                           const std::function<bool(const Delta&)>& on_delta) {
  RETURN_IF_ERROR(ValidateTextRequest(request, vocab_size_));
  ASSIGN_OR_RETURN(const ComputeRequest cr, FitToContext(request));
  // The conversation's node (ComputePool: affinity, hints, failover before the first token).
  const uint64_t key = request.affinity_key != 0
                           ? request.affinity_key
                           : ComputePool::Key(request.session_id, request.prompt);
  TextStream stream(tok_.get(), request, on_delta);
  ASSIGN_OR_RETURN(
      const ComputeResult generated,
      computes_->Generate(key, cr, HintsFor(request),
                          [&](const generation::SampledToken& t) { return stream.Push(t); }));
  heat_.Record(request.session_id, generated.expert_counts);
  return stream.Finish(generated, static_cast<int64_t>(request.prompt.size()));
}

}  // namespace colibri::router
