// Lookahead prefetch. While layer L runs, the routers of layers L+1..L+N are applied to the
// current residual stream (each after its own layer's ffn RMSNorm, as that layer's router will
// see it) and the experts they would pick are prefetched from the expert source. When a layer's
// real routing is known, the predictions for it that the router did not pick are cancelled.
//
// Predictions never feed the computation: they only decide which blocks are read early (in the
// expert source's own buffers), so tokens and logits are the same with or without lookahead.
// A layer whose every expert the source holds (ExpertSource::ResidentInLayer: a cache that
// holds the model) is not predicted, so a fully cached model pays no router products for it,
// unless the predictions are wanted for themselves (`keep_predictions`: a routing trace).
// Used from Model::Forward only (single-threaded).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "colibri/backend/backend.h"
#include "colibri/engine/model.h"
#include "colibri/expert_source/expert_source.h"
#include "routing.h"

namespace colibri::engine {

class Lookahead {
 public:
  struct LayerGate {
    bool moe = true;                  // dense layers have no router and are skipped
    const float* ffn_norm = nullptr;  // f32 [hidden]
    backend::WeightRef router;        // [n_experts, hidden]
    const float* bias = nullptr;      // host f32 [n_experts] router bias, or null (see Route)
  };
  Lookahead(backend::Backend* backend, expert_source::ExpertSource* experts,
            std::vector<LayerGate> gates, const model::ModelConfig& config, int depth,
            float min_weight, bool keep_predictions, ModelCounters* counters);

  // Forgets the previous forward pass's predictions.
  void BeginForward();
  // `x`: the residual stream [n, hidden] in backend memory after layer `layer`'s attention.
  absl::Status Predict(int layer, const float* x, int64_t n);
  // The union of experts the router picked at `layer` (ascending): scores the predictions made
  // for it and cancels the ones not picked.
  void OnRouted(int layer, const std::vector<int32_t>& experts);
  // What the last Predict call's routers chose for `row`: entry d - 1 is the top-k for layer + d
  // (every choice, whatever its weight; empty for a dense layer). For routing traces (version 2).
  std::span<const std::vector<int32_t>> RowPredictions(int64_t row) const {
    if (row < 0 || static_cast<size_t>(row) >= row_predictions_.size()) return {};
    return row_predictions_[static_cast<size_t>(row)];
  }

 private:
  backend::Backend* const backend_;
  expert_source::ExpertSource* const experts_;
  const std::vector<LayerGate> gates_;
  const model::ModelConfig config_;
  const int depth_;
  const float min_weight_;
  const bool keep_predictions_;
  const RouteParams route_;
  ModelCounters* const counters_;
  int64_t capacity_ = 0;
  std::unique_ptr<backend::Buffer> h_, logits_;
  std::vector<float> host_logits_;
  Routing routing_;
  std::vector<std::vector<char>> predicted_;  // [layer][expert]: asked for in this forward pass
  std::vector<char> resident_;                // [layer]: not predicted, all resident
  std::vector<std::vector<std::vector<int32_t>>> row_predictions_;  // [row][depth - 1][k]
};

}  // namespace colibri::engine
