// ExpertSource: where compute gets expert blocks from.
//
// Contract
// - A block is the checksummed bytes of one expert (gate, up, down; see model/manifest.h).
//   Every source verifies the block checksum before handing it out; a mismatch is DataLoss
//   naming the expert and where it was read, and the bytes are never returned.
// - Fetch returns a lease: a shared handle that keeps the block's bytes valid and unmodified
//   while any copy of it lives. A cache never evicts a leased block. Drop leases promptly.
// - Prefetch, Cancel and Hint are advisory: a source may ignore them; they never change results.
// - Thread-safe: all methods may be called concurrently from any thread.
// Implementations: local model directory (disk), remote expert store (gRPC), host-RAM cache
// tier (a decorator over another source), fault injection for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "colibri/core/file_util.h"
#include "colibri/expert_source/expert_id.h"

namespace colibri::expert_source {

enum class Priority { kDemand, kPrefetch };

// What the router decided for one expert of one layer in one forward pass: the mean of its
// softmax probability over the batch rows, and how many rows picked it (top-k).
struct RoutingHint {
  ExpertId id;
  float probability = 0;
  uint32_t selected = 0;
};

// The bytes of one expert block, immutable once published. They live in `bytes` (owned), or
// elsewhere (`external`, e.g. a slot of a shared-memory region) kept valid by `external_owner`
// for as long as the block lives; or, for a device tier's blocks, in backend memory at `device`
// (then data() is null: host code must not read them; ops take `device` directly).
struct Block {
  ExpertId id;
  AlignedBytes bytes;                          // at least `size` bytes, 4 KiB aligned
  uint64_t size = 0;                           // checksummed length
  const uint8_t* external = nullptr;           // when set: the bytes (4 KiB aligned)
  std::shared_ptr<const void> external_owner;  // keeps `external` valid
  const uint8_t* device = nullptr;             // when set: the bytes in backend (device) memory
  const uint8_t* data() const { return external != nullptr ? external : bytes.get(); }
};
using Lease = std::shared_ptr<const Block>;

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;

  // Blocks until the expert's block is available.
  virtual absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority = Priority::kDemand) = 0;

  // Fetches several blocks as one batch (one request to a store, all reads submitted together),
  // calling on_ready(i, lease) for each as it becomes available: on the calling thread, one
  // call at a time, in arrival order, exactly once per index. Returns after every callback ran,
  // or with the first error (later callbacks are then skipped). `priority` applies to the whole
  // batch: kPrefetch is a cache filling ahead of use (a Cancel of its ids may stop those reads:
  // the call then fails Cancelled), kDemand a caller waiting for the blocks.
  virtual absl::Status FetchMany(std::span<const ExpertId> ids,
                                 const std::function<void(size_t, Lease)>& on_ready,
                                 Priority priority = Priority::kDemand);
  // FetchMany, handing over at once every block that is available together: on_group(ready)
  // gets (index, lease) pairs in arrival order, on the calling thread, one group at a time,
  // each index exactly once over all groups. The default hands over one block per group; a
  // cache hands its hits over as one group, then each batch of reads that landed together.
  virtual absl::Status FetchGroups(
      std::span<const ExpertId> ids,
      const std::function<void(std::span<std::pair<size_t, Lease>>)>& on_group,
      Priority priority = Priority::kDemand);

  // Advisory: start loading these at prefetch priority (one batch).
  virtual void Prefetch(std::span<const ExpertId> ids) {}
  // Advisory: prefetches of these are no longer wanted.
  virtual void Cancel(std::span<const ExpertId> ids) {}
  // Advisory: prefetches of these in progress are now wanted by a demand request (read them at
  // demand priority from here on).
  virtual void Promote(std::span<const ExpertId> ids) {}
  // Advisory: the routing of one layer (every expert of the layer, chosen or not), reported by
  // the engine before it fetches that layer's experts. Caches use it to rank blocks.
  virtual void Hint(std::span<const RoutingHint> hints) {}

  // Bytes of the block of `id` (for budgeting), or 0 when unknown.
  virtual uint64_t BlockSize(ExpertId id) const = 0;
  // Advisory: blocks of `layer` held in this source's memory now, which a Fetch serves without
  // a read (0 when it holds none or does not count; a cache counts its residents). Lock-free.
  virtual int64_t ResidentInLayer(int32_t layer) const { return 0; }
};

}  // namespace colibri::expert_source
