#include "bench_measure.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "colibri/core/thread_pool.h"
#include "colibri/expert_source/disk_source.h"

namespace colibri::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double ReadBandwidth(size_t bytes, int threads) {
  std::vector<uint64_t> buf(bytes / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i;
  ThreadPool pool(threads);
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = Now();
    pool.ParallelFor(static_cast<int64_t>(buf.size()), 1 << 16, [&](int64_t b, int64_t e) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += buf[static_cast<size_t>(i)];
        s1 += buf[static_cast<size_t>(i + 1)];
        s2 += buf[static_cast<size_t>(i + 2)];
        s3 += buf[static_cast<size_t>(i + 3)];
      }
      for (; i < e; ++i) s0 += buf[static_cast<size_t>(i)];
      sink += s0 + s1 + s2 + s3;
    });
    best = std::max(best, static_cast<double>(bytes) / (Now() - t0));
  }
  return best;
}

absl::StatusOr<DiskReadResult> ReadExpertBlocks(const model::Container& container, int threads,
                                                double gib) {
  namespace es = expert_source;
  auto disk = es::DiskSource::Open(&container, {.direct_io = true});
  if (!disk.ok()) return disk.status();
  const auto& m = container.manifest();
  if (m.experts.empty())
    return absl::InvalidArgumentError("the model has no expert blocks to read");
  threads = std::max(1, threads);
  const uint64_t block = m.experts[0].padded_size;
  const int64_t n = std::max<int64_t>(
      threads, static_cast<int64_t>(gib * (1ull << 30) / static_cast<double>(block)));
  std::vector<es::ExpertId> order;
  std::mt19937 rng(3);
  for (int64_t i = 0; i < n; ++i) {
    order.push_back({static_cast<int32_t>(rng() % m.config.n_layers),
                     static_cast<int32_t>(rng() % m.config.n_experts)});
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  const double t0 = Now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) {
        if (!(*disk)->Fetch(order[static_cast<size_t>(i)], es::Priority::kDemand).ok())
          failed = true;
      }
    });
  }
  for (auto& t : workers) t.join();
  if (failed)
    return absl::DataLossError("an expert block read failed in " + container.dir().string());
  return DiskReadResult{(*disk)->bytes_read(), Now() - t0, (*disk)->direct_io_files()};
}

}  // namespace colibri::bench
