#include "compute_client.h"

#include "absl/strings/str_cat.h"
#include "colibri/generation/proto.h"
#include "colibri/rpc/status.h"
#include "grpcpp/grpcpp.h"

namespace colibri::router {
namespace {

class GrpcComputeClient final : public ComputeClient {
 public:
  GrpcComputeClient(const std::string& target, std::shared_ptr<grpc::Channel> channel)
      : target_(target), stub_(v1::Compute::NewStub(std::move(channel))) {}

  absl::StatusOr<ModelInfo> Info() override {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfo info;
    grpc::Status st = stub_->GetModelInfo(&ctx, v1::ModelInfoRequest(), &info);
    if (!st.ok()) return Unavailable(st);
    return ModelInfo{info.name(), info.architecture(), info.vocab_size(), info.context_length()};
  }

  absl::StatusOr<ComputeResult> Generate(
      const ComputeRequest& request,
      const std::function<bool(const generation::SampledToken&)>& on_token) override {
    const v1::GenerateRequest req = generation::RequestToProto(request);
    grpc::ClientContext ctx;
    if (request.deadline != std::chrono::system_clock::time_point::max())
      ctx.set_deadline(request.deadline);
    // The client leaving cancels the call, so compute stops even before the first token.
    CancelFlag::Registration on_cancel =
        CancelFlag::OnCancel(request.cancel, [&ctx] { ctx.TryCancel(); });
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse resp;
    ComputeResult result;
    bool cancelled = false;
    while (reader->Read(&resp)) {
      for (const auto& ev : resp.tokens()) {
        generation::SampledToken t;
        t.id = static_cast<int32_t>(ev.token_id());
        t.logprob = ev.logprob();
        for (const auto& tl : ev.top_logprobs())
          t.top.emplace_back(static_cast<int32_t>(tl.token_id()), tl.logprob());
        result.completion_tokens++;
        if (!cancelled && !on_token(t)) {
          cancelled = true;
          ctx.TryCancel();
        }
      }
      if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        result.finish = generation::FinishFromProto(resp.finish_reason());
        result.prompt_tokens = resp.usage().prompt_tokens();
        result.cached_prompt_tokens = resp.usage().cached_prompt_tokens();
        for (const auto& ec : resp.expert_counts()) {
          result.expert_counts.push_back({{ec.layer(), ec.expert()}, ec.count()});
        }
      }
    }
    grpc::Status st = reader->Finish();
    on_cancel.Reset();
    if (cancelled || IsCancelled(request.cancel)) {
      result.finish = generation::FinishReason::kCancelled;
      result.prompt_tokens = static_cast<int64_t>(request.prompt.size());
      return result;
    }
    if (!st.ok()) return Unavailable(st);
    return result;
  }

  absl::StatusOr<size_t> Prefetch(const std::vector<expert_source::ExpertId>& experts) override {
    v1::PrefetchRequest req;
    for (const auto& id : experts) {
      auto* e = req.add_experts();
      e->set_layer(id.layer);
      e->set_expert(id.expert);
    }
    grpc::ClientContext ctx;
    // Advisory and on the request's path: never worth more than a short wait.
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
    v1::PrefetchResponse resp;
    grpc::Status st = stub_->Prefetch(&ctx, req, &resp);
    if (!st.ok()) return Unavailable(st);
    return static_cast<size_t>(resp.accepted());
  }

 private:
  absl::Status Unavailable(const grpc::Status& st) {
    absl::Status s = rpc::FromGrpc(st);
    return absl::Status(s.code(), absl::StrCat("compute at ", target_, ": ", s.message()));
  }

  std::string target_;
  std::unique_ptr<v1::Compute::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ComputeClient>> MakeGrpcComputeClient(
    const std::string& target, const auth::Transport& transport) {
  auto channel = transport.Channel(target);
  if (!channel.ok())
    return absl::InvalidArgumentError(absl::StrCat("--compute: ", channel.status().message()));
  return std::unique_ptr<ComputeClient>(
      std::make_unique<GrpcComputeClient>(target, std::move(*channel)));
}

}  // namespace colibri::router
