#include "colibri/expert_source/routing_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

namespace colibri::expert_source {
namespace {

namespace fs = std::filesystem;

fs::path TempPath(const std::string& name) {
  return fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".jsonl");
}

// Accesses of one expert each, at layer 0, in the given order.
std::vector<TraceAccess> Sequence(const std::vector<int32_t>& experts) {
  std::vector<TraceAccess> out;
  for (int32_t e : experts) {
    TraceAccess a;
    a.layer = 0;
    a.experts = {e};
    out.push_back(a);
  }
  return out;
}

TEST(RoutingTrace, WritesAndReadsBack) {
  const fs::path path = TempPath("colibri_trace_rw");
  {
    auto w = RoutingTraceWriter::Open(path, {"tiny", 2, 4, 2, 4096});
    ASSERT_TRUE(w.ok()) << w.status();
    const int64_t step = (*w)->NextStep();
    EXPECT_EQ(step, 0);
    (*w)->Write({step, 0, 7, 1, {3, 0}, {0.75f, 0.25f}, {0.2f, 0.1f, 0.1f, 0.6f}});
    (*w)->Write({(*w)->NextStep(), 1, 8, 0, {1, 2}, {0.5f, 0.5f}, {}});
    ASSERT_TRUE((*w)->Flush().ok());
    EXPECT_EQ((*w)->records(), 2u);
  }
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header.model, "tiny");
  EXPECT_EQ(t->header.n_layers, 2);
  EXPECT_EQ(t->header.n_experts, 4);
  EXPECT_EQ(t->header.top_k, 2);
  EXPECT_EQ(t->header.block_bytes, 4096u);
  ASSERT_EQ(t->records.size(), 2u);
  const TraceRecord& r = t->records[0];
  EXPECT_EQ(r.step, 0);
  EXPECT_EQ(r.pos, 7);
  EXPECT_EQ(r.layer, 1);
  EXPECT_EQ(r.experts, std::vector<int32_t>({3, 0}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.75f);
  ASSERT_EQ(r.probs.size(), 4u);
  EXPECT_FLOAT_EQ(r.probs[3], 0.6f);
  EXPECT_EQ(t->records[1].step, 1);
  EXPECT_TRUE(t->records[1].probs.empty());
  fs::remove(path);
}

TEST(RoutingTrace, MalformedLinesAreNamed) {
  const fs::path path = TempPath("colibri_trace_bad");
  {
    std::ofstream out(path);
    out << R"({"format":"colibri-routing-trace","version":1,"n_layers":2,"n_experts":4,"top_k":2})"
        << "\n";
    out << R"({"step":0,"layer":0,"experts":[1,2]})"
        << "\n";
    out << R"({"step":0,"layer":0,"experts":[9]})"
        << "\n";
  }
  auto t = ReadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status();
  {
    std::ofstream out(path);
    out << "{\"step\":0}\n";
  }
  EXPECT_FALSE(ReadTrace(path).ok());
  fs::remove(path);
}

TEST(RoutingTrace, AccessesAreTheBatchUnionPerStepAndLayer) {
  Trace t;
  t.header = {"m", 2, 4, 2, 0};
  // Step 0: two rows; layer 0 picks {1,2} and {2,3}; layer 1 {0,1} twice.
  t.records = {{0, 0, 0, 0, {1, 2}, {0.6f, 0.4f}, {}},
               {0, 1, 0, 0, {2, 3}, {0.5f, 0.5f}, {}},
               {0, 0, 0, 1, {0, 1}, {0.5f, 0.5f}, {}},
               {0, 1, 0, 1, {1, 0}, {0.7f, 0.3f}, {}},
               {1, 0, 1, 0, {3, 0}, {0.9f, 0.1f}, {}}};
  auto a = TraceAccesses(t);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].layer, 0);
  EXPECT_EQ(a[0].experts, std::vector<int32_t>({1, 2, 3}));
  EXPECT_EQ(a[1].layer, 1);
  EXPECT_EQ(a[1].experts, std::vector<int32_t>({0, 1}));
  EXPECT_EQ(a[2].experts, std::vector<int32_t>({0, 3}));
  // Hints: selections counted per expert, weights averaged over the rows.
  ASSERT_EQ(a[0].hints.size(), 3u);
  EXPECT_EQ(a[0].hints[1].id, (ExpertId{0, 2}));
  EXPECT_EQ(a[0].hints[1].selected, 2u);
  EXPECT_FLOAT_EQ(a[0].hints[1].probability, 0.45f);
}

TEST(RoutingTrace, BeladyOnAKnownSequence) {
  // Capacity 2; a b c a b c: MIN keeps a, evicts b for c (b is used later than a)...
  //   a(m) b(m) c(m, evict b: next b at 4 > next a at 3) a(h) b(m, evict a or c: c at 5, a never)
  //   c(h) -> 2 hits of 6.
  auto accesses = Sequence({0, 1, 2, 0, 1, 2});
  ReplayResult min = ReplayBelady(accesses, 2);
  EXPECT_EQ(min.lookups, 6u);
  EXPECT_EQ(min.hits, 2u);
  // LRU gets none on this loop.
  ReplayResult lru = ReplayWithPolicy(accesses, 2, CachePolicyKind::kLru, {});
  EXPECT_EQ(lru.lookups, 6u);
  EXPECT_EQ(lru.hits, 0u);
}

TEST(RoutingTrace, NoPolicyBeatsBelady) {
  std::mt19937 rng(5);
  std::vector<int32_t> seq;
  std::discrete_distribution<int> skew({8, 6, 4, 3, 2, 2, 1, 1, 1, 1});
  for (int i = 0; i < 3000; ++i) seq.push_back(skew(rng));
  auto accesses = Sequence(seq);
  for (uint64_t cap : {1u, 3u, 5u}) {
    const ReplayResult min = ReplayBelady(accesses, cap);
    for (auto kind : {CachePolicyKind::kLru, CachePolicyKind::kLfu, CachePolicyKind::kRouting}) {
      const ReplayResult r =
          ReplayWithPolicy(accesses, cap, kind, DefaultPolicyParams(cap, 1, 10, 1));
      EXPECT_EQ(r.lookups, min.lookups);
      EXPECT_LE(r.hits, min.hits) << CachePolicyName(kind) << " at capacity " << cap;
    }
    // On a skewed, memoryless stream, frequency beats recency.
    const ReplayResult lru =
        ReplayWithPolicy(accesses, cap, CachePolicyKind::kLru, DefaultPolicyParams(cap, 1, 10, 1));
    const ReplayResult lfu =
        ReplayWithPolicy(accesses, cap, CachePolicyKind::kLfu, DefaultPolicyParams(cap, 1, 10, 1));
    if (cap > 1) {
      EXPECT_GT(lfu.hits, lru.hits) << "capacity " << cap;
    }
  }
}

}  // namespace
}  // namespace colibri::expert_source

namespace colibri::expert_source {
namespace {

// Writes `lines` (header first) to a temporary trace and reads it back.
absl::StatusOr<Trace> ReadLines(const std::vector<std::string>& lines) {
  const fs::path path = TempPath("colibri_trace_v2");
  {
    std::ofstream out(path);
    for (const auto& l : lines) out << l << "\n";
  }
  auto t = ReadTrace(path);
  fs::remove(path);
  return t;
}

const std::string kV2Header =
    R"({"format":"colibri-routing-trace","version":2,"n_layers":3,"n_experts":4,"top_k":1,"lookahead_layers":2})";

TEST(RoutingTrace, Version2LookaheadRoundTrips) {
  const fs::path path = TempPath("colibri_trace_v2_rw");
  {
    auto w = RoutingTraceWriter::Open(path, {"tiny", 3, 4, 1, 64, 2});
    ASSERT_TRUE(w.ok()) << w.status();
    TraceRecord r{0, 0, 0, 0, {1}, {1.0f}, {}};
    r.lookahead = {{2}, {3}};
    (*w)->Write(r);
    TraceRecord last{0, 0, 0, 2, {0}, {1.0f}, {}};
    (*w)->Write(last);
    ASSERT_TRUE((*w)->Flush().ok());
  }
  auto t = ReadTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->header.lookahead_layers, 2);
  ASSERT_EQ(t->records.size(), 2u);
  EXPECT_EQ(t->records[0].lookahead, (std::vector<std::vector<int32_t>>{{2}, {3}}));
  EXPECT_TRUE(t->records[1].lookahead.empty());
  fs::remove(path);
}

TEST(RoutingTrace, MalformedVersion2IsRejectedWithTheReason) {
  const std::string v1 =
      R"({"format":"colibri-routing-trace","version":1,"n_layers":3,"n_experts":4,"top_k":1)";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{R"({"format":"colibri-routing-trace","version":3,"n_layers":3,"n_experts":4,"top_k":1})"},
       "unsupported trace version 3"},
      {{R"({"format":"colibri-routing-trace","n_layers":3,"n_experts":4,"top_k":1})"},
       "no integer version"},
      {{v1 + R"(,"lookahead_layers":1})"}, "lookahead_layers needs trace version 2"},
      {{R"({"format":"colibri-routing-trace","version":2,"n_layers":3,"n_experts":4,"top_k":1})"},
       "needs lookahead_layers"},
      {{R"({"format":"colibri-routing-trace","version":2,"n_layers":3,"n_experts":4,"top_k":1,"lookahead_layers":17})"},
       "not in 1..16"},
      {{R"({"format":"colibri-routing-trace","version":1,"n_layers":3,"n_experts":4,"top_k":5})"},
       "top_k exceeds n_experts"},
      {{v1 + "}", R"({"step":0,"layer":0,"experts":[1],"lookahead":[[2]]})"},
       "header has no lookahead_layers"},
      {{kV2Header, R"({"step":0,"layer":0,"experts":[1],"lookahead":[[2],[3],[0]]})"},
       "the header allows 2"},
      {{kV2Header, R"({"step":0,"layer":1,"experts":[1],"lookahead":[[2],[3]]})"},
       "past the last layer"},
      {{kV2Header, R"({"step":0,"layer":0,"experts":[1],"lookahead":[[7]]})"},
       "lookahead expert 7 is out of range"},
      {{kV2Header, R"({"step":0,"layer":0,"experts":[1],"lookahead":[2]})"}, "line 2"},
      {{kV2Header, R"({"step":0,"layer":0,"experts":[1],"weights":[0.5,0.5]})"},
       "weights must match experts"},
      {{kV2Header, R"({"step":0,"layer":0,"experts":[1],"probs":[0.5,0.5,0.5,1.5]})"},
       "probs must lie in [0, 1]"},
  };
  for (const auto& [lines, why] : cases) {
    SCOPED_TRACE(lines.back());
    auto t = ReadLines(lines);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(why), std::string::npos) << t.status();
  }
}

TEST(RoutingTrace, PrefetchReplayAccounting) {
  // 2 layers x 4 experts, top-1, predictions one layer ahead; a cache of 2 blocks, lru.
  //   step 0: layer 0 uses 0 and predicts 2 for layer 1 (right): prefetch (1,2); (0,0) misses;
  //           (1,2) hits on the prefetched block.
  //   step 1: layer 0 uses 0, predicts 3 (wrong): prefetch (1,3) evicts the older (0,0); (0,0)
  //           misses and evicts (1,2) (the prefetched (1,3) is guarded); layer 1 routes to 1:
  //           (1,3) is cancelled (demoted) and (1,1) misses, evicting it unused.
  Trace t;
  t.header = {"m", 2, 4, 1, 100, 1};
  TraceRecord r0{0, 0, 0, 0, {0}, {1.0f}, {}};
  r0.lookahead = {{2}};
  TraceRecord r1{1, 0, 1, 0, {0}, {1.0f}, {}};
  r1.lookahead = {{3}};
  t.records = {r0, {0, 0, 0, 1, {2}, {1.0f}, {}}, r1, {1, 0, 1, 1, {1}, {1.0f}, {}}};
  const auto a = TraceAccesses(t);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].lookahead, (std::vector<std::vector<int32_t>>{{2}}));
  auto replay = [&](int depth) {
    return ReplayWithPrefetch(a, 2, CachePolicyKind::kLru, DefaultPolicyParams(2, 2, 4, 1), depth,
                              t.header.block_bytes);
  };
  const PrefetchReplayResult p = replay(1);
  EXPECT_EQ(p.lookups, 4u);
  EXPECT_EQ(p.hits, 1u);
  EXPECT_EQ(p.prefetch_hits, 1u);
  EXPECT_EQ(p.prefetch_reads, 2u);
  EXPECT_EQ(p.prefetch_wasted, 1u);
  EXPECT_EQ(p.prefetch_dropped, 0u);
  EXPECT_EQ(p.wasted_bytes, 100u);
  EXPECT_DOUBLE_EQ(p.coverage(), 0.25);
  // Without prefetch: (0,0) is still resident at step 1 (lru: (1,2) is evicted for it), the
  // only hit.
  const PrefetchReplayResult none = replay(0);
  EXPECT_EQ(none.lookups, 4u);
  EXPECT_EQ(none.hits, 1u);
  EXPECT_EQ(none.prefetch_reads, 0u);
  EXPECT_EQ(none.wasted_bytes, 0u);
}

TEST(RoutingTrace, PerLayerBudgetSplitsTheCapacity) {
  // Layer 0 always uses expert 0, layer 1 cycles through 3 experts; 4 blocks. Split 2 + 2: layer 0
  // hits 11 of 12 with a slot to spare, layer 1 (3 experts in 2 slots, lru) never hits. One pool
  // holds all 4 blocks: 11 + 9 hits.
  Trace t;
  t.header = {"m", 2, 4, 1, 0, 0};
  for (int s = 0; s < 12; ++s) {
    t.records.push_back({s, 0, s, 0, {0}, {1.0f}, {}});
    t.records.push_back({s, 0, s, 1, {s % 3}, {1.0f}, {}});
  }
  const auto a = TraceAccesses(t);
  const ReplayResult split = ReplayPerLayer(a, 2, 4, CachePolicyKind::kLru, 4, 1);
  EXPECT_EQ(split.lookups, 24u);
  EXPECT_EQ(split.hits, 11u);
  const ReplayResult pool =
      ReplayWithPolicy(a, 4, CachePolicyKind::kLru, DefaultPolicyParams(4, 2, 4, 1));
  EXPECT_EQ(pool.lookups, 24u);
  EXPECT_EQ(pool.hits, 20u);
}

}  // namespace
}  // namespace colibri::expert_source
