#include "compute_metrics.h"

#include <algorithm>
#include <functional>
#include <string>

#include "colibri/core/block_arena.h"

namespace colibri::compute {
namespace {

prometheus::Counter* MakeCounter(prometheus::Registry& r, const std::string& name,
                                 const std::string& help, const prometheus::Labels& labels = {}) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Gauge* MakeGauge(prometheus::Registry& r, const std::string& name,
                             const std::string& help, const prometheus::Labels& labels = {}) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

// Advances a Prometheus counter to a monotonic value counted elsewhere.
void SyncCounter(prometheus::Counter* c, double value) {
  const double delta = value - c->Value();
  if (delta > 0) c->Increment(delta);
}
void SyncCounter(prometheus::Counter* c, uint64_t value) {
  SyncCounter(c, static_cast<double>(value));
}

double Ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

}  // namespace

std::vector<LayerHeat> SummarizeHeat(const expert_source::RoutingHeat& heat, int n_layers,
                                     int n_experts, int top_k, double share) {
  std::vector<LayerHeat> out(static_cast<size_t>(std::max(0, n_layers)));
  std::vector<double> h(static_cast<size_t>(std::max(0, n_experts)));
  for (int l = 0; l < n_layers; ++l) {
    double total = 0;
    for (int e = 0; e < n_experts; ++e) total += h[static_cast<size_t>(e)] = heat.Heat({l, e});
    if (total <= 0) continue;
    std::sort(h.begin(), h.end(), std::greater<double>());
    LayerHeat& lh = out[static_cast<size_t>(l)];
    double sum = 0;
    for (int e = 0; e < n_experts; ++e) {
      sum += h[static_cast<size_t>(e)];
      if (e < top_k) lh.top_k_share = sum / total;
      if (lh.hot_experts == 0 && sum >= share * total * (1 - 1e-12)) lh.hot_experts = e + 1;
    }
  }
  return out;
}

ComputeMetrics::ComputeMetrics(std::shared_ptr<prometheus::Registry> r) : registry(std::move(r)) {
  requests_failed = MakeCounter(*registry, "colibri_compute_requests_failed_total",
                                "Generate requests that ended with an error");
  time_to_first_token_seconds = &prometheus::BuildHistogram()
                                     .Name("colibri_compute_time_to_first_token_seconds")
                                     .Help("From request start to the first sampled token")
                                     .Register(*registry)
                                     .Add({}, metrics::LatencyBuckets());
  active_requests =
      MakeGauge(*registry, "colibri_compute_active_requests", "Generate requests in progress");
  pending_requests =
      MakeGauge(*registry, "colibri_compute_pending_requests",
                "Generate requests accepted and not finished (waiting for the engine or running)");
  pending_requests_limit = MakeGauge(*registry, "colibri_compute_pending_requests_limit",
                                     "Pending Generate requests past which new ones are rejected");
  requests_ = MakeCounter(*registry, "colibri_compute_requests_total", "Generate requests started");
  prompt_tokens_ =
      MakeCounter(*registry, "colibri_compute_prompt_tokens_total", "Prompt tokens prefilled");
  generated_tokens_ =
      MakeCounter(*registry, "colibri_compute_generated_tokens_total", "Tokens generated");
  requests_cancelled_ =
      MakeCounter(*registry, "colibri_compute_requests_cancelled_total",
                  "Requests whose client left or cancelled (while queued, prefilling or decoding)");
  auto& lookups = prometheus::BuildCounter()
                      .Name("colibri_compute_expert_cache_lookups_total")
                      .Help("Expert cache lookups, by tier and result")
                      .Register(*registry);
  cache_hits_ = &lookups.Add({{"tier", "ram"}, {"result", "hit"}});
  cache_misses_ = &lookups.Add({{"tier", "ram"}, {"result", "miss"}});
  cache_in_flight_ = &lookups.Add({{"tier", "ram"}, {"result", "in_flight"}});
  cache_pinned_bytes_ = MakeGauge(*registry, "colibri_compute_expert_cache_pinned_bytes",
                                  "Bytes of pinned expert blocks resident", {{"tier", "ram"}});
  cache_hit_ratio_ =
      MakeGauge(*registry, "colibri_compute_expert_cache_hit_ratio",
                "Demand lookups that found the block resident, since start", {{"tier", "ram"}});
  cache_coverage_ratio_ =
      MakeGauge(*registry, "colibri_compute_expert_cache_coverage_ratio",
                "Demand lookups that found the block resident or already being read, since start",
                {{"tier", "ram"}});
  auto& prefetch =
      prometheus::BuildCounter()
          .Name("colibri_compute_expert_prefetch_blocks_total")
          .Help(
              "Prefetched expert blocks: read, used by a demand request, promoted to demand "
              "while queued, cancelled while queued, dropped (queue full or no room)")
          .Register(*registry);
  prefetch_read_ = &prefetch.Add({{"result", "read"}});
  prefetch_used_ = &prefetch.Add({{"result", "used"}});
  prefetch_promoted_ = &prefetch.Add({{"result", "promoted"}});
  prefetch_cancelled_ = &prefetch.Add({{"result", "cancelled"}});
  prefetch_dropped_ = &prefetch.Add({{"result", "dropped"}});
  prefetch_wasted_bytes_ =
      MakeCounter(*registry, "colibri_compute_expert_prefetch_wasted_bytes_total",
                  "Prefetched bytes evicted or cleared without a demand use");
  prefetch_precision_ = MakeGauge(*registry, "colibri_compute_expert_prefetch_precision_ratio",
                                  "Prefetch reads a demand request then used, since start");
  auto& predictions =
      prometheus::BuildCounter()
          .Name("colibri_compute_expert_predictions_total")
          .Help("Lookahead: experts predicted for coming layers, and of those the router picked")
          .Register(*registry);
  predictions_ = &predictions.Add({{"result", "predicted"}});
  predictions_correct_ = &predictions.Add({{"result", "correct"}});
  forward_tokens_ = MakeCounter(*registry, "colibri_compute_forward_tokens_total",
                                "Tokens through the model (prompt and generated)");
  stall_seconds_ = MakeCounter(*registry, "colibri_compute_expert_stall_seconds_total",
                               "Time the model waited for expert blocks (not computing)");
  stall_seconds_per_token_ = MakeGauge(*registry, "colibri_compute_expert_stall_seconds_per_token",
                                       "Expert stall per token forwarded, since start");
  fetched_bytes_per_token_ =
      MakeGauge(*registry, "colibri_compute_expert_fetched_bytes_per_token",
                "Expert bytes read below the cache per token forwarded, since start");
  fetched_bytes_per_generated_token_ =
      MakeGauge(*registry, "colibri_compute_expert_fetched_bytes_per_generated_token",
                "Expert bytes read below the cache per generated token (per accepted token with "
                "speculation), since start");
  verify_passes_ = MakeCounter(*registry, "colibri_compute_speculative_verify_passes_total",
                               "Speculative decoding: forward passes that verified drafted tokens");
  draft_tokens_ = MakeCounter(*registry, "colibri_compute_speculative_draft_tokens_total",
                              "Speculative decoding: tokens drafted and verified");
  accepted_draft_tokens_ =
      MakeCounter(*registry, "colibri_compute_speculative_accepted_tokens_total",
                  "Speculative decoding: drafted tokens the model accepted");
  draft_acceptance_ratio_ =
      MakeGauge(*registry, "colibri_compute_speculative_acceptance_ratio",
                "Speculative decoding: accepted over drafted tokens, since start");
  tokens_per_verify_pass_ =
      MakeGauge(*registry, "colibri_compute_speculative_tokens_per_pass",
                "Speculative decoding: tokens produced per verify pass, since start");
  dense_bytes_ =
      MakeGauge(*registry, "colibri_compute_dense_bytes", "Bytes of resident dense weights");
  kv_cache_bytes_ = MakeGauge(*registry, "colibri_compute_kv_cache_bytes",
                              "Bytes of KV caches (active and pooled)");
  kv_restored_tokens_ =
      MakeCounter(*registry, "colibri_compute_kv_restored_tokens_total",
                  "Prompt tokens whose KV came back from host RAM or disk instead of a prefill");
  kv_offload_bytes_ = MakeGauge(*registry, "colibri_compute_kv_offload_bytes",
                                "Bytes of evicted KV caches held in host RAM (--kv-offload-limit)");
  kv_offload_entries_ =
      &prometheus::BuildGauge()
           .Name("colibri_compute_kv_offload_entries")
           .Help("Evicted KV caches kept, by where: ram or disk (--kv-persist-dir)")
           .Register(*registry);
  memory_budget_ = MakeGauge(*registry, "colibri_compute_memory_budget_bytes",
                             "The host-memory budget (--memory-limit; auto: cgroup or RAM)");
  memory_part_ = &prometheus::BuildGauge()
                      .Name("colibri_compute_memory_part_bytes")
                      .Help(
                          "The budget's split by part: dense, expert_cache, io, kv, "
                          "kv_offload, scratch, drafter, runtime")
                      .Register(*registry);
  resident_bytes_ = MakeGauge(*registry, "colibri_compute_resident_memory_bytes",
                              "Resident memory of the process (RSS)");
  resident_peak_bytes_ = MakeGauge(*registry, "colibri_compute_resident_memory_peak_bytes",
                                   "Peak resident memory of the process (VmHWM)");
  arena_capacity_ = MakeGauge(*registry, "colibri_compute_expert_arena_capacity_bytes",
                              "The expert block arena, reserved and faulted in at start");
  arena_used_ = MakeGauge(*registry, "colibri_compute_expert_arena_used_bytes",
                          "Arena bytes in blocks cached or being read");
  arena_peak_ = MakeGauge(*registry, "colibri_compute_expert_arena_peak_used_bytes",
                          "The most arena bytes in use at once since start");
  arena_waits_ = MakeCounter(*registry, "colibri_compute_expert_arena_waits_total",
                             "Demand reads that waited for an arena slot");
  arena_refused_ = MakeCounter(*registry, "colibri_compute_expert_arena_refused_total",
                               "Reads that found no arena slot (prefetches shed, waits given up)");
  prefetch_hints_ = MakeCounter(*registry, "colibri_compute_prefetch_hints_total",
                                "Expert prefetches started from the router's hints");
  cache_evictions_ = MakeCounter(*registry, "colibri_compute_expert_cache_evictions_total",
                                 "Expert blocks evicted", {{"tier", "ram"}});
  expert_bytes_fetched_ = MakeCounter(*registry, "colibri_compute_expert_fetched_bytes_total",
                                      "Expert bytes fetched from disk or stores");
  cache_bytes_ = MakeGauge(*registry, "colibri_compute_expert_cache_bytes",
                           "Bytes of expert blocks cached", {{"tier", "ram"}});
  cache_capacity_bytes_ = MakeGauge(*registry, "colibri_compute_expert_cache_capacity_bytes",
                                    "Expert cache budget in bytes", {{"tier", "ram"}});
  cache_resident_ratio_ =
      MakeGauge(*registry, "colibri_compute_expert_resident_ratio",
                "Share of the model's expert bytes resident in the cache", {{"tier", "ram"}});
  warm_queued_ = MakeGauge(*registry, "colibri_compute_expert_warm_queued_blocks",
                           "Expert blocks still queued for the start-up warming (--warm-start)");
  auto& warm = prometheus::BuildCounter()
                   .Name("colibri_compute_expert_warm_blocks_total")
                   .Help(
                       "Start-up warming: blocks read, and blocks skipped (resident already, or no "
                       "free room)")
                   .Register(*registry);
  warm_read_ = &warm.Add({{"result", "read"}});
  warm_skipped_ = &warm.Add({{"result", "skipped"}});
  warm_bytes_ = MakeCounter(*registry, "colibri_compute_expert_warm_bytes_total",
                            "Expert bytes read by the start-up warming");
  store_failovers_ = MakeCounter(*registry, "colibri_compute_store_failovers_total",
                                 "Expert fetches retried on another store after one failed");
  store_bytes_ = &prometheus::BuildCounter()
                      .Name("colibri_compute_store_received_bytes_total")
                      .Help("Expert bytes received, by store")
                      .Register(*registry);
  store_shm_bytes_ = &prometheus::BuildCounter()
                          .Name("colibri_compute_store_shm_blocks_total")
                          .Help("Expert blocks received through shared memory, by store")
                          .Register(*registry);
  store_up_ = &prometheus::BuildGauge()
                   .Name("colibri_compute_store_up")
                   .Help("1 when the store takes reads, by store")
                   .Register(*registry);
  store_outstanding_ = &prometheus::BuildGauge()
                            .Name("colibri_compute_store_outstanding_bytes")
                            .Help("Expert bytes requested and not yet received, by store")
                            .Register(*registry);
  hot_set_experts_ =
      &prometheus::BuildGauge()
           .Name("colibri_compute_expert_hot_set_experts")
           .Help(
               "Experts of the layer that together take 80% of its decayed routing heat, by layer")
           .Register(*registry);
  heat_top_k_ratio_ =
      &prometheus::BuildGauge()
           .Name("colibri_compute_expert_heat_top_k_ratio")
           .Help("Share of the layer's decayed routing heat on its top_k hottest experts, by layer")
           .Register(*registry);
}

void ComputeMetrics::Refresh(ComputeNode& node) {
  std::lock_guard<std::mutex> lock(refresh_mu_);
  const auto stats = node.cache_stats();
  SyncCounter(cache_hits_, stats.hits);
  SyncCounter(cache_misses_, stats.misses);
  SyncCounter(cache_evictions_, stats.evictions);
  SyncCounter(expert_bytes_fetched_, stats.bytes_fetched);
  cache_bytes_->Set(static_cast<double>(stats.bytes_cached));
  cache_capacity_bytes_->Set(static_cast<double>(stats.capacity_bytes));
  cache_resident_ratio_->Set(Ratio(static_cast<double>(stats.bytes_cached),
                                   static_cast<double>(node.manifest().PaddedExpertBytes())));
  warm_queued_->Set(static_cast<double>(stats.warm_queued));
  SyncCounter(warm_read_, stats.warm_reads);
  SyncCounter(warm_skipped_, stats.warm_skipped);
  SyncCounter(warm_bytes_, stats.warm_bytes);
  SyncCounter(cache_in_flight_, stats.in_flight_hits);
  cache_pinned_bytes_->Set(static_cast<double>(stats.bytes_pinned));
  cache_hit_ratio_->Set(stats.hit_rate());
  cache_coverage_ratio_->Set(stats.coverage());
  SyncCounter(prefetch_read_, stats.prefetch_reads);
  SyncCounter(prefetch_used_, stats.prefetch_used);
  SyncCounter(prefetch_promoted_, stats.prefetch_promoted);
  SyncCounter(prefetch_cancelled_, stats.prefetch_cancelled);
  SyncCounter(prefetch_dropped_, stats.prefetch_dropped);
  SyncCounter(prefetch_wasted_bytes_, stats.prefetch_wasted_bytes);
  prefetch_precision_->Set(stats.prefetch_precision());
  const auto& mc = node.model().counters();
  SyncCounter(predictions_, mc.prefetch_predicted.load());
  SyncCounter(predictions_correct_, mc.prefetch_predicted_routed.load());
  const double tokens = static_cast<double>(mc.rows.load());
  const double stall = static_cast<double>(mc.expert_wait_ns.load()) * 1e-9;
  SyncCounter(forward_tokens_, mc.rows.load());
  SyncCounter(stall_seconds_, stall);
  stall_seconds_per_token_->Set(Ratio(stall, tokens));
  fetched_bytes_per_token_->Set(Ratio(static_cast<double>(stats.bytes_fetched), tokens));
  dense_bytes_->Set(static_cast<double>(node.model().dense_bytes()));
  kv_cache_bytes_->Set(static_cast<double>(node.engine().kv_bytes()));
  SyncCounter(kv_restored_tokens_, node.engine().counters().kv_restored_tokens.load());
  const engine::KvStoreStats kv =
      node.kv_store() ? node.kv_store()->stats() : engine::KvStoreStats{};
  kv_offload_bytes_->Set(static_cast<double>(kv.ram_bytes));
  kv_offload_entries_->Add({{"where", "ram"}}).Set(static_cast<double>(kv.ram_entries));
  kv_offload_entries_->Add({{"where", "disk"}}).Set(static_cast<double>(kv.disk_entries));
  SyncCounter(prefetch_hints_, node.prefetch_hints());
  const auto& c = node.engine().counters();
  SyncCounter(requests_, c.requests.load());
  SyncCounter(prompt_tokens_, c.prompt_tokens.load());
  SyncCounter(generated_tokens_, c.generated_tokens.load());
  fetched_bytes_per_generated_token_->Set(Ratio(static_cast<double>(stats.bytes_fetched),
                                                static_cast<double>(c.generated_tokens.load())));
  SyncCounter(verify_passes_, c.verify_passes.load());
  SyncCounter(draft_tokens_, c.draft_tokens.load());
  SyncCounter(accepted_draft_tokens_, c.accepted_draft_tokens.load());
  draft_acceptance_ratio_->Set(Ratio(static_cast<double>(c.accepted_draft_tokens.load()),
                                     static_cast<double>(c.draft_tokens.load())));
  tokens_per_verify_pass_->Set(Ratio(static_cast<double>(c.verify_pass_tokens.load()),
                                     static_cast<double>(c.verify_passes.load())));
  SyncCounter(requests_cancelled_, c.cancelled.load());
  SyncCounter(store_failovers_, node.store_failovers());
  for (const auto& st : node.store_states()) {
    const prometheus::Labels labels = {{"store", st.target}};
    SyncCounter(&store_bytes_->Add(labels), st.stats.bytes);
    SyncCounter(&store_shm_bytes_->Add(labels), st.stats.shm_blocks);
    store_up_->Add(labels).Set(st.up ? 1 : 0);
    store_outstanding_->Add(labels).Set(static_cast<double>(st.stats.outstanding_bytes));
  }
  const AutoSettingsReport& plan = node.auto_settings();
  memory_budget_->Set(static_cast<double>(plan.memory_budget));
  const plan::MemorySplit& part = plan.memory;
  for (const auto& [name, bytes] : {std::pair<const char*, uint64_t>{"dense", part.dense},
                                    {"expert_cache", part.expert_cache},
                                    {"io", part.io},
                                    {"kv", part.kv},
                                    {"kv_offload", part.kv_offload},
                                    {"scratch", part.scratch},
                                    {"drafter", part.drafter},
                                    {"runtime", part.runtime}}) {
    memory_part_->Add({{"part", name}}).Set(static_cast<double>(bytes));
  }
  resident_bytes_->Set(static_cast<double>(ResidentBytes()));
  resident_peak_bytes_->Set(static_cast<double>(PeakResidentBytes()));
  if (const BlockArena* arena = node.arena()) {
    const BlockArenaStats a = arena->Stats();
    arena_capacity_->Set(static_cast<double>(a.capacity_bytes));
    arena_used_->Set(static_cast<double>(a.used_bytes));
    arena_peak_->Set(static_cast<double>(a.peak_used_bytes));
    SyncCounter(arena_waits_, a.waits);
    SyncCounter(arena_refused_, a.refused);
  }
  const auto& mcfg = node.manifest().config;
  const auto layers = SummarizeHeat(node.expert_cache().heat(), static_cast<int>(mcfg.n_layers),
                                    static_cast<int>(mcfg.n_experts), static_cast<int>(mcfg.top_k));
  for (size_t l = 0; l < layers.size(); ++l) {
    const prometheus::Labels labels = {{"layer", std::to_string(l)}};
    hot_set_experts_->Add(labels).Set(layers[l].hot_experts);
    heat_top_k_ratio_->Add(labels).Set(layers[l].top_k_share);
  }
}

}  // namespace colibri::compute
