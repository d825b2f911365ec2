// A one-way cancel signal between whoever watches a client (an HTTP connection, a gRPC stream)
// and the work done for it: the engine's scheduler checks it at admission and before every
// step (so a client that leaves while queued or during a long prefill stops its work at once),
// and a gRPC client call registers a callback that cancels its own call to the next hop.
//
// Thread-safe. Cancel() is idempotent; callbacks run once, on the thread that cancels (or at
// once in OnCancel when already cancelled), outside the flag's lock. A registration must be
// removed (Remove, or the Registration's destructor) before whatever the callback uses dies.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace colibri {

class CancelFlag {
 public:
  class Registration {
   public:
    Registration() = default;
    Registration(std::shared_ptr<CancelFlag> flag, uint64_t id) : flag_(std::move(flag)), id_(id) {}
    Registration(Registration&& o) noexcept : flag_(std::move(o.flag_)), id_(o.id_) {}
    Registration& operator=(Registration&& o) noexcept {
      Reset();
      flag_ = std::move(o.flag_);
      id_ = o.id_;
      return *this;
    }
    ~Registration() { Reset(); }
    void Reset() {
      if (flag_) flag_->Remove(id_);
      flag_.reset();
    }

   private:
    std::shared_ptr<CancelFlag> flag_;
    uint64_t id_ = 0;
  };

  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  void Cancel() {
    std::map<uint64_t, std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_.exchange(true)) return;
      callbacks.swap(callbacks_);
    }
    for (auto& [id, cb] : callbacks) cb();
  }

  // Runs `cb` when the flag is cancelled (now, if it already is: then the registration is empty).
  static Registration OnCancel(const std::shared_ptr<CancelFlag>& flag, std::function<void()> cb) {
    if (!flag) return {};
    {
      std::lock_guard<std::mutex> lock(flag->mu_);
      if (!flag->cancelled_.load()) {
        const uint64_t id = ++flag->next_id_;
        flag->callbacks_.emplace(id, std::move(cb));
        return Registration(flag, id);
      }
    }
    cb();
    return {};
  }

 private:
  void Remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_.erase(id);
  }

  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::map<uint64_t, std::function<void()>> callbacks_;
  uint64_t next_id_ = 0;
};

using CancelToken = std::shared_ptr<CancelFlag>;

inline bool IsCancelled(const CancelToken& t) { return t && t->cancelled(); }

}  // namespace colibri
