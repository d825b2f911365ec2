// A fixed-size pool of worker threads for data-parallel kernels (ParallelFor) and background
// tasks (Submit). Thread-safe. The destructor drains queued tasks and joins the workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
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
  // Chunks are at least `grain` long. At most `max_threads` threads take part (the caller
  // included; 0: all of the pool's). Must not be called from inside another ParallelFor.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                   int max_threads = 0);

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
// The cores this process may actually run on, at least 1: the physical cores among the CPUs of
// its affinity mask (taskset, cpusets), capped by its cgroup's CPU quota rounded up (cgroup v2
// cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us). The default worker count: a container held
// to 2 CPUs on a 64-core host runs 2 workers, not 64 that the quota then throttles in turn.
int UsableCoreCount();
// Distinct (physical id, core id) pairs in the text of a /proc/cpuinfo; 0 when it names none.
// With `allowed` non-empty, only the processors numbered in it count.
int CountPhysicalCores(std::string_view cpuinfo, const std::set<int>& allowed = {});
// A cgroup v2 cpu.max ("max 100000", "150000 100000") as cores (quota / period); 0 when
// unlimited or malformed.
double CgroupV2CpuLimit(std::string_view cpu_max);
// cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us as cores; 0 when unlimited (-1) or malformed.
double CgroupV1CpuLimit(std::string_view quota_us, std::string_view period_us);
// The process's cgroup v2 path from the text of /proc/self/cgroup (its "0::/path" line), or ""
// when it has none (cgroup v1 only).
std::string CgroupV2Path(std::string_view proc_self_cgroup);

}  // namespace colibri
