#include "colibri/store/io_engine.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "spdlog/spdlog.h"

namespace colibri::store {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// user_data of the NOP that wakes a reaper at shutdown; Op pointers are never 1.
constexpr uint64_t kWakeTag = 1;

struct File {
  uint32_t disk = 0;
  fs::path path;
  int direct_fd = -1;    // O_DIRECT descriptor, when the filesystem accepted it
  int buffered_fd = -1;  // opened up front without O_DIRECT, or lazily on a refused read
  std::atomic<bool> direct_refused{false};
  std::mutex mu;  // guards the lazy open of buffered_fd
};

struct Op {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t required = 0;   // bytes the file must hold from `offset`; the end of file may come after
  std::vector<iovec> iov;  // where the bytes go, in file order
  std::vector<iovec> cur;  // what is left to read (kept alive while the kernel reads into it)
  expert_source::Priority priority = expert_source::Priority::kDemand;
  IoEngine::Ticket ticket = 0;
  bool cancelled = false;      // taken out of its queue by Cancel: never submitted
  bool prefetch_slot = false;  // started as a prefetch: counts against prefetch_depth
  IoEngine::Done done;
  uint64_t done_bytes = 0;
  bool use_buffered = false;  // a misaligned remainder: finish it without O_DIRECT
  bool used_direct = false;   // the last submission went through direct_fd
  Clock::time_point due{};    // bandwidth cap: not delivered before this
  absl::Status status;
};

}  // namespace

class IoEngine::Impl {
 public:
  struct Disk {
    uint32_t index = 0;
    std::string name;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Op*> demand, prefetch;
    uint64_t in_flight = 0;
    uint64_t prefetch_in_flight = 0;  // of in_flight, the reads started as prefetches
    bool stopping = false;
    bool ring_ok = false;
    io_uring ring{};
    std::thread reaper;
    std::vector<std::thread> workers;
    Clock::time_point busy_until{};
    std::atomic<uint64_t> reads{0}, bytes{0}, errors{0}, cancelled{0};
    std::atomic<bool> direct{true};
  };

  Impl(std::vector<std::string> names, const IoEngineOptions& options) : options_(options) {
    options_.queue_depth = std::max(1, options_.queue_depth);
    for (uint32_t i = 0; i < names.size(); ++i) {
      auto d = std::make_unique<Disk>();
      d->index = i;
      d->name = std::move(names[i]);
      disks_.push_back(std::move(d));
    }
  }

  absl::Status Start() {
    bool uring = options_.backend != IoEngineOptions::Backend::kThreads;
    for (auto& d : disks_) {
      if (!uring) break;
      const unsigned entries = static_cast<unsigned>(2 * options_.queue_depth + 2);
      int rc = io_uring_queue_init(entries, &d->ring, 0);
      if (rc < 0) {
        if (options_.backend == IoEngineOptions::Backend::kIoUring) {
          return absl::UnavailableError(absl::StrCat("io_uring_queue_init: ", std::strerror(-rc)));
        }
        spdlog::warn("io_uring is unavailable ({}): reading with a pool of pread threads per disk",
                     std::strerror(-rc));
        for (auto& o : disks_) {
          if (o->ring_ok) io_uring_queue_exit(&o->ring);
          o->ring_ok = false;
        }
        uring = false;
        break;
      }
      d->ring_ok = true;
    }
    uring_ = uring;
    for (auto& d : disks_) {
      Disk* dp = d.get();
      if (uring_) {
        dp->reaper = std::thread([this, dp] { ReaperLoop(*dp); });
      } else {
        const int n = std::min(options_.queue_depth, 16);
        for (int i = 0; i < n; ++i) dp->workers.emplace_back([this, dp] { WorkerLoop(*dp); });
      }
    }
    timer_ = std::thread([this] { TimerLoop(); });
    return absl::OkStatus();
  }

  ~Impl() { Shutdown(); }

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(shutdown_mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    for (auto& d : disks_) {
      std::deque<Op*> cancelled;
      {
        std::lock_guard<std::mutex> lock(d->mu);
        d->stopping = true;
        for (Op* op : d->demand) cancelled.push_back(op);
        for (Op* op : d->prefetch) cancelled.push_back(op);
        d->demand.clear();
        d->prefetch.clear();
        d->cv.notify_all();
      }
      for (Op* op : cancelled) {
        Done done = std::move(op->done);
        delete op;
        done(absl::CancelledError("I/O engine shutting down"));
      }
    }
    for (auto& d : disks_) {
      std::unique_lock<std::mutex> lock(d->mu);
      d->cv.wait(lock, [&] { return d->in_flight == 0; });
      if (d->ring_ok) {
        io_uring_sqe* sqe = io_uring_get_sqe(&d->ring);
        if (sqe != nullptr) {
          io_uring_prep_nop(sqe);
          io_uring_sqe_set_data64(sqe, kWakeTag);
          io_uring_submit(&d->ring);
        }
      }
      lock.unlock();
      if (d->reaper.joinable()) d->reaper.join();
      for (auto& t : d->workers) t.join();
      if (d->ring_ok) io_uring_queue_exit(&d->ring);
    }
    {
      std::lock_guard<std::mutex> lock(timer_mu_);
      timer_stop_ = true;
      timer_cv_.notify_all();
    }
    if (timer_.joinable()) timer_.join();
  }

  void CloseFiles() {
    for (auto& f : files_) {
      if (f->direct_fd >= 0) ::close(f->direct_fd);
      if (f->buffered_fd >= 0) ::close(f->buffered_fd);
      f->direct_fd = f->buffered_fd = -1;
    }
  }

  absl::StatusOr<uint32_t> OpenFile(uint32_t disk, const fs::path& path) {
    if (disk >= disks_.size()) return absl::InvalidArgumentError(absl::StrCat("no disk ", disk));
    auto f = std::make_unique<File>();
    f->disk = disk;
    f->path = path;
    if (options_.direct_io) {
      int fd = options_.pretend_direct_refused
                   ? -1
                   : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      const int err = options_.pretend_direct_refused ? EINVAL : errno;
      if (fd >= 0) {
        f->direct_fd = fd;
      } else if (err != EINVAL) {
        return ErrnoStatus(err, "open", path);
      } else {
        NoteDirectRefused(*disks_[disk], path);
      }
    }
    if (f->direct_fd < 0) {
      f->buffered_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (f->buffered_fd < 0) return ErrnoStatus(errno, "open", path);
    }
    files_.push_back(std::move(f));
    return static_cast<uint32_t>(files_.size() - 1);
  }

  Ticket Read(uint32_t file, uint64_t offset, std::vector<iovec> iov, Priority priority, Done done,
              uint64_t required) {
    Op* op = new Op;
    // The disk in the low bits: Cancel and Promote find the queue without a global map.
    const Ticket ticket = (next_ticket_++ << kDiskBits) | files_[file]->disk;
    op->ticket = ticket;
    op->file = file;
    op->offset = offset;
    for (const iovec& v : iov) op->length += v.iov_len;
    op->required = std::min(required, op->length);
    op->iov = std::move(iov);
    op->priority = priority;
    op->done = std::move(done);
    Disk& d = *disks_[files_[file]->disk];
    std::unique_lock<std::mutex> lock(d.mu);
    if (d.stopping) {
      lock.unlock();
      // The engine's threads are gone: this caller's thread is the only one left to answer.
      Done cb = std::move(op->done);
      delete op;
      cb(absl::CancelledError("I/O engine shut down"));
      return ticket;
    }
    if (uring_ && CanStartLocked(d, priority)) {
      StartLocked(d, op);
      if (!SubmitLocked(d, op)) {
        lock.unlock();
        RunSoon(op);  // completes with its error on the timer thread, never inside Read()
      }
      return ticket;
    }
    (priority == Priority::kDemand ? d.demand : d.prefetch).push_back(op);
    if (!uring_) d.cv.notify_one();
    return ticket;
  }

  bool Cancel(Ticket ticket) {
    Disk* d = DiskOf(ticket);
    if (d == nullptr) return false;
    Op* op = nullptr;
    {
      std::lock_guard<std::mutex> lock(d->mu);
      for (auto* q : {&d->prefetch, &d->demand}) {
        auto it = std::find_if(q->begin(), q->end(), [&](Op* o) { return o->ticket == ticket; });
        if (it == q->end()) continue;
        op = *it;
        q->erase(it);
        break;
      }
    }
    if (op == nullptr) return false;
    op->cancelled = true;
    op->status = absl::CancelledError(absl::StrCat("read of '", files_[op->file]->path.string(),
                                                   "' at offset ", op->offset,
                                                   " cancelled before it reached disk ", d->name));
    RunSoon(op);  // `done` on the timer thread, never inside Cancel()
    return true;
  }

  bool Promote(Ticket ticket) {
    Disk* d = DiskOf(ticket);
    if (d == nullptr) return false;
    std::lock_guard<std::mutex> lock(d->mu);
    auto it = std::find_if(d->prefetch.begin(), d->prefetch.end(),
                           [&](Op* o) { return o->ticket == ticket; });
    if (it == d->prefetch.end()) return false;
    Op* op = *it;
    d->prefetch.erase(it);
    op->priority = Priority::kDemand;
    d->demand.push_back(op);
    return true;
  }

  uint32_t disk_count() const { return static_cast<uint32_t>(disks_.size()); }
  const std::string& disk_name(uint32_t disk) const { return disks_[disk]->name; }
  const fs::path& file_path(uint32_t file) const { return files_[file]->path; }
  uint32_t file_disk(uint32_t file) const { return files_[file]->disk; }
  bool using_io_uring() const { return uring_; }
  const IoEngineOptions& options() const { return options_; }

  DiskStats Stats(uint32_t disk) const {
    Disk& d = *disks_[disk];
    DiskStats s;
    s.reads = d.reads.load();
    s.bytes = d.bytes.load();
    s.errors = d.errors.load();
    s.cancelled = d.cancelled.load();
    s.direct = d.direct.load();
    std::lock_guard<std::mutex> lock(d.mu);
    s.in_flight = d.in_flight;
    s.queued = d.demand.size() + d.prefetch.size();
    return s;
  }

 private:
  static constexpr int kDiskBits = 16;

  Disk* DiskOf(Ticket ticket) {
    const uint64_t disk = ticket & ((uint64_t{1} << kDiskBits) - 1);
    return ticket == 0 || disk >= disks_.size() ? nullptr : disks_[disk].get();
  }

  void NoteDirectRefused(Disk& d, const fs::path& path) {
    d.direct = false;
    if (!direct_refused_logged_.exchange(true)) {
      spdlog::warn(
          "'{}' (disk {}) refuses O_DIRECT: reading it through the page cache (buffered). Logged "
          "once.",
          path.string(), d.name);
    }
  }

  int BufferedFd(File& f) {
    std::lock_guard<std::mutex> lock(f.mu);
    if (f.buffered_fd < 0) f.buffered_fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    return f.buffered_fd;
  }

  // Picks the descriptor for the op's next read; -errno when none can be opened.
  int FdFor(Op* op) {
    File& f = *files_[op->file];
    op->used_direct = f.direct_fd >= 0 && !op->use_buffered && !f.direct_refused.load();
    if (op->used_direct) return f.direct_fd;
    int fd = BufferedFd(f);
    return fd >= 0 ? fd : -errno;
  }

  // Whether a read of `priority` may start now: a free slot, and for a prefetch a free prefetch
  // slot (so demand reads never queue behind more than prefetch_depth prefetch reads).
  bool CanStartLocked(const Disk& d, Priority priority) const {
    const uint64_t depth = static_cast<uint64_t>(options_.queue_depth);
    if (uring_ && d.in_flight >= depth) return false;  // threads: one read per worker
    return priority == Priority::kDemand || d.prefetch_in_flight < PrefetchDepth();
  }
  uint64_t PrefetchDepth() const {
    return static_cast<uint64_t>(options_.prefetch_depth > 0 ? options_.prefetch_depth
                                                             : options_.queue_depth);
  }
  // Takes a read slot for `op`.
  void StartLocked(Disk& d, Op* op) {
    d.in_flight++;
    op->prefetch_slot = op->priority == Priority::kPrefetch;
    if (op->prefetch_slot) d.prefetch_in_flight++;
    AssignDueLocked(d, op);
  }
  // The next queued read that may start (demand first), taken out of its queue and given a
  // slot; nullptr when none may.
  Op* NextLocked(Disk& d) {
    if (uring_ && d.in_flight >= static_cast<uint64_t>(options_.queue_depth)) return nullptr;
    std::deque<Op*>* q = nullptr;
    if (!d.demand.empty()) {
      q = &d.demand;
    } else if (!d.prefetch.empty() && d.prefetch_in_flight < PrefetchDepth()) {
      q = &d.prefetch;
    }
    if (q == nullptr) return nullptr;
    Op* op = q->front();
    q->pop_front();
    StartLocked(d, op);
    return op;
  }

  void AssignDueLocked(Disk& d, Op* op) {
    if (options_.faults == nullptr) return;
    const uint64_t rate = options_.faults->DiskBandwidth(d.index);
    if (rate == 0) return;
    const auto now = Clock::now();
    const auto start = std::max(now, d.busy_until);
    d.busy_until = start + std::chrono::nanoseconds(static_cast<int64_t>(
                               1e9 * static_cast<double>(op->length) / static_cast<double>(rate)));
    op->due = d.busy_until;
  }

  // Queues the op's (next) read on the ring. False (op->status set) when that fails.
  bool SubmitLocked(Disk& d, Op* op) {
    const int fd = FdFor(op);
    if (fd < 0) {
      op->status = ErrnoStatus(-fd, "open", files_[op->file]->path);
      return false;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&d.ring);
    if (sqe == nullptr) {
      op->status = absl::InternalError(
          absl::StrCat("io_uring submission queue of disk ", d.name, " is full"));
      return false;
    }
    Remaining(op);
    io_uring_prep_readv(sqe, fd, op->cur.data(), static_cast<unsigned>(op->cur.size()),
                        op->offset + op->done_bytes);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(op));
    int rc = io_uring_submit(&d.ring);
    if (rc < 0) {
      op->status = absl::UnavailableError(
          absl::StrCat("io_uring_submit on disk ", d.name, ": ", std::strerror(-rc)));
      return false;
    }
    return true;
  }

  // The iovecs of the bytes not read yet.
  static void Remaining(Op* op) {
    op->cur.clear();
    uint64_t skip = op->done_bytes;
    for (const iovec& v : op->iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      op->cur.push_back(iovec{static_cast<uint8_t*>(v.iov_base) + skip, v.iov_len - skip});
      skip = 0;
    }
  }

  // Applies faults and interprets a read's result. True: the op is finished (OK or error);
  // false: read the rest (short read, EINTR, O_DIRECT refused).
  bool HandleResult(Disk& d, Op* op, int64_t result) {
    const uint64_t want = op->length - op->done_bytes;
    if (options_.faults != nullptr) {
      Remaining(op);
      options_.faults->AfterRead(d.index, op->offset + op->done_bytes, want, op->cur, &result);
    }
    File& f = *files_[op->file];
    if (result == -EINTR || result == -EAGAIN) return false;
    if (result == -EINVAL && op->used_direct) {
      f.direct_refused = true;
      NoteDirectRefused(d, f.path);
      return false;
    }
    if (result < 0) {
      op->status = ErrnoStatus(
          static_cast<int>(-result),
          absl::StrCat("read ", want, " bytes at offset ", op->offset + op->done_bytes, " of"),
          f.path);
      return true;
    }
    if (result == 0 && op->done_bytes >= op->required) {
      op->length = op->done_bytes;  // the file ends here, after every byte that must exist
      return true;
    }
    if (result == 0) {
      op->status = absl::DataLossError(absl::StrCat(
          "read '", f.path.string(), "' at offset ", op->offset, ": the file ends after ",
          op->done_bytes, " of ", op->length, " bytes (truncated?)"));
      return true;
    }
    op->done_bytes += static_cast<uint64_t>(result);
    if (op->done_bytes >= op->length) return true;
    if (op->done_bytes % 4096 != 0) op->use_buffered = true;  // O_DIRECT needs aligned buffers
    return false;
  }

  void Complete(Op* op) {
    if (op->due != Clock::time_point{} && op->due > Clock::now()) {
      std::lock_guard<std::mutex> lock(timer_mu_);
      timers_.emplace(op->due, op);
      timer_cv_.notify_all();
      return;
    }
    Finish(op);
  }

  // Runs `done`, frees the queue slot and (io_uring) starts queued reads.
  void Finish(Op* first) {
    std::vector<Op*> work = {first};
    while (!work.empty()) {
      Op* op = work.back();
      work.pop_back();
      Disk& d = *disks_[files_[op->file]->disk];
      const bool cancelled = op->cancelled;
      const bool prefetch_slot = op->prefetch_slot;
      if (cancelled) {
        d.cancelled++;
      } else if (op->status.ok()) {
        d.reads++;
        d.bytes += op->length;
      } else {
        d.errors++;
      }
      Done done = std::move(op->done);
      absl::Status status = std::move(op->status);
      delete op;
      {
        // The slot is free before `done` runs, so a callback that reads again gets it. The
        // destructor still waits for this callback: it joins the thread running it.
        std::lock_guard<std::mutex> lock(d.mu);
        if (!cancelled) d.in_flight--;  // a cancelled read never took a slot
        if (prefetch_slot) d.prefetch_in_flight--;
        if (uring_) {
          while (Op* next = NextLocked(d)) {
            if (!SubmitLocked(d, next)) work.push_back(next);
          }
        }
        d.cv.notify_all();
      }
      done(std::move(status));
    }
  }

  // An op that failed before reaching the device: finished on the timer thread.
  void RunSoon(Op* op) {
    std::lock_guard<std::mutex> lock(timer_mu_);
    op->due = Clock::time_point{};
    timers_.emplace(Clock::time_point{}, op);
    timer_cv_.notify_all();
  }

  void ReaperLoop(Disk& d) {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&d.ring, &cqe);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) {
        spdlog::error("io_uring_wait_cqe on disk {}: {}", d.name, std::strerror(-rc));
        continue;
      }
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int64_t res = cqe->res;
      io_uring_cqe_seen(&d.ring, cqe);
      if (tag == kWakeTag) {
        std::lock_guard<std::mutex> lock(d.mu);
        if (d.stopping && d.in_flight == 0) return;
        continue;
      }
      Op* op = reinterpret_cast<Op*>(tag);
      if (!HandleResult(d, op, res)) {
        std::unique_lock<std::mutex> lock(d.mu);
        if (SubmitLocked(d, op)) continue;
      }
      Complete(op);
    }
  }

  void WorkerLoop(Disk& d) {
    for (;;) {
      Op* op;
      {
        std::unique_lock<std::mutex> lock(d.mu);
        d.cv.wait(lock, [&] {
          return d.stopping || !d.demand.empty() ||
                 (!d.prefetch.empty() && CanStartLocked(d, Priority::kPrefetch));
        });
        op = NextLocked(d);
        if (op == nullptr) return;  // stopping, nothing left to start
      }
      for (;;) {
        const int fd = FdFor(op);
        int64_t n;
        if (fd < 0) {
          n = fd;
        } else {
          Remaining(op);
          ssize_t r = ::preadv(fd, op->cur.data(), static_cast<int>(op->cur.size()),
                               static_cast<off_t>(op->offset + op->done_bytes));
          n = r < 0 ? -errno : r;
        }
        if (HandleResult(d, op, n)) break;
      }
      if (op->due != Clock::time_point{})
        std::this_thread::sleep_until(op->due);  // emulated slow disk
      Finish(op);
    }
  }

  void TimerLoop() {
    std::unique_lock<std::mutex> lock(timer_mu_);
    for (;;) {
      if (timers_.empty()) {
        if (timer_stop_) return;
        timer_cv_.wait(lock);
        continue;
      }
      auto it = timers_.begin();
      if (it->first > Clock::now()) {
        timer_cv_.wait_until(lock, it->first);
        continue;
      }
      Op* op = it->second;
      timers_.erase(it);
      lock.unlock();
      Finish(op);
      lock.lock();
    }
  }

  IoEngineOptions options_;
  bool uring_ = false;
  std::vector<std::unique_ptr<Disk>> disks_;
  std::vector<std::unique_ptr<File>> files_;
  std::atomic<bool> direct_refused_logged_{false};
  std::atomic<uint64_t> next_ticket_{1};
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  std::multimap<Clock::time_point, Op*> timers_;
  bool timer_stop_ = false;
  std::thread timer_;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

absl::StatusOr<std::unique_ptr<IoEngine>> IoEngine::Create(std::vector<std::string> disk_names,
                                                           const IoEngineOptions& options) {
  if (disk_names.empty()) return absl::InvalidArgumentError("I/O engine needs at least one disk");
  auto impl = std::make_unique<Impl>(std::move(disk_names), options);
  RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<IoEngine>(new IoEngine(std::move(impl)));
}

IoEngine::IoEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IoEngine::~IoEngine() {
  impl_->Shutdown();
  impl_->CloseFiles();
}
void IoEngine::Shutdown() { impl_->Shutdown(); }

absl::StatusOr<uint32_t> IoEngine::OpenFile(uint32_t disk, const fs::path& path) {
  return impl_->OpenFile(disk, path);
}
IoEngine::Ticket IoEngine::Read(uint32_t file, uint64_t offset, uint64_t length, uint8_t* dst,
                                Priority priority, Done done) {
  return impl_->Read(file, offset, {iovec{dst, length}}, priority, std::move(done),
                     std::numeric_limits<uint64_t>::max());
}
IoEngine::Ticket IoEngine::ReadV(uint32_t file, uint64_t offset, std::vector<iovec> iov,
                                 Priority priority, Done done, uint64_t required) {
  return impl_->Read(file, offset, std::move(iov), priority, std::move(done), required);
}
bool IoEngine::Cancel(Ticket ticket) { return impl_->Cancel(ticket); }
bool IoEngine::Promote(Ticket ticket) { return impl_->Promote(ticket); }
uint32_t IoEngine::disk_count() const { return impl_->disk_count(); }
const std::string& IoEngine::disk_name(uint32_t disk) const { return impl_->disk_name(disk); }
const fs::path& IoEngine::file_path(uint32_t file) const { return impl_->file_path(file); }
uint32_t IoEngine::file_disk(uint32_t file) const { return impl_->file_disk(file); }
DiskStats IoEngine::Stats(uint32_t disk) const { return impl_->Stats(disk); }
bool IoEngine::using_io_uring() const { return impl_->using_io_uring(); }
const IoEngineOptions& IoEngine::options() const { return impl_->options(); }

}  // namespace colibri::store
