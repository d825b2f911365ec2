// The planner: machine facts + model facts + what the user fixed -> every budget and knob the
// user would otherwise guess, each with the reason it was chosen, and the expected decode
// speed with its bottleneck.
//
// Rules (host RAM; the same shape on a GPU's memory):
//   free = MemAvailable - dense weights - --kv-offload-limit - headroom (max(1 GiB, 5% of RAM))
//   --expert-cache-size: every expert when they fit in 3/4 of `free`, else 3/4 of `free`
//   --kv-cache-limit:    kv_limit.h's rule over what the expert cache leaves
//   --vram-budget:       (cuda) every expert when they fit in 3/4 of the device memory left
//                        after dense weights and working memory, else that 3/4; 0 on the CPU
//   --prefetch-layers:   2 on NVMe (deep queues hide the latency), else 1
//   --io-threads:        8 NVMe, 4 SATA SSD / unknown / network, 2 HDD or RAM
// A value the user fixed is kept (and the others planned around it). The expected decode
// speed is a model, not a measurement: per token, dense bytes plus top_k experts per layer are
// read from memory, the share of expert reads the cache misses (uniform routing: 1 - cache /
// experts, a lower bound on the hit rate since real routing is skewed) comes from disk, and
// the slowest of disk, memory bandwidth and compute decides (max with prefetch, else disk is
// added). Pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/plan/facts.h"
#include "nlohmann/json.hpp"

namespace colibri::plan {

struct PlanRequest {
  std::string backend = "cpu";  // cpu | cuda
  int device = 0;
  int max_batch = 16;
  uint64_t kv_offload_bytes = 0;
  // Fixed by the user (nullopt: auto).
  std::optional<uint64_t> expert_cache_bytes;
  std::optional<uint64_t> vram_bytes;
  std::optional<uint64_t> kv_cache_bytes;  // 0: unbounded
  std::optional<int> prefetch_layers;
  std::optional<int> io_threads;
};

template <typename T>
struct Choice {
  T value{};
  std::string reason;
  bool fixed = false;  // given by the user
};

struct Plan {
  Choice<uint64_t> expert_cache_bytes;
  Choice<uint64_t> vram_bytes;
  Choice<uint64_t> kv_cache_bytes;
  Choice<int> prefetch_layers;
  Choice<int> io_threads;
  double expected_hit_rate = 0;     // expert reads served by the cache, warm
  double disk_bytes_per_token = 0;  // expert bytes read from disk per decoded token
  double expected_decode_tps = 0;
  std::string bottleneck;  // disk | memory bandwidth | compute | PCIe
  std::string estimate_reason;
  std::vector<std::string> warnings;
};

// ResourceExhausted when the model cannot run at all (dense weights and two expert blocks do
// not fit, naming the numbers); FailedPrecondition for --backend cuda without a GPU in the
// facts; InvalidArgument for an unknown backend.
absl::StatusOr<Plan> MakePlan(const MachineFacts& machine, const ModelFacts& model,
                              const PlanRequest& request);

// Bytes/s a disk of this kind gives random block reads when not measured.
double TypicalReadBandwidth(sysinfo::DiskKind kind);

nlohmann::json PlanToJson(const Plan& plan, const MachineFacts& machine, const ModelFacts& model);
// The human form: machine, model, one line per setting with its reason, the estimate.
std::string PlanToText(const Plan& plan, const MachineFacts& machine, const ModelFacts& model);

}  // namespace colibri::plan
