// Measurements the benchmarks share: the machine's memory read bandwidth and the disk's
// bandwidth for whole expert blocks, the two limits decode speed is held against.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "colibri/model/container.h"

namespace colibri::bench {

// Best-of-5 read bandwidth over a buffer of `bytes`, `threads` threads (bytes/s).
double ReadBandwidth(size_t bytes, int threads);

struct DiskReadResult {
  uint64_t bytes = 0;
  double seconds = 0;
  bool direct_io = false;  // the reads bypassed the page cache
  double bandwidth() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0; }
};

// Reads about `gib` GiB of the container's expert blocks in random order with O_DIRECT through
// the serving read path (one batch, as a step's misses are), at most `threads` blocks in flight.
absl::StatusOr<DiskReadResult> ReadExpertBlocks(const model::Container& container, int threads,
                                                double gib);

}  // namespace colibri::bench
