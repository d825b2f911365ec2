// The default --kv-cache-limit: KV caches are bounded unless the user asks otherwise (0).
//
// KV caches grow with every token of every sequence (engine::KvBytesPerToken each); without a
// bound, long contexts or many sessions run the host (or the GPU) out of memory and the kernel
// kills the server. The default is what --max-batch sequences of the full context need, capped
// by a share of the memory still free once the model is placed: half of the host's memory
// budget (planner.h) less its other parts (CPU backend),
// or 90% of the device memory left after dense weights, the VRAM tier and working memory (GPU).
// A request needing more than the limit fails with ResourceExhausted naming it.
#pragma once

#include <cstdint>
#include <string>

namespace colibri::plan {

struct KvLimitInputs {
  uint64_t kv_bytes_per_token = 0;
  uint64_t kv_ring_bytes = 0;  // per sequence, on top of its tokens (sliding-window layers)
  int64_t context_length = 0;
  int max_batch = 1;
  uint64_t memory_free = 0;      // MemAvailable (host) or the device's free bytes
  uint64_t memory_reserved = 0;  // of that, what the model will still take (dense, caches)
  bool device = false;           // memory_free is device memory
  bool budget = false;           // memory_free is the host memory budget (--memory-limit)
};

struct KvLimit {
  uint64_t bytes = 0;
  std::string explanation;  // how it was derived, for the start-up log
};

// Never 0 (0 means unbounded): at least one token's KV.
KvLimit DefaultKvCacheLimit(const KvLimitInputs& in);

}  // namespace colibri::plan
