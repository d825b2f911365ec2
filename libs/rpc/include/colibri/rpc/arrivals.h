// Completions of several asynchronous block fetches, handed to the caller's thread in arrival
// order: the FetchMany contract of the store-backed ExpertSources (one place for it).
//
// Slot(i) returns the completion callback of request i; it may run on any thread, also after
// the Arrivals object is gone (the state is shared). Drain() runs on the caller's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"

namespace colibri::rpc {

class Arrivals {
 public:
  Arrivals() : state_(std::make_shared<State>()) {}

  std::function<void(absl::StatusOr<expert_source::Lease>)> Slot(size_t i) const {
    return [state = state_, i](absl::StatusOr<expert_source::Lease> r) {
      std::lock_guard<std::mutex> lock(state->mu);
      state->arrived.emplace_back(i, std::move(r));
      state->cv.notify_all();
    };
  }

  // Waits for `count` completions and calls on_ready(i, lease) for each, in arrival order, with
  // no lock held. Returns the first failed completion's status, or DeadlineExceeded with
  // `timeout_message` when `deadline` passes first; the remaining completions are not handed out.
  // With `skip_cancelled` (a prefetch batch), Cancelled completions are passed over and the
  // first of them returned once the others have been handed out.
  absl::Status Drain(size_t count, std::chrono::steady_clock::time_point deadline,
                     const std::string& timeout_message,
                     const std::function<void(size_t, expert_source::Lease)>& on_ready,
                     bool skip_cancelled = false) {
    absl::Status cancelled;
    std::unique_lock<std::mutex> lock(state_->mu);
    for (size_t handed = 0; handed < count; ++handed) {
      if (!state_->cv.wait_until(lock, deadline, [&] { return !state_->arrived.empty(); })) {
        return absl::DeadlineExceededError(timeout_message);
      }
      auto [i, r] = std::move(state_->arrived.front());
      state_->arrived.pop_front();
      if (skip_cancelled && absl::IsCancelled(r.status())) {
        if (cancelled.ok()) cancelled = r.status();
        continue;
      }
      if (!r.ok()) return r.status();
      lock.unlock();
      on_ready(i, std::move(*r));
      lock.lock();
    }
    return cancelled;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<size_t, absl::StatusOr<expert_source::Lease>>> arrived;
  };
  std::shared_ptr<State> state_;
};

}  // namespace colibri::rpc
