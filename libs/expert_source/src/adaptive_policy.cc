#include "adaptive_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <vector>

namespace colibri::expert_source {
namespace {

constexpr double kDemoted = -std::numeric_limits<double>::infinity();
constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();

// A demand-only cache of `capacity` blocks that evicts the lowest score (given by the caller).
class ShadowCache {
 public:
  // True on a hit. A miss is admitted; Shrink evicts the lowest scores.
  bool Access(uint64_t key, double score) {
    if (Rescore(key, score)) return true;
    score_.emplace(key, score);
    order_.insert({score, key});
    return false;
  }
  bool Rescore(uint64_t key, double score) {
    auto it = score_.find(key);
    if (it == score_.end()) return false;
    order_.erase({it->second, key});
    it->second = score;
    order_.insert({score, key});
    return true;
  }
  void Erase(uint64_t key) {
    auto it = score_.find(key);
    if (it == score_.end()) return;
    order_.erase({it->second, key});
    score_.erase(it);
  }
  void Shrink(uint64_t capacity) {
    while (score_.size() > capacity) EvictFirst();
  }
  bool Contains(uint64_t key) const { return score_.count(key) > 0; }
  // The score the shadow ranks `key` by, if it holds it.
  bool ScoreOf(uint64_t key, double* score) const {
    auto it = score_.find(key);
    if (it == score_.end()) return false;
    *score = it->second;
    return true;
  }

 private:
  void EvictFirst() {
    auto first = order_.begin();
    score_.erase(first->second);
    order_.erase(first);
  }
  std::unordered_map<uint64_t, double> score_;
  std::set<std::pair<double, uint64_t>> order_;
};

// Features of a block at a visit of its layer -> a cell of the reuse table.
constexpr int kSinceBuckets = 8, kRateBuckets = 7, kProbBuckets = 6;
constexpr int kCells = kSinceBuckets * kRateBuckets * kProbBuckets;

int SinceBucket(uint32_t since) {
  if (since == kNever) return 7;
  if (since <= 2) return static_cast<int>(since);
  if (since <= 4) return 3;
  if (since <= 8) return 4;
  if (since <= 16) return 5;
  return 6;
}

int RateBucket(double rate, double base) {
  const double r = rate / base;
  constexpr std::array<double, 6> kEdges = {0.25, 0.5, 1.0, 1.5, 2.0, 3.0};
  int b = 0;
  while (b < 6 && r >= kEdges[static_cast<size_t>(b)]) ++b;
  return b;
}

int ProbBucket(float p) {
  if (p < 0) return 0;  // unknown: no hint, or only the chosen experts' gate weights
  constexpr std::array<float, 4> kEdges = {0.05f, 0.15f, 0.3f, 0.5f};
  int b = 1;
  while (b < 5 && p >= kEdges[static_cast<size_t>(b - 1)]) ++b;
  return b;
}

struct Cell {
  double used = 0, seen = 0;
  void Add(bool u) {
    used += u ? 1 : 0;
    seen += 1;
    if (seen > 4096) {  // forget slowly: the routing drifts between prompts
      used *= 0.5;
      seen *= 0.5;
    }
  }
};

class AdaptivePolicy final : public CachePolicy {
 public:
  explicit AdaptivePolicy(const CachePolicyParams& p)
      : p_(p),
        lru_(MakeCachePolicy(CachePolicyKind::kLru, p)),
        lfu_(MakeCachePolicy(CachePolicyKind::kLfu, p)),
        routing_(MakeCachePolicy(CachePolicyKind::kRouting, p)),
        capacity_(p.capacity_blocks) {}

  CachePolicyKind kind() const override { return CachePolicyKind::kAdaptive; }

  void OnAccess(uint64_t key) override {
    // Pinned blocks always hit and are never evicted: they leave every rule's clock alone.
    if (pinned_.count(key)) return;
    const int layer = static_cast<int>(key >> 32);
    Expert& x = At(key);
    if (open_layer_ != layer || x.used) OpenVisit(layer);
    Expert& y = At(key);  // OpenVisit may have rehashed
    y.used = true;
    y.last_tick = ++tick_;
    lru_->OnAccess(key);
    lfu_->OnAccess(key);
    routing_->OnAccess(key);
    demoted_.erase(key);
    const uint64_t cap = ShadowCapacity();
    for (int i = 0; i < kRules; ++i) {
      ShadowCache& shadow = shadows_[static_cast<size_t>(i)];
      // A tier makes room for a request's misses after it has seen the whole request (so a
      // block the request also uses is never the victim); without OnRequestEnd, per access.
      if (!batched_ && !shadow.Contains(key)) shadow.Shrink(cap > 0 ? cap - 1 : 0);
      const bool hit = shadow.Access(key, Score(i, key));
      if (!batched_) shadow.Shrink(cap);
      wins_[static_cast<size_t>(i)] = wins_[static_cast<size_t>(i)] * Decay() + (hit ? 1.0 : 0.0);
    }
    int best = leader_;
    for (int i = 0; i < kRules; ++i) {
      if (wins_[static_cast<size_t>(i)] > wins_[static_cast<size_t>(best)]) best = i;
    }
    // Hysteresis: switching costs misses while the real cache converges to the new rule's set.
    if (wins_[static_cast<size_t>(best)] >
        (1 + p_.adaptive_margin) * wins_[static_cast<size_t>(leader_)] + 0.5) {
      leader_ = best;
    }
  }

  void OnRequestEnd() override {
    batched_ = true;
    for (auto& s : shadows_) s.Shrink(ShadowCapacity());
  }

  void OnInsert(uint64_t key) override {
    lru_->OnInsert(key);
    lfu_->OnInsert(key);
    routing_->OnInsert(key);
    resident_.insert(key);
    max_resident_ = std::max<uint64_t>(max_resident_, resident_.size());
  }

  void OnErase(uint64_t key) override {
    lru_->OnErase(key);
    lfu_->OnErase(key);
    routing_->OnErase(key);
    demoted_.erase(key);
    resident_.erase(key);
    if (capacity_ == 0) {
      // Without a configured capacity, the first eviction shows it: the cache was full.
      capacity_ = max_resident_;
      for (auto& s : shadows_) s.Shrink(ShadowCapacity());
    }
  }

  void OnDemote(uint64_t key) override {
    lru_->OnDemote(key);
    lfu_->OnDemote(key);
    routing_->OnDemote(key);
    demoted_.insert(key);
  }

  void OnHint(const RoutingHint& h) override {
    routing_->OnHint(h);
    Expert& x = At(h.id.Key());
    if (open_layer_ != h.id.layer || x.hinted || x.used) OpenVisit(h.id.layer);
    Expert& y = At(h.id.Key());
    y.hinted = true;
    // A chosen expert with probability 0: the trace or engine gave only gate weights (unknown).
    y.visit_prob = (h.probability <= 0 && h.selected > 0) ? -1.0f : h.probability;
  }

  void OnPinned(const std::unordered_set<uint64_t>& pinned) override {
    pinned_ = pinned;
    for (auto& s : shadows_) {
      for (uint64_t k : pinned_) s.Erase(k);
      s.Shrink(ShadowCapacity());
    }
  }

  double Priority(uint64_t key) const override {
    if (demoted_.count(key)) return kDemoted;
    return Score(leader_, key);
  }

 private:
  enum Rule {
    kLruRule = 0,
    kLfuRule = 1,
    kReuseRule = 2,
    kCycleRule = 3,
    kRouterRule = 4,
    kRules = 5
  };

  struct Expert {
    uint32_t since = kNever;  // visits of its layer since its last use
    float rate = 0;           // decayed uses per visit
    float prob = -1;          // router probability at the last closed visit (-1 unknown)
    float visit_prob = -1;    // ... at the open visit
    bool used = false;        // used at the open visit
    bool hinted = false;      // hinted at the open visit
    uint64_t last_tick = 0;
  };

  static constexpr float kRateWeight = 1.0f / 16;

  Expert& At(uint64_t key) {
    const int expert = static_cast<int>(key & 0xffffffffu);
    experts_seen_ = std::max(experts_seen_, expert + 1);
    layers_seen_ = std::max(layers_seen_, static_cast<int>(key >> 32) + 1);
    return experts_[key];
  }
  int Experts() const { return p_.n_experts > 0 ? p_.n_experts : std::max(experts_seen_, 1); }
  int Layers() const {
    return p_.n_layers > 0 ? std::max(p_.n_layers, layers_seen_) : std::max(layers_seen_, 1);
  }
  double BaseRate() const {
    const double k = p_.top_k > 0 ? p_.top_k : 1;
    return std::min(1.0, k / Experts());
  }
  uint64_t ShadowCapacity() const {
    if (capacity_ == 0) return std::numeric_limits<uint64_t>::max();  // not full yet
    return capacity_ > pinned_.size() ? capacity_ - pinned_.size() : 0;
  }
  double Decay() const {
    const double window = std::max(1024.0, p_.adaptive_window * static_cast<double>(capacity_));
    return 1.0 - 1.0 / window;
  }

  int CellOf(uint32_t since, float rate, float prob) const {
    return (SinceBucket(since) * kRateBuckets + RateBucket(rate, BaseRate())) * kProbBuckets +
           ProbBucket(prob);
  }
  // The state the block will have once the open visit closes, if it was used there.
  int CellNow(const Expert& x) const {
    if (x.used) return CellOf(0, x.rate + kRateWeight * (1 - x.rate), x.visit_prob);
    return CellOf(x.since, x.rate, x.prob);
  }

  double Q(uint64_t key) const {
    auto it = experts_.find(key);
    const int layer = static_cast<int>(key >> 32);
    const int cell = it == experts_.end() ? CellOf(kNever, 0, -1) : CellNow(it->second);
    const Cell& g = global_[static_cast<size_t>(cell)];
    const double qg = (g.used + 2.0 * BaseRate()) / (g.seen + 2.0);
    double q = qg;
    if (static_cast<size_t>(layer) < per_layer_.size()) {
      const Cell& c = per_layer_[static_cast<size_t>(layer)][static_cast<size_t>(cell)];
      q = (c.used + 8.0 * qg) / (c.seen + 8.0);
    }
    return std::clamp(q, 1e-3, 1.0);
  }

  double Score(int rule, uint64_t key) const {
    switch (rule) {
      case kLruRule: return lru_->Priority(key);
      case kLfuRule: return lfu_->Priority(key);
      default: break;
    }
    const int layer = static_cast<int>(key >> 32);
    const double last = static_cast<size_t>(layer) < last_visit_.size()
                            ? last_visit_[static_cast<size_t>(layer)]
                            : 0;
    if (rule == kRouterRule) {
      // The routing policy ranks by layer steps to the next use, seen from the layer it is at;
      // scores are taken when that is the block's own layer (its visit), so the time to the next
      // use counts from the layer's latest visit.
      return routing_->Priority(key) - last;
    }
    auto it = experts_.find(key);
    const double tie = 1e-12 * static_cast<double>(it == experts_.end() ? 0 : it->second.last_tick);
    const double q = Q(key);
    if (rule == kReuseRule) return q + tie;
    // Visit index of the layer's next visit, then L visits per further visit until a use.
    const double L = Layers();
    const double next = last > 0 ? last + L : static_cast<double>(visits_) + 1;
    return -(next + L * (1.0 / q - 1.0)) + tie;
  }

  void OpenVisit(int layer) {
    CloseVisit();
    open_layer_ = layer;
    ++visits_;
    if (last_visit_.size() <= static_cast<size_t>(layer))
      last_visit_.resize(static_cast<size_t>(layer) + 1, 0);
    last_visit_[static_cast<size_t>(layer)] = static_cast<double>(visits_);
  }

  // Learns from the open visit (every expert of the layer: used or not) and moves each expert's
  // state on; the reuse rules' scores of that layer's blocks change, so their shadows re-rank.
  void CloseVisit() {
    if (open_layer_ < 0) return;
    const int layer = open_layer_;
    open_layer_ = -1;
    if (per_layer_.size() <= static_cast<size_t>(layer))
      per_layer_.resize(static_cast<size_t>(layer) + 1);
    auto& cells = per_layer_[static_cast<size_t>(layer)];
    const int E = Experts();
    for (int e = 0; e < E; ++e) {
      const uint64_t key = ExpertId{layer, e}.Key();
      Expert& x = experts_[key];
      const auto cell = static_cast<size_t>(CellOf(x.since, x.rate, x.prob));
      cells[cell].Add(x.used);
      global_[cell].Add(x.used);
      x.since =
          x.used ? 0 : (x.since == kNever ? kNever : std::min<uint32_t>(x.since + 1, 1u << 20));
      x.rate += kRateWeight * ((x.used ? 1.0f : 0.0f) - x.rate);
      x.prob = x.visit_prob;
      x.visit_prob = -1;
      x.used = false;
      x.hinted = false;
    }
    for (int rule : {kReuseRule, kCycleRule, kRouterRule}) {
      ShadowCache& s = shadows_[static_cast<size_t>(rule)];
      for (int e = 0; e < E; ++e) {
        const uint64_t key = ExpertId{layer, e}.Key();
        if (s.Contains(key)) s.Rescore(key, Score(rule, key));
      }
    }
  }

  const CachePolicyParams p_;
  std::unique_ptr<CachePolicy> lru_, lfu_, routing_;
  uint64_t capacity_;  // blocks (0: not known yet)
  uint64_t max_resident_ = 0;
  uint64_t tick_ = 0;
  uint64_t visits_ = 0;
  int open_layer_ = -1;
  int experts_seen_ = 0, layers_seen_ = 0;
  std::unordered_map<uint64_t, Expert> experts_;
  std::vector<std::array<Cell, kCells>> per_layer_;
  std::array<Cell, kCells> global_{};
  std::vector<double> last_visit_;  // visit index of each layer's latest visit (0: none)
  std::array<ShadowCache, kRules> shadows_;
  std::array<double, kRules> wins_{};
  int leader_ = kLruRule;
  bool batched_ = false;  // the tier reports request ends
  std::unordered_set<uint64_t> resident_, demoted_, pinned_;
};

}  // namespace

std::unique_ptr<CachePolicy> MakeAdaptivePolicy(const CachePolicyParams& params) {
  return std::make_unique<AdaptivePolicy>(params);
}

}  // namespace colibri::expert_source
