// The engine on a DeepSeek-V3-shaped model (latent attention, a dense first layer, sigmoid
// routing with the selection-only bias, group-limited top-k, a shared expert; test_model.h):
// where the experts live never changes a token or a logit (a RAM cache of a few blocks with
// lookahead prefetch, a VRAM tier on the device-like backend), the latent KV cache persisted
// across a restart prefills only the new tokens with the tokens of a cold run, and the
// lookahead predicts experts with the routing's own selection rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/backend/testing/device_like_backend.h"
#include "colibri/engine/engine.h"
#include "colibri/engine/kv_store.h"
#include "colibri/engine/model.h"
#include "colibri/engine/testing/test_model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/expert_source/testing/recording_source.h"
#include "colibri/model/container.h"

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kPrompt = {5, 17, 3, 60, 22, 9, 41};
constexpr int kSteps = 16;

class MlaEngineTest : public TestModelSuite<MlaEngineTest> {
 protected:
  static void SetUpTestSuite() {
    WriteModel("mla_engine", SmallMlaTestModelOptions("mla", /*seed=*/31));
  }
  void SetUp() override {
    TestModelSuite::SetUp();
    backend_ = backend::CreateCpuBackend({.threads = 2});
  }
  uint64_t largest_block() const {
    uint64_t largest = 0;
    for (const auto& b : container_->manifest().experts) {
      largest = std::max(largest, disk_->BlockSize(b.id));
    }
    return largest;
  }
  GreedyRun Reference() {
    auto model = Model::Load(*container_, backend_.get(), disk_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    auto run = GreedyDecode(**model, kPrompt, kSteps);
    EXPECT_TRUE(run.ok()) << run.status();
    return *run;
  }

  std::unique_ptr<backend::Backend> backend_;
};

TEST_F(MlaEngineTest, TheModelIsLatentAndGrouped) {
  const model::ModelConfig& c = container_->manifest().config;
  ASSERT_TRUE(c.mla());
  EXPECT_EQ(c.architecture, model::Architecture::kDeepseek2);
  EXPECT_EQ(KvSnapshotDim(c), (c.kv_lora_rank + c.qk_rope_head_dim) / 2);  // the latent row, halved
  EXPECT_EQ(container_->manifest().experts.size(),
            static_cast<size_t>(c.n_moe_layers() * c.n_experts));
}

TEST_F(MlaEngineTest, RamCacheAndPrefetchNeverChangeTokensOrLogits) {
  const GreedyRun ref = Reference();
  const uint64_t total_blocks = container_->manifest().experts.size();
  uint64_t prefetch_reads = 0, misses = 0;
  for (uint64_t blocks : {uint64_t{3}, total_blocks / 4, total_blocks}) {
    for (int prefetch_layers : {0, 2}) {
      SCOPED_TRACE(absl::StrCat(blocks, " blocks, prefetch ", prefetch_layers));
      expert_source::CacheTierOptions o;
      o.capacity_bytes = blocks * largest_block();
      o.io_threads = 2;
      expert_source::CacheTier tier(disk_.get(), o);
      auto model =
          Model::Load(*container_, backend_.get(), &tier, {.prefetch_layers = prefetch_layers});
      ASSERT_TRUE(model.ok()) << model.status();
      auto run = GreedyDecode(**model, kPrompt, kSteps);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(run->tokens, ref.tokens);
      EXPECT_EQ(run->logits, ref.logits);
      tier.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
      const auto s = tier.Stats();
      EXPECT_LE(s.bytes_cached, o.capacity_bytes);
      prefetch_reads += s.prefetch_reads;
      if (blocks == 3) misses += s.misses;
    }
  }
  EXPECT_GT(prefetch_reads, 0u);
  // Three blocks of 48: the experts really streamed from disk, over and over.
  EXPECT_GT(misses, 2 * total_blocks);
}

TEST_F(MlaEngineTest, VramTierOnTheDeviceLikeBackendGivesTheCpuTokens) {
  const GreedyRun ref = Reference();
  const uint64_t total_blocks = container_->manifest().experts.size();
  for (uint64_t slots : {uint64_t{3}, total_blocks}) {
    SCOPED_TRACE(testing::Message() << slots << " slots");
    backend::DeviceLikeBackend be;
    auto tiers =
        StackVramTier(&be, disk_.get(), /*ram_bytes=*/8 * largest_block(), slots, largest_block());
    ASSERT_TRUE(tiers.ok()) << tiers.status();
    auto model = Model::Load(*container_, &be, tiers->vram.get(), {.prefetch_layers = 1});
    ASSERT_TRUE(model.ok()) << model.status();
    auto run = GreedyDecode(**model, kPrompt, kSteps);
    ASSERT_TRUE(run.ok()) << run.status();
    tiers->vram->WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
    EXPECT_EQ(run->tokens, ref.tokens);
    EXPECT_EQ(run->logits, ref.logits);
    EXPECT_LE(tiers->vram->Stats().bytes_cached, tiers->memory->capacity_bytes());
  }
}

GenerationRequest Greedy(std::vector<int32_t> prompt, int64_t n, std::string session = {}) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.ignore_eos = true;
  r.session_id = std::move(session);
  return r;
}

absl::StatusOr<GenerationResult> RunToEnd(Engine& e, const GenerationRequest& r) {
  return e.Generate(r, [](const SampledToken&) { return true; });
}

TEST_F(MlaEngineTest, LatentKvPersistsAcrossARestart) {
  auto model = Model::Load(*container_, backend_.get(), disk_.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const model::ModelConfig& c = (*model)->config();
  const fs::path kv_dir = fs::temp_directory_path() / absl::StrCat("colibri_mla_kv_", ::getpid());
  fs::remove_all(kv_dir);
  KvStoreOptions so;
  so.ram_limit = 16 << 20;
  so.dir = kv_dir;
  so.model_fingerprint = "mla-test-model";
  so.n_layers = c.n_layers;
  so.kv_dim = KvSnapshotDim(c);
  const std::vector<int32_t> turn1 = {1, 17, 18, 19, 20, 21};
  std::vector<int32_t> answer;
  {
    auto store = KvStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status();
    auto e = std::make_unique<Engine>(model->get(), EngineOptions{.kv_store = store->get()});
    auto first = RunToEnd(*e, Greedy(turn1, 7, "conversation-1"));
    ASSERT_TRUE(first.ok()) << first.status();
    answer = first->tokens;
    e.reset();  // shutdown: the pool goes to disk
    EXPECT_EQ((*store)->stats().disk_entries, 1u);
  }
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(kv_dir)) files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  // The latent: (kv_lora_rank + qk_rope_head_dim) floats per token and layer, not 2 x heads x
  // head_dim; the file holds the 12 positions computed (6 + 7 - 1) and a small header.
  const uint64_t latent_bytes =
      static_cast<uint64_t>(c.n_layers) * (c.kv_lora_rank + c.qk_rope_head_dim) * 12 * 4;
  EXPECT_GE(fs::file_size(files[0]), latent_bytes);
  EXPECT_LT(fs::file_size(files[0]), latent_bytes + 4096);

  auto store = KvStore::Open(so);  // "restart": the directory is indexed again
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->stats().disk_entries, 1u);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), answer.begin(), answer.end());
  turn2.insert(turn2.end(), {33, 34, 35});
  std::vector<int32_t> warm_tokens;
  {
    Engine warm_engine(model->get(), {.kv_store = store->get()});
    auto warm = RunToEnd(warm_engine, Greedy(turn2, 9, "conversation-1"));
    ASSERT_TRUE(warm.ok()) << warm.status();
    EXPECT_EQ(warm->cached_prompt_tokens,
              6 + 7 - 1);  // only the new tokens (and the last answer one) prefilled
    EXPECT_EQ(warm_engine.counters().kv_restored_tokens.load(), 12u);
    warm_tokens = warm->tokens;
  }
  Engine cold_engine(model->get(), {});
  auto cold = RunToEnd(cold_engine, Greedy(turn2, 9));
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(cold->cached_prompt_tokens, 0);
  EXPECT_EQ(warm_tokens, cold->tokens);
  store->reset();
  fs::remove_all(kv_dir);
}

// A model whose layers barely change the residual stream (residual_scale 1e-5, f32 weights):
// the router of layer L + 1 applied after layer L's attention (the lookahead) sees what layer
// L + 1's router sees up to ~1e-5, so a prediction made with the routing's rule is the routing.
class MlaLookaheadTest : public TestModelSuite<MlaLookaheadTest> {
 protected:
  static void SetUpTestSuite() {
    model::SyntheticModelOptions o = SmallMlaTestModelOptions("mla-lookahead", /*seed=*/5);
    o.dtype = quant::DType::kF32;
    o.residual_scale = 1e-5f;
    o.embedding_shared = 0.0f;
    o.config.n_layers = 5;
    WriteModel("mla_lookahead", o);
  }
};

TEST_F(MlaLookaheadTest, PredictionsUseTheRoutingsSelectionRule) {
  const model::ModelConfig& c = container_->manifest().config;
  const fs::path path =
      fs::temp_directory_path() / absl::StrCat("colibri_mla_trace_", ::getpid(), ".jsonl");
  auto backend = backend::CreateCpuBackend({.threads = 2});
  {
    auto trace = expert_source::RoutingTraceWriter::Open(
        path, {"mla", static_cast<int>(c.n_layers), static_cast<int>(c.n_experts),
               static_cast<int>(c.top_k), container_->manifest().experts[0].padded_size,
               /*lookahead_layers=*/2});
    ASSERT_TRUE(trace.ok()) << trace.status();
    auto model = Model::Load(*container_, backend.get(), disk_.get(),
                             {.prefetch_layers = 2, .trace = trace->get()});
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(GreedyDecode(**model, kPrompt, 6).ok());
    ASSERT_TRUE((*trace)->Flush().ok());
    // Every routed expert of layers 2.. was predicted (layer 1 follows the dense layer 0, whose
    // predictions are counted too).
    EXPECT_EQ((*model)->counters().prefetch_predicted_routed.load(),
              (*model)->counters().prefetch_routed.load());
  }
  auto t = expert_source::ReadTrace(path);
  fs::remove(path);
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<std::tuple<int64_t, int64_t, int32_t>, const expert_source::TraceRecord*> by_layer;
  for (const auto& r : t->records) by_layer[{r.step, r.item, r.layer}] = &r;
  const int64_t per_group = c.n_experts / c.n_expert_groups;
  int compared = 0, plain_top_k_differs = 0;
  for (const auto& r : t->records) {
    // Weights: the chosen sigmoid scores renormalised to 1, times routed_scaling_factor 2.5.
    EXPECT_NEAR(std::accumulate(r.weights.begin(), r.weights.end(), 0.0f), 2.5f,
                1e-3);  // the trace keeps 4 decimals
    // At most topk_groups groups hold the chosen experts.
    std::vector<int64_t> groups;
    for (int32_t e : r.experts) groups.push_back(e / per_group);
    std::sort(groups.begin(), groups.end());
    EXPECT_LE(std::unique(groups.begin(), groups.end()) - groups.begin(), c.topk_groups);
    // The top-k of the scores alone (no bias, no groups) is not the rule: it differs somewhere.
    std::vector<int32_t> order(static_cast<size_t>(c.n_experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return r.probs[static_cast<size_t>(a)] > r.probs[static_cast<size_t>(b)];
    });
    std::vector<int32_t> plain(order.begin(), order.begin() + c.top_k), chosen = r.experts;
    std::sort(plain.begin(), plain.end());
    std::sort(chosen.begin(), chosen.end());
    plain_top_k_differs += plain != chosen;
    for (size_t d = 0; d < r.lookahead.size(); ++d) {
      auto next = by_layer.find({r.step, r.item, r.layer + static_cast<int32_t>(d) + 1});
      if (next == by_layer.end()) continue;  // beyond the last layer
      EXPECT_EQ(r.lookahead[d], next->second->experts)
          << "step " << r.step << " row " << r.item << " layer " << r.layer << " + " << d + 1;
      ++compared;
    }
  }
  EXPECT_GT(compared, 50);
  EXPECT_GT(plain_top_k_differs, 0);
}

// What `rec` (passing everything on) was asked to prefetch since the last call.
std::set<std::pair<int32_t, int32_t>> TakePrefetched(expert_source::testing::RecordingSource& rec) {
  std::set<std::pair<int32_t, int32_t>> out;
  for (const auto& id : rec.TakePrefetched()) out.insert({id.layer, id.expert});
  return out;
}

TEST_F(MlaLookaheadTest, PrefetchMinWeightIsAShareOfTheUnscaledWeights) {
  // --prefetch-min-weight 0.33 with routed_scaling_factor 2.5: an expert is prefetched when its
  // predicted weight is at least 0.33 of the renormalised (unscaled) weights, i.e. >= 0.825 scaled.
  const model::ModelConfig& c = container_->manifest().config;
  constexpr float kMin = 0.33f;
  const float scale = static_cast<float>(c.routed_scaling_factor);
  const fs::path path =
      fs::temp_directory_path() / absl::StrCat("colibri_mla_minw_", ::getpid(), ".jsonl");
  auto backend = backend::CreateCpuBackend({.threads = 2});
  expert_source::testing::RecordingSource rec(disk_.get());
  std::vector<std::set<std::pair<int32_t, int32_t>>> prefetched;  // per forward pass
  {
    auto trace = expert_source::RoutingTraceWriter::Open(
        path, {"mla", static_cast<int>(c.n_layers), static_cast<int>(c.n_experts),
               static_cast<int>(c.top_k), container_->manifest().experts[0].padded_size,
               /*lookahead_layers=*/1});
    ASSERT_TRUE(trace.ok()) << trace.status();
    auto model =
        Model::Load(*container_, backend.get(), &rec,
                    {.prefetch_layers = 1, .prefetch_min_weight = kMin, .trace = trace->get()});
    ASSERT_TRUE(model.ok()) << model.status();
    auto cache = (*model)->NewCache();
    std::vector<BatchItem> batch;
    for (size_t i = 0; i < kPrompt.size(); ++i) {
      batch.push_back({cache.get(), kPrompt[i], static_cast<int32_t>(i), i + 1 == kPrompt.size()});
    }
    for (int step = 0; step < 6; ++step) {
      std::vector<float> logits;
      ASSERT_TRUE((*model)->Forward(batch, &logits).ok());
      prefetched.push_back(TakePrefetched(rec));
      const auto next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      batch = {{cache.get(), next, static_cast<int32_t>(cache->n_past()), true}};
    }
    ASSERT_TRUE((*trace)->Flush().ok());
  }
  auto t = expert_source::ReadTrace(path);
  fs::remove(path);
  ASSERT_TRUE(t.ok()) << t.status();
  // What the rule gives from the routing of each pass (the predictions equal it on this model,
  // see PredictionsUseTheRoutingsSelectionRule), and what a threshold on the scaled weights would.
  std::vector<std::set<std::pair<int32_t, int32_t>>> want(prefetched.size()),
      scaled_rule(prefetched.size());
  for (const auto& r : t->records) {
    ASSERT_LT(static_cast<size_t>(r.step), want.size());
    for (size_t k = 0; k < r.experts.size(); ++k) {
      ASSERT_GT(std::abs(r.weights[k] - kMin * scale), 1e-3)
          << "a weight at the threshold: pick another";
      if (r.weights[k] >= kMin * scale)
        want[static_cast<size_t>(r.step)].insert({r.layer, r.experts[k]});
      if (r.weights[k] >= kMin)
        scaled_rule[static_cast<size_t>(r.step)].insert({r.layer, r.experts[k]});
    }
  }
  size_t n = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(prefetched[s], want[s]) << "forward pass " << s;
    n += want[s].size();
  }
  EXPECT_GT(n, 0u);
  EXPECT_NE(want, scaled_rule);  // the unscaled share is what counts, and it makes a difference
}

}  // namespace
}  // namespace colibri::engine
