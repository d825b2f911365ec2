#include "colibri/store/read_cache.h"

namespace colibri::store {

SharedBlock ReadCache::Lookup(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    stats_.misses++;
    return nullptr;
  }
  stats_.hits++;
  lru_.splice(lru_.begin(), lru_, it->second.pos);
  return it->second.block;
}

void ReadCache::Insert(uint64_t key, SharedBlock block) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t need = block->padded_size;
  if (need > capacity_ || entries_.count(key)) return;
  while (stats_.bytes + need > capacity_ && !lru_.empty()) {
    auto victim = entries_.find(lru_.back());
    stats_.bytes -= victim->second.block->padded_size;
    stats_.evictions++;
    entries_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_[key] = Entry{std::move(block), lru_.begin()};
  stats_.bytes += need;
}

ReadCacheStats ReadCache::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ReadCacheStats s = stats_;
  s.capacity = capacity_;
  return s;
}

}  // namespace colibri::store
