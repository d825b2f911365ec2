// The engine end to end on the CUDA backend: synthetic Mixtral-shaped models in every weight type
// give the CPU backend's greedy tokens (a different token is allowed only where the CPU's own
// top-2 margin is a near-tie) and close logits, with experts imported per use and through a
// VRAM tier smaller than the experts (with lookahead prefetch). Skips without a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/cuda_backend.h"
#include "colibri/engine/model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/device_tier_memory.h"
#include "colibri/expert_source/disk_source.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;
using quant::DType;

struct GreedyRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // one row per step
  std::vector<float> margins; // top-1 minus top-2 per step
};

absl::StatusOr<GreedyRun> Greedy(Model& model, int prompt_len, int steps) {
  GreedyRun run;
  auto cache = model.NewCache();
  std::vector<BatchItem> batch;
  for (int i = 0; i < prompt_len; ++i) batch.push_back({cache.get(), (i * 37 + 5) % 60, i, i + 1 == prompt_len});
  for (int s = 0; s <= steps; ++s) {
    std::vector<float> logits;
    if (absl::Status st = model.Forward(batch, &logits); !st.ok()) return st;
    std::vector<float> sorted = logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    run.margins.push_back(sorted[0] - sorted[1]);
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.tokens.push_back(next);
    batch = {{cache.get(), next, static_cast<int32_t>(cache->n_past()), true}};
  }
  return run;
}

class GpuEngineTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!backend::CudaBuilt()) GTEST_SKIP() << "this build has no CUDA backend (-DCOLIBRI_CUDA=OFF)";
    if (backend::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the gpu tests need an NVIDIA GPU";
    dir_ = fs::temp_directory_path() /
           absl::StrCat("colibri_gpu_engine_", ::getpid(), "_", std::string(quant::DTypeName(GetParam())));
    model::SyntheticModelOptions o;
    o.name = "gpu";
    o.config = model::DefaultSyntheticConfig();
    o.config.hidden_size = 256;
    o.config.expert_ffn = 512;
    o.config.n_heads = 8;
    o.config.n_kv_heads = 2;
    o.config.head_dim = 32;
    o.config.n_layers = 4;
    o.config.n_experts = 8;
    o.config.top_k = 2;
    o.config.vocab_size = 128;
    o.dtype = GetParam();
    o.residual_scale = 0.5f;
    o.embedding_shared = 0.3f;
    o.seed = 7;
    ASSERT_TRUE(model::WriteSyntheticModel(dir_, o).ok());
    auto c = model::Container::Open(dir_);
    ASSERT_TRUE(c.ok()) << c.status();
    container_ = std::move(*c);
    auto disk = expert_source::DiskSource::Open(container_.get());
    ASSERT_TRUE(disk.ok());
    disk_ = std::move(*disk);
    auto gpu = backend::CreateCudaBackend({});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    cpu_ = backend::CreateCpuBackend({.threads = 2});
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void ExpectSame(const GreedyRun& cpu, const GreedyRun& gpu, double logit_tol) {
    ASSERT_EQ(cpu.tokens.size(), gpu.tokens.size());
    const size_t vocab = cpu.logits.size() / cpu.tokens.size();
    for (size_t s = 0; s < cpu.tokens.size(); ++s) {
      if (cpu.tokens[s] != gpu.tokens[s]) {
        EXPECT_LT(cpu.margins[s], 1e-2) << "step " << s << ": cpu " << cpu.tokens[s] << ", gpu " << gpu.tokens[s];
        return;  // the sequences diverge from here
      }
      double diff = 0, scale = 0;
      for (size_t v = 0; v < vocab; ++v) {
        diff = std::max(diff, std::fabs(double{cpu.logits[s * vocab + v]} - gpu.logits[s * vocab + v]));
        scale = std::max(scale, std::fabs(double{cpu.logits[s * vocab + v]}));
      }
      EXPECT_LE(diff, logit_tol * scale) << "step " << s;
    }
  }
  double tolerance() const {
    // Prefill goes through F16 GEMMs for the quantized types (the CPU quantizes to Q8).
    return GetParam() == DType::kF32 ? 1e-4 : GetParam() == DType::kF16 || GetParam() == DType::kBF16 ? 1e-3 : 3e-2;
  }

  fs::path dir_;
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<expert_source::DiskSource> disk_;
  std::unique_ptr<backend::Backend> cpu_, gpu_;
};

INSTANTIATE_TEST_SUITE_P(Types, GpuEngineTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ6_K,
                                           DType::kQ5_K, DType::kQ4_K, DType::kQ3_K, DType::kQ2_K),
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
  expert_source::CacheTierOptions ro;
  ro.capacity_bytes = blocks * container_->manifest().experts[0].padded_size * 2;
  ro.io_threads = 2;
  expert_source::CacheTier ram(disk_.get(), ro);
  auto mem = expert_source::DeviceTierMemory::Create(gpu_.get(), {.budget_bytes = (blocks / 3) * ((slot + 255) / 256 * 256),
                                                                  .slot_bytes = slot});
  ASSERT_TRUE(mem.ok()) << mem.status();
  expert_source::CacheTierOptions vo;
  vo.name = "vram";
  vo.capacity_bytes = (*mem)->capacity_bytes();
  vo.memory = mem->get();
  vo.io_threads = 2;
  expert_source::CacheTier vram(&ram, vo);
  auto gm = Model::Load(*container_, gpu_.get(), &vram, {.prefetch_layers = 1});
  ASSERT_TRUE(gm.ok()) << gm.status();
  auto gpu = Greedy(**gm, 5, 24);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectSame(*cpu, *gpu, tolerance());
  const auto vs = vram.Stats();
  EXPECT_LE(vs.bytes_cached, vo.capacity_bytes);
  EXPECT_GT(vs.evictions, 0u);
  EXPECT_GT((*mem)->Stats().uploads, 0u);
  vram.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
}

}  // namespace
}  // namespace colibri::engine
