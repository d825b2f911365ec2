#include "colibri/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>

namespace colibri {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `done()` or `budget` has passed; true if done() became true. Kernels of a forward
// pass come back to back, microseconds apart, and a futex sleep + wake-up costs tens of
// microseconds on a VM: a short spin keeps a pool that is in use awake.
template <typename Done>
bool SpinUntil(Done done, std::chrono::microseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (int i = 0;; ++i) {
    if (done()) return true;
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

constexpr std::chrono::microseconds kSpin{100};

}  // namespace

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0 || stopping_.load(); },
              kSpin);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_ and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

void ThreadPool::Submit(std::function<void()> task) {
  if (workers_.empty()) {
    task();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t participants = std::min<int64_t>(num_threads_, max_chunks);
  if (participants <= 1) {
    fn(0, n);
    return;
  }
  // Dynamic chunks (several per participant, handed out by an atomic counter): a thread that
  // shares its core with another process does less of the work instead of making every
  // ParallelFor wait for it, which a static split would (measured: 2-thread decode fell below
  // 1-thread decode on a loaded 2-core machine).
  //
  // Nor does the caller wait for a worker that has not started yet (descheduled, or busy with a
  // background task): once every chunk is taken the call is closed, a helper task that starts
  // later finds it closed and returns without touching `fn`, and the caller waits only for the
  // helpers that joined before. The handshake is sequentially consistent: a helper counts itself
  // in `joined` and then reads `closed`; the caller sets `closed` and then waits for `joined` to
  // drain, so either the caller sees the helper or the helper sees the close. The state is
  // shared, not on the stack: a late helper touches it after the caller has returned.
  struct Call {
    std::atomic<int64_t> next{0};
    std::atomic<int> joined{0};
    std::atomic<bool> closed{false};
    std::mutex mu;
    std::condition_variable cv;
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0, chunks = 0;
    void Work() {
      for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1))
        (*fn)(n * c / chunks, n * (c + 1) / chunks);
    }
  };
  auto call = std::make_shared<Call>();
  call->fn = &fn;
  call->n = n;
  call->chunks = std::min<int64_t>(max_chunks, participants * 4);
  for (int64_t p = 1; p < participants; ++p) {
    Submit([call] {
      call->joined.fetch_add(1);
      if (!call->closed.load()) call->Work();
      // Under the lock: the caller waits on cv with it, and must not miss the last leave.
      std::lock_guard<std::mutex> lock(call->mu);
      if (call->joined.fetch_sub(1) == 1) call->cv.notify_one();
    });
  }
  call->Work();
  call->closed.store(true);
  if (SpinUntil([&] { return call->joined.load() == 0; }, kSpin)) return;
  std::unique_lock<std::mutex> lock(call->mu);
  call->cv.wait(lock, [&] { return call->joined.load() == 0; });
}

int CountPhysicalCores(std::string_view cpuinfo) {
  std::set<std::pair<std::string_view, std::string_view>> cores;
  std::string_view physical_id;
  while (!cpuinfo.empty()) {
    const size_t eol = cpuinfo.find('\n');
    std::string_view line = cpuinfo.substr(0, eol);
    cpuinfo = eol == std::string_view::npos ? std::string_view() : cpuinfo.substr(eol + 1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    auto trim = [](std::string_view v) {
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
      return v;
    };
    const std::string_view key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "processor") physical_id = {};
    if (key == "physical id") physical_id = value;
    if (key == "core id") cores.insert({physical_id, value});
  }
  return static_cast<int>(cores.size());
}

int PhysicalCoreCount() {
  std::ifstream in("/proc/cpuinfo");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const int cores = CountPhysicalCores(text); cores > 0) return cores;
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

}  // namespace colibri
