// Every metric family of the expert store, registered in one place.
#pragma once

#include <memory>

#include "colibri/metrics/metrics.h"

namespace colibri::store {

struct StoreMetrics {
  explicit StoreMetrics(std::shared_ptr<prometheus::Registry> registry);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Counter* blocks_served_demand;
  prometheus::Counter* blocks_served_prefetch;
  prometheus::Counter* bytes_served;
  prometheus::Counter* checksum_failures;
  prometheus::Counter* read_errors;
  prometheus::Counter* cancellations;
  prometheus::Counter* rejected_requests;
  prometheus::Histogram* read_seconds_demand;
  prometheus::Histogram* read_seconds_prefetch;
  prometheus::Gauge* open_streams;
  prometheus::Gauge* queued_requests;
};

}  // namespace colibri::store
