// A fixed-size pool of worker threads for data-parallel kernels (ParallelFor) and background
// tasks (Submit). Thread-safe. The destructor drains queued tasks and joins the workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace colibri {

class ThreadPool {
 public:
  // `num_threads` >= 1. ParallelFor uses the calling thread as one of the workers, so a pool of
  // N threads runs N-1 background threads plus the caller.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n) and returns when all are done.
  // Chunks are at least `grain` long. Must not be called from inside another ParallelFor.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Runs `task` on a background worker (or inline when the pool has one thread).
  void Submit(std::function<void()> task);

 private:
  void WorkerLoop();

  const int num_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::atomic<int> queued_{0};         // tasks_.size(), readable without the lock
  std::atomic<bool> stopping_{false};  // stop_, readable without the lock
  std::vector<std::thread> workers_;
};

// Number of physical cores (distinct core ids in /proc/cpuinfo), falling back to
// std::thread::hardware_concurrency().
int PhysicalCoreCount();
// Distinct (physical id, core id) pairs in the text of a /proc/cpuinfo; 0 when it names none.
int CountPhysicalCores(std::string_view cpuinfo);

}  // namespace colibri
