// ExpertStore gRPC service: serves verified expert blocks from a BlockStore (striped disks
// and/or plain model directories) over the bidirectional Fetch stream. Thin: requests go to
// per-stream priority queues; block reads run on the store's I/O engine (never inside a
// reaction), up to `max_reads_in_flight` per stream so every disk stays busy; answers go back
// with one outstanding write per stream.
//
// Per stream: demand requests are served before queued prefetches (when reads start and when
// answers are written: chunks of a demand block overtake queued prefetch chunks); queued and
// in-progress requests can be cancelled (answered CANCELLED); a request queued or read past its
// timeout_ms is answered DEADLINE_EXCEEDED; at most `max_queued` requests wait
// (RESOURCE_EXHAUSTED past it) and at most `max_buffered_bytes` of read blocks wait for the
// network (reads pause: back-pressure). Chunks are cut from the read block as the previous
// write completes, so a block is held once, not as copies. Store-wide: at most `max_streams`
// streams (RESOURCE_EXHAUSTED). On unix-socket connections a client may attach a shared-memory
// region; blocks it asks for there are read straight into it (O_DIRECT, no copy) and only
// descriptors travel on the stream.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "colibri/store/block_store.h"
#include "colibri/v1/expert_store.grpc.pb.h"
#include "store_metrics.h"

namespace colibri::store {

struct StoreOptions {
  size_t chunk_bytes = 1 << 20;          // 1 MiB chunks
  size_t max_queued = 1024;              // requests queued per stream
  size_t max_buffered_bytes = 64 << 20;  // read bytes waiting for the network, per stream
  size_t max_reads_in_flight = 16;       // block reads in progress per stream
  size_t max_streams = 256;              // open Fetch streams
  bool allow_shm = true;                 // honour ShmAttach on unix-socket connections
};

class ExpertStoreService final : public v1::ExpertStore::CallbackService {
 public:
  // `store` and `metrics` must outlive the service. The destructor waits until every stream's
  // reads have ended (after the server's Shutdown, streams end but reads may still be landing).
  ExpertStoreService(BlockStore* store, StoreOptions options, StoreMetrics* metrics);
  ~ExpertStoreService() override;

  grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse>* Fetch(grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;

 private:
  class FetchReactor;
  BlockStore* store_;
  StoreOptions options_;
  StoreMetrics* metrics_;
  std::atomic<size_t> open_streams_{0};
  std::mutex reactors_mu_;
  std::condition_variable reactors_cv_;
  size_t reactors_ = 0;  // alive, counting those finished but still waiting for reads
};

}  // namespace colibri::store
