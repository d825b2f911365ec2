// The planner: machine facts + model facts + what the user fixed -> every budget and knob the
// user would otherwise guess, each with the reason it was chosen, and the expected decode
// speed with its bottleneck.
//
// Rules (host RAM; the same shape on a GPU's memory):
//   --memory-limit:      the process's whole host-memory budget. Auto: the tightest memory
//                        cgroup limit on its path (less max(128 MiB, 5%) for what the kernel
//                        charges besides), or MemAvailable less max(1 GiB, 5% of RAM) without
//                        one. Split into the parts of MemorySplit below; every part is charged
//                        where it is allocated, and resident memory stays inside the total.
//   free = budget - dense weights - runtime - scratch - I/O buffers - drafter - KV offload
//   --expert-cache-size: every expert when they fit in 3/4 of `free`, else 3/4 of `free`
//   --kv-cache-limit:    kv_limit.h's rule over what the expert cache leaves
//   A budget that cannot hold the dense weights, the fixed parts, two expert blocks and one
//   sequence's KV is refused (ResourceExhausted with the number needed); so are fixed values
//   whose sum exceeds a budget that is a real limit (--memory-limit or a cgroup), while over
//   MemAvailable alone they are a warning.
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
  uint64_t drafter_bytes = 0;  // speculation's drafter held in RAM (DrafterBytes estimate)
  // Fixed by the user (nullopt: auto).
  std::optional<uint64_t> memory_limit;
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

// Host memory of a process, part by part: what the budget is split into.
struct MemorySplit {
  uint64_t dense = 0;         // dense weights (host copy; on a GPU backend, the staging copy)
  uint64_t expert_cache = 0;  // the block arena's slots the RAM tier charges
  uint64_t io = 0;            // arena room beyond the cache: reads outside it, fragmentation
  uint64_t kv = 0;            // --kv-cache-limit (0: unbounded, not counted)
  uint64_t kv_offload = 0;    // --kv-offload-limit
  uint64_t scratch = 0;       // activations of one prefill chunk
  uint64_t drafter = 0;       // speculation's drafter weights
  uint64_t runtime = 0;       // code, libraries, threads, tokenizer, HTTP and gRPC buffers
  uint64_t total() const {
    return dense + expert_cache + io + kv + kv_offload + scratch + drafter + runtime;
  }
};
// The arena room beyond the cache (MemorySplit::io) for blocks of at most `largest_block`.
uint64_t ArenaSlackBytes(uint64_t largest_block);
// What the process itself takes besides the parts it allocates on purpose (measured: a server
// with a tiny model, its threads and HTTP front end, resident 60-90 MiB).
inline constexpr uint64_t kRuntimeBytes = 128ull << 20;

struct Plan {
  Choice<uint64_t> memory_budget;  // --memory-limit
  bool budget_is_limit = false;    // from --memory-limit or a cgroup (not MemAvailable alone)
  MemorySplit memory;
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
// One line: each part of the split and their sum against the budget.
std::string MemorySplitText(const MemorySplit& m, uint64_t budget);
// The human form: machine, model, one line per setting with its reason, the estimate.
std::string PlanToText(const Plan& plan, const MachineFacts& machine, const ModelFacts& model);

}  // namespace colibri::plan
