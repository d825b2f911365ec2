#include "colibri/expert_source/cache_policy.h"

#include <gtest/gtest.h>

#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/expert_source/testing/recording_source.h"

namespace colibri::expert_source {
namespace {

const uint64_t kA = ExpertId{0, 0}.Key(), kB = ExpertId{0, 1}.Key(), kC = ExpertId{1, 0}.Key();

TEST(CachePolicy, ParsesNames) {
  for (auto kind : {CachePolicyKind::kLru, CachePolicyKind::kLfu, CachePolicyKind::kRouting}) {
    auto parsed = ParseCachePolicy(CachePolicyName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  auto bad = ParseCachePolicy("arc");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("arc"), std::string::npos);
}

TEST(CachePolicy, LruRanksByLastUse) {
  auto p = MakeCachePolicy(CachePolicyKind::kLru, {});
  for (uint64_t k : {kA, kB, kC}) {
    p->OnAccess(k);
    p->OnInsert(k);
  }
  p->OnAccess(kA);
  EXPECT_LT(p->Priority(kB), p->Priority(kC));
  EXPECT_LT(p->Priority(kC), p->Priority(kA));
  p->OnDemote(kA);
  EXPECT_LT(p->Priority(kA), p->Priority(kB));
}

TEST(CachePolicy, LfuKeepsTheFrequentBlockOverTheRecentOne) {
  CachePolicyParams params;
  params.half_life = 1000;
  auto p = MakeCachePolicy(CachePolicyKind::kLfu, params);
  for (int i = 0; i < 5; ++i) p->OnAccess(kA);
  p->OnAccess(kB);
  EXPECT_GT(p->Priority(kA), p->Priority(kB));
  // LRU would rank the other way round.
  auto lru = MakeCachePolicy(CachePolicyKind::kLru, {});
  for (int i = 0; i < 5; ++i) lru->OnAccess(kA);
  lru->OnAccess(kB);
  EXPECT_LT(lru->Priority(kA), lru->Priority(kB));
}

TEST(CachePolicy, LfuCountsDecay) {
  CachePolicyParams params;
  params.half_life = 10;
  auto p = MakeCachePolicy(CachePolicyKind::kLfu, params);
  for (int i = 0; i < 4; ++i) p->OnAccess(kA);  // 4 uses, then 100 ticks (10 half-lives) pass
  for (int i = 0; i < 100; ++i) p->OnAccess(kC);
  p->OnAccess(kB);  // one fresh use outweighs 4 x 2^-10
  EXPECT_GT(p->Priority(kB), p->Priority(kA));
  // Without decay in the way (a long half-life), the 4 uses win.
  params.half_life = 1e9;
  auto q = MakeCachePolicy(CachePolicyKind::kLfu, params);
  for (int i = 0; i < 4; ++i) q->OnAccess(kA);
  for (int i = 0; i < 100; ++i) q->OnAccess(kC);
  q->OnAccess(kB);
  EXPECT_GT(q->Priority(kA), q->Priority(kB));
}

TEST(CachePolicy, LfuRemembersEvictedBlocks) {
  CachePolicyParams params;
  params.half_life = 1000;
  auto p = MakeCachePolicy(CachePolicyKind::kLfu, params);
  for (int i = 0; i < 5; ++i) p->OnAccess(kA);
  p->OnErase(kA);
  p->OnAccess(kB);
  p->OnAccess(kA);  // back, with its history
  p->OnInsert(kA);
  EXPECT_GT(p->Priority(kA), p->Priority(kB));
}

CachePolicyParams Shape() {
  CachePolicyParams p;
  p.n_layers = 2;
  p.n_experts = 4;
  p.top_k = 1;
  return p;
}

TEST(CachePolicy, RoutingPolicyKeepsWhatTheRouterFavours) {
  auto p = MakeCachePolicy(CachePolicyKind::kRouting, Shape());
  // Layer 0, three visits: the router never picks A or B, but keeps giving A a high probability.
  for (int i = 0; i < 3; ++i) {
    p->OnHint({ExpertId{0, 0}, 0.45f, 0});
    p->OnHint({ExpertId{0, 1}, 0.05f, 0});
    p->OnHint({ExpertId{0, 2}, 0.50f, 1});
  }
  EXPECT_GT(p->Priority(kA), p->Priority(kB));
  // The expert it picks every time ranks above both.
  EXPECT_GT(p->Priority(ExpertId{0, 2}.Key()), p->Priority(kA));
  // lfu ignores hints.
  auto lfu = MakeCachePolicy(CachePolicyKind::kLfu, Shape());
  lfu->OnHint({ExpertId{0, 0}, 0.45f, 0});
  EXPECT_EQ(lfu->Priority(kA), lfu->Priority(kB));
}

TEST(CachePolicy, RoutingPolicyFollowsTheRouterOverTime) {
  auto p = MakeCachePolicy(CachePolicyKind::kRouting, Shape());
  for (int i = 0; i < 5; ++i) p->OnHint({ExpertId{0, 0}, 0.9f, 1});  // A hot
  p->OnHint({ExpertId{0, 1}, 0.1f, 0});
  EXPECT_GT(p->Priority(kA), p->Priority(kB));
  for (int i = 0; i < 10; ++i) {  // then the routing moves to B
    p->OnHint({ExpertId{0, 0}, 0.05f, 0});
    p->OnHint({ExpertId{0, 1}, 0.9f, 1});
  }
  EXPECT_LT(p->Priority(kA), p->Priority(kB));
}

TEST(CachePolicy, RoutingPolicyEvictsTheLayerJustComputedFirst) {
  auto p = MakeCachePolicy(CachePolicyKind::kRouting, Shape());
  // Same pick probability for (0, 0) and (1, 0). The engine is at layer 1: layer 0 comes next.
  p->OnHint({ExpertId{0, 0}, 0.5f, 1});
  p->OnHint({ExpertId{1, 0}, 0.5f, 1});
  EXPECT_GT(p->Priority(kA), p->Priority(kC));
  p->OnHint({ExpertId{0, 3}, 0.0f, 0});  // now at layer 0: layer 1 comes next
  EXPECT_GT(p->Priority(kC), p->Priority(kA));
  p->OnDemote(kC);
  EXPECT_LT(p->Priority(kC), p->Priority(kA));
}

// The tier evicts what the policy ranks lowest.
TEST(CachePolicy, TierEvictsThePolicysChoice) {
  const ExpertId a{0, 0}, b{0, 1}, c{1, 0}, d{1, 1};
  for (auto kind : {CachePolicyKind::kLru, CachePolicyKind::kLfu}) {
    SCOPED_TRACE(CachePolicyName(kind));
    testing::RecordingSource src(100);
    CacheTierOptions o;
    o.capacity_bytes = 300;
    o.policy = kind;
    o.policy_params.half_life = 1000;
    CacheTier tier(&src, o);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier.Fetch(a, Priority::kDemand).ok());
    ASSERT_TRUE(tier.Fetch(b, Priority::kDemand).ok());
    ASSERT_TRUE(tier.Fetch(c, Priority::kDemand).ok());
    ASSERT_TRUE(tier.Fetch(c, Priority::kDemand).ok());
    ASSERT_TRUE(tier.Fetch(d, Priority::kDemand).ok());  // evicts one of a, b, c
    if (kind == CachePolicyKind::kLru) {
      EXPECT_FALSE(tier.Contains(a));  // least recently used
      EXPECT_TRUE(tier.Contains(b));
    } else {
      EXPECT_TRUE(tier.Contains(a));   // used 3 times
      EXPECT_FALSE(tier.Contains(b));  // used once, longest ago
    }
    EXPECT_TRUE(tier.Contains(c));
    EXPECT_TRUE(tier.Contains(d));
  }
}

}  // namespace
}  // namespace colibri::expert_source

namespace colibri::expert_source {
namespace {

// Accesses of one expert each, at layer 0.
std::vector<TraceAccess> OneLayer(const std::vector<int32_t>& experts) {
  std::vector<TraceAccess> out;
  for (int32_t e : experts) out.push_back(TraceAccess{0, {e}, {}, {}});
  return out;
}

uint64_t Hits(const std::vector<TraceAccess>& a, uint64_t cap, CachePolicyKind kind) {
  CachePolicyParams p = DefaultPolicyParams(cap, 1, 8, 1);
  p.half_life = 1000;
  return ReplayWithPolicy(a, cap, kind, p).hits;
}

TEST(AdaptivePolicy, ParsesAndIsTheDefault) {
  auto parsed = ParseCachePolicy("adaptive");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, CachePolicyKind::kAdaptive);
  EXPECT_EQ(kDefaultCachePolicy, CachePolicyKind::kAdaptive);
  EXPECT_EQ(CachePolicyName(kDefaultCachePolicy), kDefaultCachePolicyName);
}

// Phase 1 rewards frequency: expert 0 comes back after two one-off experts, so lru (capacity 2)
// has always just evicted it and lfu keeps it. Phase 2 rewards recency: a working set of two
// that moves every 8 uses, which lfu never admits for long (expert 0's count outweighs them).
std::vector<int32_t> FrequencyThenRecency() {
  std::vector<int32_t> seq;
  for (int i = 0; i < 40; ++i) {
    seq.push_back(0);
    seq.push_back(1000 + 2 * i);  // never seen again
    seq.push_back(1001 + 2 * i);
  }
  for (int phase = 0; phase < 30; ++phase) {
    for (int i = 0; i < 8; ++i) seq.push_back(100 + 2 * phase + (i % 2));
  }
  return seq;
}

TEST(AdaptivePolicy, ExactHitsWhereLruAndLfuDiffer) {
  const auto a = OneLayer(FrequencyThenRecency());
  ASSERT_EQ(a.size(), 360u);
  // lru: phase 1 nothing, phase 2 6 of every 8.
  EXPECT_EQ(Hits(a, 2, CachePolicyKind::kLru), 180u);
  // lfu: phase 1 every visit of 0 but the first two (at one use each, 0 and the first one-off
  // tie and recency evicts 0 once), phase 2 nothing.
  EXPECT_EQ(Hits(a, 2, CachePolicyKind::kLfu), 38u);
  // adaptive: ranks by lfu once that shadow is ahead in phase 1 and by lru in phase 2, so it
  // beats both (each switch costs a few misses while the real cache turns over).
  EXPECT_EQ(Hits(a, 2, CachePolicyKind::kAdaptive), 204u);
  EXPECT_EQ(ReplayBelady(a, 2).hits, 219u);
}

// A pinned expert takes no policy capacity: a tier of 3 blocks with one pinned behaves, for the
// other experts, exactly like a tier of 2 without pins (the adaptive shadows are sized 2, not 3:
// sized 3 they would lose 4 hits here),
// and every use of the pinned one hits.
TEST(AdaptivePolicy, PinnedBlocksAreNoPartOfThePolicysCapacity) {
  const std::vector<int32_t> seq = FrequencyThenRecency();
  const ExpertId pinned{1, 0};
  auto run = [&](uint64_t blocks, bool pin) {
    testing::RecordingSource src(100);
    CacheTierOptions o;
    o.capacity_bytes = 100 * blocks;
    o.policy = CachePolicyKind::kAdaptive;
    o.policy_params = DefaultPolicyParams(blocks, 1, 8, 1);
    o.policy_params.half_life = 1000;
    CacheTier tier(&src, o);
    if (pin) {
      EXPECT_TRUE(tier.SetPinned(std::vector<ExpertId>{pinned}).ok());
    }
    for (size_t i = 0; i < seq.size(); ++i) {
      EXPECT_TRUE(tier.Fetch(ExpertId{0, seq[i]}, Priority::kDemand).ok());
      if (pin && i % 10 == 0) {
        EXPECT_TRUE(tier.Fetch(pinned, Priority::kDemand).ok());
      }
    }
    return tier.Stats().hits;
  };
  const uint64_t unpinned = run(2, false);
  EXPECT_EQ(unpinned, 204u);
  EXPECT_EQ(run(3, true), unpinned + 36);  // 36 uses of the pinned expert, all hits
}

}  // namespace
}  // namespace colibri::expert_source
