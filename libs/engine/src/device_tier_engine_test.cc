// The engine on a backend with memory of its own (zero_copy() false), without a GPU: the
// device-like test backend copies weights in, and a VRAM tier (DeviceTierMemory over that
// backend) stacked on the RAM tier hands the engine blocks already in backend memory. Greedy
// tokens and logits equal the plain CPU backend's bit for bit (the same CPU kernels compute),
// the tier stays within its slots, and memory that does not fit is a clear error at load.
#include <gtest/gtest.h>

#include <algorithm>

#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/testing/device_like_backend.h"
#include "colibri/engine/model.h"
#include "colibri/engine/testing/test_model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/device_tier_memory.h"
#include "colibri/expert_source/expert_label.h"
#include "colibri/model/container.h"
#include "colibri/store/striped_source.h"

namespace colibri::engine {
namespace {

constexpr int32_t kPrompt[] = {5, 17, 3, 60, 22, 9, 41};

class DeviceTierEngineTest : public TestModelSuite<DeviceTierEngineTest> {
 protected:
  static void SetUpTestSuite() {
    WriteModel("device_tier_engine", SmallTestModelOptions("device-tier", /*seed=*/23));
  }
  uint64_t largest_block() const {
    uint64_t largest = 0;
    for (const auto& b : container_->manifest().experts)
      largest = std::max(largest, disk_->BlockSize(b.id));
    return largest;
  }

  GreedyRun Reference() {
    auto cpu = backend::CreateCpuBackend({.threads = 2});
    auto model = Model::Load(*container_, cpu.get(), disk_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    auto run = GreedyDecode(**model, kPrompt, kSteps);
    EXPECT_TRUE(run.ok()) << run.status();
    return *run;
  }

  static constexpr int kSteps = 20;
};

TEST_F(DeviceTierEngineTest, ImportPerUseGivesTheCpuTokens) {
  const GreedyRun ref = Reference();
  backend::DeviceLikeBackend be;
  auto model = Model::Load(*container_, &be, disk_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const uint64_t dense_imports = be.counters().imports.load();
  EXPECT_GT(dense_imports, 0u);  // dense weights copied in once
  auto run = GreedyDecode(**model, kPrompt, kSteps);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tokens, ref.tokens);
  EXPECT_EQ(run->logits, ref.logits);
  // Without a VRAM tier every applied expert is imported (three matrices).
  EXPECT_EQ(be.counters().imports.load() - dense_imports,
            3 * (*model)->counters().experts_applied.load());
}

TEST_F(DeviceTierEngineTest, VramTierSmallerThanTheExpertsGivesTheCpuTokens) {
  const GreedyRun ref = Reference();
  const uint64_t total_blocks = container_->manifest().experts.size();
  for (uint64_t slots : {uint64_t{3}, total_blocks / 2, total_blocks}) {
    for (int prefetch : {0, 1}) {
      SCOPED_TRACE(testing::Message() << slots << " slots, prefetch " << prefetch);
      backend::DeviceLikeBackend be;
      auto tiers = StackVramTier(&be, disk_.get(), /*ram_bytes=*/total_blocks * largest_block(),
                                 slots, largest_block());
      ASSERT_TRUE(tiers.ok()) << tiers.status();
      expert_source::DeviceTierMemory& mem = *tiers->memory;
      expert_source::CacheTier& vram = *tiers->vram;
      EXPECT_EQ(be.counters().bytes_allocated.load(), mem.capacity_bytes());
      auto model = Model::Load(*container_, &be, &vram, {.prefetch_layers = prefetch});
      ASSERT_TRUE(model.ok()) << model.status();
      const uint64_t dense_imports = be.counters().imports.load();
      auto run = GreedyDecode(**model, kPrompt, kSteps);
      ASSERT_TRUE(run.ok()) << run.status();
      // Lookahead prefetches may still be uploading: count only once the tier is idle.
      vram.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
      EXPECT_EQ(run->tokens, ref.tokens);
      EXPECT_EQ(run->logits, ref.logits);
      // Experts came from the tier's slots, never imported per use.
      EXPECT_EQ(be.counters().imports.load(), dense_imports);
      const expert_source::CacheStats vs = vram.Stats();
      EXPECT_LE(vs.bytes_cached, mem.capacity_bytes());
      EXPECT_LE(mem.Stats().slots_used, slots);
      EXPECT_GT(vs.lookups(), 0u);
      EXPECT_EQ(mem.Stats().uploads, vs.misses + vs.prefetch_reads - vs.prefetch_aborted);
      if (slots < total_blocks) {
        EXPECT_GT(vs.evictions, 0u);
      }
      if (slots == total_blocks && prefetch == 0) {
        EXPECT_GT(vs.hits, 0u);
      }
    }
  }
}

TEST_F(DeviceTierEngineTest, DenseWeightsThatDoNotFitFailAtLoad) {
  backend::DeviceLikeBackend be(/*memory_cap=*/container_->manifest().config.hidden_size * 64);
  auto model = Model::Load(*container_, &be, disk_.get());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted) << model.status();
}

// An op the backend lacks fails the load, naming the op, the backend and the tensor; never the
// first token.
TEST_F(DeviceTierEngineTest, AnUnsupportedOpFailsTheLoadNamingIt) {
  const model::Manifest& m = container_->manifest();
  const quant::DType expert_type = m.experts[0].parts[0].dtype;
  {
    backend::DeviceLikeBackend be;
    be.RefuseOp(backend::Op::kApplyExperts, expert_type);
    auto model = Model::Load(*container_, &be, disk_.get());
    ASSERT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
    const std::string msg(model.status().message());
    EXPECT_NE(msg.find("backend 'device-like' does not support op ApplyExperts with " +
                       std::string(quant::DTypeName(expert_type)) + " weights"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("model '" + m.name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(ExpertLabel(m.experts[0].id)), std::string::npos) << msg;
    EXPECT_EQ(be.counters().imports.load(), 0u);  // refused before any weight was copied in
  }
  {
    backend::DeviceLikeBackend be;
    be.RefuseOp(backend::Op::kMatMul, m.FindDense("blk.0.attn_q")->dtype);
    auto model = Model::Load(*container_, &be, disk_.get());
    ASSERT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
    EXPECT_NE(model.status().message().find("op MatMul"), std::string::npos) << model.status();
  }
  {
    backend::DeviceLikeBackend be;
    be.LimitHeadDim(m.config.head_dim - 2);
    auto model = Model::Load(*container_, &be, disk_.get());
    ASSERT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
    EXPECT_NE(model.status().message().find("op Attention with head_dim " +
                                            std::to_string(m.config.head_dim)),
              std::string::npos)
        << model.status();
  }
  // Nothing refused: the same backend loads.
  backend::DeviceLikeBackend be;
  be.LimitHeadDim(m.config.head_dim);
  EXPECT_TRUE(Model::Load(*container_, &be, disk_.get()).ok());
}

}  // namespace
}  // namespace colibri::engine
