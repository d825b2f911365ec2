// Short measurements the planner needs: random-read bandwidth of real files (the model's
// expert blocks, read as the engine reads them) and host memory bandwidth.
//
// Contract: each call runs for at most its time budget (plus one read), allocates only its
// buffers, and reports what it measured; nothing is cached between calls. Reads use O_DIRECT
// when the file allows it (page-cache hits would overstate the disk), else buffered reads,
// said in `direct`. Thread-safe (each call owns its threads).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/statusor.h"

namespace colibri::sysinfo {

struct ReadExtent {
  std::filesystem::path file;
  uint64_t offset = 0;  // 4 KiB aligned
  uint64_t size = 0;    // multiple of 4 KiB
};

struct ReadBandwidthOptions {
  int threads = 4;
  double seconds = 0.5;             // time budget
  uint64_t max_bytes = 1ull << 30;  // stop after this much
  uint64_t seed = 1;
};

struct ReadBandwidth {
  double bytes_per_second = 0;
  uint64_t bytes = 0;
  int64_t reads = 0;
  double seconds = 0;
  bool direct = false;  // every read was O_DIRECT
};
// Reads extents picked uniformly at random (with replacement) from `extents`.
// InvalidArgument when empty or an extent is not 4 KiB aligned; NotFound / the errno status
// when a file cannot be opened or read.
absl::StatusOr<ReadBandwidth> MeasureRandomRead(const std::vector<ReadExtent>& extents,
                                                const ReadBandwidthOptions& options = {});

// memcpy bandwidth over `bytes` (counting read + write bytes), best of `repeats`.
double MeasureMemoryBandwidth(uint64_t bytes = 256ull << 20, int repeats = 3);

}  // namespace colibri::sysinfo
