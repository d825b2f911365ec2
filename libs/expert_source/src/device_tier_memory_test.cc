// The VRAM tier's memory driven through the Backend interface, on the device-like test backend:
// a CacheTier over it never holds more than its slots, the backend memory never exceeds the
// arena, blocks arrive byte for byte at their device address, and misses, hits and evictions
// are counted as on any tier.
#include "colibri/expert_source/device_tier_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "colibri/backend/testing/device_like_backend.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/testing/recording_source.h"

namespace colibri::expert_source {
namespace {

using testing::RecordingSource;

// Blocks of a size that depends on the expert (mixed quant types give mixed block sizes).
testing::RecordingSourceOptions MixedSizes() {
  testing::RecordingSourceOptions o;
  o.size_of = [](ExpertId id) -> uint64_t { return id.expert % 2 == 0 ? 1000 : 700; };
  return o;
}

std::vector<uint8_t> DeviceBytes(backend::Backend& be, const Lease& lease) {
  std::vector<uint8_t> out(lease->size);
  be.Download(out.data(), lease->device, out.size());
  return out;
}

TEST(DeviceTierMemoryTest, TierOverDeviceMemoryStaysWithinItsSlots) {
  backend::DeviceLikeBackend be(/*memory_cap=*/64 << 10);
  auto mem = DeviceTierMemory::Create(&be, {.budget_bytes = 5000, .slot_bytes = 1000});
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ((*mem)->slot_bytes(), 1024u);  // rounded up to 256 bytes
  EXPECT_EQ((*mem)->capacity_bytes(), 4u * 1024);
  EXPECT_EQ(be.counters().bytes_allocated.load(), 4u * 1024);

  RecordingSource src(MixedSizes());
  CacheTierOptions o;
  o.name = "vram";
  o.capacity_bytes = (*mem)->capacity_bytes();
  o.memory = mem->get();
  CacheTier tier(&src, o);
  for (int round = 0; round < 3; ++round) {
    for (int e = 0; e < 10; ++e) {
      const ExpertId id{round % 2, e};
      auto lease = tier.Fetch(id, Priority::kDemand);
      ASSERT_TRUE(lease.ok()) << lease.status();
      ASSERT_NE((*lease)->device, nullptr);
      EXPECT_EQ((*lease)->data(), nullptr);
      EXPECT_EQ((*lease)->size, src.BlockSize(id));
      EXPECT_EQ(DeviceBytes(be, *lease),
                std::vector<uint8_t>(src.BlockSize(id), RecordingSource::Fill(id)));
      const CacheStats s = tier.Stats();
      // Every block is charged one slot, whatever its size: at most four resident.
      EXPECT_LE(s.bytes_cached, o.capacity_bytes);
      EXPECT_LE(s.blocks_cached, 4u);
      EXPECT_LE((*mem)->Stats().slots_used, 4u);
      // No memory beyond the arena, ever.
      EXPECT_EQ(be.counters().peak_bytes.load(), 4u * 1024);
    }
  }
  const CacheStats s = tier.Stats();
  EXPECT_EQ(s.misses, 30u);  // 10 distinct experts cycling through 4 slots: LRU always misses
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.evictions, 26u);
  const DeviceTierStats ds = (*mem)->Stats();
  EXPECT_EQ(ds.uploads, 30u);
  EXPECT_EQ(ds.bytes_uploaded, 15u * 1000 + 15u * 700);
  EXPECT_EQ(be.counters().transfers.load(), 30u);
  // Every reuse of a slot waited for the fence of its previous block's readers.
  EXPECT_EQ(ds.fence_waits, 26u);

  // Hits: the four most recent stay resident and come back without an upload.
  for (int e = 6; e < 10; ++e) ASSERT_TRUE(tier.Fetch(ExpertId{0, e}, Priority::kDemand).ok());
  EXPECT_EQ(tier.Stats().hits, 4u);
  EXPECT_EQ((*mem)->Stats().uploads, 30u);
}

TEST(DeviceTierMemoryTest, LeasedBlocksKeepTheirSlotsAndAreReleasedBehindAFence) {
  backend::DeviceLikeBackend be;
  auto mem = DeviceTierMemory::Create(&be, {.budget_bytes = 3 * 1024, .slot_bytes = 1024});
  ASSERT_TRUE(mem.ok());
  RecordingSource src(1000);
  CacheTierOptions o;
  o.capacity_bytes = (*mem)->capacity_bytes();
  o.memory = mem->get();
  o.room_wait = std::chrono::milliseconds(50);
  CacheTier tier(&src, o);
  std::vector<Lease> held;
  for (int e = 0; e < 3; ++e) held.push_back(*tier.Fetch(ExpertId{0, e}, Priority::kDemand));
  std::set<const uint8_t*> addresses;
  for (const Lease& l : held) addresses.insert(l->device);
  EXPECT_EQ(addresses.size(), 3u);
  // Every slot is leased: a fourth block waits, then fails with the tier's message.
  auto full = tier.Fetch(ExpertId{0, 3}, Priority::kDemand);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_EQ((*mem)->Stats().slots_used, 3u);
  const uint64_t fences = be.counters().fences.load();
  held.erase(held.begin());
  auto next = tier.Fetch(ExpertId{0, 3}, Priority::kDemand);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_GT(be.counters().fences.load(), fences);  // the evicted block's slot was fenced
  EXPECT_EQ(DeviceBytes(be, *next),
            std::vector<uint8_t>(1000, RecordingSource::Fill(ExpertId{0, 3})));
}

TEST(DeviceTierMemoryTest, OutOfMemoryAndTooSmallBudgetsAreClearErrorsAtStart) {
  backend::DeviceLikeBackend be(/*memory_cap=*/8 << 10);
  auto too_big = DeviceTierMemory::Create(&be, {.budget_bytes = 16 << 10, .slot_bytes = 1024});
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted) << too_big.status();
  EXPECT_NE(too_big.status().message().find("does not fit"), std::string::npos) << too_big.status();
  EXPECT_EQ(be.counters().bytes_allocated.load(), 0u);
  auto too_small = DeviceTierMemory::Create(&be, {.budget_bytes = 1500, .slot_bytes = 1024});
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument) << too_small.status();
}

TEST(DeviceTierMemoryTest, PrefetchReachesTheDeviceTier) {
  backend::DeviceLikeBackend be;
  auto mem = DeviceTierMemory::Create(&be, {.budget_bytes = 8 * 1024, .slot_bytes = 1024});
  ASSERT_TRUE(mem.ok());
  RecordingSource src(1000);
  CacheTierOptions o;
  o.capacity_bytes = (*mem)->capacity_bytes();
  o.memory = mem->get();
  o.io_threads = 2;
  CacheTier tier(&src, o);
  const std::vector<ExpertId> ids = {{1, 2}, {1, 5}};
  tier.Prefetch(ids);
  ASSERT_TRUE(tier.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ((*mem)->Stats().uploads, 2u);
  for (const ExpertId& id : ids) {
    auto lease = tier.Fetch(id, Priority::kDemand);
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(DeviceBytes(be, *lease), std::vector<uint8_t>(1000, RecordingSource::Fill(id)));
  }
  EXPECT_EQ(tier.Stats().hits, 2u);
  EXPECT_EQ(tier.Stats().prefetch_used, 2u);
}

}  // namespace
}  // namespace colibri::expert_source
