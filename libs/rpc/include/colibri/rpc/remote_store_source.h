// ExpertSource over the gRPC ExpertStore.Fetch stream of a remote (or co-located) store.
//
// One long-lived bidirectional stream per source. Requests are written by the fetching
// threads (serialised), responses are read by a background thread that reassembles chunks,
// checks every chunk checksum and the block checksum against the local manifest, and wakes the
// waiter. A broken stream fails the fetches in flight with Unavailable and is re-opened on the
// next fetch. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "colibri/expert_source/expert_source.h"
#include "colibri/model/manifest.h"
#include "colibri/v1/expert_store.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace colibri::rpc {

struct RemoteStoreOptions {
  std::string target;                  // host:port or unix:/path
  std::string model;                   // model name as the store knows it
  std::chrono::milliseconds fetch_timeout{60000};
};

struct RemoteStoreStats {
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint64_t reconnects = 0;
};

class RemoteStoreSource final : public expert_source::ExpertSource {
 public:
  // `manifest` (the model's, read by compute) must outlive the source; it gives block sizes
  // and the checksums every received block is verified against.
  static absl::StatusOr<std::unique_ptr<RemoteStoreSource>> Connect(const RemoteStoreOptions& options,
                                                                    const model::Manifest* manifest);
  ~RemoteStoreSource() override;

  absl::StatusOr<expert_source::Lease> Fetch(expert_source::ExpertId id, expert_source::Priority priority) override;
  absl::Status FetchMany(std::span<const expert_source::ExpertId> ids,
                         const std::function<void(size_t, expert_source::Lease)>& on_ready) override;
  uint64_t BlockSize(expert_source::ExpertId id) const override;
  RemoteStoreStats Stats() const;

 private:
  struct Pending {
    expert_source::ExpertId id;
    std::shared_ptr<expert_source::Block> block;
    uint64_t generation = 0;  // the stream it was sent on
    uint64_t received = 0;
    bool done = false;
    absl::Status status;
  };
  RemoteStoreSource(const RemoteStoreOptions& options, const model::Manifest* manifest);
  absl::Status EnsureStreamLocked(std::unique_lock<std::mutex>& lock);
  absl::StatusOr<uint64_t> SendLocked(std::unique_lock<std::mutex>& lock, expert_source::ExpertId id,
                                      expert_source::Priority priority);
  absl::StatusOr<expert_source::Lease> WaitLocked(std::unique_lock<std::mutex>& lock, uint64_t request_id);
  void ReaderLoop(std::shared_ptr<grpc::ClientContext> ctx,
                  std::shared_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream,
                  uint64_t generation);
  void HandleResponse(const v1::FetchResponse& resp);

  const RemoteStoreOptions options_;
  const model::Manifest* manifest_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExpertStore::Stub> stub_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>> stream_;
  std::mutex write_mu_;
  uint64_t generation_ = 0;
  std::thread reader_;
  std::vector<std::thread> old_readers_;
  uint64_t next_request_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  RemoteStoreStats stats_;
  bool shutting_down_ = false;
};

}  // namespace colibri::rpc
