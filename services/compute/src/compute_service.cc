#include "compute_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "colibri/generation/proto.h"
#include "colibri/rpc/status.h"

namespace colibri::compute {

ComputeService::ComputeService(ComputeNode* node, ComputeMetrics* metrics, int max_pending_requests)
    : node_(node),
      metrics_(metrics),
      pending_(max_pending_requests),
      executor_(max_pending_requests + 1) {
  metrics_->pending_requests_limit->Set(pending_.limit());
}

ComputeService::~ComputeService() = default;

grpc::ServerWriteReactor<v1::GenerateResponse>* ComputeService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) {
  if (!req->model().empty() && req->model() != node_->model_name()) {
    return Reject(absl::NotFoundError(absl::StrCat("model '", req->model(),
                                                   "' is not served here (this node runs '",
                                                   node_->model_name(), "')")));
  }
  auto ticket = pending_.TryAcquire();  // held until the request's producer is done
  if (!ticket) return Reject(absl::ResourceExhaustedError("compute: too many requests waiting"));
  metrics_->pending_requests->Increment();
  engine::GenerationRequest r;
  static_cast<generation::Request&>(r) =
      generation::RequestFromProto(*req, node_->manifest().config.context_length);
  const auto deadline = ctx->deadline();
  using Writer = rpc::QueuedWriteReactor<v1::GenerateResponse>;
  return new Writer(&executor_, [this, r = std::move(r), deadline, ticket](Writer* out) mutable {
    r.cancel =
        out->cancel_token();  // the router cancelling the call stops the engine's work at once
    return Run(r, deadline, out);
  });
}

grpc::ServerWriteReactor<v1::GenerateResponse>* ComputeService::Reject(const absl::Status& status) {
  using Writer = rpc::QueuedWriteReactor<v1::GenerateResponse>;
  return new Writer(&executor_, [status](Writer*) { return rpc::ToGrpc(status); });
}

grpc::Status ComputeService::Run(const engine::GenerationRequest& r,
                                 std::chrono::system_clock::time_point deadline,
                                 rpc::QueuedWriteReactor<v1::GenerateResponse>* out) {
  metrics_->active_requests->Increment();
  const auto t0 = std::chrono::steady_clock::now();
  bool first = true;
  auto result = node_->engine().Generate(r, [&](const engine::SampledToken& tok) {
    if (first) {
      metrics_->time_to_first_token_seconds->Observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      first = false;
    }
    if (std::chrono::system_clock::now() > deadline) return false;
    v1::GenerateResponse msg;
    auto* ev = msg.add_tokens();
    ev->set_token_id(static_cast<uint32_t>(tok.id));
    ev->set_logprob(tok.logprob);
    for (const auto& [id, lp] : tok.top) {
      auto* t = ev->add_top_logprobs();
      t->set_token_id(static_cast<uint32_t>(id));
      t->set_logprob(lp);
    }
    return out->Push(std::move(msg));
  });
  metrics_->active_requests->Decrement();
  metrics_->pending_requests->Decrement();
  if (!result.ok()) {
    metrics_->requests_failed->Increment();
    return rpc::ToGrpc(result.status());
  }
  if (result->finish == engine::FinishReason::kCancelled) {
    return std::chrono::system_clock::now() > deadline
               ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "deadline exceeded during generation")
               : grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
  }
  v1::GenerateResponse last;
  last.set_finish_reason(generation::FinishToProto(result->finish));
  last.mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(result->prompt_tokens));
  last.mutable_usage()->set_completion_tokens(static_cast<uint32_t>(result->tokens.size()));
  last.mutable_usage()->set_cached_prompt_tokens(
      static_cast<uint32_t>(result->cached_prompt_tokens));
  for (const ExpertUse& u : TopExperts(result->expert_counts, node_->model().config())) {
    auto* ec = last.add_expert_counts();
    ec->set_layer(u.id.layer);
    ec->set_expert(u.id.expert);
    ec->set_count(u.count);
  }
  out->Push(std::move(last));
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* ComputeService::Prefetch(grpc::CallbackServerContext* ctx,
                                                   const v1::PrefetchRequest* req,
                                                   v1::PrefetchResponse* resp) {
  std::vector<expert_source::ExpertId> ids;
  ids.reserve(static_cast<size_t>(req->experts_size()));
  for (const auto& e : req->experts()) {
    ids.push_back({e.layer(), e.expert()});
  }
  auto accepted = node_->PrefetchHint(ids);
  if (accepted.ok()) resp->set_accepted(static_cast<uint32_t>(*accepted));
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(accepted.ok() ? grpc::Status::OK : rpc::ToGrpc(accepted.status()));
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                       const v1::ModelInfoRequest* req,
                                                       v1::ModelInfo* resp) {
  auto* reactor = ctx->DefaultReactor();
  const auto& m = node_->manifest();
  if (!req->model().empty() && req->model() != m.name) {
    reactor->Finish(rpc::ToGrpc(
        absl::NotFoundError(absl::StrCat("model '", req->model(), "' is not served here"))));
    return reactor;
  }
  resp->set_name(m.name);
  resp->set_architecture(std::string(model::ArchitectureName(m.config.architecture)));
  resp->set_vocab_size(static_cast<uint32_t>(m.config.vocab_size));
  resp->set_context_length(static_cast<uint32_t>(m.config.context_length));
  for (int64_t e : m.config.eos_token_ids) resp->add_eos_token_ids(static_cast<uint32_t>(e));
  resp->set_bos_token_id(static_cast<uint32_t>(std::max<int64_t>(0, m.config.bos_token_id)));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace colibri::compute
