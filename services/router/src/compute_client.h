// How the router reaches compute: in-process (colibri-server) or over gRPC (cluster mode).
// Both run the same engine; only the transport differs. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/auth/transport.h"
#include "colibri/engine/engine.h"
#include "colibri/v1/compute.grpc.pb.h"
#include "expert_heat.h"

namespace colibri::compute {
class ComputeNode;
}

namespace colibri::router {

struct ComputeRequest {
  std::vector<int32_t> prompt;
  engine::SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<int32_t> stop_tokens;
  bool ignore_eos = false;
  int64_t min_tokens = 0;  // EOS and stop tokens masked until this many (engine.h)
  std::string session_id;  // optional: prefer this conversation's pooled KV
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  CancelToken cancel;      // optional: the client left; stops the work wherever it is (queue, prefill)
};

struct ComputeResult {
  engine::FinishReason finish = engine::FinishReason::kLength;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV was reused
  std::vector<expert_source::ExpertUse> expert_counts;  // the experts the request used most (routing report)
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
  virtual absl::StatusOr<ComputeResult> Generate(const ComputeRequest& request,
                                                 const std::function<bool(const engine::SampledToken&)>& on_token) = 0;
  // Advisory: warm these experts in compute's caches. Returns how many compute accepted.
  virtual absl::StatusOr<size_t> Prefetch(const std::vector<expert_source::ExpertId>& experts) = 0;
};

std::unique_ptr<ComputeClient> MakeInProcessComputeClient(compute::ComputeNode* node);
// `target`: host:port or unix:/path of a colibri-compute service, reached through `transport`
// (mutual TLS, or plaintext where allowed). InvalidArgument for a malformed target or plaintext
// to a non-loopback one without --insecure.
absl::StatusOr<std::unique_ptr<ComputeClient>> MakeGrpcComputeClient(const std::string& target,
                                                                      const auth::Transport& transport);

}  // namespace colibri::router
