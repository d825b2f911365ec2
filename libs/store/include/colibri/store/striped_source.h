// ExpertSource over a BlockStore model: the in-process path from the store's disks into
// compute's cache, with no serialization (colibri-server-style embedding, and the bench's
// baseline). FetchMany submits every block at once, so all disks work in parallel, and hands
// blocks to the caller in arrival order. Verification is the BlockStore's (stripe checksums).
//
// Cancel(ids) applies to the reads of prefetch batches (FetchMany with kPrefetch) in progress:
// their parts still queued at the disks are dropped (BlockStore::Cancel) and the batch stops
// waiting for them at once, also for parts already submitted; it hands out the others and then
// fails Cancelled. Promote(ids) moves such reads ahead of queued prefetch reads
// (BlockStore::Promote); a promoted read is wanted by a demand and no longer cancelled.
// Thread-safe; the store must outlive the source.
#pragma once

#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/store/block_store.h"

namespace colibri::store {

class StripedSource final : public expert_source::ExpertSource {
 public:
  // NotFound when the store does not hold `model`.
  static absl::StatusOr<std::unique_ptr<StripedSource>> Create(BlockStore* store,
                                                               std::string_view model);

  absl::StatusOr<expert_source::Lease> Fetch(expert_source::ExpertId id,
                                             expert_source::Priority priority) override;
  absl::Status FetchMany(
      std::span<const expert_source::ExpertId> ids,
      const std::function<void(size_t, expert_source::Lease)>& on_ready,
      expert_source::Priority priority = expert_source::Priority::kDemand) override;
  void Cancel(std::span<const expert_source::ExpertId> ids) override;
  void Promote(std::span<const expert_source::ExpertId> ids) override;
  uint64_t BlockSize(expert_source::ExpertId id) const override;

 private:
  struct Batch;                                             // one FetchMany in progress
  using Entry = std::pair<std::shared_ptr<Batch>, size_t>;  // a batch and an index in it

  StripedSource(BlockStore* store, const StoredModel* model) : store_(store), model_(model) {}
  // Removes the entries of `ids` (by ExpertId::Key()) from prefetching_ and returns them.
  std::vector<Entry> TakePrefetching(std::span<const expert_source::ExpertId> ids);
  // Cancel (cancel) or Promote (!cancel) of the prefetch reads of `ids` in progress.
  void Advise(std::span<const expert_source::ExpertId> ids, bool cancel);

  BlockStore* store_;
  const StoredModel* model_;
  std::mutex mu_;
  std::unordered_multimap<uint64_t, Entry> prefetching_;  // mu_; prefetch reads by expert key
};

}  // namespace colibri::store
