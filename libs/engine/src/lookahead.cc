#include "lookahead.h"

#include <algorithm>

#include "colibri/core/status.h"

namespace colibri::engine {

using expert_source::ExpertId;

Lookahead::Lookahead(backend::Backend* backend, expert_source::ExpertSource* experts,
                     std::vector<LayerGate> gates, const model::ModelConfig& config, int depth,
                     float min_weight, bool keep_predictions, ModelCounters* counters)
    : backend_(backend),
      experts_(experts),
      gates_(std::move(gates)),
      config_(config),
      depth_(depth),
      min_weight_(min_weight),
      keep_predictions_(keep_predictions),
      route_(RouteParams::FromConfig(config)),
      counters_(counters),
      predicted_(gates_.size(), std::vector<char>(static_cast<size_t>(config.n_experts), 0)),
      resident_(gates_.size(), 0) {}

void Lookahead::BeginForward() {
  for (auto& layer : predicted_) std::fill(layer.begin(), layer.end(), 0);
  std::fill(resident_.begin(), resident_.end(), 0);
}

absl::Status Lookahead::Predict(int layer, const float* x, int64_t n) {
  const int64_t H = config_.hidden_size, E = config_.n_experts;
  if (n > capacity_) {
    ASSIGN_OR_RETURN(h_, backend_->Allocate(static_cast<size_t>(n * H) * sizeof(float)));
    ASSIGN_OR_RETURN(logits_, backend_->Allocate(static_cast<size_t>(n * E) * sizeof(float)));
    capacity_ = n;
  }
  host_logits_.resize(static_cast<size_t>(n * E));
  std::vector<ExpertId> ids;
  row_predictions_.assign(static_cast<size_t>(n), {});
  const int last = std::min<int>(static_cast<int>(gates_.size()) - 1, layer + depth_);
  for (int target = layer + 1; target <= last; ++target) {
    const LayerGate& g = gates_[static_cast<size_t>(target)];
    if (!g.moe) {  // a dense layer fetches nothing
      for (auto& row : row_predictions_) row.emplace_back();
      continue;
    }
    // Asked each time (lock-free): a block of the layer may have been evicted since.
    if (!keep_predictions_ && experts_->ResidentInLayer(target) >= config_.n_experts) {
      resident_[static_cast<size_t>(target)] = 1;
      counters_->prefetch_layers_resident++;
      for (auto& row : row_predictions_) row.emplace_back();
      continue;
    }
    backend_->RmsNorm(x, g.ffn_norm, n, H, static_cast<float>(config_.rms_norm_eps), h_->f32());
    backend_->MatMul(g.router, h_->f32(), n, logits_->f32());
    backend_->Download(host_logits_.data(), logits_->f32(), host_logits_.size() * sizeof(float));
    Route(host_logits_.data(), g.bias, n, route_, /*keep_probs=*/false, &routing_);
    const auto K = static_cast<size_t>(config_.top_k);
    for (int64_t t = 0; t < n; ++t) {
      const auto begin =
          routing_.experts.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(t) * K);
      row_predictions_[static_cast<size_t>(t)].emplace_back(begin,
                                                            begin + static_cast<std::ptrdiff_t>(K));
    }
    auto& seen = predicted_[static_cast<size_t>(target)];
    for (size_t i = 0; i < routing_.experts.size(); ++i) {
      const int32_t e = routing_.experts[i];
      // Compared without the scaling factor (see ModelOptions::prefetch_min_weight).
      if (seen[static_cast<size_t>(e)] || routing_.weights[i] < min_weight_ * route_.scale)
        continue;
      seen[static_cast<size_t>(e)] = 1;
      ids.push_back(ExpertId{target, e});
    }
  }
  if (!ids.empty()) {
    // Nearest layer first: its read is needed soonest.
    experts_->Prefetch(ids);
    counters_->prefetch_predicted += ids.size();
  }
  return absl::OkStatus();
}

void Lookahead::OnRouted(int layer, const std::vector<int32_t>& experts) {
  auto& seen = predicted_[static_cast<size_t>(layer)];
  // Not predicted (all resident when its turn came): not scored, nothing to cancel.
  if (resident_[static_cast<size_t>(layer)] && std::find(seen.begin(), seen.end(), 1) == seen.end())
    return;
  std::vector<char> routed(seen.size(), 0);
  uint64_t hit = 0;
  for (int32_t e : experts) {
    routed[static_cast<size_t>(e)] = 1;
    hit += seen[static_cast<size_t>(e)] != 0;
  }
  std::vector<ExpertId> unused;
  for (size_t e = 0; e < seen.size(); ++e) {
    if (seen[e] && !routed[e]) unused.push_back(ExpertId{layer, static_cast<int32_t>(e)});
  }
  counters_->prefetch_predicted_routed += hit;
  // Layer 0 is never predicted (nothing runs before it): it does not count against coverage.
  if (layer > 0) counters_->prefetch_routed += experts.size();
  if (!unused.empty()) experts_->Cancel(unused);
}

}  // namespace colibri::engine
