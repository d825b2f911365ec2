// ExpertSource over a BlockStore model: the one local read path, from the disks into compute's
// cache with no serialization and no thread hop between the caller and io_uring. It serves a
// process's own model (OpenLocal: a model directory or a GGUF in place, the store a private
// one) and an embedded expert store alike. FetchMany submits every block at once, so all disks
// work in parallel, and hands blocks to the caller in arrival order. Verification is the
// BlockStore's (stripe checksums, or the container's block checksum).
//
// Memory: with an arena (StripedSourceOptions::arena) every block is read straight into one of
// its slots and the lease holds the slot, so the blocks in a cache and in flight all live in the
// arena's fixed, pre-faulted memory. A demand read waits up to `arena_wait` for a slot (then
// ResourceExhausted); a prefetch finding none is shed (Cancelled, counted in shed_reads()).
// Without an arena, blocks come from the process's buffer pool.
//
// Cancel(ids) applies to the reads of prefetch batches (FetchMany with kPrefetch) in progress:
// their parts still queued at the disks are dropped (BlockStore::Cancel) and the batch stops
// waiting for them at once, also for parts already submitted; it hands out the others and then
// fails Cancelled. Promote(ids) moves such reads ahead of queued prefetch reads
// (BlockStore::Promote); a promoted read is wanted by a demand and no longer cancelled.
// Thread-safe; the store must outlive the source.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/status/statusor.h"
#include "colibri/core/block_arena.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/store/block_store.h"

namespace colibri::store {

struct StripedSourceOptions {
  BlockArena* arena = nullptr;  // not owned; must outlive every block
  std::chrono::milliseconds arena_wait{30000};
};

class StripedSource final : public expert_source::ExpertSource {
 public:
  // NotFound when the store does not hold `model`.
  static absl::StatusOr<std::unique_ptr<StripedSource>> Create(BlockStore* store,
                                                               std::string_view model,
                                                               StripedSourceOptions options = {});
  // A process's own model: a private store (one engine disk) over the open container, which
  // must outlive the source.
  static absl::StatusOr<std::unique_ptr<StripedSource>> OpenLocal(
      const model::Container* container, const IoEngineOptions& io,
      StripedSourceOptions options = {});

  absl::StatusOr<expert_source::Lease> Fetch(expert_source::ExpertId id,
                                             expert_source::Priority priority) override;
  absl::Status FetchMany(
      std::span<const expert_source::ExpertId> ids,
      const std::function<void(size_t, expert_source::Lease)>& on_ready,
      expert_source::Priority priority = expert_source::Priority::kDemand) override;
  void Cancel(std::span<const expert_source::ExpertId> ids) override;
  void Promote(std::span<const expert_source::ExpertId> ids) override;
  uint64_t BlockSize(expert_source::ExpertId id) const override;

  const BlockStore& store() const { return *store_; }
  // Prefetch reads shed because the arena had no free slot.
  uint64_t shed_reads() const { return shed_.load(); }

 private:
  struct Batch;                                             // one FetchMany in progress
  using Entry = std::pair<std::shared_ptr<Batch>, size_t>;  // a batch and an index in it

  StripedSource(BlockStore* store, const StoredModel* model, StripedSourceOptions options)
      : store_(store), model_(model), options_(options) {}
  // Memory for `block` (bytes): an arena slot or pooled bytes. A prefetch finding the arena full
  // is shed (Cancelled); a demand read waits for a slot when `may_wait`, else gets Unavailable.
  absl::Status Acquire(expert_source::Block* block, uint64_t bytes,
                       expert_source::Priority priority, bool may_wait);
  // Removes the entries of `ids` (by ExpertId::Key()) from prefetching_ and returns them.
  std::vector<Entry> TakePrefetching(std::span<const expert_source::ExpertId> ids);
  // Cancel (cancel) or Promote (!cancel) of the prefetch reads of `ids` in progress.
  void Advise(std::span<const expert_source::ExpertId> ids, bool cancel);

  std::unique_ptr<BlockStore> owned_store_;  // OpenLocal's
  BlockStore* store_;
  const StoredModel* model_;
  const StripedSourceOptions options_;
  std::atomic<uint64_t> shed_{0};
  std::mutex mu_;
  std::unordered_multimap<uint64_t, Entry> prefetching_;  // mu_; prefetch reads by expert key
};

}  // namespace colibri::store
