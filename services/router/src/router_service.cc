#include "router_service.h"

#include "absl/strings/str_cat.h"
#include "colibri/auth/grpc_auth.h"
#include "colibri/generation/proto.h"
#include "colibri/rpc/queued_write_reactor.h"
#include "colibri/rpc/status.h"
#include "request_proto.h"

namespace colibri::router {

namespace {

using Writer = rpc::QueuedWriteReactor<v1::RouterGenerateResponse>;

// A stream refused before any work (authentication, the pending cap): finishes at once.
class RefusedStream final : public grpc::ServerWriteReactor<v1::RouterGenerateResponse> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(rpc::ToGrpc(status)); }
  void OnDone() override { delete this; }
};

grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(rpc::ToGrpc(status));
  return reactor;
}

}  // namespace

RouterService::RouterService(RouterCore* core, RouterMetrics* metrics, int max_concurrent,
                             size_t max_sessions, int max_pending, size_t max_sessions_per_key)
    : core_(core),
      metrics_(metrics),
      sessions_(core, max_sessions, max_sessions_per_key),
      pending_(max_pending),
      executor_(max_concurrent + 1) {}

grpc::Status RouterService::StreamRun(
    Writer* out, const std::string& endpoint,
    const std::function<absl::StatusOr<TextResult>(const std::function<bool(const Delta&)>&)>&
        run) {
  metrics_->active_requests->Increment();
  auto result = run([&](const Delta& d) {
    v1::RouterGenerateResponse msg;
    msg.set_text(d.text);
    for (const auto& t : d.tokens) msg.add_token_ids(static_cast<uint32_t>(t.id));
    return out->Push(std::move(msg));
  });
  metrics_->active_requests->Decrement();
  if (!result.ok()) {
    metrics_->CountRequest(endpoint, rpc::HttpStatus(result.status()));
    return rpc::ToGrpc(result.status());
  }
  if (result->finish == generation::FinishReason::kCancelled)
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  metrics_->prompt_tokens->Increment(static_cast<double>(result->prompt_tokens));
  metrics_->completion_tokens->Increment(static_cast<double>(result->completion_tokens));
  v1::RouterGenerateResponse last;
  last.set_finish_reason(generation::FinishToProto(result->finish));
  last.mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(result->prompt_tokens));
  last.mutable_usage()->set_completion_tokens(static_cast<uint32_t>(result->completion_tokens));
  last.mutable_usage()->set_cached_prompt_tokens(
      static_cast<uint32_t>(result->cached_prompt_tokens));
  out->Push(std::move(last));
  metrics_->CountRequest(endpoint, 200);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::RouterGenerateResponse>* RouterService::Generate(
    grpc::CallbackServerContext* ctx, const v1::RouterGenerateRequest* req) {
  auto who = auth::Authenticate(keys_.get(), *ctx);
  if (!who.ok()) return new RefusedStream(who.status());
  auto ticket = pending_.TryAcquire();
  if (!ticket)
    return new RefusedStream(absl::ResourceExhaustedError(
        absl::StrCat("router: ", pending_.limit(), " requests are waiting already")));
  v1::RouterGenerateRequest copy = *req;
  const auto deadline = ctx->deadline();
  return new Writer(
      &executor_,
      [this, req = std::move(copy), deadline, ticket, owner = *who](Writer* out) -> grpc::Status {
        auto fail = [&](const absl::Status& st) {
          metrics_->CountRequest("grpc_generate", rpc::HttpStatus(st));
          return rpc::ToGrpc(st);
        };
        if (auto st = core_->CheckModel(req.model()); !st.ok()) return fail(st);
        absl::StatusOr<std::vector<int32_t>> ids;
        uint64_t chat_key = 0;
        switch (req.input_case()) {
          case v1::RouterGenerateRequest::kPrompt: ids = core_->EncodeText(req.prompt()); break;
          case v1::RouterGenerateRequest::kChat: {
            std::vector<tokenizer::ChatMessage> msgs = ChatFromProto(req.chat());
            ids = core_->EncodeChat(msgs);
            chat_key = ComputePool::ChatKey(msgs);
            break;
          }
          case v1::RouterGenerateRequest::kTokens:
            ids = std::vector<int32_t>(req.tokens().ids().begin(), req.tokens().ids().end());
            break;
          default: ids = absl::InvalidArgumentError("one of prompt, chat or tokens is required");
        }
        if (!ids.ok()) return fail(ids.status());
        TextRequest tr = TextRequestFromProto(req.sampling(), req.stop(), deadline);
        tr.prompt = std::move(*ids);
        tr.session_id = ScopedSessionId(owner, req.session_id());
        tr.cancel = out->cancel_token();
        if (tr.session_id.empty()) tr.affinity_key = chat_key;
        return StreamRun(out, "grpc_generate",
                         [&](const auto& on_delta) { return core_->Run(tr, on_delta); });
      });
}

grpc::ServerWriteReactor<v1::RouterGenerateResponse>* RouterService::SendMessage(
    grpc::CallbackServerContext* ctx, const v1::SendMessageRequest* req) {
  auto who = auth::Authenticate(keys_.get(), *ctx);
  if (!who.ok()) return new RefusedStream(who.status());
  auto ticket = pending_.TryAcquire();
  if (!ticket)
    return new RefusedStream(absl::ResourceExhaustedError(
        absl::StrCat("router: ", pending_.limit(), " requests are waiting already")));
  v1::SendMessageRequest copy = *req;
  const auto deadline = ctx->deadline();
  return new Writer(
      &executor_,
      [this, req = std::move(copy), deadline, ticket, owner = *who](Writer* out) -> grpc::Status {
        TextRequest tr = TextRequestFromProto(req.sampling(), req.stop(), deadline);
        tr.cancel = out->cancel_token();
        tokenizer::ChatMessage m{req.message().role(), req.message().content()};
        return StreamRun(out, "grpc_session_send", [&](const auto& on_delta) {
          return sessions_.Send(req.session_id(), std::move(m), std::move(tr), on_delta, owner);
        });
      });
}

namespace {

void FillSessionInfo(const SessionView& v, const std::string& model, v1::SessionInfo* info) {
  info->set_session_id(v.id);
  info->set_model(model);
  for (const auto& m : v.messages) {
    auto* pm = info->add_messages();
    pm->set_role(m.role);
    pm->set_content(m.content);
  }
  info->set_turns(static_cast<uint32_t>(v.turns));
}

}  // namespace

grpc::ServerUnaryReactor* RouterService::CreateSession(grpc::CallbackServerContext* ctx,
                                                       const v1::CreateSessionRequest* req,
                                                       v1::SessionInfo* resp) {
  auto who = auth::Authenticate(keys_.get(), *ctx);
  if (!who.ok()) return Refused(ctx, who.status());
  auto* reactor = ctx->DefaultReactor();
  auto v = sessions_.Create(req->model(), req->system_prompt(), *who);
  if (v.ok()) FillSessionInfo(*v, core_->model_name(), resp);
  reactor->Finish(v.ok() ? grpc::Status::OK : rpc::ToGrpc(v.status()));
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::GetSession(grpc::CallbackServerContext* ctx,
                                                    const v1::GetSessionRequest* req,
                                                    v1::SessionInfo* resp) {
  auto who = auth::Authenticate(keys_.get(), *ctx);
  if (!who.ok()) return Refused(ctx, who.status());
  auto* reactor = ctx->DefaultReactor();
  auto v = sessions_.Get(req->session_id(), *who);
  if (v.ok()) FillSessionInfo(*v, core_->model_name(), resp);
  reactor->Finish(v.ok() ? grpc::Status::OK : rpc::ToGrpc(v.status()));
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::DeleteSession(grpc::CallbackServerContext* ctx,
                                                       const v1::DeleteSessionRequest* req,
                                                       v1::DeleteSessionResponse* resp) {
  auto who = auth::Authenticate(keys_.get(), *ctx);
  if (!who.ok()) return Refused(ctx, who.status());
  resp->set_deleted(sessions_.Delete(req->session_id(), *who));
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::ListModels(grpc::CallbackServerContext* ctx,
                                                    const v1::RouterListModelsRequest*,
                                                    v1::RouterListModelsResponse* resp) {
  auto who = auth::Authenticate(keys_.get(), *ctx);
  if (!who.ok()) return Refused(ctx, who.status());
  for (const std::string& name : core_->served_names()) resp->add_models(name);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace colibri::router
