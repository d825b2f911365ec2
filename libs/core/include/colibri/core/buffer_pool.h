// A pool of 4 KiB-aligned buffers recycled by size: block reads land in memory whose pages are
// already faulted in, instead of a fresh allocation the kernel must zero and map page by page
// (for 8 MiB blocks that doubled the cost of an O_DIRECT read: bench/store_bench, RESULTS.md).
// Buffers are handed out as shared_ptr whose deleter returns them to the pool, which keeps at
// most `max_idle_bytes` idle (the rest is freed). Contents are not zeroed. Thread-safe; handles
// may outlive the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace colibri {

class BufferPool {
 public:
  explicit BufferPool(uint64_t max_idle_bytes);
  // The process-wide pool the expert store reads blocks into (a compute node reads into its
  // BlockArena instead). It keeps at most 64 MiB idle: one stream's worth of blocks waiting for
  // the network (the store's --max-buffered), so what it hoards is bounded and small.
  static BufferPool& Default();
  static constexpr uint64_t kDefaultMaxIdleBytes = 64ull << 20;

  // A buffer of at least `size` bytes (rounded up to 4 KiB), 4 KiB aligned, not zeroed.
  absl::StatusOr<std::shared_ptr<uint8_t>> Get(size_t size);
  uint64_t idle_bytes() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace colibri
