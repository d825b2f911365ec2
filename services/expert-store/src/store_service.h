// ExpertStore gRPC service: serves verified expert blocks from a BlockStore (striped disks
// and/or plain model directories) over the bidirectional Fetch stream. Thin: each stream's
// reactor hands the client's messages to a FetchScheduler (colibri/store/fetch_scheduler.h:
// queues, demand first, caps, deadlines, cancel, promote, batches, chunking, shared-memory
// slots, idle detection) and writes the answers it produces; block reads run on the store's
// I/O engine, never inside a reaction.
//
// Store-wide: at most `max_streams` streams, and at most `max_streams_per_client` from one
// peer host (all unix-socket peers are one client), RESOURCE_EXHAUSTED past either. A stream
// with no request for `idle_stream_timeout` and no read in progress is ended by the store (OK
// when nothing is owed to the client; cancelled when answers wait for a client that stopped
// reading), so abandoned or hostile streams do not hold a slot forever; clients open a new
// stream on their next request. On unix-socket connections a client may attach a
// shared-memory region (ShmAttach); the reactor maps it and blocks asked for there are read
// straight into it (O_DIRECT, no copy), only descriptors travel on the stream.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "colibri/store/block_store.h"
#include "colibri/store/fetch_scheduler.h"
#include "colibri/v1/expert_store.grpc.pb.h"
#include "store_metrics.h"

namespace colibri::store {

struct StoreOptions {
  size_t chunk_bytes = 1 << 20;          // 1 MiB chunks
  size_t max_queued = 1024;              // requests queued per stream
  size_t max_buffered_bytes = 64 << 20;  // read bytes waiting for the network, per stream
  size_t max_reads_in_flight = 16;       // block reads in progress per stream
  size_t max_streams = 256;              // open Fetch streams
  size_t max_streams_per_client = 64;    // open Fetch streams from one peer host
  std::chrono::milliseconds idle_stream_timeout{
      std::chrono::minutes(5)};  // 0: streams never idle out
  bool allow_shm = true;         // honour ShmAttach on unix-socket connections
};

class ExpertStoreService final : public v1::ExpertStore::CallbackService {
 public:
  // `store` and `metrics` must outlive the service. The destructor waits until every stream's
  // reads have ended (after the server's Shutdown, streams end but reads may still be landing).
  ExpertStoreService(BlockStore* store, StoreOptions options, StoreMetrics* metrics);
  ~ExpertStoreService() override;

  grpc::ServerBidiReactor<v1::FetchRequest, v1::FetchResponse>* Fetch(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest* req,
                                       v1::ListModelsResponse* resp) override;

 private:
  class FetchReactor;
  // Ends the streams idle past options_.idle_stream_timeout; runs until the destructor.
  void IdleLoop();
  // Counts a stream of `peer`; false when it has max_streams_per_client open already.
  bool AddPeerStream(const std::string& peer);
  void RemovePeerStream(const std::string& peer);

  BlockStore* store_;
  StoreOptions options_;
  StoreMetrics* metrics_;
  BlockStoreReads reads_;
  FetchLimits limits_;
  std::atomic<size_t> open_streams_{0};
  std::mutex peers_mu_;
  std::unordered_map<std::string, size_t> peer_streams_;  // only peers with open streams
  std::mutex reactors_mu_;
  std::condition_variable reactors_cv_;
  size_t reactors_ = 0;           // alive, counting those finished but still waiting for reads
  std::set<FetchReactor*> live_;  // every alive reactor (reactors_mu_)
  bool stopping_ = false;         // reactors_mu_
  std::thread idle_thread_;
};

}  // namespace colibri::store
