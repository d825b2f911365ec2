// Where a cache tier keeps its copies of expert blocks.
//
// The host-RAM tier keeps the blocks its source returned (CacheTierOptions::memory == nullptr: no
// copy; the disk source already reads into 4 KiB-aligned host buffers). A VRAM tier (with a GPU
// backend) stacks on top of the RAM tier and copies each block into device memory through a
// TierMemory over the backend (device_tier_memory.h); its leases carry the device address in
// Block::device and no host bytes. Under a GPU backend the RAM tier may copy into pinned host memory so uploads run at
// full bus speed. The tier code itself never looks inside blocks, so it is the same for both.
// Thread-safe: Adopt may be called from several reader threads at once.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source {

class TierMemory {
 public:
  virtual ~TierMemory() = default;
  virtual std::string_view name() const = 0;
  // The tier's own copy of `block` (same id, size and bytes). ResourceExhausted when the
  // memory cannot hold it.
  virtual absl::StatusOr<Lease> Adopt(const Lease& block) = 0;
  // Bytes a block of `block_bytes` occupies here: what the tier charges against its budget
  // (a memory of fixed-size slots charges a slot), so the budget accounting and the memory
  // agree on what fits.
  virtual uint64_t Footprint(uint64_t block_bytes) const { return block_bytes; }
};

}  // namespace colibri::expert_source
