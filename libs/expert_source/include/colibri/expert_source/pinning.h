// Pinned experts: blocks a cache tier never evicts.
//
// Two sources: a file the operator writes (--pinned-experts), and learned pins, the hottest
// experts by persisted routing heat (routing_heat.h), re-planned while serving. A learned pin
// set only changes when an outsider is hotter than the coldest insider by the factor
// (1 + hysteresis), so the set does not thrash on small fluctuations.
//
// Pinned-experts file: a JSON list of [layer, expert] pairs and/or {"layer": L, "expert": E}
// objects, or an object {"pinned_experts": [...]} holding such a list.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/cache_tier.h"
#include "colibri/expert_source/routing_heat.h"

namespace colibri::expert_source {

// Errors (InvalidArgument) name the offending entry; duplicates are removed.
absl::StatusOr<std::vector<ExpertId>> ParsePinnedExperts(std::string_view json, int n_layers,
                                                         int n_experts);
absl::StatusOr<std::vector<ExpertId>> LoadPinnedExperts(const std::filesystem::path& path,
                                                        int n_layers, int n_experts);

// The learned pin set: from `ranked` (hottest first), experts not in `exclude` with heat >=
// `min_heat` whose blocks fit in `budget_bytes`. Members of `current` stay unless an outsider is
// hotter by the factor (1 + hysteresis). Deterministic.
std::vector<ExpertId> PlanLearnedPins(const std::vector<std::pair<ExpertId, double>>& ranked,
                                      const std::vector<ExpertId>& current, uint64_t budget_bytes,
                                      const std::function<uint64_t(ExpertId)>& block_size,
                                      double hysteresis, double min_heat,
                                      const std::unordered_set<uint64_t>& exclude);

struct PinControllerOptions {
  std::vector<ExpertId> fixed;        // from the pinned-experts file
  uint64_t learned_budget_bytes = 0;  // 0: no learned pins
  double hysteresis = 0.25;
  double min_heat = 1.0;                      // never pin an expert picked less than about once
  std::filesystem::path heat_path;            // empty: the heat is not persisted
  std::chrono::milliseconds interval{10000};  // re-plan and save period; 0: only on Rebalance()
};

// Keeps a tier's pinned set = fixed pins + learned pins. Thread-safe.
class PinController {
 public:
  // Applies the fixed pins and the learned ones from `heat` (as loaded) at once.
  static absl::StatusOr<std::unique_ptr<PinController>> Start(CacheTier* tier, RoutingHeat* heat,
                                                              PinControllerOptions options);
  // Stops re-planning and saves the heat one last time.
  ~PinController();

  // Re-plans the learned pins now; returns how many experts entered or left the set.
  absl::StatusOr<int> Rebalance();
  std::vector<ExpertId> learned() const;
  uint64_t changes() const;  // total learned-pin entries and exits since start
  absl::Status SaveHeat() const;

 private:
  PinController(CacheTier* tier, RoutingHeat* heat, PinControllerOptions options)
      : tier_(tier), heat_(heat), options_(std::move(options)) {}
  void Loop();

  CacheTier* const tier_;
  RoutingHeat* const heat_;
  const PinControllerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<ExpertId> learned_;
  uint64_t changes_ = 0;
  std::thread thread_;
};

}  // namespace colibri::expert_source
