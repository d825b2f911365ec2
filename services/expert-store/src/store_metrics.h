// Every metric family of the expert store, registered in one place. Request-path metrics are
// updated as requests are served; disk and read-cache figures live in the BlockStore and are
// copied in by Refresh() before each scrape.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "colibri/metrics/metrics.h"

namespace colibri::store {

class BlockStore;

struct StoreMetrics {
  explicit StoreMetrics(std::shared_ptr<prometheus::Registry> registry);

  // Bytes served to one client. Bounded: past kMaxClientSeries distinct clients (or for a name
  // longer than kMaxClientNameBytes) they count as "other", and nothing more is remembered.
  static constexpr size_t kMaxClientSeries = 64;
  static constexpr size_t kMaxClientNameBytes = 128;
  prometheus::Counter* ClientBytes(const std::string& client);
  // Label values of colibri_store_client_bytes_served_total in use (at most kMaxClientSeries + 1).
  size_t client_series() const;
  // Copies the disk and read-cache statistics of `store` into the registry.
  void Refresh(BlockStore& store);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Counter* blocks_served_demand;
  prometheus::Counter* blocks_served_prefetch;
  prometheus::Counter* bytes_served;
  prometheus::Counter* shm_bytes_served;
  prometheus::Counter* checksum_failures;
  prometheus::Counter* read_errors;
  prometheus::Counter* cancellations;
  prometheus::Counter* rejected_requests;
  prometheus::Counter* rejected_streams;
  prometheus::Counter* deadline_exceeded;
  prometheus::Counter* idle_streams_closed;
  prometheus::Histogram* read_seconds_demand;
  prometheus::Histogram* read_seconds_prefetch;
  prometheus::Gauge* open_streams;
  prometheus::Gauge* queued_requests;
  prometheus::Gauge* reads_in_flight;

 private:
  struct DiskFamily {
    prometheus::Counter* reads;
    prometheus::Counter* bytes;
    prometheus::Counter* errors;
    prometheus::Counter* checksum_failures;
    prometheus::Gauge* in_flight;
    prometheus::Gauge* queued;
    double last_reads = 0, last_bytes = 0, last_errors = 0, last_checksum = 0;
  };
  mutable std::mutex mu_;
  prometheus::Family<prometheus::Counter>* client_bytes_;
  std::map<std::string, prometheus::Counter*> clients_;
  prometheus::Counter* other_client_ = nullptr;
  prometheus::Family<prometheus::Counter>* disk_reads_;
  prometheus::Family<prometheus::Counter>* disk_bytes_;
  prometheus::Family<prometheus::Counter>* disk_errors_;
  prometheus::Family<prometheus::Counter>* disk_checksum_failures_;
  prometheus::Family<prometheus::Gauge>* disk_in_flight_;
  prometheus::Family<prometheus::Gauge>* disk_queued_;
  std::vector<DiskFamily> disks_;
  prometheus::Counter* cache_hits_;
  prometheus::Counter* cache_misses_;
  prometheus::Gauge* cache_bytes_;
  prometheus::Gauge* cache_capacity_bytes_;
  double last_hits_ = 0, last_misses_ = 0;
};

}  // namespace colibri::store
