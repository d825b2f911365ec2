#include "colibri/store/fetch_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "colibri/core/checksum.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::store {

using expert_source::Priority;

namespace {

absl::Status CancelledByClient() { return absl::CancelledError("cancelled by the client"); }

absl::Status Late(const BlockRecord& b, uint32_t timeout_ms, const char* what) {
  return absl::DeadlineExceededError(absl::StrCat(
      ExpertLabel(b.id), ": ", what, " after the request's ", timeout_ms, " ms timeout"));
}

}  // namespace

absl::StatusOr<FetchTarget> BlockStoreReads::Find(std::string_view model,
                                                  expert_source::ExpertId id) const {
  FetchTarget t;
  auto rec = store_->FindBlock(model, id, &t.model);
  if (!rec.ok()) return rec.status();
  t.block = *rec;
  return t;
}

FetchReads::Handle BlockStoreReads::Read(const FetchTarget& target, Priority priority, uint8_t* dst,
                                         Done done) {
  if (dst != nullptr) {
    return store_->ReadInto(
        *target.model, *target.block, dst, priority,
        [done = std::move(done)](absl::Status s) { done(std::move(s), nullptr); });
  }
  auto shared = [done = std::move(done)](absl::StatusOr<SharedBlock> b) {
    if (b.ok()) {
      done(absl::OkStatus(), std::move(*b));
    } else {
      done(b.status(), nullptr);
    }
  };
  if (!target.whole()) {
    return store_->ReadRange(*target.model, *target.block, target.begin, target.end, priority,
                             std::move(shared));
  }
  return store_->ReadShared(*target.model, *target.block, priority, std::move(shared));
}

void BlockStoreReads::Cancel(const Handle& read) { store_->Cancel(read); }
void BlockStoreReads::Promote(const Handle& read) { store_->Promote(read); }

FetchScheduler::FetchScheduler(FetchReads* reads, FetchObserver* observer, FetchSink* sink,
                               FetchLimits limits, Now now)
    : reads_(reads),
      observer_(observer),
      sink_(sink),
      limits_(limits),
      now_(now ? std::move(now) : Now([] { return Clock::now(); })),
      last_active_(now_()) {}

void FetchScheduler::Submit(const FetchBlock& request) {
  OnMessage([&](std::vector<Request>*) { AcceptLocked(request); });
}

void FetchScheduler::SubmitBatch(std::span<const FetchBlock> requests) {
  OnMessage([&](std::vector<Request>* starts) {
    if (requests.empty() || requests.size() > limits_.max_batch) {
      PushErrorLocked(
          0, absl::InvalidArgumentError(absl::StrCat(
                 "expert store: a block batch holds 1 to ", limits_.max_batch,
                 " requests, this one holds ", requests.size(), " (none of them was queued)")));
      return;
    }
    // Demand first, then as if sent one by one: the queue cap counts each request when it is
    // queued, after the ones before it took free read slots.
    std::vector<const FetchBlock*> order;
    order.reserve(requests.size());
    for (const FetchBlock& b : requests) order.push_back(&b);
    std::stable_partition(order.begin(), order.end(),
                          [](const FetchBlock* b) { return b->priority != Priority::kPrefetch; });
    for (const FetchBlock* b : order) {
      AcceptLocked(*b);
      ScheduleLocked(starts);
    }
  });
}

void FetchScheduler::Cancel(std::span<const uint64_t> ids) {
  OnMessage([&](std::vector<Request>*) {
    for (uint64_t id : ids) CancelLocked(id);
  });
}

void FetchScheduler::Promote(std::span<const uint64_t> ids) {
  OnMessage([&](std::vector<Request>*) {
    for (uint64_t id : ids) PromoteLocked(id);
    WriteNextLocked();
  });
}

void FetchScheduler::Attached(bool ok, const std::string& message, uint8_t* base, uint64_t size) {
  OnMessage([&](std::vector<Request>*) {
    if (ok) {
      shm_base_ = base;
      shm_size_ = size;
    }
    FetchAnswer a;
    a.kind = FetchAnswer::Kind::kShmAttached;
    a.attach_ok = ok;
    a.attach_message = message;
    PushLocked(std::move(a));
  });
}

void FetchScheduler::Skip() {
  OnMessage([](std::vector<Request>*) {});
}

void FetchScheduler::Refuse(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || done_) return;
  FinishLocked(status);
}

// Every client message: handled under the lock, then reads start (after the lock) and the next
// message is asked for (under the lock, so never after the stream finished).
void FetchScheduler::OnMessage(const std::function<void(std::vector<Request>*)>& handle) {
  std::vector<Request> starts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || done_) return;
    last_active_ = now_();
    handle(&starts);
    ScheduleLocked(&starts);
    if (!finished_) sink_->ReadNext();
    HoldLocked(starts);
  }
  StartReads(starts);
}

void FetchScheduler::ClientDone() {
  std::lock_guard<std::mutex> lock(mu_);
  client_done_ = true;
  MaybeFinishLocked();
}

void FetchScheduler::WriteDone(bool ok) {
  std::vector<Request> starts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (ok) last_active_ = now_();  // an answer just went out: the stream is not idle
    if (!ok) broken_ = true;
    WriteNextLocked();
    ScheduleLocked(&starts);
    MaybeFinishLocked();
    HoldLocked(starts);
  }
  StartReads(starts);
}

void FetchScheduler::Broken() {
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = true;
  MaybeFinishLocked();
}

bool FetchScheduler::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  ClearQueuedLocked();
  return tasks_ == 0;
}

FetchScheduler::Idle FetchScheduler::ExpireIfIdle(Clock::time_point now,
                                                  std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_ || done_ || broken_ || !in_flight_.empty() || now - last_active_ < timeout)
    return Idle::kBusy;
  observer_->IdleEnded();
  if (writing_ || !demand_out_.empty() || !prefetch_out_.empty()) {
    sink_->Abort();
    return Idle::kStuck;
  }
  ClearQueuedLocked();
  FinishLocked(absl::OkStatus());
  return Idle::kFinished;
}

bool FetchScheduler::has_shm() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shm_base_ != nullptr;
}

void FetchScheduler::AcceptLocked(const FetchBlock& b) {
  if (demand_.size() + prefetch_.size() >= limits_.max_queued) {
    observer_->Rejected();
    PushErrorLocked(b.request_id, absl::ResourceExhaustedError(
                                      absl::StrCat("expert store: more than ", limits_.max_queued,
                                                   " requests queued on this stream")));
    return;
  }
  Request r;
  r.id = b.request_id;
  auto target = reads_->Find(b.model, b.id);
  if (!target.ok()) {
    observer_->Failed(target.status());
    PushErrorLocked(r.id, target.status());
    return;
  }
  r.target = *target;
  const uint64_t size = r.target.block->size;
  if (b.range_end != 0 || b.range_begin != 0) {
    if (b.range_begin >= b.range_end || b.range_end > size) {
      PushErrorLocked(r.id, absl::InvalidArgumentError(absl::StrCat(
                                "range [", b.range_begin, ", ", b.range_end, ") of ",
                                ExpertLabel(b.id), " is not inside its ", size, " bytes")));
      return;
    }
    if (b.has_shm_offset) {
      PushErrorLocked(r.id, absl::InvalidArgumentError(
                                "a part of a block is sent as chunks, not into shared memory"));
      return;
    }
    r.target.begin = b.range_begin;
    r.target.end = b.range_end;
    const auto [first, second] =
        BlockStore::PartWindow(*r.target.block, r.target.begin, r.target.end);
    r.target.held = std::max(r.target.bytes(), second > first ? second - first : 0);
  } else {
    r.target.begin = 0;
    r.target.end = size;
    r.target.held = size;
  }
  r.demand = b.priority != Priority::kPrefetch;
  r.timeout_ms = b.timeout_ms;
  if (b.timeout_ms > 0) r.deadline = now_() + std::chrono::milliseconds(b.timeout_ms);
  if (b.has_shm_offset) {
    if (shm_base_ == nullptr) {
      PushErrorLocked(r.id, absl::FailedPreconditionError(
                                "no shared-memory region is attached to this stream"));
      return;
    }
    const uint64_t off = b.shm_offset;
    const uint64_t need = r.target.block->padded_size;
    if (off % 4096 != 0 || off > shm_size_ || need > shm_size_ - off) {
      PushErrorLocked(
          r.id, absl::InvalidArgumentError(absl::StrCat("shared-memory offset ", off, " (+", need,
                                                        " bytes) is not inside the region")));
      return;
    }
    r.shm_dst = shm_base_ + off;
    r.shm_offset = off;
  }
  (r.demand ? demand_ : prefetch_).push_back(r);
  observer_->QueuedChanged(1);
}

void FetchScheduler::CancelLocked(uint64_t id) {
  for (auto* q : {&prefetch_, &demand_}) {
    for (auto it = q->begin(); it != q->end(); ++it) {
      if (it->id != id) continue;
      q->erase(it);
      observer_->QueuedChanged(-1);
      observer_->Cancelled();
      PushErrorLocked(id, CancelledByClient());
      return;
    }
  }
  if (auto it = in_flight_.find(id); it != in_flight_.end()) {
    if (it->second.cancelled) return;
    observer_->Cancelled();
    it->second.cancelled = true;                               // answered when the read ends
    if (it->second.handle) reads_->Cancel(it->second.handle);  // else once Read returned
    return;
  }
  for (auto* q : {&prefetch_out_, &demand_out_}) {
    for (auto it = q->begin(); it != q->end(); ++it) {
      if (it->answer.request_id != id || !it->block) continue;
      buffered_bytes_ -= it->end - it->next + it->extra;
      q->erase(it);
      observer_->Cancelled();
      PushErrorLocked(id, CancelledByClient());
      return;
    }
  }
}

void FetchScheduler::PromoteLocked(uint64_t id) {
  for (auto it = prefetch_.begin(); it != prefetch_.end(); ++it) {
    if (it->id != id) continue;
    Request r = *it;
    prefetch_.erase(it);
    r.demand = true;
    demand_.push_back(r);
    return;
  }
  if (auto it = in_flight_.find(id); it != in_flight_.end()) {
    if (it->second.demand) return;
    it->second.demand = true;
    if (it->second.handle) reads_->Promote(it->second.handle);  // else once Read returned
    return;
  }
  for (auto it = prefetch_out_.begin(); it != prefetch_out_.end(); ++it) {
    if (it->answer.request_id != id) continue;
    demand_out_.push_back(std::move(*it));
    prefetch_out_.erase(it);
    return;
  }
}

void FetchScheduler::PushErrorLocked(uint64_t id, const absl::Status& status) {
  FetchAnswer a;
  a.kind = FetchAnswer::Kind::kError;
  a.request_id = id;
  a.error = status;
  PushLocked(std::move(a));
}

// A ready answer (not a block to cut): goes with the demand answers.
void FetchScheduler::PushLocked(FetchAnswer answer) {
  Out o;
  o.answer = std::move(answer);
  demand_out_.push_back(std::move(o));
  WriteNextLocked();
}

void FetchScheduler::ClearQueuedLocked() {
  observer_->QueuedChanged(-static_cast<int64_t>(demand_.size() + prefetch_.size()));
  demand_.clear();
  prefetch_.clear();
}

// Picks requests to read (demand first) while there are read slots and buffer room.
void FetchScheduler::ScheduleLocked(std::vector<Request>* starts) {
  if (broken_ || done_ || finished_) return;
  while (in_flight_.size() < limits_.max_reads_in_flight) {
    std::deque<Request>* q = !demand_.empty()     ? &demand_
                             : !prefetch_.empty() ? &prefetch_
                                                  : nullptr;
    if (q == nullptr) break;
    // Bytes read for the network count against the buffer; shared-memory reads land in the
    // client's memory and only take a read slot.
    if (q->front().shm_dst == nullptr &&
        chunk_bytes_in_flight_ + buffered_bytes_ >= limits_.max_buffered_bytes) {
      break;
    }
    Request r = q->front();
    q->pop_front();
    observer_->QueuedChanged(-1);
    r.started = now_();
    const BlockRecord& rec = *r.target.block;
    if (r.started > r.deadline) {
      observer_->DeadlineExceeded();
      PushErrorLocked(r.id, Late(rec, r.timeout_ms, "still queued"));
      continue;
    }
    if (in_flight_.count(r.id) != 0) {
      PushErrorLocked(r.id, absl::InvalidArgumentError(absl::StrCat(
                                "request id ", r.id, " is already being read on this stream")));
      continue;
    }
    if (r.shm_dst == nullptr) chunk_bytes_in_flight_ += r.target.held;
    r.seq = next_seq_++;
    in_flight_[r.id] = InFlight{false, r.demand, r.seq, nullptr};
    tasks_++;
    observer_->ReadsInFlightChanged(1);
    starts->push_back(r);
  }
}

void FetchScheduler::HoldLocked(const std::vector<Request>& starts) {
  if (!starts.empty()) tasks_++;
}

void FetchScheduler::StartReads(const std::vector<Request>& starts) {
  if (starts.empty()) return;
  std::vector<FetchReads::Handle> handles;
  handles.reserve(starts.size());
  for (const Request& r : starts) {
    handles.push_back(reads_->Read(r.target, r.demand ? Priority::kDemand : Priority::kPrefetch,
                                   r.shm_dst, [this, r](absl::Status s, SharedBlock b) {
                                     OnReadComplete(r, std::move(s), std::move(b));
                                   }));
  }
  bool last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Cancels and promotes that came while the reads started reach the disks now.
    for (size_t i = 0; i < starts.size(); ++i) {
      auto it = in_flight_.find(starts[i].id);
      if (!handles[i] || it == in_flight_.end() || it->second.seq != starts[i].seq) continue;
      it->second.handle = std::move(handles[i]);
      if (it->second.cancelled) {
        reads_->Cancel(it->second.handle);
      } else if (it->second.demand && !starts[i].demand) {
        reads_->Promote(it->second.handle);
      }
    }
    tasks_--;  // HoldLocked's
    last = done_ && tasks_ == 0;
  }
  if (last) sink_->Released();  // may destroy this scheduler: nothing after it
}

void FetchScheduler::OnReadComplete(const Request& r, absl::Status status, SharedBlock block) {
  std::vector<Request> starts;
  bool last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const BlockRecord& rec = *r.target.block;
    tasks_--;
    if (r.shm_dst == nullptr) chunk_bytes_in_flight_ -= r.target.held;
    InFlight f = in_flight_[r.id];
    in_flight_.erase(r.id);
    const auto now = now_();
    observer_->ReadTime(f.demand, std::chrono::duration<double>(now - r.started).count());
    observer_->ReadsInFlightChanged(-1);
    if (!done_ && !broken_) {
      if (f.cancelled) {
        PushErrorLocked(r.id, CancelledByClient());
      } else if (now > r.deadline) {
        observer_->DeadlineExceeded();
        PushErrorLocked(r.id, Late(rec, r.timeout_ms, "read finished"));
      } else if (!status.ok()) {
        observer_->Failed(status);
        PushErrorLocked(r.id, status);
      } else {
        Out o;
        o.answer.request_id = r.id;
        if (r.shm_dst != nullptr) {
          observer_->Served(f.demand, rec.size, true);
          o.answer.kind = FetchAnswer::Kind::kShmBlock;
          o.answer.shm_offset = r.shm_offset;
          o.answer.block_size = rec.size;
          o.answer.block_checksum = rec.checksum;
          demand_out_.push_back(std::move(o));
        } else if (!block || block->offset > r.target.begin) {
          PushErrorLocked(
              r.id, absl::InternalError(absl::StrCat(
                        ExpertLabel(rec.id), ": the read succeeded without the bytes asked for")));
        } else {
          observer_->Served(f.demand, r.target.bytes(), false);
          o.answer.kind = FetchAnswer::Kind::kChunk;
          o.block = std::move(block);
          o.record = &rec;
          o.next = r.target.begin;
          o.end = r.target.end;
          o.extra = r.target.held - r.target.bytes();
          buffered_bytes_ += r.target.held;
          (f.demand ? demand_out_ : prefetch_out_).push_back(std::move(o));
        }
      }
      WriteNextLocked();
      ScheduleLocked(&starts);
      MaybeFinishLocked();
      HoldLocked(starts);
    }
    last = done_ && tasks_ == 0;
  }
  StartReads(starts);
  if (last) sink_->Released();  // may destroy this scheduler: nothing after it
}

// Starts the next write: demand answers first; a block's next chunk is cut here.
void FetchScheduler::WriteNextLocked() {
  if (writing_ || finished_ || broken_ || done_) return;
  std::deque<Out>* q = !demand_out_.empty()     ? &demand_out_
                       : !prefetch_out_.empty() ? &prefetch_out_
                                                : nullptr;
  if (q == nullptr) return;
  Out& o = q->front();
  FetchAnswer a;
  if (o.block) {
    const uint64_t n = std::min<uint64_t>(limits_.chunk_bytes, o.end - o.next);
    a.kind = FetchAnswer::Kind::kChunk;
    a.request_id = o.answer.request_id;
    a.offset = o.next;
    a.data = o.block->data() + (o.next - o.block->offset);
    a.length = n;
    a.chunk_checksum = Checksum64(a.data, n);
    a.block_size = o.record->size;
    a.block_checksum = o.record->checksum;
    a.hold = o.block;
    o.next += n;
    buffered_bytes_ -= n;
    a.last = o.next >= o.end;
    if (a.last) {
      buffered_bytes_ -= o.extra;
      q->pop_front();
    }
  } else {
    a = std::move(o.answer);
    q->pop_front();
  }
  writing_ = true;
  sink_->Write(a);
}

void FetchScheduler::MaybeFinishLocked() {
  if (finished_ || writing_ || done_) return;
  if (broken_) {
    FinishLocked(absl::CancelledError("stream cancelled"));
    return;
  }
  if (client_done_ && demand_.empty() && prefetch_.empty() && in_flight_.empty() &&
      demand_out_.empty() && prefetch_out_.empty()) {
    FinishLocked(absl::OkStatus());
  }
}

void FetchScheduler::FinishLocked(const absl::Status& status) {
  finished_ = true;
  sink_->Finish(status);
}

}  // namespace colibri::store
