// The store's I/O engine: asynchronous reads from a set of disks, every disk in parallel.
//
// - One io_uring per disk (liburing) with up to `queue_depth` reads in flight on it; reads
//   beyond that wait in the disk's queue, demand before prefetch: a queued demand read is
//   always submitted to the device before any queued prefetch read. A queued read can be
//   cancelled (it never reaches the device) or promoted to demand (Cancel, Promote: both
//   advisory, a read already submitted finishes as it is). A reaper thread per disk
//   takes completions. Where io_uring is unavailable (old kernels, seccomp profiles that block
//   it) a pool of `queue_depth` pread threads per disk does the same job; logged once.
// - Files are opened O_DIRECT (reads DMA straight into the caller's 4 KiB-aligned buffer, no
//   page cache). A filesystem that refuses O_DIRECT (tmpfs on older kernels, some FUSE and
//   network filesystems) gets buffered reads instead; logged once per engine.
// - Short reads are continued; EOF before the requested length is DataLoss and errors are
//   statuses naming the file and offset. Nothing here verifies checksums (BlockStore does).
// - An optional FaultInjector sees every completed read (tests, benches).
//
// Threading: Read() may be called from any thread; `done` runs exactly once on an engine
// thread (never inside Read(), except after Shutdown(): then inline, with Cancelled) and must
// not block: hand longer work to your own executor.
// OpenFile() must not race with Read(): open every file first. The destructor fails queued
// reads with Cancelled and waits for the ones in flight (their callbacks run).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/store/fault_injection.h"

namespace colibri::store {

struct IoEngineOptions {
  enum class Backend { kAuto, kIoUring, kThreads };
  int queue_depth = 32;  // reads in flight per disk
  // Of those, at most this many prefetch reads (0: queue_depth), so a demand read arriving never
  // waits behind more than prefetch_depth prefetch reads at the device.
  int prefetch_depth = 0;
  bool direct_io = true;             // O_DIRECT where the filesystem allows it
  Backend backend = Backend::kAuto;  // kAuto: io_uring, else threads
  FaultInjector* faults = nullptr;   // not owned; must outlive the engine
  // Test hook: behave as if every O_DIRECT open were refused (EINVAL), as on tmpfs.
  bool pretend_direct_refused = false;
};

struct DiskStats {
  uint64_t reads = 0;      // completed block-unit reads
  uint64_t bytes = 0;      // bytes delivered
  uint64_t errors = 0;     // reads that ended in an error
  uint64_t in_flight = 0;  // reads submitted to the device (or held by a bandwidth cap)
  uint64_t queued = 0;     // reads waiting for a queue slot
  uint64_t cancelled = 0;  // reads cancelled while queued (they never reached the device)
  bool direct = true;      // false once a file of the disk fell back to buffered reads
};

class IoEngine {
 public:
  using Done = std::function<void(absl::Status)>;
  using Priority = expert_source::Priority;
  // Names one read for Cancel and Promote. Never 0.
  using Ticket = uint64_t;

  // One queue per entry of `disk_names` (used in messages and stats).
  static absl::StatusOr<std::unique_ptr<IoEngine>> Create(std::vector<std::string> disk_names,
                                                          const IoEngineOptions& options);
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Opens `path` for reads on `disk`; returns its file id.
  absl::StatusOr<uint32_t> OpenFile(uint32_t disk, const std::filesystem::path& path);

  // Reads [offset, offset + length) of `file` into `dst`. `offset`, `length` and `dst` must be
  // 4 KiB aligned (O_DIRECT). `done` gets OK once all bytes are in `dst`.
  Ticket Read(uint32_t file, uint64_t offset, uint64_t length, uint8_t* dst, Priority priority,
              Done done);
  // Reads consecutive file bytes from `offset` into several buffers (each base and length 4 KiB
  // aligned): one request to the device for pieces that are contiguous on disk only. Only the
  // first `required` bytes must exist: an end of file after them ends the read with OK (the
  // buffers' bytes past it are unspecified: O_DIRECT may land the last page whole), before them
  // it is DataLoss.
  Ticket ReadV(uint32_t file, uint64_t offset, std::vector<iovec> iov, Priority priority, Done done,
               uint64_t required = std::numeric_limits<uint64_t>::max());

  // Cancels the read if it still waits in its disk's queue: it never reaches the device and
  // its `done` runs with Cancelled on an engine thread (never inside Cancel). False when it was
  // already submitted (it finishes normally), has finished, or the ticket is unknown.
  bool Cancel(Ticket ticket);
  // Moves the read, if it waits in its disk's queue as a prefetch, to the end of the demand
  // queue: it is submitted before every queued prefetch. False otherwise.
  bool Promote(Ticket ticket);

  // Fails queued reads with Cancelled and waits for the ones in flight (their callbacks run);
  // later reads fail with Cancelled. The destructor does this too.
  void Shutdown();

  uint32_t disk_count() const;
  const std::string& disk_name(uint32_t disk) const;
  const std::filesystem::path& file_path(uint32_t file) const;
  uint32_t file_disk(uint32_t file) const;
  DiskStats Stats(uint32_t disk) const;
  bool using_io_uring() const;
  const IoEngineOptions& options() const;

  class Impl;

 private:
  explicit IoEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace colibri::store
