#include "colibri/sysinfo/bandwidth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace colibri::sysinfo {
namespace {

namespace fs = std::filesystem;

TEST(Bandwidth, RandomReadsWholeExtents) {
  const fs::path file =
      fs::path(::testing::TempDir()) / ("bw_" + std::to_string(::getpid()) + ".bin");
  {
    std::ofstream out(file, std::ios::binary);
    out << std::string(16 * 65536, 'z');
  }
  std::vector<ReadExtent> extents;
  for (int i = 0; i < 16; ++i) extents.push_back({file, static_cast<uint64_t>(i) * 65536, 65536});
  auto bw = MeasureRandomRead(extents, {.threads = 2, .seconds = 5, .max_bytes = 64 * 65536});
  fs::remove(file);
  ASSERT_TRUE(bw.ok()) << bw.status();
  // Stops at max_bytes (each thread may finish the read it started).
  EXPECT_GE(bw->bytes, 64u * 65536);
  EXPECT_LE(bw->bytes, 66u * 65536);
  EXPECT_EQ(bw->bytes, static_cast<uint64_t>(bw->reads) * 65536);
  EXPECT_GT(bw->bytes_per_second, 0);
}

TEST(Bandwidth, BadInputIsRefused) {
  EXPECT_EQ(MeasureRandomRead({}).status().code(), absl::StatusCode::kInvalidArgument);
  auto unaligned = MeasureRandomRead({{"/nonexistent", 100, 4096}});
  EXPECT_EQ(unaligned.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = MeasureRandomRead({{"/nonexistent/colibri.bin", 0, 4096}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

TEST(Bandwidth, MemoryCopyIsMeasured) { EXPECT_GT(MeasureMemoryBandwidth(8 << 20, 2), 1e8); }

}  // namespace
}  // namespace colibri::sysinfo
