// DiskSource with O_DIRECT and piecewise prefetch reads, and MmapSource: the same verified bytes
// as a plain read of the container.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "colibri/expert_source/disk_source.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/expert_source/mmap_source.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"

namespace colibri::expert_source {
namespace {

namespace fs = std::filesystem;

class DirectSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("colibri_direct_source_test_" + std::to_string(::getpid()));
    model::SyntheticModelOptions o;
    o.config = model::DefaultSyntheticConfig();
    o.config.expert_ffn = 512;  // blocks of several 4 KiB pieces
    ASSERT_TRUE(model::WriteSyntheticModel(dir_, o).ok());
    auto c = model::Container::Open(dir_);
    ASSERT_TRUE(c.ok());
    container_ = std::move(*c);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void ExpectSameBytes(ExpertSource& src, Priority priority) {
    for (const auto& b : container_->manifest().experts) {
      auto want = container_->ReadExpertBlock(b.id);
      ASSERT_TRUE(want.ok());
      auto got = src.Fetch(b.id, priority);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ((*got)->size, b.size);
      ASSERT_EQ(std::memcmp((*got)->data(), want->get(), b.size), 0) << ExpertLabel(b.id);
    }
  }

  fs::path dir_;
  std::unique_ptr<model::Container> container_;
};

TEST_F(DirectSourceTest, DirectAndPiecewiseReadsGiveTheSameBytes) {
  auto disk = DiskSource::Open(container_.get(), {.direct_io = true, .prefetch_chunk_bytes = 4096});
  ASSERT_TRUE(disk.ok()) << disk.status();
  ExpectSameBytes(**disk, Priority::kDemand);
  ExpectSameBytes(**disk, Priority::kPrefetch);  // in 4 KiB pieces
  // /tmp supports O_DIRECT here; elsewhere the buffered fallback gives the same bytes.
  EXPECT_LE((*disk)->direct_io_files(), 1);
  const std::vector<ExpertId> stale = {ExpertId{0, 0}};
  (*disk)->Cancel(stale);  // no read in progress: nothing to stop, later reads unaffected
  ExpectSameBytes(**disk, Priority::kPrefetch);
  EXPECT_EQ((*disk)->cancelled_reads(), 0u);
  auto bad = DiskSource::Open(container_.get(), {.direct_io = true, .prefetch_chunk_bytes = 1000});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DirectSourceTest, MmapSourceGivesTheSameBytesAndChecksThem) {
  auto src = MmapSource::Open(container_.get());
  ASSERT_TRUE(src.ok()) << src.status();
  ExpectSameBytes(**src, Priority::kDemand);
  EXPECT_EQ((*src)->BlockSize(ExpertId{0, 0}), container_->manifest().Expert(0, 0).padded_size);
  EXPECT_EQ((*src)->Fetch(ExpertId{9, 0}, Priority::kDemand).status().code(),
            absl::StatusCode::kNotFound);

  // A corrupt block is DataLoss on its first fetch.
  const auto& b = container_->manifest().Expert(1, 2);
  {
    std::fstream f(container_->ExpertFilePath(b), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(b.offset + 17));
    f.put('\x5a');
  }
  auto fresh = MmapSource::Open(container_.get());
  ASSERT_TRUE(fresh.ok());
  auto got = (*fresh)->Fetch(ExpertId{1, 2}, Priority::kDemand);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
}

}  // namespace
}  // namespace colibri::expert_source
