#include "colibri/expert_source/cache_tier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace colibri::expert_source {

void PrintTo(const ExpertId& id, std::ostream* os) { *os << "(layer " << id.layer << ", id " << id.expert << ")"; }

namespace {

constexpr auto kDeadline = std::chrono::seconds(10);

// The byte every position of a fake block holds: derived from its id.
uint8_t Fill(ExpertId id) { return static_cast<uint8_t>(id.layer * 16 + id.expert + 1); }

// An upstream source that records every call. Blocks are `size_of(id)` bytes of Fill(id).
// Fetches of a "gated" id block until Open() is called; ids in `fail_once` fail their next fetch.
class FakeSource final : public ExpertSource {
 public:
  explicit FakeSource(uint64_t default_size = 1000) : default_size_(default_size) {}

  absl::StatusOr<Lease> Fetch(ExpertId id, Priority priority) override {
    std::unique_lock<std::mutex> lock(mu_);
    fetches_.push_back(id);
    priorities_.push_back(priority);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !gated_.count(id.Key()); });
    if (fail_once_.erase(id.Key())) {
      return absl::UnavailableError(absl::StrCat("fake: expert (layer ", id.layer, ", id ", id.expert, ") failed"));
    }
    lock.unlock();
    return MakeLease(id);
  }

  // Delivers misses in reverse order, as a source whose reads complete out of order might.
  absl::Status FetchMany(std::span<const ExpertId> ids, const std::function<void(size_t, Lease)>& on_ready) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      batches_.emplace_back(ids.begin(), ids.end());
    }
    for (size_t k = ids.size(); k-- > 0;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (fail_once_.erase(ids[k].Key())) return absl::UnavailableError("fake: batch read failed");
      }
      on_ready(k, MakeLease(ids[k]));
    }
    return absl::OkStatus();
  }

  uint64_t BlockSize(ExpertId id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return SizeLocked(id);
  }

  void SetSize(ExpertId id, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[id.Key()] = size;
  }
  void Gate(ExpertId id) {
    std::lock_guard<std::mutex> lock(mu_);
    gated_.insert(id.Key());
  }
  void Open(ExpertId id) {
    std::lock_guard<std::mutex> lock(mu_);
    gated_.erase(id.Key());
    cv_.notify_all();
  }
  void FailOnce(ExpertId id) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_once_.insert(id.Key());
  }
  // Waits until `n` Fetch calls have started; false on timeout.
  bool WaitForFetches(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return fetches_.size() >= n; });
  }

  std::vector<ExpertId> fetches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fetches_;
  }
  std::vector<Priority> priorities() const {
    std::lock_guard<std::mutex> lock(mu_);
    return priorities_;
  }
  std::vector<std::vector<ExpertId>> batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  size_t FetchCount(ExpertId id) const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& f : fetches_) n += f == id;
    return n;
  }

 private:
  uint64_t SizeLocked(ExpertId id) const {
    auto it = sizes_.find(id.Key());
    return it == sizes_.end() ? default_size_ : it->second;
  }
  Lease MakeLease(ExpertId id) {
    uint64_t size;
    {
      std::lock_guard<std::mutex> lock(mu_);
      size = SizeLocked(id);
    }
    auto block = std::make_shared<Block>();
    block->id = id;
    block->size = size;
    block->bytes = *AllocateAligned(size, 4096);
    std::memset(block->bytes.get(), Fill(id), size);
    return block;
  }

  const uint64_t default_size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, uint64_t> sizes_;
  std::set<uint64_t> gated_, fail_once_;
  std::vector<ExpertId> fetches_;
  std::vector<Priority> priorities_;
  std::vector<std::vector<ExpertId>> batches_;
};

void ExpectBlockOf(const Lease& lease, ExpertId id, uint64_t size) {
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->id, id);
  ASSERT_EQ(lease->size, size);
  for (uint64_t i = 0; i < size; ++i) ASSERT_EQ(lease->data()[i], Fill(id)) << i;
}

const ExpertId kA{0, 0}, kB{0, 1}, kC{1, 0}, kD{1, 1}, kE{2, 5};

TEST(CacheTier, MissThenHit) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  auto first = cache.Fetch(kA, Priority::kPrefetch);
  ASSERT_TRUE(first.ok());
  ExpectBlockOf(*first, kA, 1000);
  auto second = cache.Fetch(kA, Priority::kDemand);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->get(), first->get());  // the cached block itself, not a copy
  EXPECT_EQ(fake.fetches(), std::vector<ExpertId>({kA}));
  EXPECT_EQ(fake.priorities(), std::vector<Priority>({Priority::kPrefetch}));  // passed through
  const CacheStats s = cache.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.bypasses, 0u);
  EXPECT_EQ(s.bytes_fetched, 1000u);
  EXPECT_EQ(s.bytes_cached, 1000u);
  EXPECT_EQ(s.blocks_cached, 1u);
  EXPECT_EQ(s.capacity_bytes, 10000u);
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_EQ(cache.BlockSize(kA), 1000u);
}

TEST(CacheTier, EvictsLeastRecentlyUsed) {
  FakeSource fake(1000);
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

  ASSERT_TRUE(cache.Fetch(kB, Priority::kDemand).ok());  // refetched from upstream; evicts A
  EXPECT_EQ(fake.FetchCount(kB), 2u);
  EXPECT_FALSE(cache.Contains(kA));
  EXPECT_EQ(fake.fetches(), std::vector<ExpertId>({kA, kB, kC, kD, kE, kB}));
  const CacheStats s = cache.Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 6u);
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(s.blocks_cached, 3u);
  EXPECT_EQ(s.bytes_cached, 3000u);
  EXPECT_EQ(s.bytes_fetched, 6000u);
}

TEST(CacheTier, BytesNeverExceedCapacity) {
  FakeSource fake;
  std::mt19937 rng(3);
  std::vector<ExpertId> ids;
  std::map<uint64_t, uint64_t> sizes;
  for (int32_t l = 0; l < 4; ++l) {
    for (int32_t e = 0; e < 6; ++e) {
      ExpertId id{l, e};
      const uint64_t size = 500 + rng() % 4000;
      fake.SetSize(id, size);
      sizes[id.Key()] = size;
      ids.push_back(id);
    }
  }
  const uint64_t capacity = 12000;
  CacheTier cache(&fake, capacity);
  std::vector<Lease> held;  // a few leases kept for a while, as kernels do
  for (int step = 0; step < 400; ++step) {
    const ExpertId id = ids[rng() % ids.size()];
    auto lease = cache.Fetch(id, Priority::kDemand);
    ASSERT_TRUE(lease.ok());
    ExpectBlockOf(*lease, id, sizes[id.Key()]);
    if (rng() % 4 == 0) held.push_back(*lease);
    if (held.size() > 2) held.erase(held.begin());
    const CacheStats s = cache.Stats();
    ASSERT_LE(s.bytes_cached, capacity) << "step " << step;
    uint64_t resident = 0, blocks = 0;
    for (const auto& other : ids) {
      if (cache.Contains(other)) {
        resident += sizes[other.Key()];
        ++blocks;
      }
    }
    ASSERT_EQ(s.bytes_cached, resident) << "step " << step;
    ASSERT_EQ(s.blocks_cached, blocks) << "step " << step;
    ASSERT_EQ(s.hits + s.misses, static_cast<uint64_t>(step + 1));
  }
  EXPECT_GT(cache.Stats().evictions, 0u);
  EXPECT_GT(cache.Stats().hits, 0u);
}

TEST(CacheTier, LeasedBlocksAreNeverEvicted) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 2000);
  auto a = cache.Fetch(kA, Priority::kDemand);
  auto b = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(a.ok() && b.ok());
  // Both cached blocks are leased: C is handed out uncached.
  auto c = cache.Fetch(kC, Priority::kDemand);
  ASSERT_TRUE(c.ok());
  ExpectBlockOf(*c, kC, 1000);
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_TRUE(cache.Contains(kB));
  EXPECT_FALSE(cache.Contains(kC));
  CacheStats s = cache.Stats();
  EXPECT_EQ(s.bypasses, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.bytes_cached, 2000u);
  // The leased bytes are intact.
  ExpectBlockOf(*a, kA, 1000);
  ExpectBlockOf(*b, kB, 1000);

  // Once A's lease is dropped it is the one evicted, even though A is older than B.
  a->reset();
  auto d = cache.Fetch(kD, Priority::kDemand);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(cache.Contains(kA));
  EXPECT_TRUE(cache.Contains(kB));
  EXPECT_TRUE(cache.Contains(kD));
  s = cache.Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.bypasses, 1u);
  EXPECT_EQ(s.bytes_cached, 2000u);
}

TEST(CacheTier, LeasedLruBlockIsSkippedForAnUnleasedOne) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 2000);
  auto a = cache.Fetch(kA, Priority::kDemand);  // LRU, but leased
  ASSERT_TRUE(cache.Fetch(kB, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_TRUE(cache.Contains(kC));
  EXPECT_EQ(cache.Stats().bypasses, 0u);
}

TEST(CacheTier, BlockLargerThanCapacityBypasses) {
  FakeSource fake(1000);
  fake.SetSize(kE, 5000);
  CacheTier cache(&fake, 4000);
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
  auto big = cache.Fetch(kE, Priority::kDemand);
  ASSERT_TRUE(big.ok());
  ExpectBlockOf(*big, kE, 5000);
  EXPECT_FALSE(cache.Contains(kE));
  EXPECT_TRUE(cache.Contains(kA));  // nothing evicted for a block that can never fit
  EXPECT_EQ(cache.Stats().bypasses, 1u);
  EXPECT_EQ(cache.Stats().evictions, 0u);
}

TEST(CacheTier, ClearKeepsLeasedBlocks) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  auto a = cache.Fetch(kA, Priority::kDemand);
  ASSERT_TRUE(cache.Fetch(kB, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
  cache.Clear();
  EXPECT_TRUE(cache.Contains(kA));
  EXPECT_FALSE(cache.Contains(kB));
  EXPECT_FALSE(cache.Contains(kC));
  CacheStats s = cache.Stats();
  EXPECT_EQ(s.bytes_cached, 1000u);
  EXPECT_EQ(s.blocks_cached, 1u);
  EXPECT_EQ(s.evictions, 0u);  // Clear is not eviction
  a->reset();
  cache.Clear();
  EXPECT_FALSE(cache.Contains(kA));
  EXPECT_EQ(cache.Stats().bytes_cached, 0u);
  // Still usable afterwards.
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
  EXPECT_EQ(fake.FetchCount(kA), 2u);
}

TEST(CacheTier, ErrorsPassThroughAndAreNotCached) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  fake.FailOnce(kB);
  auto r = cache.Fetch(kB, Priority::kDemand);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(cache.Contains(kB));
  auto again = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(fake.FetchCount(kB), 2u);
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
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  fake.Gate(kC);
  Fetchers f;
  f.Start(&cache, kC, 1);
  ASSERT_TRUE(fake.WaitForFetches(1));  // the first fetch is inside the upstream source
  f.Start(&cache, kC, 5);
  ASSERT_TRUE(f.WaitStarted(6));
  fake.Open(kC);
  f.Join();
  EXPECT_EQ(fake.FetchCount(kC), 1u);
  ASSERT_EQ(f.results.size(), 6u);
  const Block* block = nullptr;
  for (const auto& r : f.results) {
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectBlockOf(*r, kC, 1000);
    if (block == nullptr) block = r->get();
    EXPECT_EQ(r->get(), block);  // everyone shares the one fetched block
  }
  const CacheStats s = cache.Stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 5u);
  EXPECT_EQ(s.bytes_fetched, 1000u);
}

TEST(CacheTier, WaitersRetryOnceWhenTheCoalescedFetchFails) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  fake.Gate(kD);
  fake.FailOnce(kD);
  Fetchers f;
  f.Start(&cache, kD, 1);
  ASSERT_TRUE(fake.WaitForFetches(1));
  f.Start(&cache, kD, 4);
  ASSERT_TRUE(f.WaitStarted(5));
  fake.Open(kD);
  f.Join();
  // The failed fetch is reported to its caller only; one waiter fetches again for the rest.
  ASSERT_FALSE(f.results[0].ok());
  EXPECT_EQ(f.results[0].status().code(), absl::StatusCode::kUnavailable);
  for (size_t i = 1; i < f.results.size(); ++i) {
    ASSERT_TRUE(f.results[i].ok()) << f.results[i].status();
    ExpectBlockOf(*f.results[i], kD, 1000);
  }
  EXPECT_EQ(fake.FetchCount(kD), 2u);
  EXPECT_TRUE(cache.Contains(kD));
}

TEST(CacheTier, ConcurrentFetchesOfDifferentExpertsDoNotWaitForEachOther) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  fake.Gate(kA);
  Fetchers f;
  f.Start(&cache, kA, 1);
  ASSERT_TRUE(fake.WaitForFetches(1));
  // While A's fetch is stuck upstream, B is fetched and served on this thread.
  auto b = cache.Fetch(kB, Priority::kDemand);
  ASSERT_TRUE(b.ok());
  ExpectBlockOf(*b, kB, 1000);
  fake.Open(kA);
  f.Join();
  ASSERT_TRUE(f.results[0].ok());
  ExpectBlockOf(*f.results[0], kA, 1000);
}

TEST(CacheTier, FetchManyHandsHitsFirstThenMissesAndCachesThem) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  ASSERT_TRUE(cache.Fetch(kA, Priority::kDemand).ok());
  ASSERT_TRUE(cache.Fetch(kC, Priority::kDemand).ok());
  const std::vector<ExpertId> ids = {kA, kB, kC, kD};
  std::vector<std::pair<size_t, ExpertId>> order;
  absl::Status s = cache.FetchMany(ids, [&](size_t i, Lease lease) {
    ExpectBlockOf(lease, ids[i], 1000);
    order.emplace_back(i, lease->id);
  });
  ASSERT_TRUE(s.ok()) << s;
  // Hits in request order, then the misses in the order the source delivered them.
  const std::vector<std::pair<size_t, ExpertId>> want = {{0, kA}, {2, kC}, {3, kD}, {1, kB}};
  EXPECT_EQ(order, want);
  // One batch upstream with just the misses.
  EXPECT_EQ(fake.batches(), std::vector<std::vector<ExpertId>>({{kB, kD}}));
  EXPECT_TRUE(cache.Contains(kB));
  EXPECT_TRUE(cache.Contains(kD));
  CacheStats st = cache.Stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 4u);
  EXPECT_EQ(st.blocks_cached, 4u);
  EXPECT_EQ(st.bytes_fetched, 4000u);

  // Everything is a hit now: nothing goes upstream.
  order.clear();
  ASSERT_TRUE(cache.FetchMany(ids, [&](size_t i, Lease) { order.emplace_back(i, ids[i]); }).ok());
  EXPECT_EQ(order.size(), 4u);
  EXPECT_EQ(fake.batches().size(), 1u);
  EXPECT_EQ(fake.fetches().size(), 2u);
}

TEST(CacheTier, FetchManyReportsUpstreamErrors) {
  FakeSource fake(1000);
  CacheTier cache(&fake, 10000);
  fake.FailOnce(kB);
  const std::vector<ExpertId> ids = {kB, kD};
  std::vector<size_t> seen;
  absl::Status s = cache.FetchMany(ids, [&](size_t i, Lease) { seen.push_back(i); });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(seen, std::vector<size_t>({1}));  // D arrived (reverse order) before B failed
  EXPECT_TRUE(cache.Contains(kD));
  EXPECT_FALSE(cache.Contains(kB));
}

}  // namespace
}  // namespace colibri::expert_source
