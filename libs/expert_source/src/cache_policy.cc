#include "colibri/expert_source/cache_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "adaptive_policy.h"

namespace colibri::expert_source {
namespace {

constexpr double kDemoted = -std::numeric_limits<double>::infinity();

// log2(2^a + 2^b) without overflow: scores are kept in the log domain, scaled to a fixed
// origin, so adding a use at time t adds 2^(t / half_life) and the order between blocks never
// needs recomputing as time passes (every score decays by the same factor).
double LogAdd2(double a, double b) {
  if (a == kDemoted || std::isinf(a)) return b;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log2(1.0 + std::exp2(lo - hi));
}

class LruPolicy final : public CachePolicy {
 public:
  CachePolicyKind kind() const override { return CachePolicyKind::kLru; }
  void OnAccess(uint64_t key) override { last_[key] = static_cast<double>(++now_); }
  void OnInsert(uint64_t key) override {
    // A block read by prefetch enters as most recently used; a demand miss already is.
    auto& t = last_[key];
    t = std::max(t, static_cast<double>(now_));
  }
  void OnErase(uint64_t key) override { last_.erase(key); }
  void OnDemote(uint64_t key) override { last_[key] = kDemoted; }
  double Priority(uint64_t key) const override {
    auto it = last_.find(key);
    return it == last_.end() ? 0 : it->second;
  }

 private:
  uint64_t now_ = 0;
  std::unordered_map<uint64_t, double> last_;
};

// lfu: decayed counts in the log domain (see LogAdd2).
class LfuPolicy final : public CachePolicy {
 public:
  explicit LfuPolicy(const CachePolicyParams& p)
      : half_life_(p.half_life > 0 ? p.half_life : 256) {}
  CachePolicyKind kind() const override { return CachePolicyKind::kLfu; }

  void OnAccess(uint64_t key) override {
    ++now_;
    State& s = state_[key];
    s.score = LogAdd2(s.score, static_cast<double>(now_) / half_life_);
    s.last_use = now_;
    s.demoted = false;
  }
  void OnInsert(uint64_t key) override { state_.try_emplace(key); }
  void OnErase(uint64_t key) override {
    auto it = state_.find(key);
    if (it != state_.end()) it->second.demoted = false;
  }
  void OnDemote(uint64_t key) override { state_[key].demoted = true; }
  double Priority(uint64_t key) const override {
    auto it = state_.find(key);
    if (it == state_.end()) return -1e300;
    if (it->second.demoted) return kDemoted;
    return it->second.score + 1e-9 * static_cast<double>(it->second.last_use);
  }

 private:
  struct State {
    double score = -std::numeric_limits<double>::infinity();  // log2 of the decayed count
    uint64_t last_use = 0;
    bool demoted = false;
  };
  const double half_life_;
  uint64_t now_ = 0;
  std::unordered_map<uint64_t, State> state_;
};

// routing: expected layer steps to the next use (see the header).
class RoutingPolicy final : public CachePolicy {
 public:
  explicit RoutingPolicy(const CachePolicyParams& p) : p_(p), layers_(std::max(p.n_layers, 1)) {}
  CachePolicyKind kind() const override { return CachePolicyKind::kRouting; }

  void OnAccess(uint64_t key) override {
    const int layer = static_cast<int>(key >> 32);
    current_ = layer;
    layers_ = std::max(layers_, layer + 1);
    State& s = At(key);
    s.demoted = false;
    if (!s.hinted) {  // no hints: uses only
      s.fast += p_.fast_weight * (1.0 - s.fast);
      s.slow += p_.slow_weight * (1.0 - s.slow);
    }
  }
  void OnInsert(uint64_t key) override { At(key); }
  void OnErase(uint64_t key) override {
    auto it = state_.find(key);
    if (it != state_.end()) it->second.demoted = false;
  }
  void OnDemote(uint64_t key) override { At(key).demoted = true; }
  void OnHint(const RoutingHint& h) override {
    current_ = h.id.layer;
    layers_ = std::max(layers_, h.id.layer + 1);
    experts_ = std::max(experts_, h.id.expert + 1);
    const double k = p_.top_k > 0 ? p_.top_k : 1;
    const double visit =
        p_.picked_weight * (h.selected > 0 ? 1.0 : 0.0) +
        (1.0 - p_.picked_weight) * std::min(1.0, k * static_cast<double>(h.probability));
    State& s = At(h.id.Key());
    // Score both estimates on this pick before updating them (Brier loss, slowly averaged).
    const double picked = h.selected > 0 ? 1.0 : 0.0;
    constexpr double kLossRate = 0.002;
    loss_fast_ += kLossRate * ((s.fast - picked) * (s.fast - picked) - loss_fast_);
    loss_slow_ += kLossRate * ((s.slow - picked) * (s.slow - picked) - loss_slow_);
    s.fast += p_.fast_weight * (visit - s.fast);
    s.slow += p_.slow_weight * (visit - s.slow);
    s.hinted = true;
  }
  double Priority(uint64_t key) const override {
    auto it = state_.find(key);
    const State* s = it == state_.end() ? nullptr : &it->second;
    if (s != nullptr && s->demoted) return kDemoted;
    const int layer = static_cast<int>(key >> 32);
    int d = ((layer - current_) % layers_ + layers_) % layers_;
    if (d == 0) d = layers_;  // the layer just computed comes round last
    const double q =
        std::max(s == nullptr ? Prior() : (loss_fast_ < loss_slow_ ? s->fast : s->slow), 1e-4);
    return -(d + layers_ * (1.0 / q - 1.0));
  }

 private:
  struct State {
    double fast = 0, slow = 0;  // estimates of the pick probability per visit
    bool hinted = false;
    bool demoted = false;
  };
  double Prior() const {
    const int e = p_.n_experts > 0 ? p_.n_experts : std::max(experts_, 1);
    return p_.top_k > 0 ? std::min(1.0, static_cast<double>(p_.top_k) / e) : 0.25;
  }
  State& At(uint64_t key) {
    auto [it, inserted] = state_.try_emplace(key);
    if (inserted) it->second.fast = it->second.slow = Prior();
    return it->second;
  }

  const CachePolicyParams p_;
  int layers_;
  int experts_ = 0;
  int current_ = 0;
  double loss_fast_ = 0, loss_slow_ = 0;
  std::unordered_map<uint64_t, State> state_;
};

}  // namespace

std::string_view CachePolicyName(CachePolicyKind kind) {
  switch (kind) {
    case CachePolicyKind::kLru: return "lru";
    case CachePolicyKind::kLfu: return "lfu";
    case CachePolicyKind::kRouting: return "routing";
    case CachePolicyKind::kAdaptive: return "adaptive";
  }
  return "?";
}

absl::StatusOr<CachePolicyKind> ParseCachePolicy(std::string_view name) {
  if (name == "lru") return CachePolicyKind::kLru;
  if (name == "lfu") return CachePolicyKind::kLfu;
  if (name == "routing") return CachePolicyKind::kRouting;
  if (name == "adaptive") return CachePolicyKind::kAdaptive;
  return absl::InvalidArgumentError(absl::StrCat("unknown cache policy '", std::string(name),
                                                 "' (expected adaptive, lru, lfu or routing)"));
}

CachePolicyParams DefaultPolicyParams(uint64_t capacity_blocks, int n_layers, int n_experts,
                                      int top_k) {
  CachePolicyParams p;
  const double cap = static_cast<double>(std::max<uint64_t>(capacity_blocks, 1));
  const double per_token = static_cast<double>(std::max(1, n_layers * top_k));
  // lfu: remember about two cache turnovers, and never less than a few tokens.
  p.half_life = std::max(2.0 * cap, 4.0 * per_token);
  p.n_layers = n_layers;
  p.n_experts = n_experts;
  p.top_k = top_k;
  p.capacity_blocks = capacity_blocks;
  return p;
}

std::unique_ptr<CachePolicy> MakeCachePolicy(CachePolicyKind kind,
                                             const CachePolicyParams& params) {
  switch (kind) {
    case CachePolicyKind::kLru: return std::make_unique<LruPolicy>();
    case CachePolicyKind::kLfu: return std::make_unique<LfuPolicy>(params);
    case CachePolicyKind::kRouting: return std::make_unique<RoutingPolicy>(params);
    case CachePolicyKind::kAdaptive: return MakeAdaptivePolicy(params);
  }
  return std::make_unique<LruPolicy>();
}

}  // namespace colibri::expert_source
