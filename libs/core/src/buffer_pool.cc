#include "colibri/core/buffer_pool.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"

namespace colibri {

struct BufferPool::State {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<uint8_t*>> idle;
  uint64_t idle_bytes = 0;
  uint64_t max_idle_bytes = 0;
  ~State() {
    for (auto& [size, v] : idle) {
      for (uint8_t* p : v) std::free(p);
    }
  }
};

BufferPool::BufferPool(uint64_t max_idle_bytes) : state_(std::make_shared<State>()) {
  state_->max_idle_bytes = max_idle_bytes;
}

BufferPool& BufferPool::Default() {
  static BufferPool* pool = new BufferPool(kDefaultMaxIdleBytes);
  return *pool;
}

absl::StatusOr<std::shared_ptr<uint8_t>> BufferPool::Get(size_t size) {
  size = AlignUp(std::max<size_t>(size, 1), 4096);
  uint8_t* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->idle.find(size);
    if (it != state_->idle.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      state_->idle_bytes -= size;
    }
  }
  if (p == nullptr) {
    void* raw = nullptr;
    if (::posix_memalign(&raw, 4096, size) != 0 || raw == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes"));
    }
    p = static_cast<uint8_t*>(raw);
  }
  return std::shared_ptr<uint8_t>(p, [state = state_, size](uint8_t* q) {
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->idle_bytes + size <= state->max_idle_bytes) {
        state->idle[size].push_back(q);
        state->idle_bytes += size;
        return;
      }
    }
    std::free(q);
  });
}

uint64_t BufferPool::idle_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->idle_bytes;
}

}  // namespace colibri
