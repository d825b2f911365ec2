// Compute gRPC service: Generate streams the tokens of one request as the engine samples them;
// GetModelInfo tells the router about the model. Thin: proto -> engine request -> proto.
// Requests run on the service's executor (never inside a reaction); at most
// `max_pending_requests` wait for the engine, past that RESOURCE_EXHAUSTED.
#pragma once

#include <atomic>
#include <memory>

#include "colibri/core/thread_pool.h"
#include "colibri/rpc/pending_limit.h"
#include "colibri/rpc/queued_write_reactor.h"
#include "colibri/v1/compute.grpc.pb.h"
#include "compute_metrics.h"
#include "compute_node.h"

namespace colibri::compute {

class ComputeService final : public v1::Compute::CallbackService {
 public:
  ComputeService(ComputeNode* node, ComputeMetrics* metrics, int max_pending_requests);
  ~ComputeService() override;

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                           const v1::GenerateRequest* req) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const v1::ModelInfoRequest* req,
                                         v1::ModelInfo* resp) override;
  grpc::ServerUnaryReactor* Prefetch(grpc::CallbackServerContext* ctx,
                                     const v1::PrefetchRequest* req,
                                     v1::PrefetchResponse* resp) override;

 private:
  grpc::ServerWriteReactor<v1::GenerateResponse>* Reject(const absl::Status& status);
  grpc::Status Run(const engine::GenerationRequest& r,
                   std::chrono::system_clock::time_point deadline,
                   rpc::QueuedWriteReactor<v1::GenerateResponse>* out);
  ComputeNode* node_;
  ComputeMetrics* metrics_;
  rpc::PendingLimit pending_;
  ThreadPool executor_;
};

}  // namespace colibri::compute
