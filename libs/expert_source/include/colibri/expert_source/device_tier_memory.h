// Where a VRAM tier keeps its expert blocks: a fixed arena of backend memory (device memory with
// the CUDA backend), allocated once at start-up and cut into slots of the model's largest block.
//
//   VRAM CacheTier (memory = DeviceTierMemory) ──Fetch──▶ RAM CacheTier ──▶ disk | stores
//        Adopt: free slot ◀─ Backend::TransferIn (own stream, overlaps the engine's ops)
//
// Budget. The arena is exactly slots * slot_bytes (<= the budget) and is the only backend memory
// the tier uses; Footprint() charges every block one slot, and capacity_bytes() is what the
// CacheTier's budget must be, so the tier's strict accounting and the slots agree: a block the
// tier has room for always finds a free slot (Adopt waits the moment it takes for an evicted
// block's last lease copy to be released), and fragmentation cannot happen. Out of memory
// shows at Create (ResourceExhausted naming the sizes), never mid-request.
//
// Leases. Adopt's lease carries the block's device address in Block::device (no host bytes).
// When its last copy is dropped the slot is freed behind a Backend fence: ops already queued
// that read the block (the engine drops its lease right after queueing them) finish before a
// later Adopt overwrites the slot. The backend must outlive the memory and every lease.
// Thread-safe: Adopt runs on the tier's reader threads, leases drop on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/expert_source/tier_memory.h"

namespace colibri::backend {
class Backend;
}

namespace colibri::expert_source {

struct DeviceTierMemoryOptions {
  std::string name = "vram";
  uint64_t budget_bytes = 0;  // --vram-budget
  uint64_t slot_bytes = 0;    // the largest block of the model (rounded up to 256 bytes)
};

struct DeviceTierStats {
  uint64_t slots = 0;
  uint64_t slots_used = 0;
  uint64_t arena_bytes = 0;  // backend memory held (slots * slot_bytes)
  uint64_t uploads = 0;      // blocks copied in
  uint64_t bytes_uploaded = 0;
  uint64_t upload_ns = 0;    // time in TransferIn
  uint64_t fence_waits = 0;  // slots reused before their last reader had finished
};

class DeviceTierMemory final : public TierMemory {
 public:
  // InvalidArgument when the budget holds fewer than two slots; ResourceExhausted when the
  // backend cannot allocate the arena.
  static absl::StatusOr<std::unique_ptr<DeviceTierMemory>> Create(
      backend::Backend* backend, const DeviceTierMemoryOptions& options);
  ~DeviceTierMemory() override;

  std::string_view name() const override { return name_; }
  absl::StatusOr<Lease> Adopt(const Lease& block) override;
  uint64_t Footprint(uint64_t block_bytes) const override { return slot_bytes_; }

  // The budget to give the CacheTier over this memory.
  uint64_t capacity_bytes() const { return slots_ * slot_bytes_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  DeviceTierStats Stats() const;

 private:
  struct State;
  DeviceTierMemory(std::string name, uint64_t slot_bytes, uint64_t slots,
                   std::shared_ptr<State> state);

  const std::string name_;
  const uint64_t slot_bytes_;
  const uint64_t slots_;
  std::shared_ptr<State> s_;  // shared with the leases
};

}  // namespace colibri::expert_source
