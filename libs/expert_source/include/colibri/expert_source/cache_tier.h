// A host-RAM expert cache in front of another ExpertSource (LRU eviction).
//
// Accounting: the bytes of cached blocks never exceed `capacity_bytes`. A block that cannot be
// cached because every cached block is leased is handed to the caller uncached (counted in
// `bypasses`), so a cache smaller than one layer's working set still makes progress.
// Concurrent misses on the same expert are coalesced into one fetch from the next source.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source {

struct CacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t bypasses = 0;
  uint64_t bytes_fetched = 0;  // from the next source
  uint64_t bytes_cached = 0;   // currently resident
  uint64_t capacity_bytes = 0;
  uint64_t blocks_cached = 0;
};

class CacheTier final : public ExpertSource {
 public:
  // `next` must outlive the cache.
  CacheTier(ExpertSource* next, uint64_t capacity_bytes);

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override;
  // Hits are handed out first; the misses go to the next source as one FetchMany.
  absl::Status FetchMany(std::span<const ExpertId> ids, const std::function<void(size_t, Lease)>& on_ready) override;
  uint64_t BlockSize(ExpertId id) const override { return next_->BlockSize(id); }

  // Drops every block not currently leased.
  void Clear();
  CacheStats Stats() const;
  bool Contains(ExpertId id) const;

 private:
  struct Entry {
    Lease lease;
    std::list<uint64_t>::iterator lru_pos;
  };
  // Inserts a block fetched from the next source (or counts a bypass). Requires mu_ held.
  void InsertLocked(const Lease& lease);
  // Evicts unleased LRU blocks until `need` more bytes fit. Requires mu_ held.
  bool MakeRoomLocked(uint64_t need);

  ExpertSource* const next_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front = most recently used
  std::unordered_map<uint64_t, int> in_flight_;  // key -> waiters
  CacheStats stats_;
};

}  // namespace colibri::expert_source
