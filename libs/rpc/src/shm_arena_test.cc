#include "colibri/rpc/shm_arena.h"

#include <gtest/gtest.h>

#include <cstring>

namespace colibri::rpc {
namespace {

TEST(ShmRegion, CreateAttachShareBytesAndUnlink) {
  auto a = ShmRegion::Create(64 << 10);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->size(), 64u << 10);
  ASSERT_TRUE((*a)->Commit(8192).ok());
  auto b = ShmRegion::Attach((*a)->name(), 64 << 10);
  ASSERT_TRUE(b.ok()) << b.status();
  std::memcpy((*b)->data() + 4096, "hello", 5);
  EXPECT_EQ(std::memcmp((*a)->data() + 4096, "hello", 5), 0);
  // Too large a claim, a bad name, and a name gone after Unlink.
  EXPECT_EQ(ShmRegion::Attach((*a)->name(), 1 << 20).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ShmRegion::Attach("no-slash", 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  (*a)->Unlink();
  EXPECT_EQ(ShmRegion::Attach((*a)->name(), 4096).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::memcmp((*b)->data() + 4096, "hello", 5), 0);  // mappings outlive the name
}

TEST(ShmArena, FirstFitWithCoalescingFrees) {
  auto r = ShmRegion::Create(16 * 4096);
  ASSERT_TRUE(r.ok());
  auto arena = std::make_shared<ShmArena>(std::move(*r));
  auto a = arena->Allocate(4096);
  auto b = arena->Allocate(5000);  // rounds up to 8 KiB
  auto c = arena->Allocate(4096);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 4096u);
  EXPECT_EQ(*c, 12288u);
  EXPECT_EQ(arena->bytes_in_use(), 16384u);
  EXPECT_FALSE(arena->Allocate(13 * 4096));  // 12 pages left
  arena->Free(*a, 4096);
  arena->Free(*b, 5000);
  // The freed neighbours coalesced: three pages fit at offset 0.
  auto d = arena->Allocate(3 * 4096);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 0u);
  {
    auto hold = arena->Hold(*d, 3 * 4096);  // a lease's handle frees the slot when dropped
    EXPECT_EQ(arena->bytes_in_use(), 4u * 4096);
  }
  EXPECT_EQ(arena->bytes_in_use(), 4096u);
  arena->Retire();
  EXPECT_FALSE(arena->Allocate(4096));
}

}  // namespace
}  // namespace colibri::rpc
