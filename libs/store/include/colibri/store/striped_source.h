// ExpertSource over a BlockStore model: the in-process path from the store's disks into
// compute's cache, with no serialization (colibri-server-style embedding, and the bench's
// baseline). FetchMany submits every block at once, so all disks work in parallel, and hands
// blocks to the caller in arrival order. Verification is the BlockStore's (stripe checksums).
// Thread-safe; the store must outlive the source.
#pragma once

#include <memory>
#include <string_view>

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
  uint64_t BlockSize(expert_source::ExpertId id) const override;

 private:
  StripedSource(BlockStore* store, const StoredModel* model) : store_(store), model_(model) {}
  BlockStore* store_;
  const StoredModel* model_;
};

}  // namespace colibri::store
