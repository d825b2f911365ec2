#include "router_service.h"

#include "absl/strings/str_cat.h"
#include "colibri/rpc/queued_write_reactor.h"
#include "colibri/rpc/status.h"
#include "compute_service.h"

namespace colibri::router {

RouterService::RouterService(RouterCore* core, RouterMetrics* metrics, int max_concurrent)
    : core_(core), metrics_(metrics), executor_(max_concurrent + 1) {}

grpc::ServerWriteReactor<v1::RouterGenerateResponse>* RouterService::Generate(grpc::CallbackServerContext* ctx,
                                                                              const v1::RouterGenerateRequest* req) {
  using Writer = rpc::QueuedWriteReactor<v1::RouterGenerateResponse>;
  v1::RouterGenerateRequest copy = *req;
  const auto deadline = ctx->deadline();
  return new Writer(&executor_, [this, req = std::move(copy), deadline](Writer* out) -> grpc::Status {
    auto fail = [&](const absl::Status& st) {
      metrics_->CountRequest("grpc_generate", rpc::HttpStatus(st));
      return rpc::ToGrpc(st);
    };
    if (auto st = core_->CheckModel(req.model()); !st.ok()) return fail(st);
    TextRequest tr;
    absl::StatusOr<std::vector<int32_t>> ids;
    switch (req.input_case()) {
      case v1::RouterGenerateRequest::kPrompt:
        ids = core_->EncodeText(req.prompt());
        break;
      case v1::RouterGenerateRequest::kChat: {
        std::vector<tokenizer::ChatMessage> msgs;
        for (const auto& m : req.chat().messages()) msgs.push_back({m.role(), m.content()});
        ids = core_->EncodeChat(msgs);
        break;
      }
      case v1::RouterGenerateRequest::kTokens:
        ids = std::vector<int32_t>(req.tokens().ids().begin(), req.tokens().ids().end());
        break;
      default:
        ids = absl::InvalidArgumentError("one of prompt, chat or tokens is required");
    }
    if (!ids.ok()) return fail(ids.status());
    tr.prompt = std::move(*ids);
    tr.sampling = compute::SamplingFromProto(req.sampling());
    tr.max_tokens = req.stop().max_tokens() > 0 ? req.stop().max_tokens() : 256;
    tr.stop_strings.assign(req.stop().stop_strings().begin(), req.stop().stop_strings().end());
    tr.stop_tokens.assign(req.stop().stop_token_ids().begin(), req.stop().stop_token_ids().end());
    tr.ignore_eos = req.stop().ignore_eos();
    tr.session_id = req.session_id();
    tr.deadline = deadline;
    metrics_->active_requests->Increment();
    auto result = core_->Run(tr, [&](const Delta& d) {
      v1::RouterGenerateResponse msg;
      msg.set_text(d.text);
      for (const auto& t : d.tokens) msg.add_token_ids(static_cast<uint32_t>(t.id));
      return out->Push(std::move(msg));
    });
    metrics_->active_requests->Decrement();
    if (!result.ok()) return fail(result.status());
    if (result->finish == engine::FinishReason::kCancelled) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    metrics_->prompt_tokens->Increment(static_cast<double>(result->prompt_tokens));
    metrics_->completion_tokens->Increment(static_cast<double>(result->completion_tokens));
    v1::RouterGenerateResponse last;
    last.set_finish_reason(compute::FinishToProto(result->finish));
    last.mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(result->prompt_tokens));
    last.mutable_usage()->set_completion_tokens(static_cast<uint32_t>(result->completion_tokens));
    last.mutable_usage()->set_cached_prompt_tokens(static_cast<uint32_t>(result->cached_prompt_tokens));
    out->Push(std::move(last));
    metrics_->CountRequest("grpc_generate", 200);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* RouterService::ListModels(grpc::CallbackServerContext* ctx,
                                                    const v1::RouterListModelsRequest*,
                                                    v1::RouterListModelsResponse* resp) {
  resp->add_models(core_->model_name());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace colibri::router
