// The store's optional RAM read cache: whole verified blocks, LRU by bytes. A block is shared
// (shared_ptr) so eviction never frees bytes a reader still copies from. Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "colibri/core/buffer_pool.h"

namespace colibri::store {

// The bytes of one block: `padded_size` bytes, 4 KiB aligned; `size` of them checksummed.
// The memory comes from (and returns to) a BufferPool.
struct BlockBuffer {
  std::shared_ptr<uint8_t> bytes;
  uint64_t size = 0;         // of the block
  uint64_t padded_size = 0;  // of the block
  uint64_t offset = 0;       // the block offset bytes[0] holds: 0, or where a part read starts
  const uint8_t* data() const { return bytes.get(); }
};
using SharedBlock = std::shared_ptr<const BlockBuffer>;

struct ReadCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t bytes = 0;
  uint64_t capacity = 0;
};

class ReadCache {
 public:
  explicit ReadCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The cached block (counted as a hit) or nullptr (a miss).
  SharedBlock Lookup(uint64_t key);
  // Inserts, evicting least recently used blocks; a block larger than the cache is skipped.
  void Insert(uint64_t key, SharedBlock block);
  ReadCacheStats Stats() const;

 private:
  struct Entry {
    SharedBlock block;
    std::list<uint64_t>::iterator pos;
  };
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front: most recent
  ReadCacheStats stats_;
};

}  // namespace colibri::store
