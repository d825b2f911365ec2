// BlockArena: the memory expert blocks live in, reserved and pre-faulted once at start.
//
// Contract
// - One anonymous private mapping of `capacity` bytes (rounded up to 2 MiB), huge pages asked
//   for where the kernel has them (madvise), and every page faulted in at Create: resident
//   memory is the arena's size from the start, and steady state takes no page faults. Nothing
//   is ever allocated outside the mapping: a full arena fails or waits, it never grows.
// - Allocate hands out a slot: a 4 KiB-aligned range of at least the asked bytes (rounded up to
//   4 KiB, the unit of O_DIRECT), not zeroed. The range goes back to the arena when the last
//   copy of the slot's handle (a shared_ptr, thread-safe) is dropped; handles may outlive the
//   BlockArena object (the mapping goes when the last of them does).
// - Placement is best fit over free ranges merged with their free neighbours, so a model whose
//   blocks share one size never fragments; mixed sizes leave at most a few unusable holes,
//   which is why owners size an arena with a little room beyond what they charge to it.
// - TryAllocate fails at once (ResourceExhausted) when no free range fits: for reads that may
//   be shed (prefetch). Allocate waits for a release up to a deadline: for demand reads.
// - Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace colibri {

struct BlockArenaOptions {
  std::string name = "expert arena";  // in errors and metrics
  bool prefault = true;               // fault every page in at Create
  bool huge_pages = true;             // madvise(MADV_HUGEPAGE) when the kernel offers it
};

struct BlockArenaStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;       // in slots handed out and not yet released
  uint64_t peak_used_bytes = 0;  // the most in use at once since Create
  uint64_t largest_free_bytes = 0;
  uint64_t slots = 0;        // handed out now
  uint64_t allocations = 0;  // ever
  uint64_t waits = 0;        // Allocate calls that had to wait for a release
  uint64_t refused = 0;      // TryAllocate calls that found no room, and Allocate timeouts
  bool huge_pages = false;   // the kernel took the madvise
};

class BlockArena {
 public:
  using Slot = std::shared_ptr<uint8_t>;

  // ResourceExhausted when the mapping or its pre-fault fails (naming the size); InvalidArgument
  // for a zero capacity.
  static absl::StatusOr<std::unique_ptr<BlockArena>> Create(uint64_t capacity_bytes,
                                                            BlockArenaOptions options = {});
  ~BlockArena();
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // A slot of at least `bytes`, or ResourceExhausted at once when no free range fits.
  absl::StatusOr<Slot> TryAllocate(uint64_t bytes);
  // A slot of at least `bytes`, waiting for releases until `deadline` (then ResourceExhausted
  // naming the arena's use). InvalidArgument at once when `bytes` exceeds the whole arena.
  absl::StatusOr<Slot> Allocate(uint64_t bytes, std::chrono::steady_clock::time_point deadline);

  BlockArenaStats Stats() const;
  uint64_t capacity_bytes() const;
  const std::string& name() const;

 private:
  struct State;
  explicit BlockArena(std::shared_ptr<State> state) : state_(std::move(state)) {}
  static Slot MakeSlot(const std::shared_ptr<State>& state, uint64_t offset, uint64_t size);
  std::shared_ptr<State> state_;
};

// Resident memory of this process now (RSS, bytes) and its peak (VmHWM), from /proc/self;
// 0 where they cannot be read.
uint64_t ResidentBytes();
uint64_t PeakResidentBytes();

}  // namespace colibri
