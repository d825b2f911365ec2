#include "colibri/rpc/shm_arena.h"

#include "colibri/core/units.h"

namespace colibri::rpc {

ShmArena::ShmArena(std::unique_ptr<ShmRegion> region) : region_(std::move(region)) {
  free_[0] = region_->size();
}

std::optional<uint64_t> ShmArena::Allocate(uint64_t bytes) {
  bytes = AlignUp(std::max<uint64_t>(bytes, 1), 4096);
  std::lock_guard<std::mutex> lock(mu_);
  if (retired_) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t off = it->first;
    // Reserve the pages before anyone writes there (no SIGBUS on a full /dev/shm).
    if (!region_->Commit(off + bytes).ok()) return std::nullopt;
    const uint64_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_[off + bytes] = rest;
    in_use_ += bytes;
    return off;
  }
  return std::nullopt;
}

void ShmArena::Free(uint64_t offset, uint64_t bytes) {
  bytes = AlignUp(std::max<uint64_t>(bytes, 1), 4096);
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= bytes;
  auto next = free_.lower_bound(offset);
  uint64_t start = offset, len = bytes;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && offset + bytes == next->first) {
    len += next->second;
    free_.erase(next);
  }
  free_[start] = len;
}

std::shared_ptr<const void> ShmArena::Hold(uint64_t offset, uint64_t bytes) {
  return std::shared_ptr<const void>(
      region_->data() + offset,
      [self = shared_from_this(), offset, bytes](const void*) { self->Free(offset, bytes); });
}

void ShmArena::Retire() {
  std::lock_guard<std::mutex> lock(mu_);
  retired_ = true;
}

uint64_t ShmArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

}  // namespace colibri::rpc
