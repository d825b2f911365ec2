// The engine on a backend with memory of its own (zero_copy() false), without a GPU: the
// device-like test backend copies weights in, and a VRAM tier (DeviceTierMemory over that
// backend) stacked on the RAM tier hands the engine blocks already in backend memory. Greedy
// tokens and logits equal the plain CPU backend's bit for bit (the same CPU kernels compute),
// the tier stays within its slots, and memory that does not fit is a clear error at load.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/device_like_backend.h"
#include "colibri/engine/model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/device_tier_memory.h"
#include "colibri/expert_source/disk_source.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;

class DeviceTierEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("colibri_device_tier_engine_" + std::to_string(::getpid())));
    model::SyntheticModelOptions o;
    o.name = "device-tier";
    o.config = model::DefaultSyntheticConfig();
    o.config.n_layers = 4;
    o.config.n_experts = 8;
    o.config.top_k = 2;
    o.dtype = quant::DType::kQ8_0;
    o.residual_scale = 0.5f;
    o.embedding_shared = 0.5f;
    o.seed = 23;
    const absl::Status st = model::WriteSyntheticModel(*dir_, o);
    ASSERT_TRUE(st.ok()) << st;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    auto c = model::Container::Open(*dir_);
    ASSERT_TRUE(c.ok()) << c.status();
    container_ = std::move(*c);
    auto disk = expert_source::DiskSource::Open(container_.get());
    ASSERT_TRUE(disk.ok());
    disk_ = std::move(*disk);
  }
  uint64_t largest_block() const {
    uint64_t largest = 0;
    for (const auto& b : container_->manifest().experts) largest = std::max(largest, disk_->BlockSize({static_cast<int32_t>(b.layer), static_cast<int32_t>(b.expert)}));
    return largest;
  }

  struct Run {
    std::vector<int32_t> tokens;
    std::vector<float> logits;
  };
  // A prompt forward, then greedy steps.
  static absl::StatusOr<Run> Greedy(Model& model, int steps) {
    const std::vector<int32_t> prompt = {5, 17, 3, 60, 22, 9, 41};
    Run run;
    auto cache = model.NewCache();
    std::vector<BatchItem> batch;
    for (size_t i = 0; i < prompt.size(); ++i) {
      batch.push_back({cache.get(), prompt[i], static_cast<int32_t>(i), i + 1 == prompt.size()});
    }
    for (int s = 0; s <= steps; ++s) {
      std::vector<float> logits;
      if (absl::Status st = model.Forward(batch, &logits); !st.ok()) return st;
      run.logits.insert(run.logits.end(), logits.begin(), logits.end());
      const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      run.tokens.push_back(next);
      batch = {{cache.get(), next, static_cast<int32_t>(cache->n_past()), true}};
    }
    return run;
  }
  Run Reference() {
    auto cpu = backend::CreateCpuBackend({.threads = 2});
    auto model = Model::Load(*container_, cpu.get(), disk_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    auto run = Greedy(**model, kSteps);
    EXPECT_TRUE(run.ok()) << run.status();
    return *run;
  }

  static constexpr int kSteps = 20;
  static fs::path* dir_;
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<expert_source::DiskSource> disk_;
};
fs::path* DeviceTierEngineTest::dir_ = nullptr;

TEST_F(DeviceTierEngineTest, ImportPerUseGivesTheCpuTokens) {
  const Run ref = Reference();
  backend::DeviceLikeBackend be;
  auto model = Model::Load(*container_, &be, disk_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const uint64_t dense_imports = be.counters().imports.load();
  EXPECT_GT(dense_imports, 0u);  // dense weights copied in once
  auto run = Greedy(**model, kSteps);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tokens, ref.tokens);
  EXPECT_EQ(run->logits, ref.logits);
  // Without a VRAM tier every applied expert is imported (three matrices).
  EXPECT_EQ(be.counters().imports.load() - dense_imports, 3 * (*model)->counters().experts_applied.load());
}

TEST_F(DeviceTierEngineTest, VramTierSmallerThanTheExpertsGivesTheCpuTokens) {
  const Run ref = Reference();
  const uint64_t total_blocks = container_->manifest().experts.size();
  for (uint64_t slots : {uint64_t{3}, total_blocks / 2, total_blocks}) {
    for (int prefetch : {0, 1}) {
      SCOPED_TRACE(testing::Message() << slots << " slots, prefetch " << prefetch);
      backend::DeviceLikeBackend be;
      expert_source::CacheTierOptions ro;
      ro.capacity_bytes = total_blocks * largest_block();
      ro.io_threads = 2;
      expert_source::CacheTier ram(disk_.get(), ro);
      auto mem = expert_source::DeviceTierMemory::Create(&be, {.budget_bytes = slots * ((largest_block() + 255) / 256 * 256),
                                                               .slot_bytes = largest_block()});
      ASSERT_TRUE(mem.ok()) << mem.status();
      const uint64_t arena = be.counters().bytes_allocated.load();
      EXPECT_EQ(arena, (*mem)->capacity_bytes());
      expert_source::CacheTierOptions vo;
      vo.name = "vram";
      vo.capacity_bytes = (*mem)->capacity_bytes();
      vo.memory = mem->get();
      vo.io_threads = 2;
      expert_source::CacheTier vram(&ram, vo);
      auto model = Model::Load(*container_, &be, &vram, {.prefetch_layers = prefetch});
      ASSERT_TRUE(model.ok()) << model.status();
      const uint64_t dense_imports = be.counters().imports.load();
      auto run = Greedy(**model, kSteps);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(run->tokens, ref.tokens);
      EXPECT_EQ(run->logits, ref.logits);
      // Experts came from the tier's slots, never imported per use.
      EXPECT_EQ(be.counters().imports.load(), dense_imports);
      const expert_source::CacheStats vs = vram.Stats();
      EXPECT_LE(vs.bytes_cached, vo.capacity_bytes);
      EXPECT_LE((*mem)->Stats().slots_used, slots);
      EXPECT_GT(vs.lookups(), 0u);
      EXPECT_EQ((*mem)->Stats().uploads, vs.misses + vs.prefetch_reads - vs.prefetch_aborted);
      if (slots < total_blocks) {
        EXPECT_GT(vs.evictions, 0u);
      }
      if (slots == total_blocks && prefetch == 0) {
        EXPECT_GT(vs.hits, 0u);
      }
      vram.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
    }
  }
}

TEST_F(DeviceTierEngineTest, DenseWeightsThatDoNotFitFailAtLoad) {
  backend::DeviceLikeBackend be(/*memory_cap=*/container_->manifest().config.hidden_size * 64);
  auto model = Model::Load(*container_, &be, disk_.get());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted) << model.status();
}

}  // namespace
}  // namespace colibri::engine
