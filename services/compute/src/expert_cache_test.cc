#include "expert_cache.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "colibri/backend/testing/device_like_backend.h"
#include "colibri/core/block_arena.h"
#include "colibri/model/synthetic_model.h"
#include "colibri/store/striped_source.h"

namespace colibri::compute {
namespace {

using expert_source::ExpertId;
using expert_source::RoutingHint;

// 2 layers x 3 experts of 100 bytes, stored in the experts file out of id order.
model::Manifest SmallManifest() {
  model::Manifest m;
  m.name = "m";
  m.config.n_layers = 2;
  m.config.n_experts = 3;
  m.config.top_k = 1;
  const uint64_t offsets[2][3] = {{500, 0, 100}, {200, 300, 400}};
  for (int32_t l = 0; l < 2; ++l) {
    for (int32_t e = 0; e < 3; ++e) {
      model::ExpertBlock b;
      b.id = {l, e};
      b.file = "experts.bin";
      b.offset = offsets[l][e];
      b.size = b.padded_size = 100;
      m.experts.push_back(b);
    }
  }
  return m;
}

void Route(expert_source::RoutingHeat* heat, int expert_l0, int expert_l1) {
  std::vector<RoutingHint> hints;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 3; ++e) {
      hints.push_back(
          {ExpertId{l, e}, 0.0f, static_cast<uint32_t>(e == (l == 0 ? expert_l0 : expert_l1))});
    }
  }
  heat->Record(hints);
}

TEST(WarmOrder, AFittingModelIsReadInFileOrderWithoutHeat) {
  const model::Manifest m = SmallManifest();
  expert_source::RoutingHeat heat("m", 2, 3, 1);
  const auto order = WarmOrder(m, heat, 600);
  const std::vector<ExpertId> want = {{0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {0, 0}};
  EXPECT_EQ(order, want);
}

TEST(WarmOrder, HottestFirstThenTheRestInFileOrder) {
  const model::Manifest m = SmallManifest();
  expert_source::RoutingHeat heat("m", 2, 3, 1);
  Route(&heat, 0, 2);
  Route(&heat, 0, 2);
  Route(&heat, 2, 2);
  const auto order = WarmOrder(m, heat, 600);
  ASSERT_EQ(order.size(), 6u);
  // (1, 2) picked 3 times, (0, 0) twice, (0, 2) once; then the cold ones in file order.
  const std::vector<ExpertId> want = {{1, 2}, {0, 0}, {0, 2}, {0, 1}, {1, 0}, {1, 1}};
  EXPECT_EQ(order, want);
}

TEST(WarmOrder, AModelLargerThanTheCacheWarmsOnlyItsHotSet) {
  const model::Manifest m = SmallManifest();
  expert_source::RoutingHeat heat("m", 2, 3, 1);
  EXPECT_TRUE(WarmOrder(m, heat, 599).empty());  // no heat: nothing to go on
  Route(&heat, 1, 0);
  const std::vector<ExpertId> want = {{0, 1}, {1, 0}};
  EXPECT_EQ(WarmOrder(m, heat, 599), want);
}

// The production construction path (ExpertCache::Create, as ComputeNode calls it) with a
// backend that has device memory: the VRAM tier keeps its blocks in the device arena, each
// block is uploaded once, and a second use is a VRAM hit that touches no host bytes.
TEST(ExpertCacheCreate, VramTierHoldsItsBlocksInDeviceMemory) {
  const auto dir =
      std::filesystem::path(::testing::TempDir()) / ("vram_tier_" + std::to_string(::getpid()));
  model::SyntheticModelOptions so;
  so.config = model::DefaultSyntheticConfig();
  ASSERT_TRUE(model::WriteSyntheticModel(dir, so).ok());
  auto container = model::Container::Open(dir);
  ASSERT_TRUE(container.ok()) << container.status();
  const model::Manifest& m = (*container)->manifest();
  auto arena = BlockArena::Create(m.PaddedExpertBytes() + (4 << 20), {.prefault = false});
  ASSERT_TRUE(arena.ok());
  auto disk = store::StripedSource::OpenLocal(container->get(), {}, {.arena = arena->get()});
  ASSERT_TRUE(disk.ok()) << disk.status();
  backend::DeviceLikeBackend device;
  ExpertCacheConfig cc;
  cc.io_threads = 0;
  cc.warm_start = "off";
  cc.routing_heat = "none";
  cc.learned_pin_fraction = 0;
  uint64_t slot = 0;
  for (const auto& b : m.experts) slot = std::max(slot, b.size);
  cc.vram_bytes = 3 * slot;
  auto cache = ExpertCache::Create(disk->get(), **container, m.PaddedExpertBytes(), cc, &device);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_NE((*cache)->vram(), nullptr);
  const uint64_t device_bytes = device.counters().bytes_allocated.load();
  EXPECT_GE(device_bytes, 3 * slot);  // the tier's arena, allocated once at start

  const ExpertId id{0, 1};
  auto first = (*cache)->front()->Fetch(id, expert_source::Priority::kDemand);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE((*first)->device, nullptr) << "the VRAM tier handed out a host block";
  EXPECT_EQ((*first)->data(), nullptr);
  first->reset();
  auto second = (*cache)->front()->Fetch(id, expert_source::Priority::kDemand);
  ASSERT_TRUE(second.ok());
  EXPECT_NE((*second)->device, nullptr);
  const expert_source::CacheStats vram = (*cache)->vram()->Stats();
  EXPECT_EQ(vram.hits, 1u);
  EXPECT_EQ(vram.misses, 1u);
  EXPECT_EQ((*cache)->ram().Stats().bytes_fetched, m.Expert(id).size);  // one read from disk
  EXPECT_EQ(device.counters().bytes_allocated.load(), device_bytes);    // no allocation per use
  EXPECT_EQ(device.counters().imports.load(), 0u);  // no expert imported as a weight
  // The RAM tier's copy lives in the arena.
  EXPECT_EQ((*arena)->Stats().slots, 1u);
  second->reset();
  cache->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace colibri::compute
