#include "colibri/core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "colibri/core/file_util.h"

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
                             const std::function<void(int64_t, int64_t)>& fn, int max_threads) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = max_threads > 0 ? std::min(max_threads, num_threads_) : num_threads_;
  const int64_t participants = std::min<int64_t>(threads, max_chunks);
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

namespace {

// Spaces, tabs and line ends off both ends (cpuinfo's "key\t: value", a file's last newline).
std::string_view TrimSpace(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t' || v.front() == '\n'))
    v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\n'))
    v.remove_suffix(1);
  return v;
}

// A whole decimal integer (optionally negative), or nullopt.
std::optional<int64_t> ParseInt(std::string_view v) {
  v = TrimSpace(v);
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return out;
}

// A /proc or /sys file's text; "" when it cannot be read (no such cgroup file, no /proc).
std::string ReadOrEmpty(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  return text.ok() ? *std::move(text) : std::string();
}

// quota / period as cores; 0 unless both are whole positive numbers.
double QuotaCores(std::string_view quota, std::string_view period) {
  const std::optional<int64_t> q = ParseInt(quota), p = ParseInt(period);
  if (!q || !p || *q <= 0 || *p <= 0) return 0;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

}  // namespace

int CountPhysicalCores(std::string_view cpuinfo, const std::set<int>& allowed) {
  std::set<std::pair<std::string_view, std::string_view>> cores;
  std::string_view physical_id;
  bool counted = true;  // the current processor is in `allowed`
  while (!cpuinfo.empty()) {
    const size_t eol = cpuinfo.find('\n');
    std::string_view line = cpuinfo.substr(0, eol);
    cpuinfo = eol == std::string_view::npos ? std::string_view() : cpuinfo.substr(eol + 1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = TrimSpace(line.substr(0, colon));
    const std::string_view value = TrimSpace(line.substr(colon + 1));
    if (key == "processor") {
      physical_id = {};
      const std::optional<int64_t> number = ParseInt(value);
      counted = allowed.empty() || (number && allowed.contains(static_cast<int>(*number)));
    }
    if (key == "physical id") physical_id = value;
    if (key == "core id" && counted) cores.insert({physical_id, value});
  }
  return static_cast<int>(cores.size());
}

double CgroupV2CpuLimit(std::string_view cpu_max) {
  cpu_max = TrimSpace(cpu_max);
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return 0;
  const std::string_view quota = cpu_max.substr(0, space);
  if (quota == "max") return 0;
  return QuotaCores(quota, cpu_max.substr(space + 1));
}

double CgroupV1CpuLimit(std::string_view quota_us, std::string_view period_us) {
  return QuotaCores(quota_us, period_us);
}

std::string CgroupV2Path(std::string_view proc_self_cgroup) {
  while (!proc_self_cgroup.empty()) {
    const size_t eol = proc_self_cgroup.find('\n');
    const std::string_view line = proc_self_cgroup.substr(0, eol);
    proc_self_cgroup =
        eol == std::string_view::npos ? std::string_view() : proc_self_cgroup.substr(eol + 1);
    if (line.starts_with("0::")) return std::string(TrimSpace(line.substr(3)));
  }
  return "";
}

int PhysicalCoreCount() {
  if (const int cores = CountPhysicalCores(ReadOrEmpty("/proc/cpuinfo")); cores > 0) return cores;
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

namespace {

// The cgroup CPU quota of this process as cores; 0 when there is none (or no cgroup fs).
double CgroupCpuLimit() {
  const std::string v2 = CgroupV2Path(ReadOrEmpty("/proc/self/cgroup"));
  // Inside a cgroup namespace (containers) the process's own group is the mount's root.
  for (const std::string& dir :
       {std::string("/sys/fs/cgroup") + (v2 == "/" ? "" : v2), std::string("/sys/fs/cgroup")}) {
    if (const double limit = CgroupV2CpuLimit(ReadOrEmpty(dir + "/cpu.max")); limit > 0)
      return limit;
  }
  for (const char* dir : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
    const std::string d(dir);
    if (const double limit = CgroupV1CpuLimit(ReadOrEmpty(d + "/cpu.cfs_quota_us"),
                                              ReadOrEmpty(d + "/cpu.cfs_period_us"));
        limit > 0)
      return limit;
  }
  return 0;
}

}  // namespace

int UsableCoreCount() {
  std::set<int> allowed;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mask)) allowed.insert(cpu);
  }
  int cores = CountPhysicalCores(ReadOrEmpty("/proc/cpuinfo"), allowed);
  // No core ids (some VMs, ARM): every allowed logical CPU counts.
  if (cores <= 0 && !allowed.empty()) cores = static_cast<int>(allowed.size());
  if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  if (const double limit = CgroupCpuLimit(); limit > 0)
    cores = std::min(cores, static_cast<int>(std::ceil(limit - 1e-9)));
  return std::max(1, cores);
}

}  // namespace colibri
