#include "colibri/core/block_arena.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace colibri {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;

std::unique_ptr<BlockArena> MakeArena(uint64_t bytes, bool prefault = false) {
  auto a = BlockArena::Create(bytes, {.name = "test arena", .prefault = prefault});
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(*a);
}

TEST(BlockArena, CapacityRoundsToTwoMiBAndSlotsToFourKiB) {
  auto arena = MakeArena(3 * kMiB);
  EXPECT_EQ(arena->capacity_bytes(), 4 * kMiB);
  auto a = arena->TryAllocate(1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->get()) % 4096, 0u);
  EXPECT_EQ(arena->Stats().used_bytes, 4096u);
  auto b = arena->TryAllocate(4097);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(arena->Stats().used_bytes, 4096u + 8192u);
  EXPECT_EQ(b->get() - a->get(), 4096);  // packed
  a->reset();
  b->reset();
  const BlockArenaStats s = arena->Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.slots, 0u);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.peak_used_bytes, 3u * 4096u);
  EXPECT_EQ(s.largest_free_bytes, 4 * kMiB);  // both releases merged back into one range
}

TEST(BlockArena, FullArenaRefusesAndReleasedRoomIsReused) {
  auto arena = MakeArena(4 * kMiB);
  std::vector<BlockArena::Slot> slots;
  for (int i = 0; i < 4; ++i) {
    auto s = arena->TryAllocate(kMiB);
    ASSERT_TRUE(s.ok()) << i;
    std::memset(s->get(), i, kMiB);
    slots.push_back(*s);
  }
  auto none = arena->TryAllocate(1);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("test arena"), std::string::npos) << none.status();
  EXPECT_EQ(arena->Stats().refused, 1u);
  uint8_t* second = slots[1].get();
  slots[1].reset();
  auto again = arena->TryAllocate(kMiB);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), second);  // the freed range, not new memory
  EXPECT_EQ(slots[2].get()[0], 2);  // neighbours untouched
  EXPECT_EQ(arena->Stats().used_bytes, 4 * kMiB);
}

TEST(BlockArena, BestFitKeepsTheLargeHoleForLargeBlocks) {
  auto arena = MakeArena(8 * kMiB);
  auto a = *arena->TryAllocate(kMiB);
  auto gap1 = *arena->TryAllocate(kMiB);
  auto b = *arena->TryAllocate(kMiB);
  auto gap2 = *arena->TryAllocate(3 * kMiB);
  auto c = *arena->TryAllocate(2 * kMiB);
  gap1.reset();  // a 1 MiB hole
  gap2.reset();  // a 3 MiB hole
  uint8_t* small_hole = a.get() + kMiB;
  auto small = arena->TryAllocate(kMiB);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->get(), small_hole);  // the 1 MiB hole, not a cut of the 3 MiB one
  auto large = arena->TryAllocate(3 * kMiB);
  EXPECT_TRUE(large.ok()) << large.status();
}

TEST(BlockArena, AllocateWaitsForARelease) {
  auto arena = MakeArena(2 * kMiB);
  auto held = *arena->TryAllocate(2 * kMiB);
  std::thread releaser([&] {
    while (arena->Stats().waits == 0) std::this_thread::yield();
    held.reset();
  });
  auto got = arena->Allocate(kMiB, steady_clock::now() + std::chrono::seconds(30));
  releaser.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(arena->Stats().waits, 1u);
}

TEST(BlockArena, AllocateGivesUpAtTheDeadlineAndRefusesTooLarge) {
  auto arena = MakeArena(2 * kMiB);
  auto held = *arena->TryAllocate(2 * kMiB);
  auto late = arena->Allocate(kMiB, steady_clock::now() + milliseconds(20));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kResourceExhausted);
  auto huge = arena->Allocate(3 * kMiB, steady_clock::now() + std::chrono::hours(1));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);  // at once, no wait
}

TEST(BlockArena, SlotsOutliveTheArenaObject) {
  BlockArena::Slot slot;
  {
    auto arena = MakeArena(2 * kMiB);
    slot = *arena->TryAllocate(kMiB);
  }
  std::memset(slot.get(), 7, kMiB);  // still mapped
  EXPECT_EQ(slot.get()[kMiB - 1], 7);
  slot.reset();
}

TEST(BlockArena, PrefaultMakesTheArenaResidentAtCreate) {
  const uint64_t before = ResidentBytes();
  ASSERT_GT(before, 0u);
  auto arena = MakeArena(64 * kMiB, /*prefault=*/true);
  const uint64_t after = ResidentBytes();
  EXPECT_GE(after, before + 60 * kMiB) << "before " << before << " after " << after;
  EXPECT_GE(PeakResidentBytes(), after);
}

TEST(BlockArena, ZeroCapacityIsRefused) {
  EXPECT_EQ(BlockArena::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colibri
