// A ComputeClient for router tests: streams a scripted list of token ids and records what it
// was asked (requests, what on_token returned, prefetch hints). Test-only.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "compute_client.h"

namespace colibri::router::testing {

// A compute client that streams a scripted list of token ids and records what it was asked.
class FakeCompute final : public ComputeClient {
 public:
  struct Log {
    std::vector<ComputeRequest> requests;
    std::vector<bool> on_token_returned;  // what on_token returned, token by token
    int info_calls = 0;
    std::vector<std::vector<expert_source::ExpertId>> prefetches;
  };

  FakeCompute(std::vector<int32_t> script, Log* log,
              generation::FinishReason finish = generation::FinishReason::kLength)
      : script_(std::move(script)), log_(log), finish_(finish) {}

  absl::StatusOr<ModelInfo> Info() override {
    log_->info_calls++;
    return info_;
  }

  absl::StatusOr<ComputeResult> Generate(
      const ComputeRequest& request,
      const std::function<bool(const generation::SampledToken&)>& on_token) override {
    log_->requests.push_back(request);
    if (!error_.ok() && !fail_after_script_) return error_;
    ComputeResult r;
    r.prompt_tokens = static_cast<int64_t>(request.prompt.size());
    r.expert_counts = counts_;
    for (int32_t id : script_) {
      if (r.completion_tokens >= request.max_tokens) {
        if (fail_after_script_) return error_;
        return r;  // kLength
      }
      generation::SampledToken t;
      t.id = id;
      t.logprob = -0.5f;
      ++r.completion_tokens;
      const bool keep = on_token(t);
      log_->on_token_returned.push_back(keep);
      if (!keep) {
        r.finish = generation::FinishReason::kCancelled;
        return r;
      }
    }
    if (fail_after_script_) return error_;  // the node died mid-stream
    r.finish = finish_;
    return r;
  }

  absl::StatusOr<size_t> Prefetch(const std::vector<expert_source::ExpertId>& experts) override {
    log_->prefetches.push_back(experts);
    if (!prefetch_error_.ok()) return prefetch_error_;
    return experts.size();
  }
  absl::Status prefetch_error_;  // what Prefetch answers (after logging the call)

  std::vector<expert_source::ExpertUse> counts_;  // the routing report every Generate returns
  bool fail_after_script_ = false;                // stream the script, then return error_

  ModelInfo info_{"tiny-moe", "mixtral", 512, 64};
  absl::Status error_;

 private:
  std::vector<int32_t> script_;
  Log* log_;
  generation::FinishReason finish_;
};

}  // namespace colibri::router::testing
