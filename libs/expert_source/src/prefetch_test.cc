// Prefetch through a CacheTier with reader threads: background reads, promotion, cancellation,
// protection of predicted blocks, and the accounting of what prefetch cost and saved.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "colibri/core/testing/wait.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/testing/recording_source.h"

namespace colibri::expert_source {
namespace {

using testing::RecordingSource;
constexpr auto kDeadline = std::chrono::seconds(10);
const ExpertId kA{0, 0}, kB{0, 1}, kC{1, 0}, kD{1, 1}, kE{2, 0};

auto Deadline() { return std::chrono::steady_clock::now() + kDeadline; }

bool WaitUntil(const std::function<bool()>& done) {
  return ::colibri::testing::WaitUntil(done, kDeadline);
}

CacheTierOptions Options(uint64_t capacity, int io_threads = 2) {
  CacheTierOptions o;
  o.capacity_bytes = capacity;
  o.io_threads = io_threads;
  return o;
}

TEST(Prefetch, ReadsInTheBackgroundAndTheDemandHits) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000));
  const std::vector<ExpertId> ids = {kA, kB};
  tier.Prefetch(ids);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_TRUE(tier.Contains(kB));
  EXPECT_EQ(src.PrioritiesOf(kA), std::vector<Priority>({Priority::kPrefetch}));
  auto a = tier.Fetch(kA, Priority::kDemand);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->data()[0], RecordingSource::Fill(kA));
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.prefetch_requested, 2u);
  EXPECT_EQ(s.prefetch_reads, 2u);
  EXPECT_EQ(s.prefetch_bytes, 200u);
  EXPECT_EQ(s.prefetch_used, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(src.Count(kA), 1u);
}

TEST(Prefetch, DemandJoinsAPrefetchInFlight) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000));
  src.Gate(kA);
  const std::vector<ExpertId> ids = {kA};
  tier.Prefetch(ids);
  ASSERT_TRUE(src.WaitForFetch(kA));
  absl::StatusOr<Lease> got = absl::UnknownError("not run");
  std::thread t([&] { got = tier.Fetch(kA, Priority::kDemand); });
  // The demand request joins the read (observable through the stats), then the read lands.
  ASSERT_TRUE(WaitUntil([&] { return tier.Stats().in_flight_hits > 0; }));
  src.Open(kA);
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(src.Count(kA), 1u);
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.in_flight_hits, 1u);
  EXPECT_EQ(s.prefetch_used, 1u);
  EXPECT_EQ(s.misses, 0u);
}

TEST(Prefetch, DemandPromotesAQueuedPrefetch) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, /*io_threads=*/1));
  src.Gate(kA);
  const std::vector<ExpertId> first = {kA}, second = {kB};
  tier.Prefetch(first);
  ASSERT_TRUE(src.WaitForFetch(kA));  // the only reader is busy with A
  tier.Prefetch(second);              // B waits in the queue
  absl::StatusOr<Lease> got = absl::UnknownError("not run");
  std::thread t([&] { got = tier.Fetch(kB, Priority::kDemand); });
  ASSERT_TRUE(WaitUntil([&] { return tier.Stats().prefetch_promoted > 0; }));
  src.Open(kA);
  t.join();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(tier.Stats().misses, 1u);  // it waited for a whole read
  EXPECT_EQ(tier.Stats().in_flight_hits, 0u);
  // B was read once, at demand priority.
  EXPECT_EQ(src.PrioritiesOf(kB), std::vector<Priority>({Priority::kDemand}));
  EXPECT_EQ(tier.Stats().prefetch_reads, 1u);  // only A ran as a prefetch
}

TEST(Prefetch, CancelDropsQueuedReads) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, /*io_threads=*/1));
  src.Gate(kA);
  const std::vector<ExpertId> ids = {kA, kB, kC};
  tier.Prefetch(ids);
  ASSERT_TRUE(src.WaitForFetch(kA));
  const std::vector<ExpertId> cancel = {kB};
  tier.Cancel(cancel);
  src.Open(kA);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_EQ(src.Count(kB), 0u);
  EXPECT_EQ(src.Count(kC), 1u);
  EXPECT_FALSE(tier.Contains(kB));
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.prefetch_cancelled, 1u);
  EXPECT_EQ(s.prefetch_reads, 2u);
}

TEST(Prefetch, CancelledUnusedBlocksGoFirstAndCountAsWasted) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(300));
  ASSERT_TRUE(tier.Fetch(kA, Priority::kDemand).ok());
  ASSERT_TRUE(tier.Fetch(kB, Priority::kDemand).ok());
  const std::vector<ExpertId> ids = {kC};
  tier.Prefetch(ids);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  tier.Cancel(ids);                                     // the routing did not pick C
  ASSERT_TRUE(tier.Fetch(kD, Priority::kDemand).ok());  // needs one block of room
  EXPECT_FALSE(tier.Contains(kC));                      // the LRU block (A) stays: C was demoted
  EXPECT_TRUE(tier.Contains(kA));
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.prefetch_wasted_bytes, 100u);
  EXPECT_EQ(s.prefetch_used, 0u);
}

TEST(Prefetch, PrefetchNeverEvictsPredictedOrLeasedBlocks) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(200));
  auto a = tier.Fetch(kA, Priority::kDemand);  // leased
  ASSERT_TRUE(a.ok());
  const std::vector<ExpertId> b = {kB};
  tier.Prefetch(b);  // fits
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  const std::vector<ExpertId> c = {kC};
  tier.Prefetch(c);  // would have to evict A (leased) or B (awaiting its use): dropped
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_TRUE(tier.Contains(kB));
  EXPECT_FALSE(tier.Contains(kC));
  EXPECT_EQ(tier.Stats().prefetch_dropped, 1u);
  // A demand read may take the predicted block's room when nothing else is free.
  ASSERT_TRUE(tier.Fetch(kD, Priority::kDemand).ok());
  EXPECT_FALSE(tier.Contains(kB));
  EXPECT_EQ(tier.Stats().prefetch_wasted_bytes, 100u);
}

TEST(Prefetch, ResidentPredictedBlocksAreProtected) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(300));
  for (ExpertId id : {kA, kB, kC}) ASSERT_TRUE(tier.Fetch(id, Priority::kDemand).ok());
  const std::vector<ExpertId> keep = {kA};  // LRU, but predicted for a coming layer
  tier.Prefetch(keep);
  const std::vector<ExpertId> d = {kD};
  tier.Prefetch(d);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_FALSE(tier.Contains(kB));  // the LRU block that nobody predicted
  EXPECT_TRUE(tier.Contains(kD));
}

TEST(Prefetch, QueueIsBounded) {
  RecordingSource src(100);
  CacheTierOptions o = Options(10000, /*io_threads=*/1);
  o.max_queued_prefetches = 2;
  CacheTier tier(&src, o);
  src.Gate(kA);
  const std::vector<ExpertId> first = {kA};
  tier.Prefetch(first);
  ASSERT_TRUE(src.WaitForFetch(kA));
  const std::vector<ExpertId> more = {kB, kC, kD, kE};
  tier.Prefetch(more);
  EXPECT_EQ(tier.Stats().prefetch_dropped, 2u);
  src.Open(kA);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_TRUE(tier.Contains(kB));
  EXPECT_TRUE(tier.Contains(kC));
  EXPECT_FALSE(tier.Contains(kD));
}

TEST(Prefetch, IgnoredWithoutReaderThreads) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, /*io_threads=*/0));
  const std::vector<ExpertId> ids = {kA};
  tier.Prefetch(ids);
  EXPECT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_EQ(src.Count(kA), 0u);
}

TEST(Prefetch, ParallelDemandReadsLandInArrivalOrder) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, /*io_threads=*/3));
  src.Gate(kA);
  const std::vector<ExpertId> ids = {kA, kB, kC};
  std::vector<size_t> order;
  std::atomic<int> delivered{0};
  std::thread opener([&] {
    // A is stuck until B and C have been handed out.
    src.WaitForFetch(kA);
    WaitUntil([&] { return delivered.load() >= 2; });
    src.Open(kA);
  });
  absl::Status st = tier.FetchMany(ids, [&](size_t i, Lease lease) {
    EXPECT_EQ(lease->data()[0], RecordingSource::Fill(ids[i]));
    order.push_back(i);
    delivered++;
  });
  opener.join();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), 0u);  // A landed last
}

}  // namespace
}  // namespace colibri::expert_source

namespace colibri::expert_source {
namespace {

// A source whose reads of gated ids wait until opened; a prefetch read cancelled meanwhile then
// fails Cancelled, as the local reader drops its queued reads.
testing::RecordingSourceOptions Cancellable() {
  testing::RecordingSourceOptions o;
  o.block_size = 100;
  o.cancel_stops_prefetch = true;
  return o;
}

TEST(Prefetch, CancelStopsAReadInProgress) {
  RecordingSource src(Cancellable());
  CacheTier tier(&src, Options(1000));
  src.Gate(kA);
  const std::vector<ExpertId> ids = {kA};
  tier.Prefetch(ids);
  ASSERT_TRUE(src.WaitForReads(1));
  tier.Cancel(ids);
  src.Open(kA);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_FALSE(tier.Contains(kA));
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.prefetch_aborted, 1u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.bytes_cached, 0u);
}

TEST(Prefetch, AStoppedReadThatADemandJoinedIsReadAgain) {
  RecordingSource src(Cancellable());
  CacheTier tier(&src, Options(1000));
  src.Gate(kA);
  const std::vector<ExpertId> ids = {kA};
  tier.Prefetch(ids);
  ASSERT_TRUE(src.WaitForReads(1));
  tier.Cancel(ids);  // passed on: the source will stop the read
  absl::StatusOr<Lease> got = absl::UnknownError("not run");
  std::thread t([&] { got = tier.Fetch(kA, Priority::kDemand); });
  ASSERT_TRUE(
      WaitUntil([&] { return tier.Stats().in_flight_hits > 0; }));  // ...but now it is wanted
  src.Open(kA);
  t.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_EQ(tier.Stats().prefetch_aborted, 0u);
  const auto reads = src.Reads();
  ASSERT_EQ(reads.size(), 2u);  // the stopped prefetch, then a demand read
  EXPECT_EQ(reads[0].second, Priority::kPrefetch);
  EXPECT_EQ(reads[1].second, Priority::kDemand);
}

// Warming (CacheTier::Warm): background reads in order into free room, never evicting.
TEST(Warm, FillsFreeRoomInOrderAndStopsWhenFullWithoutEvicting) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(350, 1));                // one reader: strictly in order
  ASSERT_TRUE(tier.Fetch(kE, Priority::kDemand).ok());  // resident before warming
  const std::vector<ExpertId> order = {kA, kB, kC, kD};
  tier.Warm(order);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_TRUE(tier.Contains(kE));
  EXPECT_TRUE(tier.Contains(kA));
  EXPECT_TRUE(tier.Contains(kB));
  EXPECT_FALSE(tier.Contains(kC));  // 50 bytes of room left: the end of the warming
  EXPECT_FALSE(tier.Contains(kD));
  EXPECT_EQ(src.Count(kC), 0u);
  EXPECT_EQ(src.Count(kD), 0u);
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.warm_reads, 2u);
  EXPECT_EQ(s.warm_bytes, 200u);
  EXPECT_EQ(s.warm_skipped, 2u);
  EXPECT_EQ(s.warm_queued, 0u);
  EXPECT_EQ(s.prefetch_reads, 0u);  // warming is not prefetch
  EXPECT_EQ(src.PrioritiesOf(kA), std::vector<Priority>({Priority::kPrefetch}));
  // Warmed blocks are ordinary residents: the first use is a hit, and evicting one later is not
  // a wasted prefetch.
  ASSERT_TRUE(tier.Fetch(kA, Priority::kDemand).ok());
  EXPECT_EQ(tier.Stats().hits, 1u);
  ASSERT_TRUE(tier.Fetch(kC, Priority::kDemand).ok());
  ASSERT_TRUE(tier.Fetch(kD, Priority::kDemand).ok());
  EXPECT_GT(tier.Stats().evictions, 0u);
  EXPECT_EQ(tier.Stats().prefetch_wasted_bytes, 0u);
}

TEST(Warm, SkipsResidentBlocksAndQueuesBehindDemand) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, 1));
  ASSERT_TRUE(tier.Fetch(kA, Priority::kDemand).ok());
  src.Gate(kB);
  const std::vector<ExpertId> order = {kA, kB, kC, kD};
  tier.Warm(order);  // kA resident: skipped; kB's read blocks the only reader
  ASSERT_TRUE(src.WaitForFetch(kB));
  EXPECT_EQ(tier.Stats().warm_queued, 2u);
  // A demand for a queued warm block becomes a demand read, ahead of the rest of the queue.
  std::thread demand([&] { EXPECT_TRUE(tier.Fetch(kD, Priority::kDemand).ok()); });
  ASSERT_TRUE(WaitUntil([&] { return tier.Stats().warm_queued == 1; }));
  src.Open(kB);
  demand.join();
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  for (ExpertId id : order) EXPECT_TRUE(tier.Contains(id));
  EXPECT_EQ(src.PrioritiesOf(kD), std::vector<Priority>({Priority::kDemand}));
  EXPECT_EQ(src.Count(kA), 1u);
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.warm_reads, 2u);  // kB and kC; kD was read for the demand
  EXPECT_EQ(s.warm_skipped, 1u);
  EXPECT_EQ(s.misses, 2u);  // kA's first fetch and kD
}

TEST(Warm, ClearDropsTheQueueAndNoReadersMeansNoWarming) {
  RecordingSource src(100);
  {
    CacheTier tier(&src, Options(1000, 1));
    src.Gate(kA);
    const std::vector<ExpertId> order = {kA, kB, kC};
    tier.Warm(order);
    ASSERT_TRUE(src.WaitForFetch(kA));
    tier.Clear();
    EXPECT_EQ(tier.Stats().warm_queued, 0u);
    EXPECT_EQ(tier.Stats().warm_skipped, 2u);
    src.Open(kA);
    ASSERT_TRUE(tier.WaitIdle(Deadline()));
    EXPECT_EQ(src.Count(kB), 0u);
    EXPECT_EQ(src.Count(kC), 0u);
  }
  CacheTier inline_tier(&src, Options(1000, 0));
  const std::vector<ExpertId> one = {kD};
  inline_tier.Warm(one);
  EXPECT_EQ(src.Count(kD), 0u);
  EXPECT_EQ(inline_tier.Stats().warm_queued, 0u);
}

// What reaches the source below: one batch per request's misses, prefetches as prefetch
// batches, Promote for a demanded prefetch in flight, Cancel for one no longer wanted.
TEST(CacheTierBatches, AllMissesOfARequestGoDownAsOneDemandBatch) {
  for (int io_threads : {0, 2}) {
    SCOPED_TRACE(io_threads);
    RecordingSource src(100);
    CacheTier tier(&src, Options(1000, io_threads));
    ASSERT_TRUE(tier.Fetch(kB, Priority::kDemand).ok());
    const std::vector<ExpertId> ids = {kA, kB, kC, kD};
    std::set<size_t> got;
    ASSERT_TRUE(tier.FetchMany(ids, [&](size_t i, Lease) { got.insert(i); }).ok());
    EXPECT_EQ(got, std::set<size_t>({0, 1, 2, 3}));
    const auto batches = src.Batches();
    ASSERT_EQ(batches.size(), 2u);  // kB's own, then this request's three misses
    EXPECT_EQ(batches[1], std::vector<ExpertId>({kA, kC, kD}));
    EXPECT_EQ(src.BatchPriorities(), std::vector<Priority>({Priority::kDemand, Priority::kDemand}));
    for (const auto& call : src.Calls()) EXPECT_EQ(call.call, testing::Call::kBatch);
  }
}

TEST(CacheTierBatches, PrefetchesGoDownAsAPrefetchBatch) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, /*io_threads=*/3));  // two prefetch reads at once
  const std::vector<ExpertId> ids = {kA, kB};
  tier.Prefetch(ids);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_EQ(src.Batches(), std::vector<std::vector<ExpertId>>({{kA, kB}}));
  EXPECT_EQ(src.BatchPriorities(), std::vector<Priority>({Priority::kPrefetch}));
  EXPECT_EQ(tier.Stats().prefetch_reads, 2u);
}

TEST(CacheTierBatches, PromoteAndCancelOfReadsInFlightReachTheSource) {
  RecordingSource src(100);
  CacheTier tier(&src, Options(1000, /*io_threads=*/1));
  src.Gate(kA);
  const std::vector<ExpertId> a = {kA}, b = {kB};
  tier.Prefetch(a);
  ASSERT_TRUE(src.WaitForFetch(kA));
  tier.Prefetch(b);  // queued behind A
  std::thread demand([&] { EXPECT_TRUE(tier.Fetch(kA, Priority::kDemand).ok()); });
  ASSERT_TRUE(src.WaitForPromoted(1));
  EXPECT_EQ(src.Promoted(), std::vector<ExpertId>({kA}));
  tier.Cancel(b);  // queued: dropped here, nothing to tell the source
  EXPECT_TRUE(src.Cancelled().empty());
  src.Open(kA);
  demand.join();
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  src.Gate(kC);
  const std::vector<ExpertId> c = {kC};
  tier.Prefetch(c);
  ASSERT_TRUE(src.WaitForFetch(kC));
  tier.Cancel(c);  // being read: the source is told
  EXPECT_EQ(src.Cancelled(), std::vector<ExpertId>({kC}));
  src.Open(kC);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_EQ(src.Count(kB), 0u);
  EXPECT_EQ(tier.Stats().prefetch_cancelled, 1u);
}

TEST(CacheTierBatches, TheOtherBlocksOfAStoppedPrefetchBatchAreReadAgain) {
  RecordingSource src(Cancellable());
  CacheTier tier(&src, Options(1000, /*io_threads=*/3));
  src.Gate(kA);
  src.Gate(kB);
  const std::vector<ExpertId> ids = {kA, kB};
  tier.Prefetch(ids);
  ASSERT_TRUE(src.WaitForReads(2));
  const std::vector<ExpertId> wrong = {kA};
  tier.Cancel(wrong);
  src.Open(kA);  // the source stops A, and with it the batch
  src.Open(kB);
  ASSERT_TRUE(tier.WaitIdle(Deadline()));
  EXPECT_FALSE(tier.Contains(kA));
  EXPECT_TRUE(tier.Contains(kB));
  EXPECT_EQ(src.Count(kB), 2u);
  EXPECT_EQ(src.PrioritiesOf(kB),
            std::vector<Priority>({Priority::kPrefetch, Priority::kPrefetch}));
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.prefetch_aborted, 1u);
  EXPECT_EQ(s.prefetch_reads, 2u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.bytes_cached, 100u);
}

}  // namespace
}  // namespace colibri::expert_source
