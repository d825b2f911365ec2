// ExpertSource over the gRPC ExpertStore.Fetch stream of a remote (or co-located) store.
//
// One long-lived bidirectional stream per source. Requests are written by the fetching
// threads (serialised), responses are read by a background thread that reassembles chunks,
// checks every chunk checksum and the block checksum against the local manifest, and completes
// the request. A broken stream fails the fetches in flight with Unavailable and is re-opened on
// the next fetch. Every request carries its timeout, so the store drops work nobody waits for.
//
// Batches and advice: FetchMany sends its blocks as one BlockBatch message (one BlockRequest when
// alone) at the batch's priority; Promote and Cancel name this source's prefetch requests in
// flight for those ids (one PromoteRequest, one CancelRequest with more_request_ids). A prefetch
// batch hands out every block the store sends and skips the ones it cancelled (the call then
// returns Cancelled); a demand batch stops at its first error.
//
// Shared memory: with `shm_bytes` > 0 and a unix: target, each stream creates a shared-memory
// region, offers it to the store (ShmAttach) and, once accepted, asks for blocks to be written
// into slots of it: no bytes on the stream, no copy on either side. The block's lease points
// into its slot and keeps it reserved until dropped, so the region must hold the leases a cache
// keeps (size it as the cache plus the reads in flight); a request that finds no room falls back
// to chunks. The checksum is verified over the shared bytes before the lease is handed out.
//
// Asynchronous use (MultiStoreSource): StartFetch/StartFetches/Abandon. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "colibri/auth/transport.h"
#include "colibri/core/block_arena.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/model/manifest.h"
#include "colibri/v1/expert_store.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace colibri::rpc {

class ShmArena;

// A received block's check: OK, or DataLoss naming the block and `where`.
using BlockVerifier = std::function<absl::Status(const model::ExpertBlock& block,
                                                 const uint8_t* data, std::string_view where)>;
// `verify` when set, else the block's bytes against the manifest's checksum.
absl::Status VerifyReceived(const BlockVerifier& verify, const model::ExpertBlock& block,
                            const uint8_t* data, std::string_view where);

struct RemoteStoreOptions {
  std::string target;  // host:port or unix:/path
  std::string model;   // model name as the store knows it
  std::chrono::milliseconds fetch_timeout{60000};
  std::string client_name;  // sent as colibri-client metadata (the store's per-client metrics)
  uint64_t shm_bytes =
      0;  // > 0 with a unix: target: shared-memory delivery through a region this big
  // How the channel is secured (mutual TLS, or plaintext on loopback / unix). Null: plaintext,
  // refused for a non-loopback target.
  std::shared_ptr<const auth::Transport> transport;
  // Where blocks received as chunks are assembled (not owned; must outlive every block). A
  // block that finds no slot fails ResourceExhausted (the reader thread never waits). nullptr:
  // the process-wide buffer pool.
  BlockArena* arena = nullptr;
  // Checks a received block's bytes. Unset: against the manifest's checksum; a GGUF served in
  // place passes its Container's VerifyExpertBlock (checksums recorded on first read).
  BlockVerifier verify;
};

struct RemoteStoreStats {
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint64_t reconnects = 0;
  uint64_t shm_blocks = 0;         // of `blocks`, delivered through shared memory
  uint64_t outstanding_bytes = 0;  // requested and not answered yet
  uint64_t promoted = 0;           // prefetch requests raised to demand (PromoteRequest)
  uint64_t cancelled = 0;          // prefetch requests cancelled (CancelRequest)
  bool shm_active = false;         // the current stream has shared memory attached
};

class RemoteStoreSource final : public expert_source::ExpertSource {
 public:
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void(absl::StatusOr<expert_source::Lease>)>;

  // `manifest` (the model's, read by compute) must outlive the source; it gives block sizes
  // and the checksums every received block is verified against. Fails (Unavailable, NotFound)
  // when the store is unreachable or does not hold the model.
  static absl::StatusOr<std::unique_ptr<RemoteStoreSource>> Connect(
      const RemoteStoreOptions& options, const model::Manifest* manifest);
  // As Connect, without contacting the store (call Probe() to learn what it holds). Fails only
  // for a malformed target or one the transport refuses (InvalidArgument).
  static absl::StatusOr<std::unique_ptr<RemoteStoreSource>> Create(
      const RemoteStoreOptions& options, const model::Manifest* manifest);
  ~RemoteStoreSource() override;

  absl::StatusOr<expert_source::Lease> Fetch(expert_source::ExpertId id,
                                             expert_source::Priority priority) override;
  absl::Status FetchMany(
      std::span<const expert_source::ExpertId> ids,
      const std::function<void(size_t, expert_source::Lease)>& on_ready,
      expert_source::Priority priority = expert_source::Priority::kDemand) override;
  // Raises this source's prefetch requests in flight for these ids to demand (PromoteRequest).
  void Promote(std::span<const expert_source::ExpertId> ids) override;
  // Cancels this source's prefetch requests in flight for these ids (one CancelRequest): the
  // store answers them CANCELLED, and a prefetch FetchMany skips them.
  void Cancel(std::span<const expert_source::ExpertId> ids) override;
  uint64_t BlockSize(expert_source::ExpertId id) const override;
  RemoteStoreStats Stats() const;

  // Asks the store (ListModels) what it holds of the model: OK when it holds some of it.
  absl::Status Probe(std::chrono::milliseconds timeout);
  // What the last successful Probe (or Connect) said; false before any.
  bool Holds(expert_source::ExpertId id) const;
  bool full_copy() const;
  // The store serves parts of blocks (StartFetches with parts); false for an older store.
  bool serves_parts() const;
  // A buffer for the block of `id`: its padded size from `arena` (never waiting) or, without
  // one, from the buffer pool; the padding zeroed.
  static absl::StatusOr<std::shared_ptr<expert_source::Block>> NewBlockBuffer(
      expert_source::ExpertId id, const model::ExpertBlock& want, BlockArena* arena);
  const std::string& target() const { return options_.target; }

  // Starts a fetch; `done` runs exactly once, on the reader thread (or on the thread calling
  // Abandon or the destructor), never inside StartFetch. Errors returned here mean `done` never
  // runs. The returned handle names the fetch for Abandon.
  absl::StatusOr<uint64_t> StartFetch(expert_source::ExpertId id, expert_source::Priority priority,
                                      Clock::time_point deadline, Callback done);
  // StartFetch of several blocks as one message (a BlockBatch of up to kMaxBatch requests),
  // dones[i] for ids[i]; the handles in the same order. An error returned means no `done` runs;
  // when the store closes the stream twice while some were already failed by the reader, the
  // others' `done` runs (Unavailable) before this returns.
  // A part of a block, for StartFetches: bytes [begin, end) of the block land at the same
  // offsets of `into` (the caller's buffer, the block's padded size) and `done` gets `into`
  // back. Only the chunk checksums are checked: the caller, assembling the block from several
  // stores, verifies the whole. Parts come as chunks, never through shared memory.
  struct Part {
    uint64_t begin = 0;
    uint64_t end = 0;
    std::shared_ptr<expert_source::Block> into;
  };
  // With `parts` (empty, or one per id), ids[i] asks for parts[i] only (a Part without `into`:
  // the whole block).
  absl::StatusOr<std::vector<uint64_t>> StartFetches(std::span<const expert_source::ExpertId> ids,
                                                     expert_source::Priority priority,
                                                     Clock::time_point deadline,
                                                     std::vector<Callback> dones,
                                                     std::span<const Part> parts = {});
  static constexpr size_t kMaxBatch = 4096;  // requests in one BlockBatch (the proto's limit)
  // Gives up on a fetch: `done` runs now with Cancelled (unless it already ran) and the store is
  // told to cancel. A shared-memory slot stays reserved until the store answers.
  void Abandon(uint64_t handle);
  // Called (on the reader thread) when a stream breaks, with or without fetches in flight.
  // Set before the first fetch.
  void OnStreamBroken(std::function<void(const absl::Status&)> listener) {
    on_broken_ = std::move(listener);
  }

 private:
  struct Pending {
    expert_source::ExpertId id;
    expert_source::Priority priority = expert_source::Priority::kDemand;  // raised by Promote
    std::shared_ptr<expert_source::Block> block;
    uint64_t generation = 0;  // the stream it was sent on
    bool part = false;        // a Part: `block` is the caller's, [begin, end) is asked for
    uint64_t begin = 0;
    uint64_t end = 0;                 // the block's size when whole
    uint64_t received = 0;            // block offset of the next byte expected
    uint64_t bytes = 0;               // counted in outstanding_bytes_
    Callback done;                    // empty once run
    std::shared_ptr<ShmArena> arena;  // set: the block goes to `shm_offset` of this arena
    uint64_t shm_offset = 0;
    uint64_t shm_bytes = 0;
    v1::FetchRequest request;  // as sent, to send again after the store ended an idle stream
    bool resent = false;
  };
  // A callback to run (outside mu_) with its result.
  struct Completion {
    Callback done;
    absl::StatusOr<expert_source::Lease> result;
  };
  using Stream = grpc::ClientReaderWriter<v1::FetchRequest, v1::FetchResponse>;

  RemoteStoreSource(const RemoteStoreOptions& options, const model::Manifest* manifest);
  absl::Status EnsureStreamLocked();
  bool WriteLocked(std::unique_lock<std::mutex>& lock, const v1::FetchRequest& req);
  // The request ids of this stream's prefetches in flight for `ids`, ascending.
  std::vector<uint64_t> PrefetchesInFlightLocked(std::span<const expert_source::ExpertId> ids);
  // The BlockRequest of one fetch (a shared-memory slot reserved in `p` when there is room).
  v1::FetchRequest NewRequestLocked(uint64_t rid, expert_source::ExpertId id,
                                    expert_source::Priority priority, Clock::time_point deadline,
                                    Pending& p);
  void ReaderLoop(std::shared_ptr<grpc::ClientContext> ctx, std::shared_ptr<Stream> stream,
                  uint64_t generation, std::shared_ptr<ShmArena> arena);
  // Sends a request again on a new stream (once): it was written to a stream the store ended
  // as idle (status OK) before the reader saw the end. Fails it when that is not possible.
  void Resend(uint64_t rid);
  // Handles one response; appends completions to run after unlocking.
  void HandleResponseLocked(const v1::FetchResponse& resp, std::shared_ptr<ShmArena> arena,
                            std::vector<Completion>* out);
  void FinishLocked(uint64_t rid, absl::StatusOr<expert_source::Lease> result,
                    std::vector<Completion>* out);
  static void Run(std::vector<Completion>& completions);

  const RemoteStoreOptions options_;
  const model::Manifest* manifest_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExpertStore::Stub> stub_;

  mutable std::mutex mu_;
  std::shared_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<ShmArena> arena_;  // of the current stream
  bool shm_active_ = false;          // the store accepted arena_
  bool shm_failed_logged_ = false;
  std::mutex write_mu_;
  uint64_t generation_ = 0;
  std::thread reader_;
  std::vector<std::thread> old_readers_;
  uint64_t next_request_id_ = 1;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t outstanding_bytes_ = 0;
  RemoteStoreStats stats_;
  bool shutting_down_ = false;
  std::function<void(const absl::Status&)> on_broken_;
  // Holdings from ListModels.
  bool probed_ = false;
  bool full_copy_ = false;
  bool serves_parts_ = false;
  std::string held_;  // bitmap, when !full_copy_
};

}  // namespace colibri::rpc
