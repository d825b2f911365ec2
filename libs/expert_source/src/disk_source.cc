#include "colibri/expert_source/disk_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::expert_source {

absl::StatusOr<std::unique_ptr<DiskSource>> DiskSource::Open(const model::Container* container,
                                                             DiskSourceOptions options) {
  if (options.prefetch_chunk_bytes == 0 || options.prefetch_chunk_bytes % 4096 != 0) {
    return absl::InvalidArgumentError("prefetch_chunk_bytes must be a positive multiple of 4 KiB");
  }
  auto src = std::unique_ptr<DiskSource>(new DiskSource(container, options));
  absl::Status status;
  for (const auto& b : container->manifest().experts) {
    b.ForEachRange([&](const model::FileRange& r) {
      if (!status.ok() || src->fds_.count(r.file)) return;
      auto path = container->FilePath(r.file);
      Fds fds;
      fds.buffered = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fds.buffered < 0) {
        status = ErrnoStatus(errno, "open expert file", path);
        return;
      }
      if (options.direct_io) {
        fds.direct = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fds.direct >= 0) src->direct_files_++;
      }
      src->fds_[r.file] = fds;
    });
    RETURN_IF_ERROR(status);
  }
  if (options.read_parallelism > 1)
    src->helpers_ = std::make_unique<ThreadPool>(options.read_parallelism);
  return src;
}

DiskSource::~DiskSource() {
  helpers_.reset();  // no piece read may outlive the descriptors
  for (auto& [f, fds] : fds_) {
    ::close(fds.buffered);
    if (fds.direct >= 0) ::close(fds.direct);
  }
}

uint64_t DiskSource::BlockSize(ExpertId id) const {
  if (!container_->manifest().HasExpert(id)) return 0;
  return container_->manifest().Expert(id).padded_size;
}

void DiskSource::Cancel(std::span<const ExpertId> ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ExpertId& id : ids) {
    auto it = prefetching_.find(id.Key());
    if (it != prefetching_.end()) it->second->cancelled = true;
  }
  demand_done_.notify_all();  // paused pieces of cancelled reads stop now
}

void DiskSource::Promote(std::span<const ExpertId> ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ExpertId& id : ids) {
    auto it = prefetching_.find(id.Key());
    if (it != prefetching_.end()) it->second->urgent = true;
  }
  demand_done_.notify_all();
}

absl::StatusOr<uint64_t> DiskSource::ReadRange(const Fds& fds, uint8_t* dst, uint64_t offset,
                                               uint64_t len) {
  int fd = fds.direct >= 0 ? fds.direct : fds.buffered;
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && fd != fds.buffered) {
      // O_DIRECT refused this read (alignment after a short read, or the filesystem).
      fallbacks_++;
      fd = fds.buffered;
      continue;
    }
    if (n < 0) return absl::ErrnoToStatus(errno, "pread");
    if (n == 0) break;  // end of file
    done += static_cast<uint64_t>(n);
  }
  return done;
}

absl::StatusOr<Lease> DiskSource::Fetch(ExpertId id, Priority priority) {
  const auto& m = container_->manifest();
  if (!m.HasExpert(id)) {
    return absl::NotFoundError(absl::StrCat(ExpertLabel(id), " is not in model '", m.name, "'"));
  }
  const model::ExpertBlock& b = m.Expert(id);
  auto block = std::make_shared<Block>();
  block->id = id;
  block->size = b.size;
  // The read overwrites the buffer up to the checksummed size; the padding is never looked at.
  uint8_t* base = nullptr;
  if (options_.arena != nullptr) {
    // Demand waits for room (a block in use elsewhere is released soon); a prefetch is shed.
    absl::StatusOr<BlockArena::Slot> slot =
        priority == Priority::kDemand
            ? options_.arena->Allocate(b.padded_size,
                                       std::chrono::steady_clock::now() + options_.arena_wait)
            : options_.arena->TryAllocate(b.padded_size);
    if (!slot.ok()) {
      if (priority == Priority::kPrefetch) {
        shed_++;
        return absl::CancelledError(
            absl::StrCat("prefetch of ", ExpertLabel(id), " shed: ", slot.status().message()));
      }
      return absl::Status(slot.status().code(),
                          absl::StrCat("read ", ExpertLabel(id), ": ", slot.status().message()));
    }
    base = slot->get();
    block->external = base;
    block->external_owner = *std::move(slot);
  } else {
    ASSIGN_OR_RETURN(block->bytes, AllocateAligned(b.padded_size, 4096, /*zero=*/false));
    base = block->bytes.get();
  }

  // A prefetch can be stopped between pieces, and pauses while demand reads run.
  std::shared_ptr<PrefetchControl> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (priority == Priority::kPrefetch) {
      cancel = std::make_shared<PrefetchControl>();
      prefetching_[id.Key()] = cancel;
    } else {
      demand_reads_++;
    }
  }
  struct Unregister {
    DiskSource* self;
    uint64_t key;
    bool prefetch;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (prefetch) {
        self->prefetching_.erase(key);
      } else if (--self->demand_reads_ == 0) {
        self->demand_done_.notify_all();
      }
    }
  } unregister{this, id.Key(), cancel != nullptr};

  // Pieces read by this thread and the helpers, so one block uses several disk queues at once
  // (a virtio disk here reads 0.7 GB/s with one request in flight, 1.46 GB/s with four). A
  // block gathered from ranges (a GGUF in place) is cut range by range.
  struct Piece {
    const Fds* fds;
    uint64_t offset, length, at, needed;  // needed: bytes of it the file must hold
  };
  std::vector<Piece> plan;
  b.ForEachRange([&](const model::FileRange& r) {
    const Fds* fds = &fds_.at(r.file);
    for (uint64_t off = 0; off < r.length; off += options_.prefetch_chunk_bytes) {
      const uint64_t len = std::min(options_.prefetch_chunk_bytes, r.length - off);
      plan.push_back({fds, r.offset + off, len, r.at + off,
                      r.needed > off ? std::min(len, r.needed - off) : 0});
    }
  });
  const uint64_t pieces = plan.size();
  struct Shared {
    std::atomic<uint64_t> next{0};
    std::atomic<uint64_t> bytes{0};
    std::mutex mu;
    std::condition_variable cv;
    uint64_t finished = 0;
    absl::Status status;
    bool cancelled = false;
    // The first piece that ended before the bytes it needed: (block offset, bytes it read).
    std::optional<std::pair<uint64_t, uint64_t>> short_piece;
  };
  auto sh = std::make_shared<Shared>();
  auto work = [this, sh, base, &plan, pieces, cancel] {
    for (uint64_t i = sh->next++; i < pieces; i = sh->next++) {
      absl::Status st;
      if (cancel) {
        std::unique_lock<std::mutex> lock(mu_);
        demand_done_.wait(
            lock, [&] { return demand_reads_ == 0 || cancel->cancelled || cancel->urgent; });
      }
      bool stopped = cancel && cancel->cancelled && !cancel->urgent;
      if (!stopped) {
        const Piece& p = plan[i];
        auto n = ReadRange(*p.fds, base + p.at, p.offset, p.length);
        if (n.ok()) {
          sh->bytes += *n;
          if (*n < p.needed) {
            std::lock_guard<std::mutex> lock(sh->mu);
            if (!sh->short_piece || p.at < sh->short_piece->first) sh->short_piece = {p.at, *n};
          }
        } else {
          st = n.status();
        }
      }
      std::lock_guard<std::mutex> lock(sh->mu);
      if (!st.ok() && sh->status.ok()) sh->status = st;
      sh->cancelled = sh->cancelled || stopped;
      if (++sh->finished == pieces) sh->cv.notify_all();
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  // Demand reads only: a paused prefetch must never hold a helper a demand read needs.
  if (helpers_ && pieces > 1 && !cancel) {
    const uint64_t extra =
        std::min<uint64_t>(pieces - 1, static_cast<uint64_t>(helpers_->size() - 1));
    for (uint64_t i = 0; i < extra; ++i) helpers_->Submit(work);
  }
  work();
  {
    std::unique_lock<std::mutex> lock(sh->mu);
    sh->cv.wait(lock, [&] { return sh->finished == pieces; });
  }
  read_ns_ += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  bytes_read_ += sh->bytes.load();
  if (sh->cancelled) {
    cancelled_++;
    return absl::CancelledError(absl::StrCat("prefetch of ", ExpertLabel(id), " cancelled"));
  }
  if (!sh->status.ok()) {
    return absl::Status(sh->status.code(), absl::StrCat("read ", ExpertLabel(id), " from '",
                                                        container_->ExpertFilePath(b).string(),
                                                        "': ", sh->status.message()));
  }
  // A piece that read short ended at the end of the file (as it was when opened, or since: a
  // concurrent rewrite); the buffer's stale bytes past it must never reach the checksum (they
  // may be a copy of the block), so a block cut before the bytes it needs is short.
  if (sh->short_piece) {
    return absl::DataLossError(
        absl::StrCat(ExpertLabel(id), " in '", container_->ExpertFilePath(b).string(),
                     "': short read (", sh->short_piece->first + sh->short_piece->second, " of ",
                     b.size, " bytes): the file ends early"));
  }
  RETURN_IF_ERROR(container_->VerifyExpertBlock(b, base, container_->ExpertFilePath(b).string()));
  return Lease(std::move(block));
}

absl::Status DiskSource::FetchMany(std::span<const ExpertId> ids,
                                   const std::function<void(size_t, Lease)>& on_ready,
                                   Priority priority) {
  // Prefetch reads run on their caller only: a paused prefetch must never hold a helper.
  if (ids.size() < 2 || !helpers_ || helpers_->size() < 2 || priority == Priority::kPrefetch) {
    return ExpertSource::FetchMany(ids, on_ready, priority);
  }
  // Blocks are claimed in order by the helpers and by this thread (between handing blocks out),
  // so a batch keeps several blocks in flight like the cache's reader threads used to.
  struct Batch {
    std::vector<ExpertId> ids;
    Priority priority = Priority::kDemand;
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<size_t, absl::StatusOr<Lease>>> landed;
    size_t helpers_running = 0;
  };
  auto b = std::make_shared<Batch>();
  b->ids.assign(ids.begin(), ids.end());
  b->priority = priority;
  auto read_one = [this, b]() -> bool {
    const size_t i = b->next++;
    if (i >= b->ids.size() || b->stop.load()) return false;
    absl::StatusOr<Lease> r = Fetch(b->ids[i], b->priority);
    std::lock_guard<std::mutex> lock(b->mu);
    b->landed.emplace_back(i, std::move(r));
    b->cv.notify_all();
    return true;
  };
  const size_t helpers = std::min(ids.size() - 1, static_cast<size_t>(helpers_->size() - 1));
  b->helpers_running = helpers;
  for (size_t k = 0; k < helpers; ++k) {
    helpers_->Submit([b, read_one] {
      while (read_one()) {
      }
      std::lock_guard<std::mutex> lock(b->mu);
      b->helpers_running--;
      b->cv.notify_all();
    });
  }
  absl::Status first_error;
  for (size_t handed = 0; handed < ids.size() && first_error.ok();) {
    std::unique_lock<std::mutex> lock(b->mu);
    if (b->landed.empty()) {
      if (b->next.load() < ids.size()) {
        lock.unlock();
        read_one();
      } else {
        b->cv.wait(lock, [&] { return !b->landed.empty(); });
      }
      continue;
    }
    auto [i, r] = std::move(b->landed.front());
    b->landed.pop_front();
    lock.unlock();
    handed++;
    if (!r.ok()) {
      first_error = r.status();
      b->stop = true;
      break;
    }
    on_ready(i, std::move(*r));
  }
  // The helpers read through this source: none may outlive the call.
  std::unique_lock<std::mutex> lock(b->mu);
  b->cv.wait(lock, [&] { return b->helpers_running == 0; });
  return first_error;
}

}  // namespace colibri::expert_source
