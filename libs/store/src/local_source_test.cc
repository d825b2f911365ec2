// The local read path: StripedSource::OpenLocal over a model directory (one experts.bin or a
// file per expert), with O_DIRECT or buffered reads, an arena, and the checks on what it hands
// out (checksums, short files, unknown experts).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "colibri/core/block_arena.h"
#include "colibri/core/checksum.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/expert_source/mmap_source.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"
#include "colibri/quant/dtype.h"
#include "colibri/store/striped_source.h"
#include "store_test_util.h"

namespace colibri::store {
namespace {

namespace fs = std::filesystem;
using expert_source::CacheTier;
using expert_source::ExpertId;
using expert_source::ExpertSource;
using expert_source::Lease;
using expert_source::MmapSource;
using expert_source::Priority;
using testing::PartBytes;
using testing::TinyPartSizes;
using testing::WriteTinyModel;

// Whether files in `dir` can be opened with O_DIRECT (tmpfs and some others refuse it).
bool TakesDirectIo(const fs::path& dir) {
  const fs::path probe = dir / "direct_probe";
  const int fd = ::open(probe.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  return fd >= 0;
}

uint64_t BytesRead(const StripedSource& src) { return src.store().io().Stats(0).bytes; }

model::ModelConfig Config() { return testing::TinyConfig(2, 4); }

class LocalSourceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    // Unique per process: ctest may run several of these tests at once.
    dir_ = fs::temp_directory_path() /
           (std::string("colibri_local_source_test ") + (GetParam() ? "split " : "single ") + "é " +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    WriteTinyModel(dir_, "disk test", 2, 4, /*split_experts=*/GetParam());
    auto container = model::Container::Open(dir_);
    ASSERT_TRUE(container.ok()) << container.status();
    container_ = std::move(*container);
  }
  void TearDown() override {
    container_.reset();
    fs::remove_all(dir_);
  }

  void ExpectWritten(const Lease& lease, int64_t layer, int64_t expert) {
    ASSERT_NE(lease, nullptr);
    EXPECT_EQ(lease->id.layer, layer);
    EXPECT_EQ(lease->id.expert, expert);
    const model::ExpertBlock& b = container_->manifest().Expert(layer, expert);
    ASSERT_EQ(lease->size, b.size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(lease->data()) % 4096, 0u);
    const model::ExpertWeights w = model::ExpertWeightsOf(b, lease->data());
    const auto sizes = TinyPartSizes(Config());
    const model::TensorView* views[] = {&w.gate, &w.up, &w.down};
    for (int p = 0; p < 3; ++p) {
      const std::vector<uint8_t> want = PartBytes(layer, expert, p, sizes[static_cast<size_t>(p)]);
      ASSERT_EQ(views[p]->size, want.size());
      EXPECT_EQ(std::memcmp(views[p]->data, want.data(), views[p]->size), 0)
          << "layer " << layer << " expert " << expert << " part " << p;
    }
  }

  void FlipByte(int64_t layer, int64_t expert, uint64_t within) {
    const model::ExpertBlock& b = container_->manifest().Expert(layer, expert);
    std::fstream f(container_->ExpertFilePath(b), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(b.offset + within));
    char ch;
    f.read(&ch, 1);
    ch = static_cast<char>(ch ^ 0x40);
    f.seekp(static_cast<std::streamoff>(b.offset + within));
    f.write(&ch, 1);
  }

  fs::path dir_;
  std::unique_ptr<model::Container> container_;
};

INSTANTIATE_TEST_SUITE_P(Layouts, LocalSourceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SplitExperts" : "ExpertsBin";
                         });

TEST_P(LocalSourceTest, ReadsWhatWasWritten) {
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok()) << src.status();
  const model::ModelConfig c = Config();
  uint64_t total = 0;
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t e = 0; e < c.n_experts; ++e) {
      auto lease = (*src)->Fetch({l, e}, Priority::kDemand);
      ASSERT_TRUE(lease.ok()) << lease.status();
      ExpectWritten(*lease, l, e);
      const model::ExpertBlock& b = container_->manifest().Expert(l, e);
      EXPECT_EQ(Checksum64(lease->get()->data(), b.size), b.checksum);
      EXPECT_EQ((*src)->BlockSize({l, e}), b.padded_size);
      total += b.padded_size;  // whole 4 KiB pages are read, padding included
      // Same bytes as the container's own reader.
      auto direct = container_->ReadExpertBlock(l, e);
      ASSERT_TRUE(direct.ok());
      EXPECT_EQ(std::memcmp(direct->get(), lease->get()->data(), b.size), 0);
    }
  }
  EXPECT_EQ(BytesRead(**src), total);
  EXPECT_EQ((*src)->BlockSize({2, 0}), 0u);
  EXPECT_EQ((*src)->BlockSize({0, -1}), 0u);
}

TEST_P(LocalSourceTest, DirectIoReadsTheSameBytes) {
  // O_DIRECT where the filesystem allows it, buffered reads where it does not (tmpfs): the bytes
  // are the same either way.
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = true});
  ASSERT_TRUE(src.ok()) << src.status();
  const model::ModelConfig c = Config();
  for (int32_t l = 0; l < c.n_layers; ++l) {
    for (int32_t e = 0; e < c.n_experts; ++e) {
      auto lease = (*src)->Fetch({l, e}, Priority::kDemand);
      ASSERT_TRUE(lease.ok()) << lease.status();
      ExpectWritten(*lease, l, e);
    }
  }
  // Direct exactly where the filesystem takes O_DIRECT.
  EXPECT_EQ((*src)->store().io().Stats(0).direct, TakesDirectIo(dir_));
  EXPECT_GT(BytesRead(**src), 0u);
}

TEST_P(LocalSourceTest, FetchManyDeliversEveryIndexOnce) {
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  const std::vector<ExpertId> ids = {{1, 3}, {0, 0}, {1, 0}};
  std::vector<int> calls(ids.size(), 0);
  absl::Status s = (*src)->FetchMany(ids, [&](size_t i, Lease lease) {
    ++calls[i];
    ExpectWritten(lease, ids[i].layer, ids[i].expert);
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, std::vector<int>({1, 1, 1}));
}

TEST_P(LocalSourceTest, ABatchStopsAtACorruptBlock) {
  FlipByte(1, 2, 100);
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  const std::vector<ExpertId> ids = {{0, 0}, {1, 2}, {0, 1}, {1, 1}, {0, 2}};
  std::vector<int> calls(ids.size(), 0);
  absl::Status s = (*src)->FetchMany(ids, [&](size_t i, Lease lease) {
    ++calls[i];
    ExpectWritten(lease, ids[i].layer, ids[i].expert);
  });
  ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("layer 1, id 2"), std::string::npos) << s;
  EXPECT_EQ(calls[1], 0);
  for (int c : calls) EXPECT_LE(c, 1);
  // The source is still usable: the same batch at prefetch priority, one block at a time.
  const std::vector<ExpertId> good = {{0, 0}, {0, 1}, {1, 1}};
  std::vector<int> again(good.size(), 0);
  ASSERT_TRUE((*src)
                  ->FetchMany(
                      good, [&](size_t i, Lease) { ++again[i]; }, Priority::kPrefetch)
                  .ok());
  EXPECT_EQ(again, std::vector<int>({1, 1, 1}));
}

TEST_P(LocalSourceTest, UnknownExpertIsNotFound) {
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  for (ExpertId id : {ExpertId{2, 0}, ExpertId{0, 4}, ExpertId{-1, 0}, ExpertId{0, -1}}) {
    auto r = (*src)->Fetch(id, Priority::kDemand);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
    const std::string msg(r.status().message());
    EXPECT_NE(msg.find("layer " + std::to_string(id.layer) + ", id " + std::to_string(id.expert)),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("disk test"), std::string::npos) << msg;  // the model's name
  }
  EXPECT_EQ(BytesRead(**src), 0u);
}

TEST_P(LocalSourceTest, CorruptBlockIsDataLossAndNeverReturned) {
  FlipByte(1, 2, 100);
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  auto r = (*src)->Fetch({1, 2}, Priority::kDemand);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("layer 1, id 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
  const model::ExpertBlock& b = container_->manifest().Expert(1, 2);
  EXPECT_NE(msg.find(container_->ExpertFilePath(b).string()), std::string::npos) << msg;
  // Neighbours still read fine.
  auto ok = (*src)->Fetch({1, 1}, Priority::kDemand);
  ASSERT_TRUE(ok.ok());
  ExpectWritten(*ok, 1, 1);

  // Through a cache tier: the error passes through and nothing is cached.
  CacheTier cache(src->get(), 1 << 20);
  auto via_cache = cache.Fetch({1, 2}, Priority::kDemand);
  ASSERT_FALSE(via_cache.ok());
  EXPECT_EQ(via_cache.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(cache.Contains({1, 2}));
}

TEST_P(LocalSourceTest, CorruptionInThePaddingIsHarmless) {
  // Only the checksummed bytes matter; the zero padding up to 4 KiB is not covered.
  const model::ExpertBlock& b = container_->manifest().Expert(0, 3);
  ASSERT_LT(b.size, b.padded_size);
  FlipByte(0, 3, b.size);
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  auto r = (*src)->Fetch({0, 3}, Priority::kDemand);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectWritten(*r, 0, 3);
}

TEST_P(LocalSourceTest, ShortFileIsDataLoss) {
  // The file shrinks after Open (e.g. a concurrent rewrite): a short read, not garbage. The
  // block was read once before, so the new read's buffer may well be the old one's memory,
  // holding a valid copy of the block past the bytes the short read wrote.
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  const model::ExpertBlock& b = container_->manifest().Expert(1, 3);
  ASSERT_TRUE((*src)->Fetch({1, 3}, Priority::kDemand).ok());
  fs::resize_file(container_->ExpertFilePath(b), b.offset + b.size / 2);
  auto r = (*src)->Fetch({1, 3}, Priority::kDemand);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("layer 1, id 3"), std::string::npos) << r.status();
}

TEST_P(LocalSourceTest, MissingFileFailsOpen) {
  const model::ExpertBlock& b = container_->manifest().Expert(0, 1);
  fs::remove(container_->ExpertFilePath(b));
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(src.status().message().find(container_->ExpertFilePath(b).string()), std::string::npos)
      << src.status();
}

TEST_P(LocalSourceTest, CacheTierInFrontReadsEachBlockOnce) {
  auto src = StripedSource::OpenLocal(container_.get(), {.direct_io = false});
  ASSERT_TRUE(src.ok());
  CacheTier cache(src->get(), 1 << 20);
  for (int round = 0; round < 3; ++round) {
    for (int32_t e = 0; e < 4; ++e) {
      auto lease = cache.Fetch({1, e}, Priority::kDemand);
      ASSERT_TRUE(lease.ok());
      ExpectWritten(*lease, 1, e);
    }
  }
  uint64_t once = 0;
  for (int32_t e = 0; e < 4; ++e) once += container_->manifest().Expert(1, e).padded_size;
  EXPECT_EQ(BytesRead(**src), once);
  EXPECT_EQ(cache.Stats().hits, 8u);
  EXPECT_EQ(cache.Stats().misses, 4u);
}

// Blocks of several 4 KiB pages in a 16-expert synthetic model: direct reads, an arena smaller
// than the model, and the mmap source's view of the same bytes.
class DirectSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("colibri_direct_source_test_" + std::to_string(::getpid()));
    model::SyntheticModelOptions o;
    o.config = model::DefaultSyntheticConfig();
    o.config.expert_ffn = 512;  // blocks of several 4 KiB pages
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

TEST_F(DirectSourceTest, DirectAndPrefetchReadsGiveTheSameBytes) {
  auto disk = StripedSource::OpenLocal(container_.get(), {.direct_io = true});
  ASSERT_TRUE(disk.ok()) << disk.status();
  ExpectSameBytes(**disk, Priority::kDemand);
  ExpectSameBytes(**disk, Priority::kPrefetch);
  // Where the filesystem takes O_DIRECT the experts file reads direct; elsewhere (tmpfs) the
  // buffered fallback gives the same bytes.
  EXPECT_EQ((*disk)->store().io().Stats(0).direct, TakesDirectIo(dir_));
  const std::vector<ExpertId> stale = {ExpertId{0, 0}};
  (*disk)->Cancel(stale);  // no read in progress: nothing to stop, later reads unaffected
  ExpectSameBytes(**disk, Priority::kPrefetch);
  EXPECT_EQ((*disk)->store().io().Stats(0).cancelled, 0u);
}

TEST_F(DirectSourceTest, ArenaSlotsHoldTheBlocksAndAFullArenaShedsOrWaits) {
  const auto& m = container_->manifest();
  const uint64_t block = m.experts[0].padded_size;
  auto arena = BlockArena::Create(2 * block, {.name = "test arena", .prefault = false});
  ASSERT_TRUE(arena.ok());
  const uint64_t slots = (*arena)->capacity_bytes() / block;  // capacity rounds up to 2 MiB
  ASSERT_LT(slots, m.experts.size());
  auto disk = StripedSource::OpenLocal(
      container_.get(), {.direct_io = true},
      {.arena = arena->get(), .arena_wait = std::chrono::milliseconds(50)});
  ASSERT_TRUE(disk.ok());
  ExpectSameBytes(**disk, Priority::kDemand);  // each lease dropped before the next read
  EXPECT_EQ((*arena)->Stats().used_bytes, 0u);
  EXPECT_EQ((*arena)->Stats().allocations, m.experts.size());
  // One batch of every block through the small arena: each block is handed out before the
  // blocks that need its slot are read, so the batch completes without ever waiting long.
  std::vector<ExpertId> all;
  for (const auto& b : m.experts) all.push_back(b.id);
  std::vector<int> calls(all.size(), 0);
  ASSERT_TRUE((*disk)->FetchMany(all, [&](size_t i, Lease) { ++calls[i]; }).ok());
  EXPECT_EQ(calls, std::vector<int>(all.size(), 1));
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
  const uint64_t waits = (*arena)->Stats().waits;
  std::thread release([&] {
    while ((*arena)->Stats().waits <= waits) std::this_thread::yield();
    held.pop_back();
  });
  auto disk_wait = StripedSource::OpenLocal(
      container_.get(), {}, {.arena = arena->get(), .arena_wait = std::chrono::seconds(30)});
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
}  // namespace colibri::store
