#include "colibri/rpc/holder_split.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace colibri::rpc {
namespace {

constexpr uint64_t kMiB = 1 << 20;

struct Case {
  const char* name;
  std::vector<HolderLoad> holders;
  uint64_t size;
  uint64_t min_part;
  std::vector<uint64_t> want;
};

TEST(SplitAcrossHoldersTest, EveryHolderUsedFinishesTogether) {
  const double r = 100e6;
  const std::vector<Case> cases = {
      {"two idle equal holders halve it", {{0, r}, {0, r}}, 8 * kMiB, kMiB, {4 * kMiB, 4 * kMiB}},
      {"shares follow the rates", {{0, r}, {0, 3 * r}}, 4 * kMiB, kMiB, {kMiB, 3 * kMiB}},
      {"a holder busy past the finish takes none",
       {{1e12, r}, {0, r}},
       8 * kMiB,
       kMiB,
       {0, 8 * kMiB}},
      {"queued bytes delay a holder's start",
       {{0, r}, {double(kMiB), r}, {2.0 * kMiB, r}},
       3 * kMiB,
       kMiB / 2,
       {2 * kMiB, kMiB, 0}},
      {"a block below min_part goes whole to the first to start",
       {{double(kMiB), r}, {0, r}},
       kMiB / 2,
       kMiB,
       {0, kMiB / 2}},
      {"a part below min_part drops its holder",
       {{0, r}, {0, r}, {1.8 * kMiB, r}},
       4 * kMiB,
       kMiB,
       {2 * kMiB, 2 * kMiB, 0}},
      {"cuts are aligned, the last part takes the rest", {{0, r}, {0, r}}, 10000, 1, {4096, 5904}},
      {"holders without a rate take nothing", {{0, 0}, {0, r}}, 8 * kMiB, kMiB, {0, 8 * kMiB}},
      {"no holder with a rate: nothing", {{0, 0}}, 8 * kMiB, kMiB, {0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<uint64_t> got = SplitAcrossHolders(c.holders, c.size, c.min_part, 4096);
    EXPECT_EQ(got, c.want);
    const uint64_t sum = std::accumulate(got.begin(), got.end(), uint64_t{0});
    if (c.holders.size() > 1 || c.holders[0].rate > 0) {
      EXPECT_EQ(sum, c.size);
    }
  }
}

TEST(SplitAcrossHoldersTest, ManyHoldersSumToTheBlockWithAlignedCuts) {
  std::vector<HolderLoad> holders;
  for (int i = 0; i < 7; ++i) holders.push_back({i * 300e3, 50e6 + i * 17e6});
  const uint64_t size = 13'421'773;  // not a multiple of the alignment
  const std::vector<uint64_t> got = SplitAcrossHolders(holders, size, 512 * 1024, 4096);
  uint64_t at = 0;
  size_t used = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == 0) continue;
    ++used;
    EXPECT_EQ(at % 4096, 0u) << "part " << i << " starts unaligned";
    at += got[i];
  }
  EXPECT_EQ(at, size);
  EXPECT_GE(used, 5u);  // all of them can start well before the block would finish
}

}  // namespace
}  // namespace colibri::rpc
