#include "colibri/store/striped_source.h"

#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "colibri/core/buffer_pool.h"
#include "colibri/core/status.h"

namespace colibri::store {

using expert_source::Block;
using expert_source::ExpertId;
using expert_source::Lease;
using expert_source::Priority;

absl::StatusOr<std::unique_ptr<StripedSource>> StripedSource::Create(BlockStore* store,
                                                                     std::string_view model) {
  const StoredModel* m = store->FindModel(model);
  if (m == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("expert store does not hold model '", std::string(model), "'"));
  }
  return std::unique_ptr<StripedSource>(new StripedSource(store, m));
}

uint64_t StripedSource::BlockSize(ExpertId id) const {
  const BlockRecord* b = model_->Find(id.layer, id.expert);
  return b == nullptr ? 0 : b->padded_size;
}

absl::StatusOr<Lease> StripedSource::Fetch(ExpertId id, Priority priority) {
  absl::StatusOr<Lease> out = absl::InternalError("unset");
  RETURN_IF_ERROR(FetchMany(
      std::span<const ExpertId>(&id, 1), [&](size_t, Lease lease) { out = std::move(lease); },
      priority));
  return out;
}

absl::Status StripedSource::FetchMany(std::span<const ExpertId> ids,
                                      const std::function<void(size_t, Lease)>& on_ready,
                                      Priority priority) {
  struct Slot {
    std::shared_ptr<Block> block;
    absl::Status status;
    bool done = false;
    bool handed = false;
  };
  std::vector<Slot> slots(ids.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t outstanding = 0;
  absl::Status first_error;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSIGN_OR_RETURN(const BlockRecord* rec,
                     store_->FindBlock(model_->name(), ids[i].layer, ids[i].expert));
    auto block = std::make_shared<Block>();
    block->id = ids[i];
    block->size = rec->size;
    // Pooled memory: its pages are already mapped (a fresh allocation would fault in every
    // page during the DMA).
    auto bytes = BufferPool::Default().Get(rec->padded_size);
    if (!bytes.ok()) {
      first_error = bytes.status();
      break;
    }
    block->external = bytes->get();
    block->external_owner = std::move(*bytes);
    slots[i].block = block;
    {
      std::lock_guard<std::mutex> lock(mu);
      outstanding++;
    }
    store_->ReadInto(*model_, *rec, const_cast<uint8_t*>(block->external), priority,
                     [&, i](absl::Status s) {
                       std::lock_guard<std::mutex> lock(mu);
                       slots[i].status = std::move(s);
                       slots[i].done = true;
                       outstanding--;
                       cv.notify_all();
                     });
  }
  // Hand blocks out as they land; on an error keep waiting for the rest (they write into
  // buffers this frame owns) but hand out nothing more.
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    size_t ready = slots.size();
    cv.wait(lock, [&] {
      for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].done && !slots[i].handed) {
          ready = i;
          return true;
        }
      }
      return outstanding == 0;
    });
    if (ready == slots.size()) break;
    Slot& s = slots[ready];
    s.handed = true;
    if (!s.status.ok() || !first_error.ok()) {
      if (first_error.ok()) first_error = s.status;
      continue;
    }
    lock.unlock();
    on_ready(ready, Lease(std::move(s.block)));
    lock.lock();
  }
  return first_error;
}

}  // namespace colibri::store
