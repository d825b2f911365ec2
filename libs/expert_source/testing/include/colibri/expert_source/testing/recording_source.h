// RecordingSource: the one test double at the bottom (or in the middle) of an ExpertSource chain.
// Test-only (colibri::expert_source_testing); never linked into a binary.
//
// It records every call it receives, in order: Fetch (with its priority), FetchMany/FetchGroups
// batches (with the batch's priority), Prefetch, Cancel, Promote and Hint. Reads are either
// made up (blocks of `block_size` bytes, or SetSize's, every byte Fill(id)) or, with `next`,
// passed on to another source (a recorder between two tiers); the advisory calls are passed on
// too.
//
// Control, for tests of reads in flight:
// - Gate(id) holds every read of `id` (alone or inside a batch) until Open(id); the other blocks
//   of a batch are delivered meanwhile, so a gated block lands last.
// - FailOnce(id, status) fails the next read of `id` (a batch returns that error: its later
//   callbacks are skipped, as the FetchMany contract says).
// - With `cancel_stops_prefetch`, a prefetch-priority read of an id named by Cancel fails
//   Cancelled once it is opened (as the local reader drops its queued reads).
// - `reverse_batches` delivers a batch last block first (reads that complete out of order).
// Thread-safe. Waits give up after `wait_limit` (false), never hang a test.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source::testing {

enum class Call { kFetch, kBatch, kPrefetch, kCancel, kPromote, kHint };

struct RecordedCall {
  Call call = Call::kFetch;
  std::vector<ExpertId> ids;              // kHint: the hints' ids
  Priority priority = Priority::kDemand;  // kFetch and kBatch
  std::vector<RoutingHint> hints;         // kHint
};

struct RecordingSourceOptions {
  uint64_t block_size = 1000;                 // made-up blocks (SetSize overrides per id)
  std::function<uint64_t(ExpertId)> size_of;  // set: the size of a made-up block, by id
  size_t alignment = 4096;                    // of a made-up block's bytes
  ExpertSource* next = nullptr;               // set: reads and advice are passed on to it
  bool reverse_batches = false;
  bool cancel_stops_prefetch = false;
  std::chrono::microseconds read_delay{0};  // added to every read (a slow disk)
  std::chrono::milliseconds wait_limit{10000};
};

class RecordingSource final : public ExpertSource {
 public:
  explicit RecordingSource(uint64_t block_size = 1000);
  // Records, and passes everything on to `next` (which must outlive it).
  explicit RecordingSource(ExpertSource* next);
  explicit RecordingSource(RecordingSourceOptions options);

  // The byte every position of a made-up block of `id` holds.
  static uint8_t Fill(ExpertId id) { return static_cast<uint8_t>(id.layer * 16 + id.expert + 1); }

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override;
  absl::Status FetchMany(std::span<const ExpertId> ids,
                         const std::function<void(size_t, Lease)>& on_ready,
                         Priority priority = Priority::kDemand) override;
  void Prefetch(std::span<const ExpertId> ids) override;
  void Cancel(std::span<const ExpertId> ids) override;
  void Promote(std::span<const ExpertId> ids) override;
  void Hint(std::span<const RoutingHint> hints) override;
  uint64_t BlockSize(ExpertId id) const override;

  // Set-up.
  void SetSize(ExpertId id, uint64_t size);
  void Gate(ExpertId id);
  void Open(ExpertId id);
  void FailOnce(ExpertId id, absl::Status status = absl::UnavailableError("injected failure"));

  // What was asked. A read is one id asked by Fetch or inside a batch.
  std::vector<RecordedCall> Calls() const;
  size_t Count(ExpertId id) const;  // reads of `id`
  size_t TotalReads() const;
  std::vector<std::pair<ExpertId, Priority>> Reads() const;  // every read, in order
  std::vector<Priority> PrioritiesOf(ExpertId id) const;     // of the reads of `id`
  std::vector<std::vector<ExpertId>> Batches() const;        // FetchMany/FetchGroups calls
  std::vector<Priority> BatchPriorities() const;
  std::vector<ExpertId> Prefetched() const;  // every id named by Prefetch, in order
  std::vector<ExpertId> Cancelled() const;
  std::vector<ExpertId> Promoted() const;
  std::vector<RoutingHint> Hints() const;  // every hint, in order
  // The same, cleared: per call, and read counts by ExpertId::Key().
  std::vector<std::vector<ExpertId>> TakeBatches();
  std::vector<std::vector<RoutingHint>> TakeHints();
  std::vector<ExpertId> TakePrefetched();
  std::map<uint64_t, int> TakeReadCounts();

  // Wait until `id` was read `n` times / `n` reads were asked / `n` ids were promoted or
  // cancelled; false at the wait limit.
  bool WaitForFetch(ExpertId id, size_t n = 1);
  bool WaitForReads(size_t n);
  bool WaitForPromoted(size_t n);
  bool WaitForCancelled(size_t n);

 private:
  // Records a read and waits while it is gated; the status a failed read returns, else OK.
  absl::Status BeginRead(ExpertId id, Priority priority, std::unique_lock<std::mutex>& lock);
  absl::StatusOr<Lease> Read(ExpertId id, Priority priority);  // unlocked
  Lease MakeBlock(ExpertId id) const;
  std::vector<ExpertId> IdsOf(Call call) const;  // requires mu_
  bool WaitFor(const std::function<bool()>& done);

  const RecordingSourceOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, uint64_t> sizes_;
  std::set<uint64_t> gated_, cancelled_;
  std::map<uint64_t, absl::Status> fail_once_;
  std::vector<RecordedCall> calls_;
  std::vector<std::pair<ExpertId, Priority>> reads_;
  size_t taken_batches_ = 0, taken_hints_ = 0, taken_prefetched_ = 0, taken_reads_ = 0;
};

}  // namespace colibri::expert_source::testing
