// The engine over the expert cache: lookahead prefetch never changes results, the batch reads
// each unique expert of a layer once, hints and traces report the routing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "colibri/backend/cpu_backend.h"
#include "colibri/engine/model.h"
#include "colibri/engine/testing/test_model.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/expert_source/testing/recording_source.h"
#include "colibri/model/container.h"
#include "colibri/store/striped_source.h"

namespace colibri::engine {
namespace {

namespace fs = std::filesystem;
using expert_source::ExpertId;
using expert_source::Lease;

// Records what the engine asks for, passing every call on.
using expert_source::testing::RecordingSource;

class ExpertCacheEngineTest : public TestModelSuite<ExpertCacheEngineTest> {
 protected:
  static void SetUpTestSuite() {
    WriteModel("expert_cache_engine", SmallTestModelOptions("lookahead", /*seed=*/11));
  }
  void SetUp() override {
    TestModelSuite::SetUp();
    backend_ = backend::CreateCpuBackend({.threads = 2});
  }
  uint64_t block_bytes() const { return container_->manifest().experts[0].padded_size; }

  std::unique_ptr<backend::Backend> backend_;
};

const std::vector<int32_t> kPrompt = {5, 17, 3, 60, 22, 9};
constexpr int kSteps = 24;

TEST_F(ExpertCacheEngineTest, PrefetchNeverChangesTokensOrLogits) {
  // Reference: experts straight from disk, no cache, no lookahead.
  auto ref_model = Model::Load(*container_, backend_.get(), disk_.get());
  ASSERT_TRUE(ref_model.ok()) << ref_model.status();
  auto ref = GreedyDecode(**ref_model, kPrompt, kSteps);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const uint64_t total_blocks = container_->manifest().experts.size();

  uint64_t prefetched_reads = 0, predicted_routed = 0;
  for (auto policy : {expert_source::CachePolicyKind::kLru, expert_source::CachePolicyKind::kLfu,
                      expert_source::CachePolicyKind::kRouting}) {
    for (uint64_t blocks : {uint64_t{3}, total_blocks / 2, total_blocks}) {
      for (int prefetch_layers : {0, 1, 3}) {
        for (int io_threads : {0, 3}) {
          SCOPED_TRACE(absl::StrCat(std::string(expert_source::CachePolicyName(policy)), " cache ",
                                    blocks, " blocks, prefetch ", prefetch_layers, ", io threads ",
                                    io_threads));
          expert_source::CacheTierOptions o;
          o.capacity_bytes = blocks * block_bytes();
          o.policy = policy;
          o.io_threads = io_threads;
          expert_source::CacheTier tier(disk_.get(), o);
          auto model =
              Model::Load(*container_, backend_.get(), &tier, {.prefetch_layers = prefetch_layers});
          ASSERT_TRUE(model.ok());
          auto run = GreedyDecode(**model, kPrompt, kSteps);
          ASSERT_TRUE(run.ok()) << run.status();
          EXPECT_EQ(run->tokens, ref->tokens);
          ASSERT_EQ(run->logits.size(), ref->logits.size());
          for (size_t i = 0; i < run->logits.size(); ++i)
            ASSERT_EQ(run->logits[i], ref->logits[i]) << i;
          const auto s = tier.Stats();
          EXPECT_LE(s.bytes_cached, o.capacity_bytes);
          if (prefetch_layers == 0 || io_threads == 0) {
            EXPECT_EQ(s.prefetch_reads, 0u);
          }
          prefetched_reads += s.prefetch_reads;
          predicted_routed += (*model)->counters().prefetch_predicted_routed;
          tier.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
        }
      }
    }
  }
  // The runs above did prefetch, and predicted some experts right: the equality is not vacuous.
  EXPECT_GT(prefetched_reads, 0u);
  EXPECT_GT(predicted_routed, 0u);
}

// A cache that holds every expert: once a layer is all resident, its experts are not predicted
// (no router products for nothing to read), and the tokens and logits stay the same.
TEST_F(ExpertCacheEngineTest, LookaheadSkipsLayersTheCacheHoldsWhole) {
  auto ref_model = Model::Load(*container_, backend_.get(), disk_.get());
  ASSERT_TRUE(ref_model.ok()) << ref_model.status();
  auto ref = GreedyDecode(**ref_model, kPrompt, kSteps);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const auto& manifest = container_->manifest();
  expert_source::CacheTier tier(disk_.get(), manifest.experts.size() * block_bytes());
  auto model = Model::Load(*container_, backend_.get(), &tier, {.prefetch_layers = 2});
  ASSERT_TRUE(model.ok());
  // Every expert read once (the tier counts them per layer), then decode.
  for (const auto& e : manifest.experts)
    ASSERT_TRUE(tier.Fetch(e.id, expert_source::Priority::kDemand).ok());
  for (int32_t l = 0; l < manifest.config.n_layers; ++l)
    EXPECT_EQ(tier.ResidentInLayer(l), manifest.config.n_experts) << "layer " << l;
  auto run = GreedyDecode(**model, kPrompt, kSteps);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->tokens, ref->tokens);
  EXPECT_EQ(run->logits, ref->logits);
  const ModelCounters& c = (*model)->counters();
  EXPECT_EQ(c.prefetch_predicted.load(), 0u);
  EXPECT_EQ(c.prefetch_routed.load(), 0u);
  EXPECT_GT(c.prefetch_layers_resident.load(), 0u);
  // With a cache of one block nothing is whole: every layer after the first is predicted.
  expert_source::CacheTier small(disk_.get(), block_bytes());
  auto cold = Model::Load(*container_, backend_.get(), &small, {.prefetch_layers = 2});
  ASSERT_TRUE(cold.ok());
  auto cold_run = GreedyDecode(**cold, kPrompt, kSteps);
  ASSERT_TRUE(cold_run.ok()) << cold_run.status();
  EXPECT_EQ(cold_run->tokens, ref->tokens);
  EXPECT_GT((*cold)->counters().prefetch_predicted.load(), 0u);
  EXPECT_EQ((*cold)->counters().prefetch_layers_resident.load(), 0u);
}

TEST_F(ExpertCacheEngineTest, BatchReadsEachUniqueExpertOnce) {
  RecordingSource rec(disk_.get());
  expert_source::CacheTierOptions o;
  o.capacity_bytes = 64 * block_bytes();
  o.io_threads = 2;
  expert_source::CacheTier tier(&rec, o);
  RecordingSource front(&tier);
  auto model = Model::Load(*container_, backend_.get(), &front);
  ASSERT_TRUE(model.ok());
  // Two sequences with their own prompts...
  auto a = (*model)->NewCache();
  auto b = (*model)->NewCache();
  std::vector<BatchItem> pa = {{a.get(), 5, 0, false}, {a.get(), 17, 1, false}};
  std::vector<BatchItem> pb = {
      {b.get(), 40, 0, false}, {b.get(), 2, 1, false}, {b.get(), 33, 2, false}};
  ASSERT_TRUE((*model)->Forward(pa, nullptr).ok());
  ASSERT_TRUE((*model)->Forward(pb, nullptr).ok());
  tier.Clear();
  front.TakeBatches();
  front.TakeHints();
  rec.TakeReadCounts();
  // ...then one decode step for both in one batch; one of them twice over (same token, same
  // position in a third sequence) so rows surely share experts.
  auto c = (*model)->NewCache();
  std::vector<BatchItem> pc = {
      {c.get(), 40, 0, false}, {c.get(), 2, 1, false}, {c.get(), 33, 2, false}};
  ASSERT_TRUE((*model)->Forward(pc, nullptr).ok());
  tier.Clear();
  front.TakeBatches();
  front.TakeHints();
  rec.TakeReadCounts();
  std::vector<BatchItem> step = {
      {a.get(), 7, 2, true}, {b.get(), 8, 3, true}, {c.get(), 8, 3, true}};
  std::vector<float> logits;
  ForwardStats stats;
  const uint64_t misses_before = tier.Stats().misses;
  ASSERT_TRUE((*model)->Forward(step, &logits, &stats).ok());
  const auto batches = front.TakeBatches();
  const auto hints = front.TakeHints();
  const int L = static_cast<int>(container_->manifest().config.n_layers);
  ASSERT_EQ(batches.size(), static_cast<size_t>(L));  // one request per layer
  ASSERT_EQ(hints.size(), static_cast<size_t>(L));
  int64_t row_choices = 0, unique = 0;
  for (int l = 0; l < L; ++l) {
    std::set<int32_t> requested, routed;
    for (const ExpertId& id : batches[static_cast<size_t>(l)]) {
      EXPECT_EQ(id.layer, l);
      EXPECT_TRUE(requested.insert(id.expert).second)
          << "expert " << id.expert << " requested twice";
    }
    for (const auto& h : hints[static_cast<size_t>(l)]) {
      row_choices += h.selected;
      if (h.selected > 0) routed.insert(h.id.expert);
    }
    EXPECT_EQ(requested, routed) << "layer " << l;  // exactly the union of the rows' choices
    unique += static_cast<int64_t>(requested.size());
  }
  EXPECT_EQ(row_choices, 3 * L * 2);         // 3 rows x top-2 per layer
  EXPECT_LT(unique, row_choices);            // rows shared experts...
  EXPECT_EQ(stats.experts_applied, unique);  // ...and each shared one was applied once
  EXPECT_EQ(stats.expert_rows, row_choices);
  // Below the cache, every unique expert was read from disk exactly once.
  for (const auto& [key, n] : rec.TakeReadCounts()) EXPECT_EQ(n, 1) << key;
  EXPECT_EQ(tier.Stats().misses - misses_before, static_cast<uint64_t>(unique));
  EXPECT_EQ(logits.size(), 3 * static_cast<size_t>(container_->manifest().config.vocab_size));
  // Rows b and c are the same token at the same position: the same logits.
  const size_t V = static_cast<size_t>(container_->manifest().config.vocab_size);
  for (size_t i = 0; i < V; ++i) ASSERT_EQ(logits[V + i], logits[2 * V + i]) << i;
}

TEST_F(ExpertCacheEngineTest, TraceHasOneLinePerTokenAndLayer) {
  const fs::path path =
      fs::temp_directory_path() / ("colibri_engine_trace_" + std::to_string(::getpid()) + ".jsonl");
  const auto& c = container_->manifest().config;
  {
    auto trace = expert_source::RoutingTraceWriter::Open(
        path, {"lookahead", static_cast<int>(c.n_layers), static_cast<int>(c.n_experts),
               static_cast<int>(c.top_k), block_bytes()});
    ASSERT_TRUE(trace.ok());
    RecordingSource rec(disk_.get());
    auto model = Model::Load(*container_, backend_.get(), &rec, {.trace = trace->get()});
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(GreedyDecode(**model, kPrompt, 3).ok());
    ASSERT_TRUE((*trace)->Flush().ok());
    // Each line's experts are what the hints reported as selected.
    const auto hints = rec.TakeHints();
    auto t = expert_source::ReadTrace(path);
    ASSERT_TRUE(t.ok()) << t.status();
    const size_t rows = kPrompt.size() + 3;
    ASSERT_EQ(t->records.size(), rows * static_cast<size_t>(c.n_layers));
    for (const auto& r : t->records) {
      ASSERT_EQ(r.experts.size(), static_cast<size_t>(c.top_k));
      ASSERT_EQ(r.probs.size(), static_cast<size_t>(c.n_experts));
      EXPECT_NEAR(r.weights[0] + r.weights[1], 1.0f, 1e-3);  // Mixtral renormalises
      EXPECT_GE(r.probs[static_cast<size_t>(r.experts[0])],
                r.probs[static_cast<size_t>(r.experts[1])]);
    }
    // The last decode step: one row per layer, positions after the prompt.
    const auto& last = t->records.back();
    EXPECT_EQ(last.step, 3);
    EXPECT_EQ(last.pos, static_cast<int64_t>(kPrompt.size() + 2));
    EXPECT_EQ(last.layer, c.n_layers - 1);
    const auto& h = hints.back();
    for (int32_t e : last.experts) EXPECT_EQ(h[static_cast<size_t>(e)].selected, 1u);
  }
  fs::remove(path);
}

}  // namespace
}  // namespace colibri::engine
