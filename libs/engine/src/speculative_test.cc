// Speculative decoding: drafters, the acceptance rule's distribution, the controller, and the
// engine's verify passes (greedy output identical to plain decoding, KV rolled back exactly).
#include "colibri/engine/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "colibri/backend/cpu_backend.h"
#include "colibri/engine/engine.h"
#include "colibri/engine/resident_experts.h"
#include "colibri/engine/testing/test_model.h"

namespace colibri::engine {
namespace {

TEST(NgramDrafterTest, ProposesWhatFollowedTheLatestMatch) {
  NgramDrafter d(1, 3);
  // "5 6 7" occurred twice; the latest occurrence (at 5) was followed by 9 1.
  const std::vector<int32_t> c = {5, 6, 7, 8, 2, 5, 6, 7, 9, 1, 4, 5, 6, 7};
  auto out = d.Draft(c, 4);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, (std::vector<int32_t>{9, 1, 4, 5}));
  // Fewer tokens than asked when the match is near the end; none without a match.
  EXPECT_EQ(*d.Draft(std::vector<int32_t>{3, 4, 3}, 5), (std::vector<int32_t>{4, 3}));
  EXPECT_TRUE(d.Draft(std::vector<int32_t>{1, 2, 3}, 4)->empty());
  EXPECT_TRUE(d.Draft(c, 0)->empty());
  // A repeating pattern continues through the overlap.
  EXPECT_EQ(*d.Draft(std::vector<int32_t>{8, 8, 8}, 3), (std::vector<int32_t>{8}));
}

TEST(ParseSpeculativeModeTest, NamesRoundTripAndBadNamesAreRefused) {
  for (auto m : {SpeculativeMode::kOff, SpeculativeMode::kAuto, SpeculativeMode::kNgram,
                 SpeculativeMode::kSelf, SpeculativeMode::kDraft, SpeculativeMode::kMtp}) {
    EXPECT_EQ(*ParseSpeculativeMode(SpeculativeModeName(m)), m);
  }
  EXPECT_EQ(ParseSpeculativeMode("eagle").status().code(), absl::StatusCode::kInvalidArgument);
}

// Rejection sampling against a point-mass draft must leave the target distribution as it is.
// Chi-square over 8 outcomes (7 degrees of freedom): 30 is far above the 0.9999 quantile (~24),
// so a correct rule fails with probability < 1e-4 (and the seeds are fixed), while the usual
// mistakes land orders of magnitude above it (checked below on their exact distributions).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    const double e = p[i] * n;
    x += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x;
}

TEST(SampleDraftTest, RejectionSamplingKeepsTheTargetDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.seed = 12345;
  // The target: softmax(logits / T).
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp(logits[i] / 0.8);
  for (double& v : p) v /= z;
  constexpr int kN = 40000;
  for (int32_t draft : {0, 3, 7}) {
    SCOPED_TRACE(testing::Message() << "draft " << draft);
    Sampler s(params);
    std::vector<int> counts(logits.size(), 0);
    int accepted = 0;
    for (int i = 0; i < kN; ++i) {
      std::vector<float> l = logits;
      bool ok = false;
      const SampledToken t = s.SampleDraft(l, {}, draft, &ok);
      EXPECT_EQ(ok, t.id == draft);
      counts[static_cast<size_t>(t.id)]++;
      accepted += ok;
    }
    EXPECT_LT(ChiSquare(counts, p, kN), 30.0);
    // The acceptance rate is p(draft).
    EXPECT_NEAR(static_cast<double>(accepted) / kN, p[static_cast<size_t>(draft)], 0.015);
    // Wrong rules the test would catch: always accepting the draft, or redrawing from the whole
    // p after a rejection (p(d) + (1 - p(d)) p(d) for the draft).
    std::vector<double> redraw = p;
    for (size_t i = 0; i < p.size(); ++i) redraw[i] = (1 - p[static_cast<size_t>(draft)]) * p[i];
    redraw[static_cast<size_t>(draft)] += p[static_cast<size_t>(draft)];
    std::vector<int> expected_redraw(p.size());
    for (size_t i = 0; i < p.size(); ++i)
      expected_redraw[i] = static_cast<int>(std::lround(redraw[i] * kN));
    EXPECT_GT(ChiSquare(expected_redraw, p, kN), 30.0);
  }
}

TEST(SampleDraftTest, FilteredDraftIsAlwaysRejectedAndGreedyComparesTheArgmax) {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 2;
  Sampler s(params);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = logits;
    bool ok = true;
    const SampledToken t = s.SampleDraft(l, {}, /*draft=*/3, &ok);  // outside the top 2: p = 0
    EXPECT_FALSE(ok);
    EXPECT_TRUE(t.id == 0 || t.id == 1) << t.id;
  }
  Sampler greedy(SamplingParams{});
  std::vector<float> l = logits;
  bool ok = false;
  EXPECT_EQ(greedy.SampleDraft(l, {}, 0, &ok).id, 0);
  EXPECT_TRUE(ok);
  l = logits;
  EXPECT_EQ(greedy.SampleDraft(l, {}, 2, &ok).id, 0);
  EXPECT_FALSE(ok);
}

TEST(SpeculationControllerTest, DraftsWhenItPaysAndStopsWhenItDoesNot) {
  PassCosts costs(5);
  SpeculationController c(4, /*adaptive=*/true);
  EXPECT_EQ(c.DraftLength(costs), 0);  // no plain step measured yet
  costs.Record(1, 0.010);
  // The drafter is not measured yet: one token first.
  EXPECT_EQ(c.DraftLength(costs), 1);
  costs.RecordDraft(1, 0.0002);
  EXPECT_DOUBLE_EQ(costs.DraftSecondsPerToken(), 0.0002);
  // Unmeasured pass sizes are assumed to cost what the widest measured one does: the longest
  // draft is tried first (disk-bound, a wide pass may cost little more than a narrow one).
  EXPECT_DOUBLE_EQ(SpeculationController::PassSeconds(5, costs), 0.010);
  EXPECT_EQ(c.DraftLength(costs), 4);
  // Disk-bound: passes cost 1 + 0.15 per extra row, and every draft is accepted.
  for (int rows = 2; rows <= 5; ++rows) costs.Record(rows, 0.010 * (1 + 0.15 * (rows - 1)));
  for (int i = 0; i < 20; ++i) c.Observe(4, 4);
  EXPECT_GT(c.acceptance(), 0.9);
  EXPECT_EQ(c.DraftLength(costs), 4);
  EXPECT_GT(c.Gain(4, costs), 2.0);
  // A wider pass measured cheaper than a narrower one caps it (the narrower was measured cold).
  {
    PassCosts cold(3);
    cold.Record(1, 0.050);
    cold.Record(3, 0.012);
    EXPECT_DOUBLE_EQ(cold.Seconds(1), 0.012);
    EXPECT_DOUBLE_EQ(cold.Seconds(3), 0.012);
    cold.Record(2, 0.020);  // dearer than the wider one: kept as measured
    EXPECT_DOUBLE_EQ(cold.Seconds(2), 0.020);
    EXPECT_DOUBLE_EQ(cold.Seconds(1), 0.012);
  }
  // Nothing accepted: no draft length pays; it stays off, probing one token after 64 plain
  // steps, then after 128, 256, ... (each probe that finds nothing doubles the wait).
  for (int i = 0; i < 40; ++i) c.Observe(4, 0);
  EXPECT_LT(c.acceptance(), 0.1);
  std::vector<int> probe_steps;
  for (int i = 1; i <= 64 + 128 + 256; ++i) {
    const int k = c.DraftLength(costs);
    if (k > 0) probe_steps.push_back(i);
    EXPECT_LE(k, 1);
  }
  EXPECT_EQ(probe_steps, (std::vector<int>{64, 64 + 128, 64 + 128 + 256}));
  // A probe that is accepted turns drafting back on, and the wait starts again from 64.
  for (int i = 0; i < 60; ++i) c.Observe(1, 1);
  EXPECT_EQ(c.DraftLength(costs), 4);
  for (int i = 0; i < 40; ++i) c.Observe(4, 0);
  int probes = 0;
  for (int i = 0; i < 64; ++i) probes += c.DraftLength(costs);
  EXPECT_EQ(probes, 1);
  // Slow drafting (a draft model's tokens cost a plain step each) does not pay even when right,
  // and is not probed: at those costs no acceptance could pay.
  PassCosts slow_costs(5);
  for (int rows = 1; rows <= 5; ++rows) slow_costs.Record(rows, 0.010 * (1 + 0.15 * (rows - 1)));
  slow_costs.RecordDraft(4, 4 * 0.010);
  SpeculationController slow(4, true);
  for (int i = 0; i < 20; ++i) slow.Observe(4, 4);
  EXPECT_LT(slow.Gain(4, slow_costs), SpeculationController::kMinGain);
  probes = 0;
  for (int i = 0; i < 2048; ++i) probes += slow.DraftLength(slow_costs);
  EXPECT_EQ(probes, 0);
  // Compute-bound passes (5 rows cost 5 steps) never pay, even with every draft accepted.
  PassCosts linear(5);
  for (int i = 1; i <= 5; ++i) linear.Record(i, 0.010 * i);
  linear.RecordDraft(1, 0.0002);
  SpeculationController d(4, true);
  for (int i = 0; i < 20; ++i) d.Observe(4, 4);
  EXPECT_LT(d.Gain(4, linear), 1.0);
  EXPECT_LT(d.Gain(1, linear), SpeculationController::kMinGain);
  probes = 0;
  for (int i = 0; i < 2048; ++i) probes += d.DraftLength(linear);
  EXPECT_EQ(probes, 0);
  // Fixed: always draft_max.
  SpeculationController fixed(3, false);
  EXPECT_EQ(fixed.DraftLength(PassCosts(4)), 3);
}

// Turning drafting on first pays the drafter's catch-up: a long context with few tokens left
// does not earn it back, the same context with many tokens left does.
TEST(SpeculationControllerTest, CatchUpIsPaidOnlyWhenTheTokensLeftEarnItBack) {
  PassCosts costs(5);
  for (int rows = 1; rows <= 5; ++rows) costs.Record(rows, 0.010 * (1 + 0.15 * (rows - 1)));
  costs.RecordDraft(1, 0.0005);
  // Until measured, a catch-up token costs a plain step.
  EXPECT_DOUBLE_EQ(costs.CatchUpSecondsPerToken(), 0.010);
  costs.RecordCatchUp(100, 0.1);
  EXPECT_DOUBLE_EQ(costs.CatchUpSecondsPerToken(), 0.001);
  SpeculationController c(4, /*adaptive=*/true);
  for (int i = 0; i < 20; ++i) c.Observe(4, 4);  // every draft accepted: a gain above 2
  ASSERT_GT(c.Gain(4, costs), 2.0);
  // 2000 tokens behind (2 s of catch-up) against 100 tokens left (at most 1 s of plain steps).
  EXPECT_EQ(c.DraftLength(costs, 2000, 100), 0);
  EXPECT_EQ(c.DraftLength(costs, 2000, 4000), 4);
  EXPECT_EQ(c.DraftLength(costs, 0, 100), 4);  // nothing to catch up
  // Off, a probe is skipped when even full acceptance could not earn the catch-up back.
  for (int i = 0; i < 60; ++i) c.Observe(4, 0);
  int probes = 0;
  for (int i = 0; i < 256; ++i) probes += c.DraftLength(costs, 2000, 100);
  EXPECT_EQ(probes, 0);
  for (int i = 0; i < 256; ++i) probes += c.DraftLength(costs, 64, 4000);
  EXPECT_GT(probes, 0);
}

// A new sequence starts from the engine's acceptance over earlier ones: after a drafter that was
// always right, drafting pays from the first pass instead of waiting for a probe.
TEST(SpeculationControllerTest, NewSequencesStartFromTheEnginesAcceptance) {
  PassCosts costs(5);
  // Disk-bound passes, but wide ones dear enough that the 1/2 prior does not pay.
  for (int rows = 1; rows <= 5; ++rows) costs.Record(rows, 0.010 * (1 + 0.5 * (rows - 1)));
  costs.RecordDraft(4, 0.0004);
  EXPECT_DOUBLE_EQ(costs.Acceptance(), 0.5);
  SpeculationController fresh(4, true, costs.Acceptance());
  EXPECT_EQ(fresh.DraftLength(costs), 0);
  for (int i = 0; i < 30; ++i) costs.RecordAcceptance(4, 4);
  EXPECT_GT(costs.Acceptance(), 0.9);
  SpeculationController next(4, true, costs.Acceptance());
  EXPECT_GT(next.acceptance(), 0.9);
  EXPECT_EQ(next.DraftLength(costs), 4);
}

// What a tune profile keeps: every measured cost round-trips; malformed fields are named.
TEST(SpeculationControllerTest, PassCostsRoundTripThroughJson) {
  PassCosts c(5);
  for (int rows = 1; rows <= 5; ++rows) c.Record(rows, 0.010 * rows);
  c.RecordDraft(2, 0.003);
  c.RecordCatchUp(10, 0.02);
  c.RecordAcceptance(4, 3);
  auto back = PassCosts::FromJson(c.ToJson(), 5);
  ASSERT_TRUE(back.ok()) << back.status();
  for (int rows = 1; rows <= 5; ++rows) EXPECT_DOUBLE_EQ(back->Seconds(rows), c.Seconds(rows));
  EXPECT_DOUBLE_EQ(back->DraftSecondsPerToken(), 0.0015);
  EXPECT_DOUBLE_EQ(back->CatchUpSecondsPerToken(), 0.002);
  EXPECT_DOUBLE_EQ(back->Acceptance(), c.Acceptance());
  // Fewer rows than measured: the wider ones are dropped.
  auto narrow = PassCosts::FromJson(c.ToJson(), 3);
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ(narrow->max_rows(), 3);
  EXPECT_DOUBLE_EQ(narrow->Seconds(3), 0.030);
  nlohmann::json bad = c.ToJson();
  bad["pass_seconds"][1] = -1;
  EXPECT_NE(PassCosts::FromJson(bad, 5).status().message().find("pass_seconds"), std::string::npos);
  bad = c.ToJson();
  bad.erase("draft_seconds_per_token");
  EXPECT_NE(PassCosts::FromJson(bad, 5).status().message().find("draft_seconds_per_token"),
            std::string::npos);
  EXPECT_FALSE(PassCosts::FromJson(nlohmann::json::array(), 5).ok());
}

// The engine with speculation against the engine without, on one synthetic model per suite.
struct Variant {
  const char* name;
  uint64_t seed;
  bool sliding;
  int64_t shared_ffn;
};

class SpeculativeEngineTest : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const Variant& v = GetParam();
    model::SyntheticModelOptions o = SmallTestModelOptions(v.name, v.seed);
    if (v.sliding) {
      o.config.sliding_window = 3;
      o.config.sliding_layers = {true, false, true, false};
    }
    if (v.shared_ffn > 0) {
      o.config.shared_expert_ffn = v.shared_ffn;
      o.config.shared_expert_gated = true;
    }
    auto dir = TestModelDir::Write(std::string("speculative_") + v.name, o);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::move(*dir);
    backend_ = backend::CreateCpuBackend({.threads = 2});
    for (auto* slot : {&target_, &drafter_}) {
      auto opened = dir_->Open();
      ASSERT_TRUE(opened.ok()) << opened.status();
      auto m = Model::Load(*opened->container, backend_.get(), opened->disk.get());
      ASSERT_TRUE(m.ok()) << m.status();
      slot->opened = std::move(*opened);
      slot->model = std::move(*m);
    }
  }

  struct Loaded {
    OpenedTestModel opened;
    std::unique_ptr<Model> model;
  };

  GenerationResult Run(SpeculativeMode mode, Model* draft_model, std::vector<int32_t> prompt,
                       int64_t n, SamplingParams sampling = {}, std::vector<int32_t> stops = {},
                       int64_t min_tokens = 0, std::optional<PassCosts> costs = std::nullopt) {
    EngineOptions eo;
    eo.speculative = mode;
    eo.draft_max = 4;
    eo.draft_model = draft_model;
    eo.speculation_costs = std::move(costs);
    Engine e(target_.model.get(), eo);
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.ignore_eos = true;
    r.sampling = sampling;
    r.stop_tokens = std::move(stops);
    r.min_tokens = min_tokens;
    auto res = e.Generate(r, [](const SampledToken&) { return true; });
    EXPECT_TRUE(res.ok()) << res.status();
    return res.ok() ? *res : GenerationResult{};
  }

  // Greedy decoding with speculation: the tokens of plain decoding, and some verify passes.
  GenerationResult ExpectPlainTokens(SpeculativeMode mode, Model* draft_model,
                                     const std::vector<int32_t>& prompt, int64_t n) {
    const GenerationResult plain = Run(SpeculativeMode::kOff, nullptr, prompt, n);
    EXPECT_EQ(plain.verify_passes, 0);
    GenerationResult spec = Run(mode, draft_model, prompt, n);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_GT(spec.verify_passes, 0);
    return spec;
  }

  std::unique_ptr<TestModelDir> dir_;
  std::unique_ptr<backend::Backend> backend_;
  Loaded target_, drafter_;
};

TEST_P(SpeculativeEngineTest, GreedyOutputIsIdenticalForEveryDrafter) {
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 1, 5, 9, 2, 7, 3, 1, 5};
  const GenerationResult plain = Run(SpeculativeMode::kOff, nullptr, prompt, 40);
  ASSERT_EQ(plain.tokens.size(), 40u);
  EXPECT_EQ(plain.verify_passes, 0);
  // The n-gram drafter (prompt lookup), the same weights as a draft model (every draft accepted:
  // the all-accept path), and auto's controller.
  const GenerationResult ngram = Run(SpeculativeMode::kNgram, nullptr, prompt, 40);
  EXPECT_EQ(ngram.tokens, plain.tokens);
  EXPECT_GT(ngram.verify_passes, 0);
  EXPECT_GT(ngram.draft_tokens, 0);
  const GenerationResult self = Run(SpeculativeMode::kDraft, drafter_.model.get(), prompt, 40);
  EXPECT_EQ(self.tokens, plain.tokens);
  EXPECT_GT(self.verify_passes, 0);
  EXPECT_EQ(self.accepted_draft_tokens, self.draft_tokens);
  // Each pass yields its accepted drafts plus one token of its own: fewer passes than tokens.
  EXPECT_LT(self.verify_passes, 20);
  const GenerationResult aut = Run(SpeculativeMode::kAuto, nullptr, prompt, 40);
  EXPECT_EQ(aut.tokens, plain.tokens);
}

// CatchUp feeds what the drafter has not seen (all but the last token) and changes nothing it
// drafts: the same tokens as a drafter that catches up inside Draft.
TEST_P(SpeculativeEngineTest, ModelDrafterCatchUpIsTheSameAsDraftingAtOnce) {
  const std::vector<int32_t> context = {1, 5, 9, 2, 7, 3, 1, 5, 9, 2};
  ModelDrafter at_once(drafter_.model.get());
  ASSERT_EQ(at_once.Behind(context), 9);
  auto want = at_once.Draft(context, 4);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), 4u);
  ModelDrafter caught(target_.model.get());
  ASSERT_TRUE(caught.CatchUp(context).ok());
  EXPECT_EQ(caught.Behind(context), 0);
  auto got = caught.Draft(context, 4);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  // Two more tokens of context (a step's and the pending one): the first was the drafter's own
  // first draft, which it fed while drafting (nothing to catch up); any other is one token.
  std::vector<int32_t> longer = context;
  longer.push_back((*got)[0]);
  longer.push_back(11);
  EXPECT_EQ(caught.Behind(longer), 0);
  longer[context.size()] = (*got)[0] == 3 ? 4 : 3;
  EXPECT_EQ(caught.Behind(longer), 1);
}

// auto starts from the costs it is given (a tune profile's): told that drafting costs ten plain
// steps a token, it never drafts; measuring from scratch, it tries.
TEST_P(SpeculativeEngineTest, AutoStartsFromTheCostsItIsGiven) {
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3};
  const GenerationResult fresh =
      Run(SpeculativeMode::kAuto, drafter_.model.get(), prompt, 24, {}, {}, 0);
  EXPECT_GT(fresh.verify_passes, 0);
  PassCosts slow(5);
  for (int rows = 1; rows <= 5; ++rows) slow.Record(rows, 0.001 * rows);
  slow.RecordDraft(1, 0.010);
  const GenerationResult told =
      Run(SpeculativeMode::kAuto, drafter_.model.get(), prompt, 24, {}, {}, 0, slow);
  EXPECT_EQ(told.verify_passes, 0);
  EXPECT_EQ(told.tokens, fresh.tokens);
}

TEST_P(SpeculativeEngineTest, RejectedDraftsAreRolledBackExactly) {
  // A draft model with other weights: most drafts are wrong, so most passes roll back.
  model::SyntheticModelOptions o = SmallTestModelOptions("other", GetParam().seed + 1000);
  auto other_dir = TestModelDir::Write(std::string("speculative_other_") + GetParam().name, o);
  ASSERT_TRUE(other_dir.ok()) << other_dir.status();
  auto opened = (*other_dir)->Open();
  ASSERT_TRUE(opened.ok());
  auto other = Model::Load(*opened->container, backend_.get(), opened->disk.get());
  ASSERT_TRUE(other.ok()) << other.status();
  const GenerationResult spec = ExpectPlainTokens(SpeculativeMode::kDraft, other->get(),
                                                  {3, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9}, 32);
  EXPECT_LT(spec.accepted_draft_tokens, spec.draft_tokens);
}

TEST_P(SpeculativeEngineTest, SamplingKeepsTheDistributionOverSeeds) {
  // The same weights drafting: the draft after the first sampled token t0 is the greedy token g
  // after t0, which the second token t1 then equals with the target's probability p(g). Over
  // many seeds, how often t1 == g must match plain sampling: always accepting gives 1, redrawing
  // from the whole p after a rejection p + (1 - p) p.
  SamplingParams sp;
  sp.temperature = 1.0f;
  constexpr int kSeeds = 300;
  const std::vector<int32_t> prompt = {2, 4, 6, 8};
  std::map<int32_t, int32_t> greedy_after;  // t0 -> g
  auto greedy = [&](int32_t t0) {
    auto it = greedy_after.find(t0);
    if (it != greedy_after.end()) return it->second;
    std::vector<int32_t> p = prompt;
    p.push_back(t0);
    const int32_t g = Run(SpeculativeMode::kOff, nullptr, p, 1).tokens.at(0);
    greedy_after[t0] = g;
    return g;
  };
  int plain_hits = 0, spec_hits = 0;
  int64_t accepted = 0, drafted = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    sp.seed = static_cast<uint64_t>(seed);
    const GenerationResult a = Run(SpeculativeMode::kOff, nullptr, prompt, 3, sp);
    const GenerationResult b = Run(SpeculativeMode::kDraft, drafter_.model.get(), prompt, 3, sp);
    ASSERT_EQ(a.tokens.size(), 3u);
    ASSERT_EQ(b.tokens.size(), 3u);
    plain_hits += a.tokens[1] == greedy(a.tokens[0]);
    spec_hits += b.tokens[1] == greedy(b.tokens[0]);
    accepted += b.accepted_draft_tokens;
    drafted += b.draft_tokens;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  // Both rates are in (0, 1) here (else the test would not discriminate), and agree within
  // 0.15 (about 3.7 standard errors of the difference at 300 seeds).
  EXPECT_GT(plain_hits, kSeeds / 20);
  EXPECT_LT(plain_hits, kSeeds * 3 / 4);
  EXPECT_NEAR(static_cast<double>(spec_hits) / kSeeds, static_cast<double>(plain_hits) / kSeeds,
              0.15);
}

TEST_P(SpeculativeEngineTest, SelfDrafterOnALowBitResidentCopyOfTheExperts) {
  // q4_0 copies of the q8_0 experts (the test model's rows of 32 and 64 elements are too short
  // for q2_k's 256-element blocks: refused), with the target's dense weights.
  auto resident = [&](std::optional<quant::DType> dtype) {
    return ResidentExperts::Load(target_.opened.container->manifest(), target_.opened.disk.get(),
                                 dtype);
  };
  EXPECT_EQ(resident(quant::DType::kQ2_K).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(resident(quant::DType::kIQ2_XXS).status().code(), absl::StatusCode::kInvalidArgument);
  auto low = resident(quant::DType::kQ4_0);
  ASSERT_TRUE(low.ok()) << low.status();
  EXPECT_LT((*low)->bytes(), target_.opened.container->manifest().experts.size() *
                                 target_.opened.container->manifest().experts[0].size);
  EXPECT_EQ((*low)->manifest().experts[0].Part("gate")->dtype, quant::DType::kQ4_0);
  auto drafter = target_.model->NewDrafter((*low)->manifest(), low->get());
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  const std::vector<int32_t> prompt = {7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5, 9};
  const GenerationResult self =
      ExpectPlainTokens(SpeculativeMode::kSelf, drafter->get(), prompt, 40);
  // A 4-bit copy of 8-bit experts drafts mostly what the target says.
  EXPECT_GT(self.accepted_draft_tokens * 2, self.draft_tokens);
  // A resident copy as it is (the --draft-model path): the model over it is the target itself.
  auto same = resident(std::nullopt);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->manifest().experts[0].checksum,
            target_.opened.container->manifest().experts[0].checksum);
  auto over_ram = Model::Load(*target_.opened.container, backend_.get(), same->get());
  ASSERT_TRUE(over_ram.ok()) << over_ram.status();
  auto run = GreedyDecode(**over_ram, prompt, 8);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tokens, std::vector<int32_t>(self.tokens.begin(), self.tokens.begin() + 9));
}

TEST_P(SpeculativeEngineTest, StopTokensAndMinTokensEndWhereThePlainRunEnds) {
  // A stop token met inside an accepted draft ends the request there, as it would without
  // speculation; min_tokens masks it row by row within a verify pass.
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 1, 5, 9, 2, 7, 3, 1, 5};
  const GenerationResult free_run = Run(SpeculativeMode::kOff, nullptr, prompt, 24);
  ASSERT_EQ(free_run.tokens.size(), 24u);
  const std::vector<int32_t> stops = {free_run.tokens[6]};
  for (int64_t min_tokens : {int64_t{0}, int64_t{9}}) {
    SCOPED_TRACE(testing::Message() << "min_tokens " << min_tokens);
    const GenerationResult plain =
        Run(SpeculativeMode::kOff, nullptr, prompt, 24, {}, stops, min_tokens);
    const GenerationResult spec =
        Run(SpeculativeMode::kDraft, drafter_.model.get(), prompt, 24, {}, stops, min_tokens);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.finish, plain.finish);
    EXPECT_GT(spec.verify_passes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, SpeculativeEngineTest,
                         testing::Values(Variant{"mixtral", 21, false, 0},
                                         Variant{"sliding", 77, true, 0},
                                         Variant{"shared_expert", 33, false, 64}),
                         [](const testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace colibri::engine
