// The expert cache of a compute node: the tiers in front of the origin (disk or stores), their
// policy, pinned experts (file + learned from persisted routing heat), and the routing trace.
//
//   model ──▶ [vram tier] ──▶ ram tier ──▶ origin (StripedSource::OpenLocal | MultiStoreSource)
//
// The VRAM tier exists only with a backend that has device memory (zero_copy() false): a
// CacheTier over the RAM tier whose blocks live in a DeviceTierMemory arena of the backend
// (allocated here, so a budget that does not fit fails at start-up), read by its own threads
// (copies overlap the engine's compute; lookahead prefetches land in VRAM). With the CPU
// backend --vram-budget has no effect and says so (vram_note()). The RAM tier's budget is
// strict (cache_tier.h). Routing heat is loaded from, and saved to, <model dir>/routing_heat.json
// (or --routing-heat FILE; "none" keeps it in memory only).
// Thread-safe (the tiers are; the accessors return stable pointers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/device_tier_memory.h"
#include "colibri/expert_source/pinning.h"
#include "colibri/expert_source/routing_heat.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/model/container.h"

namespace colibri::compute {

struct ExpertCacheConfig {
  uint64_t vram_bytes = 0;  // --vram-budget
  int vram_io_threads = 2;  // VRAM tier copy threads (each with its own stream)
  std::string policy{expert_source::kDefaultCachePolicyName};  // --cache-policy
  int prefetch_layers = 1;           // --prefetch-layers (used by the model)
  int io_threads = 4;                // --io-threads: reader threads below the cache
  int max_prefetch_reads = 0;        // prefetch reads at once (0: io_threads - 1)
  float prefetch_min_weight = 0.0f;  // see engine::ModelOptions
  bool direct_io = true;             // --direct-io: O_DIRECT reads of the model directory
  std::string pinned_experts;        // --pinned-experts FILE
  std::string routing_heat;          // --routing-heat FILE ("" = <model>/routing_heat.json, "none")
  double learned_pin_fraction = 0.25;  // --learned-pins: share of the RAM tier for learned pins
  double pin_hysteresis = 0.25;
  int64_t repin_interval_ms = 10000;
  std::string trace_out;            // --trace-out FILE
  std::string warm_start = "auto";  // --warm-start auto|off (see WarmOrder)
};

// Warm start: the blocks to read into a RAM tier of `capacity` bytes at start-up, in order. When
// every block fits: all of them, the hottest by `heat` first, then the rest in file order (which
// reads the experts file sequentially). When they do not fit: the hottest blocks with any heat,
// in heat order (the tier stops at the first that finds no free room). Nothing without heat.
std::vector<expert_source::ExpertId> WarmOrder(const model::Manifest& manifest,
                                               const expert_source::RoutingHeat& heat,
                                               uint64_t capacity);

class ExpertCache {
 public:
  // `origin` and `container` must outlive the cache.
  static absl::StatusOr<std::unique_ptr<ExpertCache>> Create(expert_source::ExpertSource* origin,
                                                             const model::Container& container,
                                                             uint64_t ram_bytes,
                                                             const ExpertCacheConfig& config,
                                                             backend::Backend* backend);
  // Saves the routing heat.
  ~ExpertCache();

  // What the model reads from (the top tier).
  expert_source::ExpertSource* front() {
    return vram_ ? static_cast<expert_source::ExpertSource*>(vram_.get()) : ram_.get();
  }
  expert_source::CacheTier& ram() { return *ram_; }
  const expert_source::CacheTier& ram() const { return *ram_; }
  const expert_source::CacheTier* vram() const { return vram_.get(); }
  const expert_source::DeviceTierMemory* vram_memory() const { return vram_memory_.get(); }
  // Why there is no VRAM tier (empty when there is one, or none was asked for).
  const std::string& vram_note() const { return vram_note_; }
  expert_source::RoutingTraceWriter* trace() { return trace_.get(); }
  const expert_source::PinController* pins() const { return pins_.get(); }
  // Decayed routing heat of every expert (what learned pins and the heat metrics read).
  const expert_source::RoutingHeat& heat() const { return *heat_; }
  size_t fixed_pins() const { return fixed_pins_; }
  const ExpertCacheConfig& config() const { return config_; }
  expert_source::CachePolicyKind policy() const { return policy_; }

  // Blocks queued for warming at start-up (0 when off or nothing applied).
  size_t warm_planned() const { return warm_planned_; }
  // Drops every unleased block of every tier (pins are read again in the background).
  expert_source::CacheTier::ClearResult Clear();

 private:
  ExpertCache() = default;
  ExpertCacheConfig config_;
  expert_source::CachePolicyKind policy_ = expert_source::kDefaultCachePolicy;
  std::unique_ptr<expert_source::RoutingHeat> heat_;
  std::unique_ptr<expert_source::CacheTier> ram_;
  std::unique_ptr<expert_source::DeviceTierMemory> vram_memory_;
  std::unique_ptr<expert_source::CacheTier> vram_;
  std::unique_ptr<expert_source::PinController> pins_;
  std::unique_ptr<expert_source::RoutingTraceWriter> trace_;
  std::string vram_note_;
  size_t fixed_pins_ = 0;
  size_t warm_planned_ = 0;
};

}  // namespace colibri::compute
