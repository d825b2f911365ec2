// A server-streaming reactor fed by a producer running on our own executor (never inside a
// reaction). The producer pushes messages; the reactor keeps one write in flight and drains
// the queue from OnWriteDone. Push() blocks while more than `max_queued` messages wait (back-
// pressure on the producer) and returns false once the client is gone, so the producer can stop.
// The reactor deletes itself after gRPC's OnDone and the producer's return, whichever is last.
// cancel_token() is cancelled as soon as the client cancels or goes away (or a write fails): the
// producer hands it to its work (the engine checks it while queued and between prefill chunks),
// so a client that leaves before the first token stops the work at once.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "colibri/core/cancel.h"
#include "colibri/core/thread_pool.h"
#include "grpcpp/grpcpp.h"

namespace colibri::rpc {

template <class Response>
class QueuedWriteReactor final : public grpc::ServerWriteReactor<Response> {
 public:
  using Producer = std::function<grpc::Status(QueuedWriteReactor*)>;

  QueuedWriteReactor(ThreadPool* executor, Producer produce, size_t max_queued = 1024)
      : max_queued_(max_queued) {
    executor->Submit([this, produce = std::move(produce)] {
      grpc::Status status = produce(this);
      bool last;
      {
        std::lock_guard<std::mutex> lock(mu_);
        final_status_ = status;
        producer_done_ = true;
        WriteNextLocked();
        last = done_;
      }
      if (last) delete this;
    });
  }

  // Queues a message; false when the client cancelled or a write failed.
  bool Push(Response msg) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return broken_ || queue_.size() < max_queued_; });
    if (broken_) return false;
    queue_.push_back(std::move(msg));
    WriteNextLocked();
    return true;
  }

  const CancelToken& cancel_token() const { return cancel_; }

  bool broken() const {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      queue_.pop_front();
      if (!ok) broken_ = true;
      cv_.notify_all();
      WriteNextLocked();
    }
    if (!ok) cancel_->Cancel();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = true;
      cv_.notify_all();
      WriteNextLocked();
    }
    cancel_->Cancel();
  }

  void OnDone() override {
    bool last;
    CancelToken cancel = cancel_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      broken_ = true;
      cv_.notify_all();
      last = producer_done_;
    }
    cancel->Cancel();  // callbacks run outside our lock (no-op when nothing is waiting)
    if (last) delete this;
  }

 private:
  // Starts the next write, or finishes once the producer returned and the queue is drained
  // (or the client is gone). Finish always waits for the producer, so OnDone comes after it.
  void WriteNextLocked() {
    if (writing_ || finished_) return;
    if (!broken_ && !queue_.empty()) {
      writing_ = true;
      this->StartWrite(&queue_.front());
      return;
    }
    if (!producer_done_) return;
    finished_ = true;
    this->Finish(broken_ && final_status_.ok()
                     ? grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")
                     : final_status_);
  }

  const size_t max_queued_;
  const CancelToken cancel_ = std::make_shared<CancelFlag>();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Response> queue_;  // front is in flight while writing_
  grpc::Status final_status_;
  bool writing_ = false, broken_ = false, finished_ = false, producer_done_ = false, done_ = false;
};

}  // namespace colibri::rpc
