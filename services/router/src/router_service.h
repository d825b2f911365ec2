// Router gRPC service: the same generation as the HTTP API for clients in any language.
// Thin: proto -> RouterCore -> proto; requests run on the service's executor.
#pragma once

#include "colibri/core/thread_pool.h"
#include "colibri/v1/router.grpc.pb.h"
#include "router_core.h"
#include "router_metrics.h"

namespace colibri::router {

class RouterService final : public v1::Router::CallbackService {
 public:
  RouterService(RouterCore* core, RouterMetrics* metrics, int max_concurrent);

  grpc::ServerWriteReactor<v1::RouterGenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                                 const v1::RouterGenerateRequest* req) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::RouterListModelsRequest* req,
                                       v1::RouterListModelsResponse* resp) override;

 private:
  RouterCore* core_;
  RouterMetrics* metrics_;
  ThreadPool executor_;
};

}  // namespace colibri::router
