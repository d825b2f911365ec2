// Every metric family of the compute service, registered in one place. Engine and cache
// counters live in their own objects; Refresh() brings the registry up to date before a scrape.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "colibri/metrics/metrics.h"
#include "compute_node.h"

namespace colibri::compute {

// Bounded-cardinality view of the routing heat (one series per layer, never per expert):
// hot_experts is how many of the layer's experts together take `share` of its decayed heat
// (its working set: what the cache must hold for that layer), top_k_share the share its top_k
// hottest experts take (1: the same experts every token). Both 0 for a layer not routed yet.
struct LayerHeat {
  int hot_experts = 0;
  double top_k_share = 0;
};
std::vector<LayerHeat> SummarizeHeat(const expert_source::RoutingHeat& heat, int n_layers,
                                     int n_experts, int top_k, double share = 0.8);

class ComputeMetrics {
 public:
  explicit ComputeMetrics(std::shared_ptr<prometheus::Registry> registry);
  void Refresh(ComputeNode& node);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Counter* requests_failed;
  prometheus::Histogram* time_to_first_token_seconds;
  prometheus::Gauge* active_requests;
  // Generate requests accepted and not finished (waiting for the engine or running), and the
  // cap past which new ones get RESOURCE_EXHAUSTED (--max-pending-requests).
  prometheus::Gauge* pending_requests;
  prometheus::Gauge* pending_requests_limit;

 private:
  std::mutex refresh_mu_;  // scrapes may overlap
  prometheus::Counter* requests_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* requests_cancelled_;
  prometheus::Counter* generated_tokens_;
  prometheus::Counter* cache_hits_;
  prometheus::Counter* cache_misses_;
  prometheus::Counter* cache_evictions_;
  prometheus::Counter* expert_bytes_fetched_;
  prometheus::Gauge* cache_bytes_;
  prometheus::Gauge* cache_capacity_bytes_;
  prometheus::Gauge* cache_resident_ratio_;
  prometheus::Gauge* warm_queued_;
  prometheus::Counter* warm_read_;
  prometheus::Counter* warm_skipped_;
  prometheus::Counter* warm_bytes_;
  // Expert cache, prefetch and stalls (cache_tier.h, lookahead.h).
  prometheus::Counter* cache_in_flight_;
  prometheus::Gauge* cache_pinned_bytes_;
  prometheus::Gauge* cache_hit_ratio_;
  prometheus::Gauge* cache_coverage_ratio_;
  prometheus::Counter* prefetch_read_;
  prometheus::Counter* prefetch_used_;
  prometheus::Counter* prefetch_promoted_;
  prometheus::Counter* prefetch_cancelled_;
  prometheus::Counter* prefetch_dropped_;
  prometheus::Counter* prefetch_wasted_bytes_;
  prometheus::Gauge* prefetch_precision_;
  prometheus::Counter* predictions_;
  prometheus::Counter* predictions_correct_;
  prometheus::Counter* forward_tokens_;
  prometheus::Counter* stall_seconds_;
  prometheus::Gauge* stall_seconds_per_token_;
  prometheus::Gauge* fetched_bytes_per_token_;
  prometheus::Gauge* fetched_bytes_per_generated_token_;
  // Speculative decoding.
  prometheus::Counter* verify_passes_;
  prometheus::Counter* draft_tokens_;
  prometheus::Counter* accepted_draft_tokens_;
  prometheus::Gauge* draft_acceptance_ratio_;
  prometheus::Gauge* tokens_per_verify_pass_;
  prometheus::Gauge* dense_bytes_;
  prometheus::Gauge* kv_cache_bytes_;
  // KV offload / persistence (kv_store.h) and the router's prefetch hints.
  prometheus::Counter* kv_restored_tokens_;
  prometheus::Gauge* kv_offload_bytes_;
  prometheus::Family<prometheus::Gauge>* kv_offload_entries_;
  prometheus::Counter* prefetch_hints_;
  prometheus::Counter* store_failovers_;
  prometheus::Family<prometheus::Counter>* store_bytes_;
  prometheus::Family<prometheus::Counter>* store_shm_bytes_;
  prometheus::Family<prometheus::Gauge>* store_up_;
  prometheus::Family<prometheus::Gauge>* store_outstanding_;
  prometheus::Family<prometheus::Gauge>* hot_set_experts_;
  prometheus::Family<prometheus::Gauge>* heat_top_k_ratio_;
  // The memory budget (--memory-limit), its planned parts, resident memory and the arena.
  prometheus::Gauge* memory_budget_;
  prometheus::Family<prometheus::Gauge>* memory_part_;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* resident_peak_bytes_;
  prometheus::Gauge* arena_capacity_;
  prometheus::Gauge* arena_used_;
  prometheus::Gauge* arena_peak_;
  prometheus::Counter* arena_waits_;
  prometheus::Counter* arena_refused_;
};

}  // namespace colibri::compute
