// Every metric family of the compute service, registered in one place. Engine and cache
// counters live in their own objects; Refresh() brings the registry up to date before a scrape.
#pragma once

#include <memory>
#include <mutex>

#include "colibri/metrics/metrics.h"
#include "compute_node.h"

namespace colibri::compute {

class ComputeMetrics {
 public:
  explicit ComputeMetrics(std::shared_ptr<prometheus::Registry> registry);
  void Refresh(ComputeNode& node);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Counter* requests_failed;
  prometheus::Histogram* time_to_first_token_seconds;
  prometheus::Gauge* active_requests;

 private:
  std::mutex refresh_mu_;  // scrapes may overlap
  prometheus::Counter* requests_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generated_tokens_;
  prometheus::Counter* cache_hits_;
  prometheus::Counter* cache_misses_;
  prometheus::Counter* cache_evictions_;
  prometheus::Counter* expert_bytes_fetched_;
  prometheus::Gauge* cache_bytes_;
  prometheus::Gauge* cache_capacity_bytes_;
};

}  // namespace colibri::compute
