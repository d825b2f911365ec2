#include "colibri/engine/testing/test_model.h"

#include <unistd.h>

#include <algorithm>
#include <functional>

namespace colibri::engine {

namespace fs = std::filesystem;

model::SyntheticModelOptions SmallTestModelOptions(std::string name, uint64_t seed) {
  model::SyntheticModelOptions o;
  o.name = std::move(name);
  o.config = model::DefaultSyntheticConfig();
  o.config.n_layers = 4;
  o.config.n_experts = 8;
  o.config.top_k = 2;
  o.dtype = quant::DType::kQ8_0;
  o.residual_scale = 0.5f;
  o.embedding_shared = 0.5f;
  o.seed = seed;
  return o;
}

model::SyntheticModelOptions SmallMlaTestModelOptions(std::string name, uint64_t seed) {
  model::SyntheticModelOptions o = SmallTestModelOptions(std::move(name), seed);
  model::ModelConfig& c = o.config;
  c.architecture = model::Architecture::kDeepseek2;
  c.n_experts = 16;
  c.top_k = 4;
  c.n_heads = c.n_kv_heads = 4;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 8;
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  c.rope_dims = c.qk_rope_head_dim;
  c.rope_style = model::RopeStyle::kInterleaved;
  c.router_scoring = model::RouterScoring::kSigmoid;
  c.router_bias = true;
  c.n_expert_groups = 4;
  c.topk_groups = 2;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.shared_expert_ffn = c.expert_ffn;
  c.dense_layers = {0};
  c.dense_ffn = 2 * c.expert_ffn;
  return o;
}

absl::StatusOr<std::unique_ptr<TestModelDir>> TestModelDir::Write(
    const std::string& dir_name, const model::SyntheticModelOptions& options) {
  std::unique_ptr<TestModelDir> dir(new TestModelDir(
      fs::temp_directory_path() / ("colibri_" + dir_name + "_" + std::to_string(::getpid()))));
  if (absl::Status st = model::WriteSyntheticModel(dir->path_, options); !st.ok()) return st;
  return dir;
}

TestModelDir::~TestModelDir() {
  std::error_code ec;  // a test's leftover directory is not worth failing over
  fs::remove_all(path_, ec);
}

absl::StatusOr<OpenedTestModel> TestModelDir::Open() const {
  OpenedTestModel opened;
  auto container = model::Container::Open(path_);
  if (!container.ok()) return container.status();
  opened.container = std::move(*container);
  auto disk = store::StripedSource::OpenLocal(opened.container.get(), {});
  if (!disk.ok()) return disk.status();
  opened.disk = std::move(*disk);
  return opened;
}

absl::StatusOr<VramTierStack> StackVramTier(backend::Backend* backend,
                                            expert_source::ExpertSource* source, uint64_t ram_bytes,
                                            uint64_t slots, uint64_t slot_bytes) {
  VramTierStack stack;
  expert_source::CacheTierOptions ro;
  ro.capacity_bytes = ram_bytes;
  ro.io_threads = 2;
  stack.ram = std::make_unique<expert_source::CacheTier>(source, ro);
  auto memory = expert_source::DeviceTierMemory::Create(
      backend,
      {.budget_bytes = slots * ((slot_bytes + 255) / 256 * 256), .slot_bytes = slot_bytes});
  if (!memory.ok()) return memory.status();
  stack.memory = std::move(*memory);
  expert_source::CacheTierOptions vo;
  vo.name = "vram";
  vo.capacity_bytes = stack.memory->capacity_bytes();
  vo.memory = stack.memory.get();
  vo.io_threads = 2;
  stack.vram = std::make_unique<expert_source::CacheTier>(stack.ram.get(), vo);
  return stack;
}

absl::StatusOr<GreedyRun> GreedyDecode(Model& model, std::span<const int32_t> prompt, int steps) {
  GreedyRun run;
  auto cache = model.NewCache();
  std::vector<BatchItem> batch;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.push_back({cache.get(), prompt[i], static_cast<int32_t>(i), i + 1 == prompt.size()});
  }
  for (int s = 0; s <= steps; ++s) {
    std::vector<float> logits;
    if (absl::Status st = model.Forward(batch, &logits); !st.ok()) return st;
    std::vector<float> sorted = logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    run.margins.push_back(sorted[0] - sorted[1]);
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
    const auto next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    run.tokens.push_back(next);
    batch = {{cache.get(), next, static_cast<int32_t>(cache->n_past()), true}};
  }
  return run;
}

}  // namespace colibri::engine
