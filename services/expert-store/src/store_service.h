// ExpertStore gRPC service: serves the expert blocks of local model directories over the
// bidirectional Fetch stream. Thin: requests go to per-stream priority queues, reads run on the
// store's executor (never inside a reaction), chunks go back with one outstanding write per
// stream. Demand requests are served before queued prefetches; queued requests can be
// cancelled; each stream holds at most `max_queued` requests (RESOURCE_EXHAUSTED past it) and
// at most `max_buffered_bytes` of chunks waiting to be written (back-pressure on reads).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/core/thread_pool.h"
#include "colibri/expert_source/disk_source.h"
#include "colibri/model/container.h"
#include "colibri/v1/expert_store.grpc.pb.h"
#include "store_metrics.h"

namespace colibri::store {

struct StoreOptions {
  size_t chunk_bytes = 1 << 20;            // 1 MiB chunks
  size_t max_queued = 1024;                // requests queued per stream
  size_t max_buffered_bytes = 16 << 20;    // chunk bytes waiting for the network per stream
  int io_threads = 4;
};

// The models a store serves, by name.
class ModelCatalog {
 public:
  absl::Status AddModelDir(const std::string& dir);
  struct Entry {
    std::unique_ptr<model::Container> container;
    std::unique_ptr<expert_source::DiskSource> source;
  };
  const Entry* Find(const std::string& name) const;
  const std::map<std::string, Entry>& models() const { return models_; }

 private:
  std::map<std::string, Entry> models_;
};

class ExpertStoreService final : public v1::ExpertStore::CallbackService {
 public:
  ExpertStoreService(const ModelCatalog* catalog, StoreOptions options, StoreMetrics* metrics);
  ~ExpertStoreService() override;

  grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse>* Fetch(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;

 private:
  class FetchReactor;
  const ModelCatalog* catalog_;
  StoreOptions options_;
  StoreMetrics* metrics_;
  ThreadPool io_pool_;
};

}  // namespace colibri::store
