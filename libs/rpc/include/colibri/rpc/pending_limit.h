// A cap on the requests a service holds at once (queued and running): past it a new request is
// refused at once with RESOURCE_EXHAUSTED instead of waiting in an unbounded executor queue.
// TryAcquire hands out a ticket that gives its place back when destroyed (shared, so it can
// ride in the std::function a reactor's producer is). Thread-safe.
#pragma once

#include <atomic>
#include <memory>

namespace colibri::rpc {

class PendingLimit {
 public:
  explicit PendingLimit(int max_pending) : max_(max_pending) {}

  class Ticket {
   public:
    explicit Ticket(std::atomic<int>* count) : count_(count) {}
    ~Ticket() { count_->fetch_sub(1); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    std::atomic<int>* count_;
  };

  // Null when `max_pending` requests are already held.
  std::shared_ptr<Ticket> TryAcquire() {
    if (count_.fetch_add(1) >= max_) {
      count_.fetch_sub(1);
      return nullptr;
    }
    return std::make_shared<Ticket>(&count_);
  }

  int pending() const { return count_.load(); }
  int limit() const { return max_; }

 private:
  const int max_;
  std::atomic<int> count_{0};
};

}  // namespace colibri::rpc
