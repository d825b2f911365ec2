#include "store_metrics.h"

namespace colibri::store {

StoreMetrics::StoreMetrics(std::shared_ptr<prometheus::Registry> r) : registry(std::move(r)) {
  auto& blocks = prometheus::BuildCounter()
                     .Name("colibri_store_blocks_served_total")
                     .Help("Expert blocks served, by request priority")
                     .Register(*registry);
  blocks_served_demand = &blocks.Add({{"priority", "demand"}});
  blocks_served_prefetch = &blocks.Add({{"priority", "prefetch"}});
  bytes_served = &prometheus::BuildCounter()
                      .Name("colibri_store_bytes_served_total")
                      .Help("Expert block bytes sent to clients")
                      .Register(*registry)
                      .Add({});
  checksum_failures = &prometheus::BuildCounter()
                           .Name("colibri_store_checksum_failures_total")
                           .Help("Blocks whose checksum did not match the catalog (never served)")
                           .Register(*registry)
                           .Add({});
  read_errors = &prometheus::BuildCounter()
                     .Name("colibri_store_read_errors_total")
                     .Help("Failed block reads (I/O errors, missing blocks)")
                     .Register(*registry)
                     .Add({});
  cancellations = &prometheus::BuildCounter()
                       .Name("colibri_store_cancellations_total")
                       .Help("Queued requests cancelled by clients")
                       .Register(*registry)
                       .Add({});
  rejected_requests = &prometheus::BuildCounter()
                           .Name("colibri_store_rejected_requests_total")
                           .Help("Requests refused because a stream's queue was full")
                           .Register(*registry)
                           .Add({});
  auto& read = prometheus::BuildHistogram()
                   .Name("colibri_store_read_seconds")
                   .Help("Time to read and verify one block, by priority")
                   .Register(*registry);
  read_seconds_demand = &read.Add({{"priority", "demand"}}, metrics::LatencyBuckets());
  read_seconds_prefetch = &read.Add({{"priority", "prefetch"}}, metrics::LatencyBuckets());
  open_streams = &prometheus::BuildGauge()
                      .Name("colibri_store_open_streams")
                      .Help("Fetch streams currently open")
                      .Register(*registry)
                      .Add({});
  queued_requests = &prometheus::BuildGauge()
                         .Name("colibri_store_queued_requests")
                         .Help("Block requests queued across all streams")
                         .Register(*registry)
                         .Add({});
}

}  // namespace colibri::store
