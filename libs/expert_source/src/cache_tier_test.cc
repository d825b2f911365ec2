#include "colibri/expert_source/cache_tier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/testing/wait.h"
#include "colibri/expert_source/testing/recording_source.h"

namespace colibri::expert_source {

namespace {

constexpr auto kDeadline = std::chrono::seconds(10);

using testing::RecordingSource;
using testing::RecordingSourceOptions;

uint8_t Fill(ExpertId id) { return RecordingSource::Fill(id); }

// The upstream source records every call; its batches land last block first, as a source
// whose reads complete out of order might.
RecordingSourceOptions Upstream(uint64_t block_size) {
  RecordingSourceOptions o;
  o.block_size = block_size;
  o.reverse_batches = true;
  return o;
}

void ExpectBlockOf(const Lease& lease, ExpertId id, uint64_t size) {
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->id.Key(), id.Key());
  ASSERT_EQ(lease->size, size);
  for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(lease->data()[i], Fill(id)) << i;
}

const ExpertId kA{0, 0}, kB{0, 1}, kC{1, 0}, kD{1, 1}, kE{2, 5};

bool WaitUntil(const std::function<bool()>& done) {
  return ::colibri::testing::WaitUntil(done, kDeadline);
}

// The accounting invariants that hold at any moment.
void ExpectConsistent(const CacheTier& cache) {
  const CacheStats s = cache.Stats();
  EXPECT_LE(s.bytes_cached + s.bytes_reserved, s.capacity_bytes);
  EXPECT_LE(s.bytes_leased, s.bytes_cached);
}

TEST(CacheTier, MissThenHit) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 10000);
  auto first = cache.Fetch(kA, Priority::kDemand);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectBlockOf(*first, kA, 1000);
  auto second = cache.Fetch(kA, Priority::kDemand);
  ASSERT_TRUE(second.ok());
  ExpectBlockOf(*second, kA, 1000);
  EXPECT_EQ(second->get()->data(), first->get()->data());  // the cached bytes, not a second read
  EXPECT_EQ(fake.Count(kA), 1u);
  CacheStats s = cache.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.in_flight_hits, 0u);
  EXPECT_EQ(s.lookups(), 2u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.bytes_fetched, 1000u);
  EXPECT_EQ(s.bytes_cached, 1000u);
  EXPECT_EQ(s.blocks_cached, 1u);
  EXPECT_EQ(s.bytes_leased, 1000u);  // `first` and `second` are alive
  EXPECT_EQ(s.capacity_bytes, 10000u);
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_EQ(cache.BlockSize(kA), 1000u);
  first->reset();
  second->reset();
  EXPECT_EQ(cache.Stats().bytes_leased, 0u);  // leases are tracked exactly
}

TEST(CacheTier, EvictsLeastRecentlyUsed) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 3000);  // three blocks
  for (ExpertId id : {kA, kB, kC}) ASSERT_TRUE(cache.Fetch(id, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());  // A becomes the most recent: B is LRU
  ASSERT_TRUE(cache.Fetch(kD, Priority::kDemand).ok());
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_TRUE(cache.Contains(kC));
  EXPECT_TRUE(cache.Contains(kD));
  EXPECT_EQ(cache.Stats().evictions, 1u);

  ASSERT_TRUE(cache.Fetch(kE, Priority::kDemand).ok());  // LRU now: C
  EXPECT_FALSE(cache.Contains(kC));
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_TRUE(cache.Contains(kD));
  EXPECT_TRUE(cache.Contains(kE));

  ASSERT_TRUE(cache.Fetch(kB, Priority::kDemand).ok());  // read again; evicts A
  EXPECT_EQ(fake.Count(kB), 2u);
  EXPECT_FALSE(cache.Contains(kA));
  const CacheStats s = cache.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 6u);
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(s.blocks_cached, 3u);
  EXPECT_EQ(s.bytes_cached, 3000u);
  EXPECT_EQ(s.bytes_fetched, 6000u);
  EXPECT_EQ(fake.TotalReads(), 6u);
  // Resident now: B (layer 0), D (layer 1), E (layer 2), counted per layer through evictions.
  EXPECT_EQ(cache.ResidentInLayer(0), 1);
  EXPECT_EQ(cache.ResidentInLayer(1), 1);
  EXPECT_EQ(cache.ResidentInLayer(2), 1);
  EXPECT_EQ(cache.ResidentInLayer(3), 0);
  EXPECT_EQ(cache.ResidentInLayer(-1), 0);
  EXPECT_EQ(cache.ResidentInLayer(1 << 20), 0);
}

TEST(CacheTier, BytesNeverExceedCapacity) {
  RecordingSource fake(Upstream(1000));
  std::mt19937 rng(3);
  std::vector<ExpertId> ids;
  std::map<uint64_t, uint64_t> sizes;
  for (int32_t l = 0; l < 4; ++l) {
    for (int32_t e = 0; e < 6; ++e) {
      ExpertId id{l, e};
      const uint64_t size = 500 + rng() % 2500;
      fake.SetSize(id, size);
      sizes[id.Key()] = size;
      ids.push_back(id);
    }
  }
  const uint64_t capacity = 12000;
  CacheTier cache(&fake, capacity);
  std::vector<Lease> held;  // one lease kept for a while, as a kernel does
  for (int step = 0; step < 400; ++step) {
    const ExpertId id = ids[rng() % ids.size()];
    auto lease = cache.Fetch(id, Priority::kDemand);
    ASSERT_TRUE(lease.ok()) << lease.status() << " at step " << step;
    ExpectBlockOf(*lease, id, sizes[id.Key()]);
    ASSERT_TRUE(cache.Contains(id));  // every block handed out is resident
    if (rng() % 4 == 0) held.push_back(*lease);
    if (held.size() > 1) held.erase(held.begin());
    const CacheStats s = cache.Stats();
    ASSERT_LE(s.bytes_cached + s.bytes_reserved, capacity) << "step " << step;
    uint64_t resident = 0, blocks = 0;
    for (const auto& other : ids) {
      if (cache.Contains(other)) {
        resident += sizes[other.Key()];
        ++blocks;
      }
    }
    ASSERT_EQ(s.bytes_cached, resident) << "step " << step;
    ASSERT_EQ(s.blocks_cached, blocks) << "step " << step;
    ASSERT_EQ(s.lookups(), static_cast<uint64_t>(step + 1));
  }
  EXPECT_GT(cache.Stats().evictions, 0u);
  EXPECT_GT(cache.Stats().hits, 0u);
}

TEST(CacheTier, LeasedBlocksAreNeverEvicted) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 3000);
  auto a = cache.Fetch(kA, Priority::kDemand);  // the LRU block, but leased
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(cache.Fetch(kB, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kD, Priority::kDemand).ok());
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));  // the unleased LRU block went instead
  EXPECT_TRUE(cache.Contains(kC));
  EXPECT_TRUE(cache.Contains(kD));
  ExpectBlockOf(*a, kA, 1000);  // and A's bytes are intact
  EXPECT_EQ(cache.Stats().bytes_leased, 1000u);
}

TEST(CacheTier, DemandWaitsForALeaseToBeDroppedThenGivesUp) {
  RecordingSource fake(Upstream(1000));
  CacheTierOptions options;
  options.name = "ram";
  options.capacity_bytes = 2000;
  options.room_wait = std::chrono::milliseconds(0);
  CacheTier cache(&fake, options);
  auto a = cache.Fetch(kA, Priority::kDemand);
  auto b = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(a.ok() && b.ok());
  // Every resident block is leased and no wait is allowed: ResourceExhausted naming the tier.
  auto c = cache.Fetch(kC, Priority::kDemand);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("ram"), std::string::npos) << c.status();
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_TRUE(cache.Contains(kB));
  ExpectBlockOf(*a, kA, 1000);
  ExpectBlockOf(*b, kB, 1000);
  ExpectConsistent(cache);
  // Once a lease is dropped there is room again.
  a->reset();
  auto c2 = cache.Fetch(kC, Priority::kDemand);
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_FALSE(cache.Contains(kA));
  EXPECT_TRUE(cache.Contains(kB));
  EXPECT_TRUE(cache.Contains(kC));
}

TEST(CacheTier, DemandWaitingForRoomProceedsWhenALeaseIsDropped) {
  RecordingSource fake(Upstream(1000));
  CacheTierOptions options;
  options.capacity_bytes = 2000;
  options.room_wait = std::chrono::seconds(30);
  CacheTier cache(&fake, options);
  auto a = cache.Fetch(kA, Priority::kDemand);
  auto b = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<Lease> c = absl::UnknownError("not run");
  std::thread t([&] { c = cache.Fetch(kC, Priority::kDemand); });
  ASSERT_TRUE(WaitUntil([&] { return cache.Stats().room_waits >= 1; }))
      << "the fetch never waited for room";
  b->reset();  // the waiting read may now evict B
  t.join();
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectBlockOf(*c, kC, 1000);
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_TRUE(cache.Contains(kC));
  EXPECT_EQ(cache.Stats().room_waits, 1u);
  ExpectConsistent(cache);
}

// A demand batch that joins reads in flight and misses a block the tier has no room for: the
// joined blocks land leased to that caller, so they are what fills the tier. The caller must
// take them (and drop them) while it waits for room, not sit on them until the wait times out.
TEST(CacheTier, DemandWaitingForRoomHandsOverTheBlocksItJoined) {
  for (int io_threads : {1, 2}) {
    SCOPED_TRACE(io_threads);
    RecordingSource fake(Upstream(1000));
    CacheTierOptions options;
    options.capacity_bytes = 2500;
    options.io_threads = io_threads;
    options.max_prefetch_reads = 2;
    options.room_wait = std::chrono::seconds(20);
    CacheTier cache(&fake, options);
    fake.Gate(kA);
    fake.Gate(kB);
    const std::vector<ExpertId> pre = {kA, kB};
    cache.Prefetch(pre);
    ASSERT_TRUE(fake.WaitForReads(2)) << "the prefetches never started";
    const std::vector<ExpertId> ids = {kA, kB, kC};
    std::vector<size_t> order;
    absl::Status st = absl::UnknownError("not run");
    const auto start = std::chrono::steady_clock::now();
    std::thread t([&] {
      st = cache.FetchGroups(ids, [&](std::span<std::pair<size_t, Lease>> group) {
        for (auto& [i, lease] : group) {
          ExpectBlockOf(lease, ids[i], 1000);
          order.push_back(i);
        }
      });
    });
    ASSERT_TRUE(WaitUntil([&] { return cache.Stats().room_waits >= 1; }))
        << "C never waited for room";
    fake.Open(kA);
    fake.Open(kB);
    t.join();
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
        << "the wait for room ran to its deadline";
    // Each block once, in the order they landed (C is read once A or B was handed over).
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2}));
    EXPECT_TRUE(cache.Contains(kC));
    EXPECT_EQ(cache.Stats().bytes_leased, 0u);
    ExpectConsistent(cache);
  }
}

TEST(CacheTier, BlockLargerThanTheBudgetFails) {
  RecordingSource fake(Upstream(1000));
  fake.SetSize(kE, 5000);
  CacheTier cache(&fake, 4000);
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
  auto big = cache.Fetch(kE, Priority::kDemand);
  ASSERT_FALSE(big.ok());
  EXPECT_FALSE(cache.Contains(kE));
  EXPECT_TRUE(cache.Contains(kA));  // nothing evicted for a block that can never fit
  EXPECT_EQ(cache.Stats().evictions, 0u);
  ExpectConsistent(cache);
}

TEST(CacheTier, ClearKeepsLeasedBlocks) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 10000);
  auto a = cache.Fetch(kA, Priority::kDemand);
  ASSERT_TRUE(cache.Fetch(kB, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
  EXPECT_EQ(cache.ResidentInLayer(0), 2);  // A, B
  EXPECT_EQ(cache.ResidentInLayer(1), 1);  // C
  const CacheTier::ClearResult cleared = cache.Clear();
  EXPECT_EQ(cleared.blocks, 2u);
  EXPECT_EQ(cache.ResidentInLayer(0), 1);  // A is leased and stays
  EXPECT_EQ(cache.ResidentInLayer(1), 0);
  EXPECT_EQ(cleared.bytes, 2000u);
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_FALSE(cache.Contains(kC));
  CacheStats s = cache.Stats();
  EXPECT_EQ(s.bytes_cached, 1000u);
  EXPECT_EQ(s.blocks_cached, 1u);
  a->reset();
  const CacheTier::ClearResult again = cache.Clear();
  EXPECT_EQ(again.blocks, 1u);
  EXPECT_FALSE(cache.Contains(kA));
  EXPECT_EQ(cache.Stats().bytes_cached, 0u);
  // Still usable afterwards.
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
  EXPECT_EQ(fake.Count(kA), 2u);
}

TEST(CacheTier, LeasesOutliveTheTier) {
  RecordingSource fake(Upstream(1000));
  Lease kept;
  {
    CacheTier cache(&fake, 10000);
    auto a = cache.Fetch(kA, Priority::kDemand);
    ASSERT_TRUE(a.ok());
    kept = *a;
  }
  ExpectBlockOf(kept, kA, 1000);
}

TEST(CacheTier, ErrorsPassThroughAndAreNotCached) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 10000);
  fake.FailOnce(kB);
  auto r = cache.Fetch(kB, Priority::kDemand);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_EQ(cache.Stats().bytes_reserved, 0u);  // the reservation is released
  EXPECT_EQ(cache.Stats().bytes_cached, 0u);
  auto again = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(fake.Count(kB), 2u);
}

TEST(CacheTier, HintsArePassedOn) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 10000);
  const std::vector<RoutingHint> hints = {{kA, 0.75f, 1}, {kB, 0.25f, 0}};
  cache.Hint(hints);
  const std::vector<RoutingHint> got = fake.Hints();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id.Key(), kA.Key());
  EXPECT_FLOAT_EQ(got[0].probability, 0.75f);
  EXPECT_EQ(got[0].selected, 1u);
  EXPECT_EQ(got[1].id.Key(), kB.Key());
}

// Runs Fetch(id) on `n` threads; each signals just before it calls Fetch.
struct Fetchers {
  std::vector<std::thread> threads;
  std::vector<absl::StatusOr<Lease>> results;
  std::mutex mu;
  std::condition_variable cv;
  size_t started = 0;

  void Start(CacheTier* cache, ExpertId id, size_t n) {
    size_t first;
    {
      std::lock_guard<std::mutex> lock(mu);  // earlier threads write results under mu
      first = results.size();
      results.resize(first + n, absl::UnknownError("not run"));
    }
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([this, cache, id, slot = first + i] {
        {
          std::lock_guard<std::mutex> lock(mu);
          ++started;
          cv.notify_all();
        }
        auto r = cache->Fetch(id, Priority::kDemand);
        std::lock_guard<std::mutex> lock(mu);
        results[slot] = std::move(r);
      });
    }
  }
  bool WaitStarted(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kDeadline, [&] { return started >= n; });
  }
  void Join() {
    for (auto& t : threads) t.join();
    threads.clear();
  }
};

TEST(CacheTier, ConcurrentFetchesOfOneExpertAreCoalesced) {
  for (int io_threads : {0, 2}) {
    SCOPED_TRACE(io_threads);
    RecordingSource fake(Upstream(1000));
    CacheTierOptions options;
    options.capacity_bytes = 10000;
    options.io_threads = io_threads;
    CacheTier cache(&fake, options);
    fake.Gate(kC);
    Fetchers f;
    f.Start(&cache, kC, 1);
    ASSERT_TRUE(fake.WaitForReads(1));  // the first read is inside the upstream source
    f.Start(&cache, kC, 5);
    ASSERT_TRUE(f.WaitStarted(6));
    // The five late requests join the read in flight (wait until they have, when observable).
    ASSERT_TRUE(WaitUntil([&] { return cache.Stats().in_flight_hits >= 5; }));
    EXPECT_EQ(cache.Stats().bytes_reserved, 1000u);
    fake.Open(kC);
    f.Join();
    EXPECT_EQ(fake.Count(kC), 1u);
    ASSERT_EQ(f.results.size(), 6u);
    const uint8_t* bytes = nullptr;
    for (const auto& r : f.results) {
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectBlockOf(*r, kC, 1000);
      if (bytes == nullptr) bytes = r->get()->data();
      EXPECT_EQ(r->get()->data(), bytes);  // everyone shares the one block read
    }
    const CacheStats s = cache.Stats();
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.in_flight_hits, 5u);
    EXPECT_EQ(s.bytes_fetched, 1000u);
    EXPECT_EQ(s.bytes_reserved, 0u);
  }
}

TEST(CacheTier, ConcurrentFetchesOfDifferentExpertsDoNotWaitForEachOther) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 10000);
  fake.Gate(kA);
  Fetchers f;
  f.Start(&cache, kA, 1);
  ASSERT_TRUE(fake.WaitForReads(1));
  // While A's read is stuck upstream, B is read and served on this thread.
  auto b = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(b.ok());
  ExpectBlockOf(*b, kB, 1000);
  fake.Open(kA);
  f.Join();
  ASSERT_TRUE(f.results[0].ok());
  ExpectBlockOf(*f.results[0], kA, 1000);
}

TEST(CacheTier, FetchManyHandsHitsFirstThenMissesAndCachesThem) {
  for (int io_threads : {0, 2}) {
    SCOPED_TRACE(io_threads);
    RecordingSource fake(Upstream(1000));
    CacheTierOptions options;
    options.capacity_bytes = 10000;
    options.io_threads = io_threads;
    CacheTier cache(&fake, options);
    ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
    ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
    const std::vector<ExpertId> ids = {kA, kB, kC, kD, kE};
    std::vector<size_t> order;
    absl::Status s = cache.FetchMany(ids, [&](size_t i, Lease lease) {
      ExpectBlockOf(lease, ids[i], 1000);
      order.push_back(i);
    });
    ASSERT_TRUE(s.ok()) << s;
    // The hits, in request order, then each miss once (in the order the reads landed).
    ASSERT_EQ(order.size(), 5u);
    EXPECT_EQ(order[0], 0u);
    EXPECT_EQ(order[1], 2u);
    EXPECT_EQ(std::set<size_t>(order.begin() + 2, order.end()), std::set<size_t>({1, 3, 4}));
    for (ExpertId id : {kB, kD, kE}) {
      EXPECT_EQ(fake.Count(id), 1u);
      EXPECT_TRUE(cache.Contains(id));
    }
    EXPECT_EQ(fake.Count(kA), 1u);  // only its first Fetch
    CacheStats st = cache.Stats();
    EXPECT_EQ(st.hits, 2u);
    EXPECT_EQ(st.misses, 5u);
    EXPECT_EQ(st.blocks_cached, 5u);
    EXPECT_EQ(st.bytes_fetched, 5000u);

    // Everything is a hit now: nothing goes upstream.
    order.clear();
    const size_t reads = fake.TotalReads();
    ASSERT_TRUE(cache.FetchMany(ids, [&](size_t i, Lease) { order.push_back(i); }).ok());
    EXPECT_EQ(order, std::vector<size_t>({0, 1, 2, 3, 4}));
    EXPECT_EQ(fake.TotalReads(), reads);
  }
}

TEST(CacheTier, FetchManyReportsUpstreamErrors) {
  RecordingSource fake(Upstream(1000));
  CacheTier cache(&fake, 10000);
  fake.FailOnce(kB);
  const std::vector<ExpertId> ids = {kB, kD};
  std::set<size_t> seen;
  absl::Status s =
      cache.FetchMany(ids, [&](size_t i, Lease) { EXPECT_TRUE(seen.insert(i).second); });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(seen.count(0), 0u);  // B never handed out
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_EQ(cache.Stats().bytes_reserved, 0u);
}

TEST(CacheTier, FetchGroupsHandsTheHitsOverTogetherThenWhatLandsTogether) {
  RecordingSource fake(Upstream(1000));
  CacheTierOptions options;
  options.capacity_bytes = 10000;
  options.io_threads = 2;
  CacheTier cache(&fake, options);
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
  // D's read waits until B and E have been handed over: it lands alone, in the last group.
  fake.Gate(kD);
  const std::vector<ExpertId> ids = {kA, kB, kC, kD, kE};
  std::vector<std::vector<size_t>> groups;
  std::set<size_t> misses_seen;
  absl::Status s = cache.FetchGroups(ids, [&](std::span<std::pair<size_t, Lease>> group) {
    groups.emplace_back();
    for (auto& [i, lease] : group) {
      ExpectBlockOf(lease, ids[i], 1000);
      groups.back().push_back(i);
      if (i == 1 || i == 4) misses_seen.insert(i);
    }
    if (misses_seen.size() == 2) {
      misses_seen.insert(3);  // open D once only
      fake.Open(kD);
    }
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_GE(groups.size(), 3u);
  EXPECT_EQ(groups.front(), std::vector<size_t>({0, 2}));
  EXPECT_EQ(groups.back(), std::vector<size_t>({3}));
  std::multiset<size_t> middle;
  for (size_t g = 1; g + 1 < groups.size(); ++g) {
    EXPECT_FALSE(groups[g].empty());
    middle.insert(groups[g].begin(), groups[g].end());
  }
  EXPECT_EQ(middle, std::multiset<size_t>({1, 4}));

  // Everything resident: one group, in request order.
  groups.clear();
  ASSERT_TRUE(cache
                  .FetchGroups(ids,
                               [&](std::span<std::pair<size_t, Lease>> group) {
                                 groups.emplace_back();
                                 for (auto& [i, lease] : group) groups.back().push_back(i);
                               })
                  .ok());
  EXPECT_EQ(groups, std::vector<std::vector<size_t>>({{0, 1, 2, 3, 4}}));
}

TEST(ExpertSource, FetchGroupsDefaultsToOneBlockPerGroupInArrivalOrder) {
  RecordingSource fake(Upstream(1000));
  const std::vector<ExpertId> ids = {kA, kB, kC};
  std::vector<std::vector<size_t>> groups;
  ASSERT_TRUE(fake.FetchGroups(ids,
                               [&](std::span<std::pair<size_t, Lease>> group) {
                                 groups.emplace_back();
                                 for (auto& [i, lease] : group) {
                                   ExpectBlockOf(lease, ids[i], 1000);
                                   groups.back().push_back(i);
                                 }
                               })
                  .ok());
  // The fake delivers its batch in reverse order.
  EXPECT_EQ(groups, std::vector<std::vector<size_t>>({{2}, {1}, {0}}));
}

}  // namespace
}  // namespace colibri::expert_source
