// Test support shared by the engine tests (library colibri::engine_testing, built with the
// tests): a small synthetic MoE model written into its own temporary directory, opened as a
// container with a disk source (and a gtest fixture doing both), a VRAM tier stacked on a RAM
// tier over it, and greedy decoding that keeps every step's logits.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"
#include "colibri/engine/model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/device_tier_memory.h"
#include "colibri/model/container.h"
#include "colibri/model/synthetic_model.h"
#include "colibri/store/striped_source.h"

namespace colibri::engine {

// The engine tests' model: DefaultSyntheticConfig() with 4 layers and 8 experts top-2, q8_0
// matrices, residual_scale 0.5 and embedding_shared 0.5 (so routing has locality).
model::SyntheticModelOptions SmallTestModelOptions(std::string name, uint64_t seed);

// The same model shaped like DeepSeek-V3 (architecture deepseek2): latent attention (q LoRA 32,
// kv_lora_rank 32, 4 heads of nope 8 + rope 8, v 8; interleaved RoPE), layer 0 dense, 16
// experts top-4 in 4 groups of which 2 are eligible, sigmoid scores with the selection-only
// bias, renormalised and scaled by 2.5, one shared expert.
model::SyntheticModelOptions SmallMlaTestModelOptions(std::string name, uint64_t seed);

// A model opened from its directory. Each Open makes a new pair (a fresh disk source).
struct OpenedTestModel {
  std::unique_ptr<model::Container> container;
  std::unique_ptr<store::StripedSource> disk;
};

// A synthetic model written into <temp>/colibri_<dir_name>_<pid>; the destructor removes the
// directory: destroy it after the containers opened from it.
class TestModelDir {
 public:
  static absl::StatusOr<std::unique_ptr<TestModelDir>> Write(
      const std::string& dir_name, const model::SyntheticModelOptions& options);
  ~TestModelDir();
  TestModelDir(const TestModelDir&) = delete;
  TestModelDir& operator=(const TestModelDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  absl::StatusOr<OpenedTestModel> Open() const;

 private:
  explicit TestModelDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

// A gtest fixture over one model for a whole suite: the suite's SetUpTestSuite calls WriteModel;
// each test gets it opened afresh in container_ and disk_. `Suite` (the derived fixture) keeps
// each suite's model apart.
template <typename Suite>
class TestModelSuite : public ::testing::Test {
 protected:
  static void WriteModel(const std::string& dir_name, const model::SyntheticModelOptions& options) {
    auto dir = TestModelDir::Write(dir_name, options);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = dir->release();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(dir_, nullptr)
        << "no model: the suite's SetUpTestSuite failed or did not call WriteModel";
    auto opened = dir_->Open();
    ASSERT_TRUE(opened.ok()) << opened.status();
    container_ = std::move(opened->container);
    disk_ = std::move(opened->disk);
  }

  static inline TestModelDir* dir_ = nullptr;
  std::unique_ptr<model::Container> container_;
  std::unique_ptr<store::StripedSource> disk_;
};

// A VRAM tier stacked on a RAM tier, as the compute node stacks them for a device backend: the
// RAM tier (ram_bytes) reads from `source`; the VRAM tier holds `slots` blocks of up to
// `slot_bytes` in DeviceTierMemory on `backend`. Both tiers read with 2 I/O threads. Members
// are destroyed VRAM tier first; `source` and `backend` must outlive the stack.
struct VramTierStack {
  std::unique_ptr<expert_source::CacheTier> ram;
  std::unique_ptr<expert_source::DeviceTierMemory> memory;
  std::unique_ptr<expert_source::CacheTier> vram;  // the engine's expert source
};
absl::StatusOr<VramTierStack> StackVramTier(backend::Backend* backend,
                                            expert_source::ExpertSource* source, uint64_t ram_bytes,
                                            uint64_t slots, uint64_t slot_bytes);

struct GreedyRun {
  std::vector<int32_t> tokens;  // one per step
  std::vector<float> logits;    // one row of vocab_size per step
  std::vector<float> margins;   // top-1 minus top-2 logit per step
};

// Greedy decoding on a new cache: one forward over `prompt` (logits of its last position), then
// `steps` forwards of one token each; steps + 1 rows in all.
absl::StatusOr<GreedyRun> GreedyDecode(Model& model, std::span<const int32_t> prompt, int steps);

}  // namespace colibri::engine
