#include "bench_measure.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "colibri/core/block_arena.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"
#include "colibri/store/striped_source.h"

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
  const auto& m = container.manifest();
  if (m.experts.empty())
    return absl::InvalidArgumentError("the model has no expert blocks to read");
  threads = std::max(1, threads);
  const uint64_t block = m.experts[0].padded_size;
  // Blocks in flight live in arena slots: `threads` of them, as many as can be read at once.
  ASSIGN_OR_RETURN(auto arena,
                   BlockArena::Create(static_cast<uint64_t>(threads) * block, {.prefault = true}));
  ASSIGN_OR_RETURN(auto disk, store::StripedSource::OpenLocal(&container, {.direct_io = true},
                                                              {.arena = arena.get()}));
  const int64_t n = std::max<int64_t>(
      threads, static_cast<int64_t>(gib * (1ull << 30) / static_cast<double>(block)));
  std::vector<es::ExpertId> order;
  std::mt19937 rng(3);
  for (int64_t i = 0; i < n; ++i) {
    const auto& b = m.experts[rng() % m.experts.size()];
    order.push_back(b.id);
  }
  const double t0 = Now();
  RETURN_IF_ERROR(disk->FetchMany(
      order, [](size_t, es::Lease) {}, es::Priority::kDemand));
  const double seconds = Now() - t0;
  const store::DiskStats st = disk->store().io().Stats(0);
  return DiskReadResult{st.bytes, seconds, st.direct};
}

}  // namespace colibri::bench
