#include "colibri/core/block_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"

namespace colibri {
namespace {

constexpr uint64_t kSlotAlign = 4096;
constexpr uint64_t kMapAlign = 2ull << 20;
#ifndef MADV_POPULATE_WRITE
constexpr int kMadvPopulateWrite = 23;  // Linux 5.14
#else
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#endif

uint64_t ReadStatusKib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0) {
      try {
        return std::stoull(line.substr(n)) * 1024;
      } catch (...) {
        return 0;
      }
    }
  }
  return 0;
}

}  // namespace

struct BlockArena::State {
  std::string name;
  uint8_t* base = nullptr;
  uint64_t capacity = 0;
  mutable std::mutex mu;
  std::condition_variable released;
  std::map<uint64_t, uint64_t> free_by_offset;           // offset -> length
  std::set<std::pair<uint64_t, uint64_t>> free_by_size;  // (length, offset)
  BlockArenaStats stats;

  ~State() {
    if (base != nullptr) ::munmap(base, capacity);
  }

  void AddFreeLocked(uint64_t offset, uint64_t length) {
    free_by_offset[offset] = length;
    free_by_size.insert({length, offset});
  }
  void RemoveFreeLocked(std::map<uint64_t, uint64_t>::iterator it) {
    free_by_size.erase({it->second, it->first});
    free_by_offset.erase(it);
  }

  // Best fit: the smallest free range that holds `bytes`; -1 when none does.
  int64_t TakeLocked(uint64_t bytes) {
    auto fit = free_by_size.lower_bound({bytes, 0});
    if (fit == free_by_size.end()) return -1;
    const auto [length, offset] = *fit;
    RemoveFreeLocked(free_by_offset.find(offset));
    if (length > bytes) AddFreeLocked(offset + bytes, length - bytes);
    stats.used_bytes += bytes;
    stats.peak_used_bytes = std::max(stats.peak_used_bytes, stats.used_bytes);
    stats.slots++;
    stats.allocations++;
    return static_cast<int64_t>(offset);
  }

  void Release(uint64_t offset, uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu);
      uint64_t begin = offset, length = bytes;
      auto next = free_by_offset.lower_bound(offset);
      if (next != free_by_offset.end() && next->first == offset + bytes) {
        length += next->second;
        RemoveFreeLocked(next);
      }
      auto prev = free_by_offset.lower_bound(offset);
      if (prev != free_by_offset.begin()) {
        --prev;
        if (prev->first + prev->second == offset) {
          begin = prev->first;
          length += prev->second;
          RemoveFreeLocked(prev);
        }
      }
      AddFreeLocked(begin, length);
      stats.used_bytes -= bytes;
      stats.slots--;
    }
    released.notify_all();
  }

  std::string DescribeLocked() const {
    const uint64_t largest = free_by_size.empty() ? 0 : free_by_size.rbegin()->first;
    return absl::StrCat(name, " of ", FormatSize(capacity), ": ", FormatSize(stats.used_bytes),
                        " in ", stats.slots, " blocks, largest free range ", FormatSize(largest));
  }
};

absl::StatusOr<std::unique_ptr<BlockArena>> BlockArena::Create(uint64_t capacity_bytes,
                                                               BlockArenaOptions options) {
  if (capacity_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": capacity must be positive"));
  }
  auto state = std::make_shared<State>();
  state->name = options.name;
  state->capacity = (capacity_bytes + kMapAlign - 1) / kMapAlign * kMapAlign;
  void* p =
      ::mmap(nullptr, state->capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot reserve the ", options.name, " of ",
                                                     FormatSize(state->capacity), ": ",
                                                     std::strerror(errno)));
  }
  state->base = static_cast<uint8_t*>(p);
  if (options.huge_pages && ::madvise(p, state->capacity, MADV_HUGEPAGE) == 0) {
    state->stats.huge_pages = true;
  }
  if (options.prefault && ::madvise(p, state->capacity, kMadvPopulateWrite) != 0) {
    // Kernels before 5.14: touch one byte per page. A cgroup that cannot hold the arena kills
    // the process here, at start, rather than on its first request.
    const long page = ::sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0; off < state->capacity; off += static_cast<uint64_t>(page)) {
      static_cast<volatile uint8_t*>(p)[off] = 0;
    }
  }
  state->stats.capacity_bytes = state->capacity;
  state->AddFreeLocked(0, state->capacity);
  return std::unique_ptr<BlockArena>(new BlockArena(std::move(state)));
}

BlockArena::~BlockArena() = default;

BlockArena::Slot BlockArena::MakeSlot(const std::shared_ptr<State>& state, uint64_t offset,
                                      uint64_t size) {
  return Slot(state->base + offset,
              [state, offset, size](uint8_t*) { state->Release(offset, size); });
}

absl::StatusOr<BlockArena::Slot> BlockArena::TryAllocate(uint64_t bytes) {
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  std::unique_lock<std::mutex> lock(state_->mu);
  const int64_t off = state_->TakeLocked(size);
  if (off < 0) {
    state_->stats.refused++;
    return absl::ResourceExhaustedError(
        absl::StrCat("no room for ", FormatSize(size), " in the ", state_->DescribeLocked()));
  }
  lock.unlock();
  return MakeSlot(state_, static_cast<uint64_t>(off), size);
}

absl::StatusOr<BlockArena::Slot> BlockArena::Allocate(
    uint64_t bytes, std::chrono::steady_clock::time_point deadline) {
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  std::unique_lock<std::mutex> lock(state_->mu);
  if (size > state_->capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a block of ", FormatSize(size), " is larger than the whole ", state_->DescribeLocked()));
  }
  int64_t off = state_->TakeLocked(size);
  if (off < 0) {
    state_->stats.waits++;
    while (off < 0) {
      if (state_->released.wait_until(lock, deadline) == std::cv_status::timeout) {
        off = state_->TakeLocked(size);
        if (off >= 0) break;
        state_->stats.refused++;
        return absl::ResourceExhaustedError(
            absl::StrCat("waited in vain for room for ", FormatSize(size), " in the ",
                         state_->DescribeLocked(), " (blocks are held by running requests)"));
      }
      off = state_->TakeLocked(size);
    }
  }
  lock.unlock();
  return MakeSlot(state_, static_cast<uint64_t>(off), size);
}

BlockArenaStats BlockArena::Stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  BlockArenaStats s = state_->stats;
  s.largest_free_bytes = state_->free_by_size.empty() ? 0 : state_->free_by_size.rbegin()->first;
  return s;
}

uint64_t BlockArena::capacity_bytes() const { return state_->capacity; }
const std::string& BlockArena::name() const { return state_->name; }

uint64_t ResidentBytes() { return ReadStatusKib("VmRSS:"); }
uint64_t PeakResidentBytes() { return ReadStatusKib("VmHWM:"); }

}  // namespace colibri
