#include "colibri/store/layout.h"

#include <gtest/gtest.h>

namespace colibri::store {
namespace {

TEST(PlanStripes, DealsUnitsRoundRobinAcrossBlocks) {
  const std::vector<uint64_t> sizes = {20480, 8192, 4096};
  const StripePlan p = PlanStripes(sizes, 8192, 3);
  ASSERT_EQ(p.blocks.size(), 3u);
  // Block 0: 8K on disk 0, 8K on disk 1, 4K on disk 2.
  ASSERT_EQ(p.blocks[0].size(), 3u);
  EXPECT_EQ(p.blocks[0][0], (Extent{0, 0, 8192}));
  EXPECT_EQ(p.blocks[0][1], (Extent{1, 0, 8192}));
  EXPECT_EQ(p.blocks[0][2], (Extent{2, 0, 4096}));
  // Block 1 continues on disk 0; block 2 on disk 1.
  ASSERT_EQ(p.blocks[1].size(), 1u);
  EXPECT_EQ(p.blocks[1][0], (Extent{0, 8192, 8192}));
  EXPECT_EQ(p.blocks[2][0], (Extent{1, 8192, 4096}));
  EXPECT_EQ(p.disk_bytes, (std::vector<uint64_t>{16384, 12288, 4096}));
}

TEST(PlanStripes, OneDiskIsContiguous) {
  const std::vector<uint64_t> sizes = {12288, 12288};
  const StripePlan p = PlanStripes(sizes, 4096, 1);
  uint64_t expect = 0;
  for (const auto& b : p.blocks) {
    for (const auto& e : b) {
      EXPECT_EQ(e.disk, 0u);
      EXPECT_EQ(e.offset, expect);
      expect += e.length;
    }
  }
  EXPECT_EQ(p.disk_bytes, (std::vector<uint64_t>{24576}));
}

TEST(PlanStripes, IsDeterministicAndBalanced) {
  std::vector<uint64_t> sizes(64, 1 << 20);
  const StripePlan a = PlanStripes(sizes, 256 << 10, 4);
  const StripePlan b = PlanStripes(sizes, 256 << 10, 4);
  EXPECT_EQ(a.blocks, b.blocks);
  for (uint64_t d : a.disk_bytes) EXPECT_EQ(d, 16ull << 20);
  for (const auto& blk : a.blocks) {
    ASSERT_EQ(blk.size(), 4u);  // one 1 MiB block uses all four disks
    for (uint32_t k = 0; k < 4; ++k) EXPECT_EQ(blk[k].disk, k);
  }
}

TEST(StripeSize, Validation) {
  EXPECT_TRUE(ValidateStripeSize(4096).ok());
  EXPECT_TRUE(ValidateStripeSize(1 << 20).ok());
  EXPECT_FALSE(ValidateStripeSize(0).ok());
  EXPECT_FALSE(ValidateStripeSize(6000).ok());
  EXPECT_FALSE(ValidateStripeSize(128u << 20).ok());
}

TEST(ModelDirName, EscapesOnlyWhatPathsCannotHold) {
  EXPECT_EQ(ModelDirName("mixtral 8x7b é"), "mixtral 8x7b é");
  EXPECT_EQ(ModelDirName("org/model"), "org%2Fmodel");
  EXPECT_EQ(ModelDirName(".."), "%2E.");
  EXPECT_EQ(ModelDirName("50%"), "50%25");
  EXPECT_EQ(StripeFilePath("/d0", "a/b").string(), "/d0/models/a%2Fb/stripes.bin");
}

}  // namespace
}  // namespace colibri::store
