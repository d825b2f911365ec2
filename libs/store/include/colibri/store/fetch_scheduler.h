// FetchScheduler: the scheduling of one Fetch stream, without gRPC. The stream's adapter (the
// store service's reactor) turns each client message into a call here and each answer handed
// to its FetchSink into a wire message; everything else is decided here:
//
// - Queues: demand requests are read before queued prefetches, and their answers are written
//   before queued prefetch answers (chunks of a demand block overtake prefetch chunks). A
//   batch (SubmitBatch) is taken as one unit: its demand requests first, then its prefetches,
//   each answered exactly as if sent alone in that order (caps included); its reads start
//   together once the whole batch is queued.
// - Caps: at most `max_queued` requests wait (RESOURCE_EXHAUSTED past it), at most
//   `max_reads_in_flight` block reads run, and reads pause while `max_buffered_bytes` of read
//   bytes wait for the network (back-pressure; shared-memory reads only take a read slot).
// - Deadlines: a request queued or read past its timeout_ms is answered DEADLINE_EXCEEDED.
// - Cancel: a queued request, or a read answer still waiting for the network, is answered
//   CANCELLED at once; a read in progress is cancelled down to the disks (its parts still
//   queued there never reach the device) and answered CANCELLED when it ends (so a
//   shared-memory slot is free once the answer arrives). Unknown or finished ids are ignored.
// - Promote: a queued prefetch moves to the demand queue; a read in progress is promoted down
//   to the disks (its queued parts go ahead of queued prefetch reads) and it and its waiting
//   answer count as demand from then on. Unknown or finished ids are ignored.
// - Chunking: a read block is cut into `chunk_bytes` chunks as writes complete, each with its
//   XXH3-64, so the block is held once, not as copies. One write is outstanding at a time.
// - Shared memory: once a region is attached, requests with a shm offset are read straight
//   into it (4 KiB aligned, inside the region, else the request's error answer) and answered
//   with a descriptor.
// - End: the stream finishes OK once the client stopped sending and every answer is written,
//   or CANCELLED when the transport broke. ExpireIfIdle ends streams that are silent (no
//   client message and no completed write for the timeout, no read in progress).
//
// Threading: every method may be called from any thread; FetchSink and FetchObserver calls
// are made under the scheduler's lock (they must not call back into it), reads are started
// outside it. FetchReads::Read may complete inline.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/store/block_store.h"
#include "colibri/store/catalog.h"
#include "colibri/store/read_cache.h"

namespace colibri::store {

struct FetchLimits {
  size_t chunk_bytes = 1 << 20;          // bytes per chunk answer
  size_t max_queued = 1024;              // requests waiting for a read slot
  size_t max_buffered_bytes = 64 << 20;  // read bytes waiting for the network
  size_t max_reads_in_flight = 16;       // block reads in progress
  size_t max_batch = 4096;               // requests in one batch
};

// One block request as the client sent it.
struct FetchBlock {
  uint64_t request_id = 0;
  std::string model;
  expert_source::ExpertId id;
  expert_source::Priority priority = expert_source::Priority::kDemand;
  uint32_t timeout_ms = 0;  // 0: no limit
  bool has_shm_offset = false;
  uint64_t shm_offset = 0;
  // A part of the block: bytes [range_begin, range_end) (range_end 0: the whole block).
  uint64_t range_begin = 0;
  uint64_t range_end = 0;
};

// One answer for the wire.
struct FetchAnswer {
  enum class Kind { kChunk, kError, kShmBlock, kShmAttached };
  Kind kind = Kind::kError;
  uint64_t request_id = 0;  // 0 for kShmAttached and for an error of the stream, not a request
  absl::Status error;       // kError
  // kChunk: `length` bytes at `offset` of the block, valid while `hold` is.
  uint64_t offset = 0;
  const uint8_t* data = nullptr;
  uint64_t length = 0;
  uint64_t chunk_checksum = 0;
  bool last = false;
  SharedBlock hold;
  // kChunk and kShmBlock.
  uint64_t block_size = 0;
  uint64_t block_checksum = 0;
  uint64_t shm_offset = 0;  // kShmBlock
  // kShmAttached.
  bool attach_ok = false;
  std::string attach_message;
};

// A block the scheduler can read.
struct FetchTarget {
  const StoredModel* model = nullptr;
  const BlockRecord* block = nullptr;
  // The bytes asked for: [begin, end) of the block (set by the scheduler; end 0 until then).
  uint64_t begin = 0;
  uint64_t end = 0;
  // What the read holds until its chunks are written: the block, or a part's whole window
  // (the stripe units or pages covering it), which the buffer caps count.
  uint64_t held = 0;
  bool whole() const { return begin == 0 && end == block->size; }
  uint64_t bytes() const { return end - begin; }
};

// Where reads go: the BlockStore in the service (BlockStoreReads), a fake in tests.
class FetchReads {
 public:
  using Done = std::function<void(absl::Status, SharedBlock)>;
  using Handle = BlockStore::ReadHandle;
  virtual ~FetchReads() = default;
  // The block, or NotFound naming the model and the expert.
  virtual absl::StatusOr<FetchTarget> Find(std::string_view model,
                                           expert_source::ExpertId id) const = 0;
  // Reads the block: into `dst` (padded_size bytes, 4 KiB aligned) when set, then `done` gets
  // a null block; else into a shared buffer handed to `done` (for a part, one that holds at
  // least [target.begin, target.end), its `offset` the block offset of its first byte). `done` runs exactly once, on any
  // thread, possibly before Read returns. The handle (null when there is nothing left to
  // steer) names the read for Cancel and Promote.
  virtual Handle Read(const FetchTarget& target, expert_source::Priority priority, uint8_t* dst,
                      Done done) = 0;
  // Advisory, down to the disks: parts of the read not yet at the device are dropped (`done`
  // then gets Cancelled) or moved ahead of queued prefetch reads. Never runs `done` inline.
  virtual void Cancel(const Handle& read) = 0;
  virtual void Promote(const Handle& read) = 0;
};

// FetchReads over a BlockStore (which must outlive it).
class BlockStoreReads final : public FetchReads {
 public:
  explicit BlockStoreReads(BlockStore* store) : store_(store) {}
  absl::StatusOr<FetchTarget> Find(std::string_view model,
                                   expert_source::ExpertId id) const override;
  Handle Read(const FetchTarget& target, expert_source::Priority priority, uint8_t* dst,
              Done done) override;
  void Cancel(const Handle& read) override;
  void Promote(const Handle& read) override;

 private:
  BlockStore* store_;
};

// What the scheduler reports, for the service's metrics.
class FetchObserver {
 public:
  virtual ~FetchObserver() = default;
  virtual void QueuedChanged(int64_t delta) = 0;         // requests waiting for a read slot
  virtual void ReadsInFlightChanged(int64_t delta) = 0;  // block reads in progress
  virtual void Rejected() = 0;                           // past max_queued
  virtual void Cancelled() = 0;                          // a request cancelled by the client
  virtual void DeadlineExceeded() = 0;
  virtual void Failed(const absl::Status& status) = 0;  // lookup or read error (checksum too)
  virtual void Served(bool demand, uint64_t bytes, bool shm) = 0;
  virtual void ReadTime(bool demand, double seconds) = 0;
  virtual void IdleEnded() = 0;  // ExpireIfIdle ended the stream (before it finishes)
};

// The stream's transport, implemented by the adapter.
class FetchSink {
 public:
  virtual ~FetchSink() = default;
  // Sends one answer; the scheduler waits for WriteDone before the next.
  virtual void Write(const FetchAnswer& answer) = 0;
  // Asks for the client's next message (after each client message while the stream is open).
  virtual void ReadNext() = 0;
  // Ends the stream (at most once).
  virtual void Finish(const absl::Status& status) = 0;
  // Cancels the stream: answers wait for a client that stopped reading (ExpireIfIdle).
  virtual void Abort() = 0;
  // After Done(): the last read in progress ended; the scheduler may be destroyed now.
  virtual void Released() = 0;
};

class FetchScheduler {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  // `reads`, `observer` and `sink` must outlive the scheduler; `now` defaults to the steady
  // clock (tests pass their own).
  FetchScheduler(FetchReads* reads, FetchObserver* observer, FetchSink* sink, FetchLimits limits,
                 Now now = nullptr);

  // Client messages. Each ends with FetchSink::ReadNext unless the stream has finished.
  void Submit(const FetchBlock& request);
  // Several requests as one unit. Empty or over max_batch: nothing is queued and the stream
  // gets one InvalidArgument answer with request id 0.
  void SubmitBatch(std::span<const FetchBlock> requests);
  void Cancel(std::span<const uint64_t> ids);
  void Promote(std::span<const uint64_t> ids);
  // The answer to a shared-memory offer: `base`/`size` the mapped region when ok (it must
  // outlive every read into it: until Released, or destruction when Done found no read).
  void Attached(bool ok, const std::string& message, uint8_t* base, uint64_t size);
  // A message of a kind this store does not know (a newer client's): ignored.
  void Skip();
  // The client will send nothing more.
  void ClientDone();

  // Ends the stream at once with `status` (a stream refused before its first message).
  void Refuse(const absl::Status& status);

  // Transport events.
  void WriteDone(bool ok);
  void Broken();  // the stream was cancelled: finish CANCELLED, drop what waits
  // The transport is gone (no more sink calls). True when no read is in progress: destroy the
  // scheduler now; false: FetchSink::Released follows when the last read ends.
  bool Done();

  enum class Idle { kBusy, kFinished, kStuck };
  // Ends the stream when nothing came from the client and no write completed for `timeout`,
  // and no read is in progress: kFinished (finished OK: nothing was owed) or kStuck (answers wait for a client
  // that stopped reading: FetchSink::Abort was called). kBusy otherwise.
  Idle ExpireIfIdle(Clock::time_point now, std::chrono::milliseconds timeout);

  bool has_shm() const;

 private:
  struct Request {
    uint64_t id = 0;
    FetchTarget target;
    bool demand = true;
    Clock::time_point deadline = Clock::time_point::max();
    uint32_t timeout_ms = 0;
    uint8_t* shm_dst = nullptr;  // set: read into the attached region
    uint64_t shm_offset = 0;
    Clock::time_point started;
    uint64_t seq = 0;  // tells a read from a later one that reuses its request id
  };
  // An answer waiting for the network: a read block cut into chunks as writes complete, or a
  // ready answer.
  struct Out {
    SharedBlock block;
    const BlockRecord* record = nullptr;
    uint64_t next = 0;   // block offset of the next chunk
    uint64_t end = 0;    // of the bytes asked for
    uint64_t extra = 0;  // bytes held past those asked for (a part's window), freed at the end
    FetchAnswer answer;
  };
  struct InFlight {
    bool cancelled = false;
    bool demand = true;
    uint64_t seq = 0;
    FetchReads::Handle handle;  // set once Read returned
  };

  void OnMessage(const std::function<void(std::vector<Request>*)>& handle);
  void AcceptLocked(const FetchBlock& b);
  void CancelLocked(uint64_t id);
  void PromoteLocked(uint64_t id);
  void PushErrorLocked(uint64_t id, const absl::Status& status);
  void PushLocked(FetchAnswer answer);
  void ClearQueuedLocked();
  void ScheduleLocked(std::vector<Request>* starts);
  // Reads picked under the lock start after it; HoldLocked takes a task for them so the
  // scheduler outlives StartReads even when every read completes inline.
  void HoldLocked(const std::vector<Request>& starts);
  void StartReads(const std::vector<Request>& starts);
  void OnReadComplete(const Request& r, absl::Status status, SharedBlock block);
  void WriteNextLocked();
  void MaybeFinishLocked();
  void FinishLocked(const absl::Status& status);

  FetchReads* reads_;
  FetchObserver* observer_;
  FetchSink* sink_;
  const FetchLimits limits_;
  const Now now_;
  mutable std::mutex mu_;
  Clock::time_point last_active_;  // the last client message or completed write
  std::deque<Request> demand_, prefetch_;
  std::unordered_map<uint64_t, InFlight> in_flight_;
  std::deque<Out> demand_out_, prefetch_out_;
  uint64_t buffered_bytes_ = 0;         // read bytes not yet cut into written chunks
  uint64_t chunk_bytes_in_flight_ = 0;  // bytes of reads that will become chunks
  uint8_t* shm_base_ = nullptr;
  uint64_t shm_size_ = 0;
  uint64_t next_seq_ = 1;
  int tasks_ = 0;  // reads started and not yet completed, and StartReads calls running
  bool writing_ = false, client_done_ = false, broken_ = false, finished_ = false, done_ = false;
};

}  // namespace colibri::store
