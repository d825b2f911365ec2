// The MTP / NextN drafter: the layer loaded from extra.bin as a one-layer model, drafting from
// the target's hidden states; greedy output identical to plain decoding on a DeepSeek-shaped
// (latent attention, kv_b split at load) and a GLM-shaped (grouped-query attention with partial
// RoPE, sigmoid routing with groups) synthetic model whose MTP layer has the importers' names.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "colibri/backend/cpu_backend.h"
#include "colibri/engine/engine.h"
#include "colibri/engine/sampler.h"
#include "colibri/engine/speculative.h"
#include "colibri/engine/testing/test_model.h"

namespace colibri::engine {
namespace {

// The DeepSeek-shaped test model's routing (sigmoid with the selection bias, groups, a shared
// expert, layer 0 dense) with GLM-4.5's attention: grouped-query heads, half of each head rotated.
model::SyntheticModelOptions GlmShapedOptions(std::string name, uint64_t seed) {
  model::SyntheticModelOptions o = SmallMlaTestModelOptions(std::move(name), seed);
  model::ModelConfig& c = o.config;
  c.architecture = model::Architecture::kGlm4Moe;
  c.q_lora_rank = c.kv_lora_rank = c.qk_nope_head_dim = c.qk_rope_head_dim = c.v_head_dim = 0;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.rope_dims = c.head_dim / 2;  // partial_rotary_factor 0.5
  c.rope_style = model::RopeStyle::kHalfSplit;
  c.routed_scaling_factor = 1.5;
  return o;
}

struct Shape {
  const char* name;
  bool mla;
};

class MtpEngineTest : public testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    model::SyntheticModelOptions o =
        GetParam().mla ? SmallMlaTestModelOptions("mtp_mla", 41) : GlmShapedOptions("mtp_glm", 42);
    o.config.nextn_layers = 1;
    auto dir = TestModelDir::Write(std::string("mtp_") + GetParam().name, o);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
    auto opened = dir_->Open();
    ASSERT_TRUE(opened.ok()) << opened.status();
    opened_ = std::move(*opened);
    backend_ = backend::CreateCpuBackend({.threads = 2});
    auto m = Model::Load(*opened_.container, backend_.get(), opened_.disk.get());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    auto mtp = model_->LoadMtp(*opened_.container);
    ASSERT_TRUE(mtp.ok()) << mtp.status();
    mtp_ = std::move(*mtp);
  }

  GenerationResult Run(Engine& e, std::vector<int32_t> prompt, int64_t n) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.ignore_eos = true;
    auto res = e.Generate(r, [](const SampledToken&) { return true; });
    EXPECT_TRUE(res.ok()) << res.status();
    return res.ok() ? *res : GenerationResult{};
  }

  EngineOptions Options(SpeculativeMode mode, int draft_max) {
    EngineOptions eo;
    eo.speculative = mode;
    eo.draft_max = draft_max;
    eo.mtp_model = mtp_.get();
    return eo;
  }

  std::unique_ptr<TestModelDir> dir_;
  OpenedTestModel opened_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<Model> model_, mtp_;
};

TEST_P(MtpEngineTest, TheLayerLoadsAsAOneLayerModelWithItsExpertsInRam) {
  EXPECT_TRUE(mtp_->is_mtp());
  EXPECT_FALSE(model_->is_mtp());
  EXPECT_EQ(mtp_->config().n_layers, 1);
  EXPECT_EQ(mtp_->config().n_moe_layers(), 1);
  EXPECT_EQ(static_cast<int64_t>(mtp_->manifest().experts.size()), model_->config().n_experts);
  // Its forward pass needs the target's hidden states.
  auto cache = mtp_->NewCache();
  std::vector<BatchItem> batch = {{cache.get(), 3, 0, true}};
  std::vector<float> logits;
  EXPECT_EQ(mtp_->Forward(batch, &logits).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(MtpEngineTest, GreedyOutputIsIdenticalToPlainDecoding) {
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 5, 9, 2, 7, 3, 1, 5, 9, 2, 7, 3, 1, 5}, {3, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9}, {7}};
  for (int draft_max : {1, 3}) {
    Engine plain(model_.get(), Options(SpeculativeMode::kOff, draft_max));
    Engine mtp(model_.get(), Options(SpeculativeMode::kMtp, draft_max));
    for (const auto& prompt : prompts) {
      SCOPED_TRACE(testing::Message()
                   << "draft_max " << draft_max << ", prompt of " << prompt.size());
      const GenerationResult a = Run(plain, prompt, 24);
      const GenerationResult b = Run(mtp, prompt, 24);
      ASSERT_EQ(a.tokens.size(), 24u);
      EXPECT_EQ(b.tokens, a.tokens);
      EXPECT_EQ(a.verify_passes, 0);
      EXPECT_GT(b.verify_passes, 0);
      EXPECT_GT(b.draft_tokens, 0);
      EXPECT_LE(b.accepted_draft_tokens, b.draft_tokens);
      EXPECT_LE(b.draft_tokens, b.verify_passes * draft_max);
    }
    // The next turn continues a pooled KV cache: the MTP layer starts where the hidden states
    // do (after the reused prefix), and the output is still the plain one.
    std::vector<int32_t> turn = prompts[1];
    const GenerationResult first = Run(plain, turn, 8);
    turn.insert(turn.end(), first.tokens.begin(), first.tokens.end());
    turn.insert(turn.end(), {4, 8, 15});
    Run(mtp, prompts[1], 8);  // leaves its cache in mtp's pool
    const GenerationResult a = Run(plain, turn, 16);
    const GenerationResult b = Run(mtp, turn, 16);
    EXPECT_GT(b.cached_prompt_tokens, 0);
    EXPECT_EQ(b.tokens, a.tokens);
    EXPECT_GT(b.verify_passes, 0);
  }
}

TEST_P(MtpEngineTest, AutoDraftsWithTheMtpLayer) {
  // auto without a draft model drafts with the MTP layer: the controller probes (at least the
  // first verify pass after a measured plain step) and the output is the plain one.
  Engine plain(model_.get(), Options(SpeculativeMode::kOff, 3));
  Engine aut(model_.get(), Options(SpeculativeMode::kAuto, 3));
  const std::vector<int32_t> prompt = {2, 4, 6, 8, 10, 12};
  const GenerationResult a = Run(plain, prompt, 24);
  const GenerationResult b = Run(aut, prompt, 24);
  EXPECT_EQ(b.tokens, a.tokens);
  EXPECT_GT(b.verify_passes, 0);
}

TEST_P(MtpEngineTest, FirstDraftIsTheLayersPredictionAfterThePendingToken) {
  // By hand: the target's hidden states of the context but its last (pending) token, then the
  // MTP rows (h_j, t[j+1]) at positions j; the last row's argmax is the drafter's first draft,
  // and feeding that row's output back with the draft gives the second.
  const std::vector<int32_t> context = {1, 5, 9, 2, 7, 3, 11};
  const int64_t H = model_->config().hidden_size, n = static_cast<int64_t>(context.size()) - 1;
  auto cache = model_->NewCache();
  std::vector<BatchItem> batch;
  for (int64_t i = 0; i < n; ++i)
    batch.push_back({cache.get(), context[static_cast<size_t>(i)], static_cast<int32_t>(i), false});
  std::vector<float> hidden;
  HiddenIo io{nullptr, &hidden};
  ASSERT_TRUE(model_->Forward(batch, nullptr, nullptr, &io).ok());
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), n * H);

  auto mcache = mtp_->NewCache();
  std::vector<BatchItem> rows;
  for (int64_t j = 0; j < n; ++j) {
    rows.push_back(
        {mcache.get(), context[static_cast<size_t>(j + 1)], static_cast<int32_t>(j), j == n - 1});
  }
  std::vector<float> logits, out;
  HiddenIo mio{hidden.data(), &out};
  ASSERT_TRUE(mtp_->Forward(rows, &logits, nullptr, &mio).ok());
  const int32_t d1 = ArgMax(logits);
  std::vector<float> prev(out.end() - H, out.end());
  logits.clear();
  HiddenIo chained{prev.data(), nullptr};
  std::vector<BatchItem> next = {{mcache.get(), d1, static_cast<int32_t>(n), true}};
  ASSERT_TRUE(mtp_->Forward(next, &logits, nullptr, &chained).ok());
  const int32_t d2 = ArgMax(logits);

  MtpDrafter drafter(mtp_.get());
  EXPECT_TRUE(drafter.Draft(context, 2)->empty());  // no hidden states yet: no guess
  // The hidden states in two passes, the second recomputing one position.
  drafter.ObserveHidden(0, hidden.data(), 4);
  drafter.ObserveHidden(3, hidden.data() + 3 * H, n - 3);
  auto drafts = drafter.Draft(context, 2);
  ASSERT_TRUE(drafts.ok()) << drafts.status();
  EXPECT_EQ(*drafts, (std::vector<int32_t>{d1, d2}));
  // The chained row is dropped again: after one more target pass, drafting gives what a fresh
  // drafter given all the hidden states at once gives.
  std::vector<float> h2;
  HiddenIo io2{nullptr, &h2};
  std::vector<BatchItem> pending = {{cache.get(), context.back(), static_cast<int32_t>(n), false}};
  ASSERT_TRUE(model_->Forward(pending, nullptr, nullptr, &io2).ok());
  std::vector<int32_t> longer = context;
  longer.push_back(d1);
  drafter.ObserveHidden(n, h2.data(), 1);
  auto again = drafter.Draft(longer, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  MtpDrafter fresh(mtp_.get());
  std::vector<float> all = hidden;
  all.insert(all.end(), h2.begin(), h2.end());
  fresh.ObserveHidden(0, all.data(), n + 1);
  auto expected = fresh.Draft(longer, 1);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_EQ(expected->size(), 1u);
  EXPECT_EQ(*again, *expected);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MtpEngineTest,
                         testing::Values(Shape{"deepseek", true}, Shape{"glm", false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(MtpModelTest, AModelWithoutTheLayerIsAFailedPrecondition) {
  auto dir = TestModelDir::Write("mtp_none", SmallTestModelOptions("no_mtp", 7));
  ASSERT_TRUE(dir.ok()) << dir.status();
  auto opened = (*dir)->Open();
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto be = backend::CreateCpuBackend({.threads = 1});
  auto m = Model::Load(*opened->container, be.get(), opened->disk.get());
  ASSERT_TRUE(m.ok()) << m.status();
  auto mtp = (*m)->LoadMtp(*opened->container);
  ASSERT_EQ(mtp.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(mtp.status().message().find("no MTP/NextN layer"), std::string::npos) << mtp.status();
}

}  // namespace
}  // namespace colibri::engine
