// Router gRPC service: the same generation as the HTTP API for clients in any language, plus
// sessions (the router keeps the conversation; see sessions.h). Thin: proto -> RouterCore /
// SessionManager -> proto; requests run on the service's executor.
#pragma once

#include <memory>

#include "colibri/auth/api_keys.h"
#include "colibri/core/thread_pool.h"
#include "colibri/rpc/pending_limit.h"
#include "colibri/rpc/queued_write_reactor.h"
#include "colibri/v1/router.grpc.pb.h"
#include "router_core.h"
#include "router_metrics.h"
#include "sessions.h"

namespace colibri::router {

class RouterService final : public v1::Router::CallbackService {
 public:
  // `max_sessions`: conversations the session API keeps (the idle longest are forgotten).
  // `max_pending`: Generate/SendMessage calls held at once (waiting or running); past it
  // RESOURCE_EXHAUSTED at once.
  // `max_sessions_per_key`: sessions one API key may hold (SessionManager).
  RouterService(RouterCore* core, RouterMetrics* metrics, int max_concurrent,
                size_t max_sessions = 4096, int max_pending = 256,
                size_t max_sessions_per_key = 256);

  grpc::ServerWriteReactor<v1::RouterGenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const v1::RouterGenerateRequest* req) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::RouterListModelsRequest* req,
                                       v1::RouterListModelsResponse* resp) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* ctx,
                                          const v1::CreateSessionRequest* req,
                                          v1::SessionInfo* resp) override;
  grpc::ServerWriteReactor<v1::RouterGenerateResponse>* SendMessage(
      grpc::CallbackServerContext* ctx, const v1::SendMessageRequest* req) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const v1::GetSessionRequest* req,
                                       v1::SessionInfo* resp) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* ctx,
                                          const v1::DeleteSessionRequest* req,
                                          v1::DeleteSessionResponse* resp) override;

  SessionManager& sessions() { return sessions_; }
  // API keys every RPC needs in its `authorization: Bearer KEY` metadata (UNAUTHENTICATED
  // otherwise); each session belongs to the key that created it. Set before serving.
  void set_api_keys(std::shared_ptr<const auth::ApiKeys> keys) { keys_ = std::move(keys); }

 private:
  // Runs a generation on the executor thread, streaming its deltas and then the final message
  // (finish reason, usage); counts it under `endpoint` in the metrics.
  grpc::Status StreamRun(
      rpc::QueuedWriteReactor<v1::RouterGenerateResponse>* out, const std::string& endpoint,
      const std::function<absl::StatusOr<TextResult>(const std::function<bool(const Delta&)>&)>&
          run);

  RouterCore* core_;
  RouterMetrics* metrics_;
  std::shared_ptr<const auth::ApiKeys> keys_;
  SessionManager sessions_;
  rpc::PendingLimit pending_;
  ThreadPool executor_;
};

}  // namespace colibri::router
