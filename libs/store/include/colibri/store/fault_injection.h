// A fault-injecting file layer for tests and benches: the I/O engine passes every completed
// read through it, so faults hit the real read path (resubmission, fallback, verification).
//
//   kEio        the read fails with EIO
//   kShortRead  the read returns half of what it read (rounded to 4 KiB; the engine must
//               read the rest)
//   kEof        the read returns 0 bytes (a file that ends early)
//   kCorrupt    one byte of what was read is flipped (the checksum must catch it)
//   bandwidth   a cap per disk in bytes/s: the engine holds each completion until the disk
//               could have delivered it (a slow disk, or an emulated one for scaling benches)
//
// Rules match a disk (or all), an optional file-offset range the read must overlap, and fire a
// bounded number of times (or forever). Thread-safe; the engine calls it from its threads.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace colibri::store {

enum class FaultKind { kEio, kShortRead, kEof, kCorrupt };

struct FaultRule {
  FaultKind kind = FaultKind::kEio;
  int disk = -1;              // -1: every disk
  uint64_t offset_begin = 0;  // file offsets [begin, end) a read must overlap
  uint64_t offset_end = std::numeric_limits<uint64_t>::max();
  int64_t count = -1;  // reads it hits; -1: every matching read
};

class FaultInjector {
 public:
  void AddRule(const FaultRule& rule);
  // Caps `disk` at `bytes_per_sec` (0 removes the cap).
  void SetDiskBandwidth(uint32_t disk, uint64_t bytes_per_sec);
  void Clear();

  // Parses one spec and adds it: "kind=eio|short|eof|corrupt[,disk=N][,offset=A-B][,count=N]"
  // or "kind=slow,disk=N,rate=100M" (sizes take K/M/G suffixes). InvalidArgument names the part.
  absl::Status AddSpec(std::string_view spec);

  // Engine hook: a read of [offset, offset + length) on `disk` returned `*result` (bytes, or
  // -errno) into the buffers `dst`. May change `*result` and the bytes.
  void AfterRead(uint32_t disk, uint64_t offset, uint64_t length, std::span<const iovec> dst,
                 int64_t* result);
  uint64_t DiskBandwidth(uint32_t disk) const;
  // Times a rule of this kind fired.
  uint64_t fired(FaultKind kind) const { return fired_[static_cast<int>(kind)].load(); }

 private:
  mutable std::mutex mu_;
  std::vector<FaultRule> rules_;
  std::vector<uint64_t> bandwidth_;  // by disk
  std::atomic<bool> any_rules_{false};
  std::atomic<uint64_t> fired_[4] = {};
};

}  // namespace colibri::store
