#include "colibri/core/units.h"

#include <gtest/gtest.h>

namespace colibri {
namespace {

TEST(ParseSize, AcceptsUserForms) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("512M"), 512u * kMiB);
  EXPECT_EQ(*ParseSize("8G"), 8u * kGiB);
  EXPECT_EQ(*ParseSize("1.5G"), 3u * kGiB / 2);
  EXPECT_EQ(*ParseSize("1m"), kMiB);
  EXPECT_EQ(*ParseSize("2KiB"), 2048u);
  EXPECT_EQ(*ParseSize("3GB"), 3u * kGiB);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "G", "-1G", "1X", "abc", "1.2.3M", "99999999999T"}) {
    auto r = ParseSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatSize, Readable) {
  EXPECT_EQ(FormatSize(12), "12 B");
  EXPECT_EQ(FormatSize(3 * kGiB / 2), "1.50 GiB");
}

TEST(AlignUp, PowersOfTwo) {
  EXPECT_EQ(AlignUp(0, 4096), 0u);
  EXPECT_EQ(AlignUp(1, 4096), 4096u);
  EXPECT_EQ(AlignUp(4096, 4096), 4096u);
  EXPECT_EQ(AlignUp(4097, 4096), 8192u);
}

}  // namespace
}  // namespace colibri
