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

// Tunes the process's allocator to keep freed memory mapped: allocations up to 32 MiB come from
// its heaps instead of fresh mmaps, and freed space is not handed back to the kernel until 256
// MiB of it sits unused at a heap's top. For processes that stream blocks through buffers
// allocated and freed per message (protobuf strings and gRPC slices of 1-4 MiB each): without it
// every such buffer is faulted in page by page and unmapped again, which was half of an expert
// store's CPU when serving over TCP (bench/RESULTS.md). Call once at the start of main.
void KeepFreedMemoryMapped();

class BufferPool {
 public:
  explicit BufferPool(uint64_t max_idle_bytes);
  // The process-wide pool (512 MiB idle at most).
  static BufferPool& Default();

  // A buffer of at least `size` bytes (rounded up to 4 KiB), 4 KiB aligned, not zeroed.
  absl::StatusOr<std::shared_ptr<uint8_t>> Get(size_t size);
  uint64_t idle_bytes() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace colibri
