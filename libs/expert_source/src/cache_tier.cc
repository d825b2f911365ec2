#include "colibri/expert_source/cache_tier.h"

namespace colibri::expert_source {

CacheTier::CacheTier(ExpertSource* next, uint64_t capacity_bytes) : next_(next), capacity_(capacity_bytes) {
  stats_.capacity_bytes = capacity_bytes;
}

bool CacheTier::MakeRoomLocked(uint64_t need) {
  if (need > capacity_) return false;
  auto it = lru_.end();
  while (stats_.bytes_cached + need > capacity_ && it != lru_.begin()) {
    --it;
    auto e = entries_.find(*it);
    // use_count() == 1: only the cache holds it, so no kernel is reading these bytes.
    if (e->second.lease.use_count() == 1) {
      stats_.bytes_cached -= e->second.lease->size;
      stats_.evictions++;
      stats_.blocks_cached--;
      entries_.erase(e);
      it = lru_.erase(it);
    }
  }
  return stats_.bytes_cached + need <= capacity_;
}

absl::StatusOr<Lease> CacheTier::Fetch(ExpertId id, Priority priority) {
  const uint64_t key = id.Key();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      stats_.hits++;
      lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
      return it->second.lease;
    }
    if (!in_flight_.count(key)) break;
    cv_.wait(lock);  // another caller is fetching it; its result lands in entries_ (or fails)
    if (!entries_.count(key) && !in_flight_.count(key)) {
      // The other fetch failed or bypassed the cache: fetch ourselves.
      break;
    }
  }
  stats_.misses++;
  in_flight_[key] = 1;
  lock.unlock();
  auto fetched = next_->Fetch(id, priority);
  lock.lock();
  in_flight_.erase(key);
  cv_.notify_all();
  if (!fetched.ok()) return fetched.status();
  Lease lease = std::move(*fetched);
  InsertLocked(lease);
  return lease;
}

void CacheTier::InsertLocked(const Lease& lease) {
  const uint64_t key = lease->id.Key();
  stats_.bytes_fetched += lease->size;
  if (entries_.count(key)) return;  // a concurrent miss already inserted it
  if (MakeRoomLocked(lease->size)) {
    lru_.push_front(key);
    entries_[key] = Entry{lease, lru_.begin()};
    stats_.bytes_cached += lease->size;
    stats_.blocks_cached++;
  } else {
    stats_.bypasses++;
  }
}

absl::Status CacheTier::FetchMany(std::span<const ExpertId> ids, const std::function<void(size_t, Lease)>& on_ready) {
  std::vector<size_t> miss_index;
  std::vector<ExpertId> misses;
  std::vector<std::pair<size_t, Lease>> hits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = entries_.find(ids[i].Key());
      if (it != entries_.end() && !in_flight_.count(ids[i].Key())) {
        stats_.hits++;
        lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
        hits.emplace_back(i, it->second.lease);
      } else {
        stats_.misses++;
        miss_index.push_back(i);
        misses.push_back(ids[i]);
      }
    }
  }
  for (auto& [i, lease] : hits) on_ready(i, std::move(lease));
  if (misses.empty()) return absl::OkStatus();
  return next_->FetchMany(misses, [&](size_t j, Lease lease) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      InsertLocked(lease);
    }
    on_ready(miss_index[j], std::move(lease));
  });
}

void CacheTier::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto e = entries_.find(*it);
    if (e->second.lease.use_count() == 1) {
      stats_.bytes_cached -= e->second.lease->size;
      stats_.blocks_cached--;
      entries_.erase(e);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
}

CacheStats CacheTier::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool CacheTier::Contains(ExpertId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(id.Key()) > 0;
}

}  // namespace colibri::expert_source
