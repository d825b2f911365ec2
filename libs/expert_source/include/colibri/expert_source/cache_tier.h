// A cache tier of expert blocks in front of another ExpertSource: host RAM over a disk or a
// store, or (with a GPU backend) VRAM over the RAM tier. Backend-neutral: where the copies live
// is a TierMemory (cache_tier.h never looks inside a block).
//
// Budget (strict). Every block this tier hands out is resident and counted: the bytes of
// resident blocks plus the bytes reserved for reads in flight never exceed `capacity_bytes`.
// A block counts as the bytes it takes in the tier's memory (TierMemory::Footprint: a VRAM
// tier's fixed slot), which is its size in host RAM.
// Room is made before a read starts, by evicting the block of lowest policy priority that is
// not leased, not pinned and not a prefetched block awaiting its predicted use. When every
// resident block is leased, a demand read waits for a lease to be dropped (up to `room_wait`,
// then ResourceExhausted naming the tier); a prefetch is dropped instead. A block larger than
// the unpinned budget fails at once. Leases are tracked exactly (the tier knows when the last
// copy of a lease is dropped), so no block is ever handed out uncached.
//
// Reads. A request's misses are read on the calling thread as one batch: one FetchGroups call
// to the next source at the request's priority, each block handed over as it lands. Misses that
// do not all fit at once go as several batches, the first block of each waiting for room. With
// io_threads > 0, reader threads read queued prefetches (then warm reads) as prefetch-priority
// batches, at most max_prefetch_reads blocks in flight; with io_threads == 0, Prefetch is
// ignored. Concurrent requests for one block share a single read ("single flight"): a demand
// request for a queued prefetch takes it into its own batch (a demand read), and one for a
// prefetch already being read tells the next source with Promote.
//
// Prefetch. Prefetch(ids) queues reads at prefetch priority (at most max_queued_prefetches;
// the rest are dropped and counted; at most max_prefetch_reads run at once). A prefetched block,
// and a resident block named by Prefetch, is protected from eviction by other prefetches until a
// demand request uses it, Cancel names it, or `protect_ticks` demand accesses pass. Cancel
// removes queued reads, passes the cancel on to the source for reads in progress (a source may
// stop them: the local reader does), and demotes prefetched blocks nobody used (evicted first; their
// bytes count as wasted). A stopped read that a demand request joined meanwhile is read again,
// and so are the other blocks of a batch the source stopped (once).
//
// Warming. Warm(ids) queues background reads of blocks, in the order given, behind demand reads
// and prefetches (they share the prefetch read slots). A warm read never evicts: it runs only
// while the block fits in free room, and the first one that does not fit ends the warming (the
// rest of the queue is dropped and counted as skipped). Warmed blocks are ordinary residents
// (not protected, never counted as wasted prefetches); a demand request for a queued one turns it
// into a demand read. Clear drops the queue.
//
// Pinning. SetPinned names blocks that are never evicted; those not resident are read in the
// background (or on the calling thread when io_threads == 0). Pinned bytes count against the
// budget; SetPinned refuses a set that leaves less than two of the largest blocks unpinned.
//
// Thread-safe. Leases may outlive the tier.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "colibri/expert_source/cache_policy.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/expert_source/tier_memory.h"

namespace colibri::expert_source {

class RoutingHeat;

struct CacheTierOptions {
  std::string name = "ram";  // the tier's label in stats and metrics: ram | vram
  uint64_t capacity_bytes = 0;
  CachePolicyKind policy = CachePolicyKind::kLru;
  CachePolicyParams policy_params;  // zeros: derived from the capacity (see cache_tier.cc)
  int io_threads = 0;               // reader threads; 0: read on the caller's thread
  int max_prefetch_reads = 0;       // prefetch blocks in flight at once, over all batches
                                    // (0: io_threads - 1, at least 1)
  size_t max_queued_prefetches = 512;
  uint64_t protect_ticks = 256;  // how long a prefetched block waits for its use
  std::chrono::milliseconds room_wait{30000};
  TierMemory* memory = nullptr;  // nullptr: keep the source's blocks (host RAM)
  RoutingHeat* heat = nullptr;   // hints are also recorded here; not owned
};

struct CacheStats {
  std::string tier;
  // Demand lookups = hits + in_flight_hits + misses.
  uint64_t hits = 0;            // resident
  uint64_t in_flight_hits = 0;  // already being read (by a prefetch or another request)
  uint64_t misses = 0;          // a read had to start (or was queued, not started)
  uint64_t evictions = 0;
  uint64_t room_waits = 0;     // demand reads that waited for a lease to be dropped
  uint64_t bytes_fetched = 0;  // read from the next source (demand and prefetch)
  uint64_t bytes_cached = 0;   // resident now
  uint64_t blocks_cached = 0;
  uint64_t bytes_reserved = 0;  // reads in flight
  uint64_t bytes_leased = 0;    // resident blocks with a live lease
  uint64_t bytes_pinned = 0;    // resident and pinned
  uint64_t blocks_pinned = 0;
  uint64_t pins = 0;  // pinned set (resident or not)
  uint64_t capacity_bytes = 0;
  // Prefetch.
  uint64_t prefetch_requested = 0;  // Prefetch ids not resident or in flight: queued
  uint64_t prefetch_reads = 0;      // prefetch reads started
  uint64_t prefetch_bytes = 0;      // bytes they read
  uint64_t prefetch_used = 0;       // prefetch reads (started) a demand request then used
  uint64_t prefetch_promoted = 0;   // queued prefetches a demand request turned into demand reads
  uint64_t prefetch_cancelled = 0;  // removed from the queue by Cancel before reading
  uint64_t prefetch_aborted = 0;    // stopped by Cancel while being read (the source stopped)
  uint64_t prefetch_dropped = 0;    // queue full, or no room without evicting protected data
  uint64_t prefetch_wasted_bytes = 0;  // prefetched, then evicted or cleared without a use
  // Warming.
  uint64_t warm_queued = 0;   // waiting now
  uint64_t warm_reads = 0;    // warm reads done
  uint64_t warm_bytes = 0;    // bytes they read
  uint64_t warm_skipped = 0;  // dropped: resident or in flight already, or no free room
  uint64_t lookups() const { return hits + in_flight_hits + misses; }
  // Demanded blocks that were resident or already being read.
  double coverage() const {
    return lookups() ? static_cast<double>(hits + in_flight_hits) / lookups() : 0;
  }
  double hit_rate() const { return lookups() ? static_cast<double>(hits) / lookups() : 0; }
  // Prefetch reads that a demand request then used.
  double prefetch_precision() const {
    return prefetch_reads ? static_cast<double>(prefetch_used) / prefetch_reads : 0;
  }
};

class CacheTier final : public ExpertSource {
 public:
  // `next` must outlive the cache.
  CacheTier(ExpertSource* next, CacheTierOptions options);
  // Compatibility: an LRU tier of `capacity_bytes`, reads on the caller's thread.
  CacheTier(ExpertSource* next, uint64_t capacity_bytes);
  ~CacheTier() override;

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override;
  // Hits are handed out first, then the misses as their reads land.
  absl::Status FetchMany(std::span<const ExpertId> ids,
                         const std::function<void(size_t, Lease)>& on_ready,
                         Priority priority = Priority::kDemand) override;
  // The hits as one group, then every batch of reads found landed at one wake-up.
  absl::Status FetchGroups(std::span<const ExpertId> ids,
                           const std::function<void(std::span<std::pair<size_t, Lease>>)>& on_group,
                           Priority priority = Priority::kDemand) override;
  void Prefetch(std::span<const ExpertId> ids) override;
  // Queues background reads in this order (see Warming above). Ignored with io_threads == 0.
  void Warm(std::span<const ExpertId> ids);
  void Cancel(std::span<const ExpertId> ids) override;
  // Passed on (a tier above promotes its reads, which are reads of this tier).
  void Promote(std::span<const ExpertId> ids) override;
  // Ranks blocks (routing policy), records heat, and passes the hints on to the next source.
  void Hint(std::span<const RoutingHint> hints) override;
  uint64_t BlockSize(ExpertId id) const override { return next_->BlockSize(id); }
  // This tier's resident blocks of the layer (layers 0-1023; 0 above).
  int64_t ResidentInLayer(int32_t layer) const override;

  // Replaces the pinned set (see the contract above). InvalidArgument when it does not fit.
  absl::Status SetPinned(std::span<const ExpertId> ids);
  std::vector<ExpertId> Pinned() const;

  struct ClearResult {
    uint64_t blocks = 0;
    uint64_t bytes = 0;
  };
  // Drops every resident block not currently leased (pinned ones too: they are read again when
  // next used); queued prefetches are cancelled. The pinned set is kept.
  ClearResult Clear();
  CacheStats Stats() const;
  bool Contains(ExpertId id) const;
  // Waits until no read is queued or in flight; false at the deadline.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) const;
  const CacheTierOptions& options() const { return options_; }

 private:
  struct State;
  struct Job;
  struct Completion;
  using Waiters = std::vector<std::pair<std::shared_ptr<Completion>, size_t>>;

  // Bytes a block of `block_bytes` takes in this tier's memory (TierMemory::Footprint).
  uint64_t Charge(uint64_t block_bytes) const {
    return options_.memory != nullptr && block_bytes > 0 ? options_.memory->Footprint(block_bytes)
                                                         : block_bytes;
  }
  // A read job for `id`, its size charged as this tier's memory takes it.
  std::shared_ptr<Job> NewJob(ExpertId id) const;
  // Reads queued prefetches and warm reads, a batch at a time.
  void WorkerLoop();
  // The functions below require `lock` held on the state's mutex; they unlock it while the next
  // source reads, and while `landed_some` runs (after each group of blocks lands).
  // Reserves room for the job (a demand read waits for leases to be dropped, running
  // `landed_some` first so the waiting caller's own landed blocks are handed over and can be
  // released); false, with the reason, when there is none.
  bool ReserveJobLocked(Job& job, bool demand, std::unique_lock<std::mutex>& lock,
                        absl::Status* no_room, const std::function<void()>& landed_some = nullptr);
  // Reads `jobs` in order as batches: each the longest run that fits, the first waiting for room.
  void ReadJobsLocked(const std::vector<std::shared_ptr<Job>>& jobs, bool demand, Priority priority,
                      std::unique_lock<std::mutex>& lock, const std::function<void()>& landed_some);
  // Reads reserved jobs with one FetchGroups call to the next source; each block is inserted
  // and handed to its waiters as it lands.
  void ReadBatchLocked(const std::vector<std::shared_ptr<Job>>& batch, bool demand,
                       Priority priority, std::unique_lock<std::mutex>& lock,
                       const std::function<void()>& landed_some);
  // Ends a job: releases its reservation, inserts the block and hands it (or the error) to its
  // waiters, who go to `drop`: destroyed unlocked (a completion whose caller returned holds
  // handed-out leases, whose release takes the lock).
  void FinishJobLocked(const std::shared_ptr<Job>& job, absl::StatusOr<Lease> result,
                       std::vector<Waiters>* drop);

  ExpertSource* const next_;
  CacheTierOptions options_;
  std::shared_ptr<State> s_;  // shared with the leases handed out
  std::vector<std::thread> workers_;
};

}  // namespace colibri::expert_source
