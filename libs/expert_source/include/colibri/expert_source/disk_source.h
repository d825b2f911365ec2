// Reads expert blocks straight from a local model directory (experts.bin or split files) with
// pread into 4 KiB-aligned buffers, verifying each checksum. Caches nothing: put a CacheTier in
// front of it. Thread-safe; keeps one open descriptor per file (two with direct I/O).
//
// Direct I/O (`direct_io`): blocks are read with O_DIRECT, bypassing the kernel page cache, so
// the expert cache's budget is the only copy in RAM and a benchmark measures the disk. Blocks
// are 4 KiB aligned and padded in the container, so every O_DIRECT read is aligned. Filesystems
// that refuse O_DIRECT (tmpfs, some network filesystems) fall back to buffered reads, per file
// at open and per read on EINVAL; direct_io_files() says how many files read direct.
//
// Memory: with an arena (DiskSourceOptions::arena) every block is read straight into one of its
// slots and the lease holds the slot, so the blocks in a cache and in flight are all inside the
// arena's fixed, pre-faulted memory; without one, each block is its own aligned allocation.
//
// Pieces: a block is read in `prefetch_chunk_bytes` pieces; a demand read has the calling thread
// and up to `read_parallelism - 1` helper threads on them, so one block keeps several requests in
// flight (prefetch reads run on their caller only; the cache runs several at once).
// Cancel(ids) stops a prefetch-priority read between pieces (Fetch returns Cancelled), so a
// prediction the routing proved wrong stops using the disk. Demand reads are never cancelled.
// Priority: while any demand read is in progress, prefetch reads pause between pieces, so a
// prefetch only uses disk time that demand reads leave idle (a wrong prediction then costs
// little more than the memory it occupies). Promote(ids) ends the pauses of a prefetch that a
// demand request now waits for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "colibri/core/block_arena.h"
#include "colibri/core/thread_pool.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/model/container.h"

namespace colibri::expert_source {

struct DiskSourceOptions {
  bool direct_io = false;
  uint64_t prefetch_chunk_bytes = 4ull << 20;  // piece size, a multiple of 4 KiB
  int read_parallelism = 4;                    // threads reading the pieces of one block
  // Where blocks are read into (not owned; must outlive every block). A demand read waits up
  // to `arena_wait` for a slot (then ResourceExhausted); a prefetch finding no slot is shed
  // (Cancelled, counted in shed_reads()). nullptr: each block is its own aligned allocation.
  BlockArena* arena = nullptr;
  std::chrono::milliseconds arena_wait{30000};
};

class DiskSource final : public ExpertSource {
 public:
  // `container` must outlive the source.
  static absl::StatusOr<std::unique_ptr<DiskSource>> Open(const model::Container* container,
                                                          DiskSourceOptions options = {});
  ~DiskSource() override;

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override;
  // Reads the blocks of a demand batch in parallel: up to read_parallelism of them at once (on
  // the helpers and the calling thread), each as Fetch would; a prefetch batch one by one.
  absl::Status FetchMany(std::span<const ExpertId> ids,
                         const std::function<void(size_t, Lease)>& on_ready,
                         Priority priority = Priority::kDemand) override;
  void Cancel(std::span<const ExpertId> ids) override;
  void Promote(std::span<const ExpertId> ids) override;
  uint64_t BlockSize(ExpertId id) const override;

  uint64_t bytes_read() const { return bytes_read_.load(); }
  // Time spent inside pread, summed over threads (seconds).
  double read_seconds() const { return static_cast<double>(read_ns_.load()) * 1e-9; }
  int direct_io_files() const { return direct_files_; }
  uint64_t buffered_fallbacks() const { return fallbacks_.load(); }
  uint64_t cancelled_reads() const { return cancelled_.load(); }
  uint64_t shed_reads() const { return shed_.load(); }

 private:
  struct Fds {
    int buffered = -1;
    int direct = -1;  // -1: O_DIRECT unavailable for this file
  };
  // Reads up to `len` bytes at `offset` (fewer at the end of the file); O_DIRECT falls back to
  // the buffered descriptor on EINVAL.
  absl::StatusOr<uint64_t> ReadRange(const Fds& fds, uint8_t* dst, uint64_t offset, uint64_t len);
  DiskSource(const model::Container* container, DiskSourceOptions options)
      : container_(container), options_(options) {}

  const model::Container* container_;
  const DiskSourceOptions options_;
  std::map<std::string, Fds> fds_;  // file -> descriptors, fixed after Open
  std::mutex mu_;
  struct PrefetchControl {
    std::atomic<bool> cancelled{false};
    std::atomic<bool> urgent{false};  // promoted: no more pauses
  };
  std::unordered_map<uint64_t, std::shared_ptr<PrefetchControl>> prefetching_;
  std::atomic<uint64_t> cancelled_{0};
  std::atomic<uint64_t> shed_{0};
  int demand_reads_ = 0;  // guarded by mu_; prefetch pieces wait on demand_done_ while > 0
  std::condition_variable demand_done_;
  std::unique_ptr<ThreadPool> helpers_;  // read_parallelism - 1 background threads
  int direct_files_ = 0;
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> read_ns_{0};
  std::atomic<uint64_t> fallbacks_{0};
};

}  // namespace colibri::expert_source
