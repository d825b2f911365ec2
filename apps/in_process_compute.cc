#include "in_process_compute.h"

#include <chrono>
#include <string>

namespace colibri::router {
namespace {

class InProcessComputeClient final : public ComputeClient {
 public:
  explicit InProcessComputeClient(compute::ComputeNode* node) : node_(node) {}

  absl::StatusOr<ModelInfo> Info() override {
    const auto& m = node_->manifest();
    return ModelInfo{m.name, std::string(model::ArchitectureName(m.config.architecture)),
                     m.config.vocab_size, m.config.context_length};
  }

  absl::StatusOr<ComputeResult> Generate(
      const ComputeRequest& request,
      const std::function<bool(const generation::SampledToken&)>& on_token) override {
    engine::GenerationRequest r;
    static_cast<generation::Request&>(r) = request;
    auto result = node_->engine().Generate(r, [&](const generation::SampledToken& t) {
      if (std::chrono::system_clock::now() > request.deadline) return false;
      return on_token(t);
    });
    if (!result.ok()) return result.status();
    if (result->finish == engine::FinishReason::kCancelled &&
        std::chrono::system_clock::now() > request.deadline) {
      return absl::DeadlineExceededError("request deadline exceeded during generation");
    }
    return ComputeResult{result->finish, result->prompt_tokens,
                         static_cast<int64_t>(result->tokens.size()), result->cached_prompt_tokens,
                         compute::TopExperts(result->expert_counts, node_->model().config())};
  }

  absl::StatusOr<size_t> Prefetch(const std::vector<expert_source::ExpertId>& experts) override {
    return node_->PrefetchHint(experts);
  }

 private:
  compute::ComputeNode* node_;
};

}  // namespace

std::unique_ptr<ComputeClient> MakeInProcessComputeClient(compute::ComputeNode* node) {
  return std::make_unique<InProcessComputeClient>(node);
}

}  // namespace colibri::router
