// The engine end to end on the CUDA backend: synthetic Mixtral-shaped models in every weight type
// give the CPU backend's greedy tokens (a different token is allowed only where the CPU's own
// top-2 margin is a near-tie) and close logits, with experts imported per use and through a
// VRAM tier smaller than the experts (with lookahead prefetch). Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/cuda_backend.h"
#include "colibri/engine/model.h"
#include "colibri/engine/testing/test_model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/device_tier_memory.h"
#include "colibri/model/container.h"
#include "colibri/store/striped_source.h"

namespace colibri::engine {
namespace {

using quant::DType;

// Prompt tokens spread over the vocabulary.
absl::StatusOr<GreedyRun> Greedy(Model& model, int prompt_len, int steps) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back((i * 37 + 5) % 60);
  return GreedyDecode(model, prompt, steps);
}

class GpuEngineTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!backend::CudaBuilt())
      GTEST_SKIP() << "this build has no CUDA backend (-DCOLIBRI_CUDA=OFF)";
    if (backend::CudaDeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device: the gpu tests need an NVIDIA GPU";
    model::SyntheticModelOptions o = SmallTestModelOptions("gpu", /*seed=*/7);
    o.config.hidden_size = 256;
    o.config.expert_ffn = 512;
    o.config.n_heads = 8;
    o.config.n_kv_heads = 2;
    o.config.head_dim = 32;
    o.config.vocab_size = 128;
    o.dtype = GetParam();
    o.embedding_shared = 0.3f;
    auto dir = TestModelDir::Write("gpu_engine_" + std::string(quant::DTypeName(GetParam())), o);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
    auto opened = dir_->Open();
    ASSERT_TRUE(opened.ok()) << opened.status();
    container_ = std::move(opened->container);
    disk_ = std::move(opened->disk);
    auto gpu = backend::CreateCudaBackend({});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    cpu_ = backend::CreateCpuBackend({.threads = 2});
  }

  void ExpectSame(const GreedyRun& cpu, const GreedyRun& gpu, double logit_tol) {
    ASSERT_EQ(cpu.tokens.size(), gpu.tokens.size());
    const size_t vocab = cpu.logits.size() / cpu.tokens.size();
    for (size_t s = 0; s < cpu.tokens.size(); ++s) {
      if (cpu.tokens[s] != gpu.tokens[s]) {
        EXPECT_LT(cpu.margins[s], 1e-2)
            << "step " << s << ": cpu " << cpu.tokens[s] << ", gpu " << gpu.tokens[s];
        return;  // the sequences diverge from here
      }
      double diff = 0, scale = 0;
      for (size_t v = 0; v < vocab; ++v) {
        diff = std::max(diff,
                        std::fabs(double{cpu.logits[s * vocab + v]} - gpu.logits[s * vocab + v]));
        scale = std::max(scale, std::fabs(double{cpu.logits[s * vocab + v]}));
      }
      EXPECT_LE(diff, logit_tol * scale) << "step " << s;
    }
  }
  double tolerance() const {
    // Prefill goes through F16 GEMMs for the quantized types (the CPU quantizes to Q8).
    return GetParam() == DType::kF32                                 ? 1e-4
           : GetParam() == DType::kF16 || GetParam() == DType::kBF16 ? 1e-3
                                                                     : 3e-2;
  }

  std::unique_ptr<TestModelDir> dir_;  // outlives container_ and disk_
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<store::StripedSource> disk_;
  std::unique_ptr<backend::Backend> cpu_, gpu_;
};

INSTANTIATE_TEST_SUITE_P(Types, GpuEngineTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                           DType::kQ6_K, DType::kQ5_K, DType::kQ4_K, DType::kQ3_K,
                                           DType::kQ2_K),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(quant::DTypeName(info.param));
                         });

TEST_P(GpuEngineTest, GreedyTokensMatchTheCpu) {
  for (int prompt : {5, 40}) {  // decode kernels only; GEMM prefill
    SCOPED_TRACE(absl::StrCat("prompt ", prompt));
    auto cm = Model::Load(*container_, cpu_.get(), disk_.get());
    ASSERT_TRUE(cm.ok()) << cm.status();
    auto cpu = Greedy(**cm, prompt, 24);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gm = Model::Load(*container_, gpu_.get(), disk_.get());
    ASSERT_TRUE(gm.ok()) << gm.status();
    auto gpu = Greedy(**gm, prompt, 24);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ExpectSame(*cpu, *gpu, tolerance());
  }
}

TEST_P(GpuEngineTest, VramTierSmallerThanTheExpertsGivesTheSameTokens) {
  auto cm = Model::Load(*container_, cpu_.get(), disk_.get());
  ASSERT_TRUE(cm.ok());
  auto cpu = Greedy(**cm, 5, 24);
  ASSERT_TRUE(cpu.ok());
  uint64_t slot = 0;
  for (const auto& b : container_->manifest().experts) slot = std::max(slot, b.size);
  const uint64_t blocks = container_->manifest().experts.size();
  auto tiers =
      StackVramTier(gpu_.get(), disk_.get(),
                    /*ram_bytes=*/blocks * container_->manifest().experts[0].padded_size * 2,
                    /*slots=*/blocks / 3, slot);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  expert_source::CacheTier& vram = *tiers->vram;
  auto gm = Model::Load(*container_, gpu_.get(), &vram, {.prefetch_layers = 1});
  ASSERT_TRUE(gm.ok()) << gm.status();
  auto gpu = Greedy(**gm, 5, 24);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectSame(*cpu, *gpu, tolerance());
  const auto vs = vram.Stats();
  EXPECT_LE(vs.bytes_cached, tiers->memory->capacity_bytes());
  EXPECT_GT(vs.evictions, 0u);
  EXPECT_GT(tiers->memory->Stats().uploads, 0u);
  vram.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
}

}  // namespace
}  // namespace colibri::engine
