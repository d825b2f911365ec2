// How the router reaches compute: in-process (colibri-server; apps/in_process_compute.h) or over
// gRPC (cluster mode). Both run the same engine; only the transport differs. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/auth/transport.h"
#include "colibri/core/cancel.h"
#include "colibri/expert_source/expert_id.h"
#include "colibri/generation/request.h"
#include "colibri/v1/compute.grpc.pb.h"

namespace colibri::router {

// What the router asks a compute node for (generation/request.h): one definition for the
// in-process client, the gRPC one and the engine.
using ComputeRequest = generation::Request;

struct ComputeResult {
  generation::FinishReason finish = generation::FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV was reused
  std::vector<expert_source::ExpertUse>
      expert_counts;  // the experts the request used most (routing report)
};

struct ModelInfo {
  std::string name;
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t context_length = 0;
};

class ComputeClient {
 public:
  virtual ~ComputeClient() = default;
  virtual absl::StatusOr<ModelInfo> Info() = 0;
  // Streams tokens to on_token (return false to cancel: the result then says kCancelled).
  virtual absl::StatusOr<ComputeResult> Generate(
      const ComputeRequest& request,
      const std::function<bool(const generation::SampledToken&)>& on_token) = 0;
  // Advisory: warm these experts in compute's caches. Returns how many compute accepted.
  virtual absl::StatusOr<size_t> Prefetch(const std::vector<expert_source::ExpertId>& experts) = 0;
};

// The in-process client (colibri-server, colibri-cli chat) is wired in apps/: the router does
// not link compute.
// `target`: host:port or unix:/path of a colibri-compute service, reached through `transport`
// (mutual TLS, or plaintext where allowed). InvalidArgument for a malformed target or plaintext
// to a non-loopback one without --insecure.
absl::StatusOr<std::unique_ptr<ComputeClient>> MakeGrpcComputeClient(
    const std::string& target, const auth::Transport& transport);

}  // namespace colibri::router
