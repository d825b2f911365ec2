// Routing heat: how often the router picked each expert of a model, decayed over time, and
// persisted beside the model so a restarted node knows its hot experts before the first token.
//
// Heat of an expert = sum over the tokens that picked it of 2^(-age / half_life), age counted in
// tokens (the rows routed at layer 0). Record() takes the engine's routing hints (the same ones
// the cache tiers get). Thread-safe.
//
// File format (JSON, written atomically):
//   {"format": "colibri-routing-heat", "version": 1, "model": NAME, "n_layers": L,
//    "n_experts": E, "top_k": K, "half_life_tokens": H, "tokens": T, "heat": [[h(l, e) ...] ...]}
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source {

class RoutingHeat {
 public:
  RoutingHeat(std::string model, int n_layers, int n_experts, int top_k,
              double half_life_tokens = 4096);

  void Record(std::span<const RoutingHint> hints);
  // Heat now (decayed to the current token clock).
  double Heat(ExpertId id) const;
  // Every expert with its heat, hottest first (ties: lower layer, then lower id).
  std::vector<std::pair<ExpertId, double>> Ranked() const;
  double tokens() const;

  std::string ToJson() const;
  // Replaces the table with a file's. FailedPrecondition when the file is for another model or
  // shape; InvalidArgument when it is not a heat file.
  absl::Status FromJson(std::string_view text);
  absl::Status Save(const std::filesystem::path& path) const;
  // NotFound when the file does not exist (a model never served before).
  absl::Status Load(const std::filesystem::path& path);

 private:
  size_t Index(ExpertId id) const {
    return static_cast<size_t>(id.layer) * static_cast<size_t>(n_experts_) +
           static_cast<size_t>(id.expert);
  }
  double DecayedLocked(size_t i) const;

  const std::string model_;
  const int n_layers_, n_experts_, top_k_;
  const double half_life_;
  mutable std::mutex mu_;
  double clock_ = 0;          // tokens routed at layer 0
  std::vector<double> heat_;  // as of stamp_[i]
  std::vector<double> stamp_;
};

}  // namespace colibri::expert_source
