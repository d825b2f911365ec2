#include "colibri/store/striped_source.h"

#include <condition_variable>
#include <deque>
#include <iterator>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/buffer_pool.h"
#include "colibri/core/status.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::store {

using expert_source::Block;
using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;

absl::StatusOr<std::unique_ptr<StripedSource>> StripedSource::Create(BlockStore* store,
                                                                     std::string_view model,
                                                                     StripedSourceOptions options) {
  const StoredModel* m = store->FindModel(model);
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("expert store does not hold model '", std::string(model), "'"));
  }
  return std::unique_ptr<StripedSource>(new StripedSource(store, m, options));
}

absl::StatusOr<std::unique_ptr<StripedSource>> StripedSource::OpenLocal(
    const model::Container* container, const IoEngineOptions& io, StripedSourceOptions options) {
  ASSIGN_OR_RETURN(auto store, BlockStore::Open({.containers = {container}, .io = io}));
  ASSIGN_OR_RETURN(auto source, Create(store.get(), container->manifest().name, options));
  source->owned_store_ = std::move(store);
  return source;
}

uint64_t StripedSource::BlockSize(ExpertId id) const {
  const BlockRecord* b = model_->Find(id);
  return b == nullptr ? 0 : b->padded_size;
}

absl::StatusOr<Lease> StripedSource::Fetch(ExpertId id, Priority priority) {
  absl::StatusOr<Lease> out = absl::InternalError("unset");
  RETURN_IF_ERROR(FetchMany(
      std::span<const ExpertId>(&id, 1), [&](size_t, Lease lease) { out = std::move(lease); },
      priority));
  return out;
}

// The reads of one FetchMany call. Shared with the read callbacks: a read Cancel stopped
// waiting for may still land after the call returned, into a buffer the batch still owns.
struct StripedSource::Batch {
  struct Slot {
    std::shared_ptr<Block> block;
    BlockStore::ReadHandle read;  // set once ReadInto returned
    absl::Status status;
    bool done = false;       // arrived (or cancelled): the read's completion is then ignored
    bool cancelled = false;  // by Cancel
    bool promoted = false;   // by Promote
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Slot> slots;
  std::deque<size_t> arrived;  // done slots not handed out yet, in arrival order
  size_t pending = 0;          // reads started and not done

  // Under mu: slot i arrived (a read landed, or Cancel stopped waiting for it).
  void ArriveLocked(size_t i, absl::Status status) {
    slots[i].status = std::move(status);
    slots[i].done = true;
    arrived.push_back(i);
    pending--;
    cv.notify_all();
  }
};

absl::Status StripedSource::Acquire(Block* block, uint64_t bytes, Priority priority,
                                    bool may_wait) {
  if (options_.arena == nullptr) {
    // Pooled memory: its pages are already mapped (a fresh allocation would fault in every page
    // during the DMA).
    ASSIGN_OR_RETURN(auto pooled, BufferPool::Default().Get(bytes));
    block->external = pooled.get();
    block->external_owner = std::move(pooled);
    return absl::OkStatus();
  }
  absl::StatusOr<BlockArena::Slot> slot =
      priority == Priority::kDemand && may_wait
          ? options_.arena->Allocate(bytes, std::chrono::steady_clock::now() + options_.arena_wait)
          : options_.arena->TryAllocate(bytes);
  if (!slot.ok()) {
    if (priority == Priority::kPrefetch) {
      shed_++;
      return absl::CancelledError(
          absl::StrCat("prefetch of ", ExpertLabel(block->id), " shed: ", slot.status().message()));
    }
    if (!may_wait) return absl::UnavailableError("no free slot now");
    return absl::Status(slot.status().code(), absl::StrCat("read ", ExpertLabel(block->id), ": ",
                                                           slot.status().message()));
  }
  block->external = slot->get();
  block->external_owner = *std::move(slot);
  return absl::OkStatus();
}

absl::Status StripedSource::FetchMany(std::span<const ExpertId> ids,
                                      const std::function<void(size_t, Lease)>& on_ready,
                                      Priority priority) {
  std::vector<const BlockRecord*> records;
  for (const ExpertId& id : ids) {
    ASSIGN_OR_RETURN(const BlockRecord* rec, store_->FindBlock(model_->name(), id));
    records.push_back(rec);
  }
  const bool prefetch = priority == Priority::kPrefetch;
  auto batch = std::make_shared<Batch>();
  batch->slots.resize(ids.size());
  // first_error: stop starting reads and hand out nothing more. cancelled: a prefetch Cancel
  // stopped or the arena shed; the others are still handed out, then the call fails with it.
  absl::Status first_error, cancelled;
  size_t started = 0;
  // Starts the reads memory allows. A demand read that finds the arena full while reads of this
  // batch are still out waits for them to be handed out first (their consumer may release older
  // blocks); with none out it waits for a slot up to arena_wait.
  auto start_reads = [&] {
    while (started < ids.size() && first_error.ok() && cancelled.ok()) {
      const size_t i = started;
      bool out = false;
      {
        std::lock_guard<std::mutex> lock(batch->mu);
        out = batch->pending > 0 || !batch->arrived.empty();
      }
      auto block = std::make_shared<Block>();
      block->id = ids[i];
      block->size = records[i]->size;
      absl::Status memory = Acquire(block.get(), records[i]->padded_size, priority, !out);
      if (absl::IsUnavailable(memory) && out) return;  // hand out what landed, then retry
      if (absl::IsCancelled(memory)) {
        cancelled = memory;
        return;
      }
      if (!memory.ok()) {
        first_error = memory;
        return;
      }
      uint8_t* dst = const_cast<uint8_t*>(block->external);
      {
        std::lock_guard<std::mutex> lock(batch->mu);
        batch->slots[i].block = std::move(block);
        batch->pending++;
      }
      started++;
      // Registered before the read starts, so a Cancel or Promote that sees the read queued at
      // the disks finds it here.
      if (prefetch) {
        std::lock_guard<std::mutex> lock(mu_);
        prefetching_.emplace(ids[i].Key(), Entry(batch, i));
      }
      BlockStore::ReadHandle read =
          store_->ReadInto(*model_, *records[i], dst, priority, [batch, i](absl::Status s) {
            std::lock_guard<std::mutex> lock(batch->mu);
            if (!batch->slots[i].done) batch->ArriveLocked(i, std::move(s));
          });
      bool cancel = false, promote = false;
      {
        std::lock_guard<std::mutex> lock(batch->mu);
        batch->slots[i].read = read;
        cancel = batch->slots[i].cancelled;
        promote = batch->slots[i].promoted;
      }
      if (cancel) store_->Cancel(read);
      if (promote) store_->Promote(read);
    }
  };
  // Hand blocks out as they land. A prefetch Cancel stopped is passed over (the others are
  // still handed out; the call then fails Cancelled). On an error keep waiting for the rest, so
  // a failed batch's reads do not linger behind the caller's next one, but hand out nothing
  // more.
  for (;;) {
    start_reads();
    std::unique_lock<std::mutex> lock(batch->mu);
    batch->cv.wait(lock, [&] { return !batch->arrived.empty() || batch->pending == 0; });
    if (batch->arrived.empty()) {
      // Nothing out: done, unless reads wait for memory this batch's blocks no longer hold.
      if (started == ids.size() || !first_error.ok() || !cancelled.ok()) break;
      continue;
    }
    const size_t i = batch->arrived.front();
    batch->arrived.pop_front();
    Batch::Slot& s = batch->slots[i];
    if (prefetch && absl::IsCancelled(s.status)) {
      if (cancelled.ok()) cancelled = s.status;
      continue;
    }
    if (!s.status.ok() || !first_error.ok()) {
      if (first_error.ok()) first_error = s.status;
      continue;
    }
    lock.unlock();
    on_ready(i, Lease(std::move(s.block)));
  }
  if (prefetch) {
    std::lock_guard<std::mutex> guard(mu_);
    for (size_t i = 0; i < started; ++i) {
      auto [it, end] = prefetching_.equal_range(ids[i].Key());
      while (it != end) it = it->second.first == batch ? prefetching_.erase(it) : std::next(it);
    }
  }
  return first_error.ok() ? cancelled : first_error;
}

std::vector<StripedSource::Entry> StripedSource::TakePrefetching(std::span<const ExpertId> ids) {
  std::vector<Entry> taken;
  std::lock_guard<std::mutex> lock(mu_);
  for (const ExpertId& id : ids) {
    auto [it, end] = prefetching_.equal_range(id.Key());
    for (auto k = it; k != end; ++k) taken.push_back(std::move(k->second));
    prefetching_.erase(it, end);
  }
  return taken;
}

void StripedSource::Cancel(std::span<const ExpertId> ids) { Advise(ids, /*cancel=*/true); }

void StripedSource::Promote(std::span<const ExpertId> ids) { Advise(ids, /*cancel=*/false); }

void StripedSource::Advise(std::span<const ExpertId> ids, bool cancel) {
  for (auto& [batch, i] : TakePrefetching(ids)) {
    BlockStore::ReadHandle read;
    {
      std::lock_guard<std::mutex> lock(batch->mu);
      Batch::Slot& slot = batch->slots[i];
      if (slot.done) continue;
      if (cancel) {
        slot.cancelled = true;
        batch->ArriveLocked(i, absl::CancelledError(absl::StrCat(ExpertLabel(slot.block->id),
                                                                 ": prefetch cancelled")));
      } else {
        slot.promoted = true;
      }
      read = slot.read;  // null while ReadInto runs: FetchMany applies the advice then
    }
    if (cancel) {
      store_->Cancel(read);
    } else {
      store_->Promote(read);
    }
  }
}

}  // namespace colibri::store
