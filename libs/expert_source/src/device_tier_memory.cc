#include "colibri/expert_source/device_tier_memory.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/backend/backend.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/expert_label.h"

namespace colibri::expert_source {
namespace {
constexpr std::chrono::milliseconds kSlotWait{30000};
}  // namespace

struct DeviceTierMemory::State {
  backend::Backend* backend = nullptr;
  std::unique_ptr<backend::Buffer> arena;
  uint64_t slot_bytes = 0;
  std::mutex mu;
  std::condition_variable released;
  std::deque<uint64_t>
      free;  // FIFO: the slot freed longest ago is the likeliest to be past its fence
  std::vector<std::unique_ptr<backend::Fence>> fences;  // per slot: the last readers' fence
  DeviceTierStats stats;

  uint8_t* SlotAddress(uint64_t slot) const {
    return static_cast<uint8_t*>(arena->data()) + slot * slot_bytes;
  }
  void Release(uint64_t slot) {
    std::unique_ptr<backend::Fence> fence = backend->RecordFence();
    std::lock_guard<std::mutex> lock(mu);
    fences[slot] = std::move(fence);
    free.push_back(slot);
    stats.slots_used--;
    released.notify_one();
  }
};

absl::StatusOr<std::unique_ptr<DeviceTierMemory>> DeviceTierMemory::Create(
    backend::Backend* backend, const DeviceTierMemoryOptions& options) {
  const uint64_t slot = (options.slot_bytes + 255) / 256 * 256;
  if (slot == 0) return absl::InvalidArgumentError("device tier memory: the slot size is 0");
  const uint64_t slots = options.budget_bytes / slot;
  if (slots < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", options.name, " tier budget ", FormatSize(options.budget_bytes),
                     " holds fewer than two expert blocks of ", FormatSize(slot)));
  }
  auto state = std::make_shared<State>();
  state->backend = backend;
  state->slot_bytes = slot;
  auto arena = backend->Allocate(slots * slot);
  if (!arena.ok()) {
    const backend::MemoryInfo mem = backend->memory_info();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the ", options.name, " tier (", FormatSize(slots * slot), ": ", slots, " experts of ",
        FormatSize(slot), ") does not fit in ", std::string(backend->name()), " memory",
        mem.total_bytes > 0 ? absl::StrCat(" (", FormatSize(mem.free_bytes), " free of ",
                                           FormatSize(mem.total_bytes), ")")
                            : std::string(),
        ": ", arena.status().message()));
  }
  state->arena = std::move(*arena);
  state->fences.resize(slots);
  for (uint64_t i = 0; i < slots; ++i) state->free.push_back(i);
  state->stats.slots = slots;
  state->stats.arena_bytes = slots * slot;
  return std::unique_ptr<DeviceTierMemory>(
      new DeviceTierMemory(options.name, slot, slots, std::move(state)));
}

DeviceTierMemory::DeviceTierMemory(std::string name, uint64_t slot_bytes, uint64_t slots,
                                   std::shared_ptr<State> state)
    : name_(std::move(name)), slot_bytes_(slot_bytes), slots_(slots), s_(std::move(state)) {}

DeviceTierMemory::~DeviceTierMemory() = default;

absl::StatusOr<Lease> DeviceTierMemory::Adopt(const Lease& block) {
  if (block->size > slot_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat(ExpertLabel(block->id), " of ", FormatSize(block->size),
                     " is larger than the ", name_, " tier's slots of ", FormatSize(slot_bytes_)));
  }
  if (block->device != nullptr || block->data() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        ExpertLabel(block->id), " has no host bytes to copy into the ", name_, " tier"));
  }
  State& s = *s_;
  uint64_t slot;
  std::unique_ptr<backend::Fence> fence;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    // The CacheTier charges a slot per block and its capacity is the slot count, so when it
    // starts a read a slot is free or about to be: an evicted block's last lease copy may still
    // be on its way out on another thread (the tier's accounting drops a block as soon as its
    // handed-out leases are released). Wait for that release; never longer than kSlotWait.
    if (!s.released.wait_for(lock, kSlotWait, [&] { return !s.free.empty(); })) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the ", name_, " tier has no free slot of its ", slots_, " after ",
                       kSlotWait.count(), " ms (all leased)"));
    }
    slot = s.free.front();
    s.free.pop_front();
    fence = std::move(s.fences[slot]);
    s.stats.slots_used++;
  }
  auto give_back = [&] {
    std::lock_guard<std::mutex> lock(s.mu);
    s.free.push_front(slot);
    s.stats.slots_used--;
  };
  if (fence != nullptr) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stats.fence_waits++;
    }
    if (absl::Status st = fence->Wait(); !st.ok()) {
      give_back();
      return st;
    }
  }
  uint8_t* dst = s.SlotAddress(slot);
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status st = s.backend->TransferIn(dst, block->data(), block->size); !st.ok()) {
    give_back();
    return absl::Status(st.code(), absl::StrCat(ExpertLabel(block->id), " into the ", name_,
                                                " tier: ", st.message()));
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - start);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stats.uploads++;
    s.stats.bytes_uploaded += block->size;
    s.stats.upload_ns += static_cast<uint64_t>(ns.count());
  }
  auto* copy = new Block();
  copy->id = block->id;
  copy->size = block->size;
  copy->device = dst;
  std::shared_ptr<State> state = s_;
  return Lease(copy, [state, slot](const Block* b) {
    delete b;
    state->Release(slot);
  });
}

DeviceTierStats DeviceTierMemory::Stats() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->stats;
}

}  // namespace colibri::expert_source
