// Allocation of 4 KiB-aligned slots inside a shared-memory region (first fit, coalescing
// frees), shared between a RemoteStoreSource and the leases of blocks living in the region.
// A slot is returned by destroying its SlotHandle; a retired arena (its stream broke while the
// store may still be writing into reserved slots) never hands out memory again but stays
// mapped while any lease holds one of its slots. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "colibri/rpc/shm_region.h"

namespace colibri::rpc {

class ShmArena : public std::enable_shared_from_this<ShmArena> {
 public:
  explicit ShmArena(std::unique_ptr<ShmRegion> region);

  // A slot of `bytes` (rounded up to 4 KiB) with its pages reserved; nullopt when the region
  // has no room (or cannot reserve them, or the arena is retired).
  std::optional<uint64_t> Allocate(uint64_t bytes);
  void Free(uint64_t offset, uint64_t bytes);
  // A handle that frees the slot when the last copy is destroyed.
  std::shared_ptr<const void> Hold(uint64_t offset, uint64_t bytes);
  void Retire();

  ShmRegion& region() { return *region_; }
  uint64_t bytes_in_use() const;

 private:
  std::unique_ptr<ShmRegion> region_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
  uint64_t in_use_ = 0;
  bool retired_ = false;
};

}  // namespace colibri::rpc
