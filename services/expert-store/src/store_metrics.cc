#include "store_metrics.h"

#include "colibri/store/block_store.h"

namespace colibri::store {

namespace {
prometheus::Counter* Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}
prometheus::Gauge* Gauge(prometheus::Registry& r, const std::string& name,
                         const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}
}  // namespace

StoreMetrics::StoreMetrics(std::shared_ptr<prometheus::Registry> r) : registry(std::move(r)) {
  auto& reg = *registry;
  auto& blocks = prometheus::BuildCounter()
                     .Name("colibri_store_blocks_served_total")
                     .Help("Expert blocks served, by request priority")
                     .Register(reg);
  blocks_served_demand = &blocks.Add({{"priority", "demand"}});
  blocks_served_prefetch = &blocks.Add({{"priority", "prefetch"}});
  bytes_served = Counter(reg, "colibri_store_bytes_served_total",
                         "Expert block bytes sent to clients (any transport)");
  shm_bytes_served =
      Counter(reg, "colibri_store_shm_bytes_served_total",
              "Expert block bytes delivered through shared memory (co-located clients)");
  checksum_failures = Counter(reg, "colibri_store_checksum_failures_total",
                              "Blocks whose checksum did not match the catalog (never served)");
  read_errors = Counter(reg, "colibri_store_read_errors_total",
                        "Failed block reads (I/O errors, missing blocks)");
  cancellations =
      Counter(reg, "colibri_store_cancellations_total", "Requests cancelled by clients");
  rejected_requests = Counter(reg, "colibri_store_rejected_requests_total",
                              "Requests refused because a stream's queue was full");
  rejected_streams = Counter(reg, "colibri_store_rejected_streams_total",
                             "Fetch streams refused because the store had too many open");
  idle_streams_closed =
      Counter(reg, "colibri_store_idle_streams_closed_total",
              "Fetch streams the store ended after --idle-stream-timeout without a request");
  deadline_exceeded =
      Counter(reg, "colibri_store_deadline_exceeded_total",
              "Requests answered DEADLINE_EXCEEDED (queued or read past their timeout)");
  auto& read =
      prometheus::BuildHistogram()
          .Name("colibri_store_read_seconds")
          .Help("Time from a request leaving its queue to its block read and verified, by priority")
          .Register(reg);
  read_seconds_demand = &read.Add({{"priority", "demand"}}, metrics::LatencyBuckets());
  read_seconds_prefetch = &read.Add({{"priority", "prefetch"}}, metrics::LatencyBuckets());
  open_streams = Gauge(reg, "colibri_store_open_streams", "Fetch streams currently open");
  queued_requests =
      Gauge(reg, "colibri_store_queued_requests", "Block requests queued across all streams");
  reads_in_flight =
      Gauge(reg, "colibri_store_reads_in_flight", "Block reads in progress across all streams");
  client_bytes_ = &prometheus::BuildCounter()
                       .Name("colibri_store_client_bytes_served_total")
                       .Help(
                           "Expert block bytes served, by client (the colibri-client header, else "
                           "the peer host)")
                       .Register(reg);
  disk_reads_ = &prometheus::BuildCounter()
                     .Name("colibri_store_disk_reads_total")
                     .Help("Stripe reads completed, by disk")
                     .Register(reg);
  disk_bytes_ = &prometheus::BuildCounter()
                     .Name("colibri_store_disk_read_bytes_total")
                     .Help("Bytes read, by disk")
                     .Register(reg);
  disk_errors_ = &prometheus::BuildCounter()
                      .Name("colibri_store_disk_read_errors_total")
                      .Help("Stripe reads that failed, by disk")
                      .Register(reg);
  disk_checksum_failures_ = &prometheus::BuildCounter()
                                 .Name("colibri_store_disk_checksum_failures_total")
                                 .Help("Stripes whose checksum did not match, by disk")
                                 .Register(reg);
  disk_in_flight_ = &prometheus::BuildGauge()
                         .Name("colibri_store_disk_reads_in_flight")
                         .Help("Reads submitted to the device, by disk")
                         .Register(reg);
  disk_queued_ = &prometheus::BuildGauge()
                      .Name("colibri_store_disk_queue_depth")
                      .Help("Reads waiting for a queue slot, by disk")
                      .Register(reg);
  auto& cache = prometheus::BuildCounter()
                    .Name("colibri_store_read_cache_lookups_total")
                    .Help("RAM read-cache lookups, by result")
                    .Register(reg);
  cache_hits_ = &cache.Add({{"result", "hit"}});
  cache_misses_ = &cache.Add({{"result", "miss"}});
  cache_bytes_ = Gauge(reg, "colibri_store_read_cache_bytes", "Bytes held by the RAM read cache");
  cache_capacity_bytes_ =
      Gauge(reg, "colibri_store_read_cache_capacity_bytes", "Capacity of the RAM read cache");
}

prometheus::Counter* StoreMetrics::ClientBytes(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = clients_.find(client);
  if (it != clients_.end()) return it->second;
  // Names come from clients (a header): past the cap they share one series and are not kept.
  if (clients_.size() >= kMaxClientSeries || client.size() > kMaxClientNameBytes) {
    if (other_client_ == nullptr) other_client_ = &client_bytes_->Add({{"client", "other"}});
    return other_client_;
  }
  prometheus::Counter* c = &client_bytes_->Add({{"client", client}});
  clients_[client] = c;
  return c;
}

size_t StoreMetrics::client_series() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clients_.size() + (other_client_ != nullptr ? 1 : 0);
}

void StoreMetrics::Refresh(BlockStore& s) {
  std::lock_guard<std::mutex> lock(mu_);
  while (disks_.size() < s.disk_count()) {
    const std::string name = s.disk_name(static_cast<uint32_t>(disks_.size()));
    disks_.push_back(DiskFamily{
        &disk_reads_->Add({{"disk", name}}), &disk_bytes_->Add({{"disk", name}}),
        &disk_errors_->Add({{"disk", name}}), &disk_checksum_failures_->Add({{"disk", name}}),
        &disk_in_flight_->Add({{"disk", name}}), &disk_queued_->Add({{"disk", name}})});
  }
  auto bump = [](prometheus::Counter* c, double* last, double now) {
    if (now > *last) c->Increment(now - *last);
    *last = now;
  };
  for (uint32_t d = 0; d < disks_.size(); ++d) {
    const DiskStats st = s.io().Stats(d);
    DiskFamily& f = disks_[d];
    bump(f.reads, &f.last_reads, static_cast<double>(st.reads));
    bump(f.bytes, &f.last_bytes, static_cast<double>(st.bytes));
    bump(f.errors, &f.last_errors, static_cast<double>(st.errors));
    bump(f.checksum_failures, &f.last_checksum, static_cast<double>(s.checksum_failures(d)));
    f.in_flight->Set(static_cast<double>(st.in_flight));
    f.queued->Set(static_cast<double>(st.queued));
  }
  if (auto c = s.read_cache_stats()) {
    bump(cache_hits_, &last_hits_, static_cast<double>(c->hits));
    bump(cache_misses_, &last_misses_, static_cast<double>(c->misses));
    cache_bytes_->Set(static_cast<double>(c->bytes));
    cache_capacity_bytes_->Set(static_cast<double>(c->capacity));
  }
}

}  // namespace colibri::store
