// Cache replacement policies: which resident expert block a cache tier evicts first.
//
// Contract
// - A policy only ranks blocks. The tier decides what may be evicted at all (not leased, not
//   pinned, not a prefetched block still awaiting its predicted use) and evicts the candidate
//   with the lowest Priority().
// - Policies keep history for every expert they have seen, resident or not (a model has at most
//   tens of thousands of experts), so an expert evicted and read again keeps its frequency.
// - Called with the tier's lock held, one call at a time: not thread-safe on their own.
// - Time is counted in demand accesses ("ticks": one per block a demand request touches). At
//   32 layers x top-2, one decoded token is 64 ticks.
//
// Policies
//   lru      recency only: priority = tick of the last use (or of the insertion).
//   lfu      frequency with exponential decay: priority = log2 of sum over past uses of
//            2^((t_use - now) / half_life), a count in which a use half_life ticks old weighs 1/2;
//            ties go to the least recently used.
//   routing  routing-aware retention: expected time to the next use. Every routing decision the
//            engine reports (Hint, for every expert of the layer, picked or not) updates two
//            estimates of the chance the router picks that expert at a visit of its layer,
//              q <- (1 - a) q + a (s [picked] + (1 - s) min(1, top_k x probability)),
//            a fast one (a = 0.9: recency) and a slow one (a = 0.05: frequency); the one whose
//            predictions of the picks have been more accurate lately (Brier score) is used, so the
//            policy behaves like recency on bursty routing and like frequency on stable
//            popularity. The router's probabilities also rank the experts it did not pick.
//            Layers run in order, so
//            a block of layer l is next needed in about d + L (1/q - 1) layer steps, where d is
//            how many layers until l comes round again (the layer just computed is the one needed
//            last). The block needed furthest in the future goes first: Belady's rule with
//            expected instead of known next uses.
//   adaptive (the default) runs, beside the real cache, five shadow caches of the same capacity
//            on the same demand stream, each ranking by one rule, and ranks the real cache by
//            the rule whose shadow hit most over the last few cache turnovers (the leader changes
//            only when another is ahead by 2%):
//              lru, lfu (as above);
//              reuse: the chance q that the block is used at the next visit of its layer, learned
//                online from this tier's own stream as a table per layer of (visits since the
//                block's last use, its decayed use rate, the router's probability for it at the
//                last visit, or "unknown" when hints are partial or absent) -> how often such a
//                block was used at the next visit;
//              reuse+cycle: the expected visit of the next use, next visit of its layer +
//                L (1/q - 1) (the layer cycle; it helps at large caches, hurts at small ones);
//              routing (as above, scored at each visit of the block's layer).
//            Shadows make room after each request (OnRequestEnd), as the tier does.
//            A shadow that follows lru or lfu is an exact replica of that policy, so the real
//            cache does as well as the better of them up to the cost of switching. Pinned blocks
//            (OnPinned) are no part of the shadows: they take no policy capacity.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source {

enum class CachePolicyKind { kLru, kLfu, kRouting, kAdaptive };

// What every tier, server and tool uses unless told otherwise.
inline constexpr CachePolicyKind kDefaultCachePolicy = CachePolicyKind::kAdaptive;
inline constexpr std::string_view kDefaultCachePolicyName = "adaptive";

std::string_view CachePolicyName(CachePolicyKind kind);  // "lru" | "lfu" | "routing" | "adaptive"
absl::StatusOr<CachePolicyKind> ParseCachePolicy(std::string_view name);

struct CachePolicyParams {
  // lfu: how fast old uses fade, in ticks (0: 256).
  double half_life = 0;
  // routing: the model's shape (0: learned from the hints).
  int n_layers = 0;
  int n_experts = 0;
  int top_k = 0;
  double fast_weight = 0.9;    // a of the recency estimate
  double slow_weight = 0.05;   // a of the frequency estimate
  double picked_weight = 0.5;  // s: "picked" vs the router's probability in a visit's estimate
  // adaptive: blocks the tier holds (0: the most ever resident at once).
  uint64_t capacity_blocks = 0;
  double adaptive_window = 8;     // adaptive: hits are compared over this many cache turnovers
  double adaptive_margin = 0.02;  // adaptive: a rule leads once its shadow is this much ahead
};

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual CachePolicyKind kind() const = 0;

  // A demand use of `key` (hit, in-flight join or miss); advances the clock by one tick.
  virtual void OnAccess(uint64_t key) = 0;
  // `key` became resident (after a demand miss or a prefetch read).
  virtual void OnInsert(uint64_t key) = 0;
  // `key` left the cache.
  virtual void OnErase(uint64_t key) = 0;
  // A prefetched block the routing did not pick: rank it below everything until its next use.
  virtual void OnDemote(uint64_t key) = 0;
  // The router's probability for an expert at its layer (averaged over the batch).
  virtual void OnHint(const RoutingHint& hint) {}
  // The demand accesses of one request (FetchMany) have all been reported; the tier now makes
  // room for its misses.
  virtual void OnRequestEnd() {}
  // The tier's pinned set (never evicted, so no part of the capacity the policy ranks for).
  virtual void OnPinned(const std::unordered_set<uint64_t>& pinned) {}
  // Retention priority of a resident block: the lowest is evicted first.
  virtual double Priority(uint64_t key) const = 0;
};

std::unique_ptr<CachePolicy> MakeCachePolicy(CachePolicyKind kind, const CachePolicyParams& params);

// The parameters every tier uses: scaled to a cache of `capacity_blocks` blocks of a model of
// n_layers x n_experts experts, top_k per token.
CachePolicyParams DefaultPolicyParams(uint64_t capacity_blocks, int n_layers, int n_experts,
                                      int top_k);

}  // namespace colibri::expert_source
