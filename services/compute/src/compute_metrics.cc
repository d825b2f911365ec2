#include "compute_metrics.h"

namespace colibri::compute {
namespace {

prometheus::Counter* MakeCounter(prometheus::Registry& r, const std::string& name, const std::string& help,
                                 const prometheus::Labels& labels = {}) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Gauge* MakeGauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                             const prometheus::Labels& labels = {}) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

// Advances a Prometheus counter to a monotonic value counted elsewhere.
void SyncCounter(prometheus::Counter* c, uint64_t value) {
  const double delta = static_cast<double>(value) - c->Value();
  if (delta > 0) c->Increment(delta);
}

}  // namespace

ComputeMetrics::ComputeMetrics(std::shared_ptr<prometheus::Registry> r) : registry(std::move(r)) {
  requests_failed = MakeCounter(*registry, "colibri_compute_requests_failed_total",
                                "Generate requests that ended with an error");
  time_to_first_token_seconds = &prometheus::BuildHistogram()
                                     .Name("colibri_compute_time_to_first_token_seconds")
                                     .Help("From request start to the first sampled token")
                                     .Register(*registry)
                                     .Add({}, metrics::LatencyBuckets());
  active_requests = MakeGauge(*registry, "colibri_compute_active_requests", "Generate requests in progress");
  requests_ = MakeCounter(*registry, "colibri_compute_requests_total", "Generate requests started");
  prompt_tokens_ = MakeCounter(*registry, "colibri_compute_prompt_tokens_total", "Prompt tokens prefilled");
  generated_tokens_ = MakeCounter(*registry, "colibri_compute_generated_tokens_total", "Tokens generated");
  auto& lookups = prometheus::BuildCounter()
                      .Name("colibri_compute_expert_cache_lookups_total")
                      .Help("Expert cache lookups, by tier and result")
                      .Register(*registry);
  cache_hits_ = &lookups.Add({{"tier", "ram"}, {"result", "hit"}});
  cache_misses_ = &lookups.Add({{"tier", "ram"}, {"result", "miss"}});
  cache_evictions_ = MakeCounter(*registry, "colibri_compute_expert_cache_evictions_total",
                                 "Expert blocks evicted", {{"tier", "ram"}});
  expert_bytes_fetched_ = MakeCounter(*registry, "colibri_compute_expert_fetched_bytes_total",
                                      "Expert bytes fetched from disk or stores");
  cache_bytes_ = MakeGauge(*registry, "colibri_compute_expert_cache_bytes", "Bytes of expert blocks cached",
                           {{"tier", "ram"}});
  cache_capacity_bytes_ = MakeGauge(*registry, "colibri_compute_expert_cache_capacity_bytes",
                                    "Expert cache budget in bytes", {{"tier", "ram"}});
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
  const auto& c = node.engine().counters();
  SyncCounter(requests_, c.requests.load());
  SyncCounter(prompt_tokens_, c.prompt_tokens.load());
  SyncCounter(generated_tokens_, c.generated_tokens.load());
}

}  // namespace colibri::compute
