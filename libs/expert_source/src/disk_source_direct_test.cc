// DiskSource with O_DIRECT and piecewise prefetch reads, and MmapSource: the same verified bytes
// as a plain read of the container.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "colibri/core/block_arena.h"
#include "colibri/expert_source/disk_source.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/expert_source/mmap_source.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"

namespace colibri::expert_source {
namespace {

namespace fs = std::filesystem;

// Whether files in `dir` can be opened with O_DIRECT (tmpfs and some others refuse it).
bool TakesDirectIo(const fs::path& dir) {
  const fs::path probe = dir / "direct_probe";
  const int fd = ::open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  return fd >= 0;
}

class DirectSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("colibri_direct_source_test_" + std::to_string(::getpid()));
    model::SyntheticModelOptions o;
    o.config = model::DefaultSyntheticConfig();
    o.config.expert_ffn = 512;  // blocks of several 4 KiB pieces
    o.config.n_experts = 16;    // more blocks than a 2 MiB arena holds
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
  // Where the filesystem takes O_DIRECT its one experts file reads direct; elsewhere (tmpfs) the
  // buffered fallback gives the same bytes.
  EXPECT_EQ((*disk)->direct_io_files(), TakesDirectIo(dir_) ? 1 : 0);
  EXPECT_GT((*disk)->read_seconds(), 0.0);
  const std::vector<ExpertId> stale = {ExpertId{0, 0}};
  (*disk)->Cancel(stale);  // no read in progress: nothing to stop, later reads unaffected
  ExpectSameBytes(**disk, Priority::kPrefetch);
  EXPECT_EQ((*disk)->cancelled_reads(), 0u);
  auto bad = DiskSource::Open(container_.get(), {.direct_io = true, .prefetch_chunk_bytes = 1000});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DirectSourceTest, ArenaSlotsHoldTheBlocksAndAFullArenaShedsOrWaits) {
  const auto& m = container_->manifest();
  const uint64_t block = m.experts[0].padded_size;
  auto arena = BlockArena::Create(2 * block, {.name = "test arena", .prefault = false});
  ASSERT_TRUE(arena.ok());
  const uint64_t slots = (*arena)->capacity_bytes() / block;  // capacity rounds up to 2 MiB
  ASSERT_LT(slots, m.experts.size());
  auto disk = DiskSource::Open(
      container_.get(),
      {.direct_io = true, .arena = arena->get(), .arena_wait = std::chrono::milliseconds(50)});
  ASSERT_TRUE(disk.ok());
  ExpectSameBytes(**disk, Priority::kDemand);  // each lease dropped before the next read
  EXPECT_EQ((*arena)->Stats().used_bytes, 0u);
  EXPECT_EQ((*arena)->Stats().allocations, m.experts.size());
  // Held leases fill the arena: their bytes are inside it.
  std::vector<Lease> held;
  for (uint64_t i = 0; i < slots; ++i) {
    auto l = (*disk)->Fetch(m.experts[i].id, Priority::kDemand);
    ASSERT_TRUE(l.ok()) << l.status();
    const uint8_t* p = (*l)->data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    held.push_back(*l);
  }
  EXPECT_EQ((*arena)->Stats().used_bytes, slots * block);
  const ExpertId next = m.experts[slots].id;
  auto shed = (*disk)->Fetch(next, Priority::kPrefetch);
  EXPECT_EQ(shed.status().code(), absl::StatusCode::kCancelled) << shed.status();
  EXPECT_EQ((*disk)->shed_reads(), 1u);
  auto late = (*disk)->Fetch(next, Priority::kDemand);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kResourceExhausted) << late.status();
  EXPECT_NE(late.status().message().find("test arena"), std::string::npos) << late.status();
  // A demand read waiting for room gets it when a lease is dropped.
  std::thread release([&] {
    while ((*arena)->Stats().waits < 2) std::this_thread::yield();
    held.pop_back();
  });
  auto disk_wait = DiskSource::Open(
      container_.get(), {.arena = arena->get(), .arena_wait = std::chrono::seconds(30)});
  ASSERT_TRUE(disk_wait.ok());
  auto waited = (*disk_wait)->Fetch(next, Priority::kDemand);
  release.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  auto want = container_->ReadExpertBlock(next);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(std::memcmp((*waited)->data(), want->get(), m.Expert(next).size), 0);
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
