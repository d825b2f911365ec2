// Test doubles shared by the expert_source tests (not part of the library).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source::testing {

// Blocks of `size` bytes, each filled with a byte derived from its id. Records every Fetch with
// its priority; fetches of gated ids block until Open().
class RecordingSource final : public ExpertSource {
 public:
  explicit RecordingSource(uint64_t size = 1000) : size_(size) {}

  static uint8_t Fill(ExpertId id) { return static_cast<uint8_t>(id.layer * 16 + id.expert + 1); }

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override {
    std::unique_lock<std::mutex> lock(mu_);
    fetches_.push_back({id, priority});
    cv_.notify_all();
    cv_.wait(lock, [&] { return !gated_.count(id.Key()); });
    lock.unlock();
    auto block = std::make_shared<Block>();
    block->id = id;
    block->size = size_;
    block->bytes = *AllocateAligned(size_, 64);
    std::memset(block->bytes.get(), Fill(id), size_);
    return Lease(std::move(block));
  }
  uint64_t BlockSize(ExpertId) const override { return size_; }

  void Gate(ExpertId id) {
    std::lock_guard<std::mutex> lock(mu_);
    gated_.insert(id.Key());
  }
  void Open(ExpertId id) {
    std::lock_guard<std::mutex> lock(mu_);
    gated_.erase(id.Key());
    cv_.notify_all();
  }
  // Waits until `id` has been asked for `n` times; false after 10 s.
  bool WaitForFetch(ExpertId id, size_t n = 1) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return CountLocked(id) >= n; });
  }
  size_t Count(ExpertId id) const {
    std::lock_guard<std::mutex> lock(mu_);
    return CountLocked(id);
  }
  std::vector<Priority> PrioritiesOf(ExpertId id) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Priority> out;
    for (const auto& f : fetches_) {
      if (f.first == id) out.push_back(f.second);
    }
    return out;
  }

 private:
  size_t CountLocked(ExpertId id) const {
    size_t n = 0;
    for (const auto& f : fetches_) n += f.first == id;
    return n;
  }
  const uint64_t size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::set<uint64_t> gated_;
  std::vector<std::pair<ExpertId, Priority>> fetches_;
};

}  // namespace colibri::expert_source::testing
