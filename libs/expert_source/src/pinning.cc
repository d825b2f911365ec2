#include "colibri/expert_source/pinning.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace colibri::expert_source {

absl::StatusOr<std::vector<ExpertId>> ParsePinnedExperts(std::string_view json, int n_layers,
                                                         int n_experts) {
  nlohmann::json j =
      nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("pinned experts: not valid JSON");
  if (j.is_object()) {
    if (!j.contains("pinned_experts")) {
      return absl::InvalidArgumentError(
          "pinned experts: expected a list or an object with \"pinned_experts\"");
    }
    j = j["pinned_experts"];
  }
  if (!j.is_array()) return absl::InvalidArgumentError("pinned experts: expected a list");
  std::vector<ExpertId> out;
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& item = j[i];
    const nlohmann::json *l = nullptr, *e = nullptr;
    if (item.is_array() && item.size() == 2) {
      l = &item[0];
      e = &item[1];
    } else if (item.is_object() && item.contains("layer") && item.contains("expert")) {
      l = &item["layer"];
      e = &item["expert"];
    }
    if (l == nullptr || !l->is_number_integer() || !e->is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pinned experts: entry ", i, " (", item.dump(),
                       ") is not [layer, expert] or {\"layer\", \"expert\"}"));
    }
    const int64_t layer = l->get<int64_t>(), expert = e->get<int64_t>();
    if (layer < 0 || layer >= n_layers || expert < 0 || expert >= n_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("pinned experts: entry ", i, " (layer ", layer, ", expert ", expert,
                       ") is outside the model (", n_layers, " layers x ", n_experts, " experts)"));
    }
    ExpertId id{static_cast<int32_t>(layer), static_cast<int32_t>(expert)};
    if (seen.insert(id.Key()).second) out.push_back(id);
  }
  return out;
}

absl::StatusOr<std::vector<ExpertId>> LoadPinnedExperts(const std::filesystem::path& path,
                                                        int n_layers, int n_experts) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  auto ids = ParsePinnedExperts(*text, n_layers, n_experts);
  if (!ids.ok())
    return absl::Status(ids.status().code(),
                        absl::StrCat(path.string(), ": ", ids.status().message()));
  return ids;
}

std::vector<ExpertId> PlanLearnedPins(const std::vector<std::pair<ExpertId, double>>& ranked,
                                      const std::vector<ExpertId>& current, uint64_t budget_bytes,
                                      const std::function<uint64_t(ExpertId)>& block_size,
                                      double hysteresis, double min_heat,
                                      const std::unordered_set<uint64_t>& exclude) {
  std::unordered_map<uint64_t, double> heat;
  for (const auto& [id, h] : ranked) heat[id.Key()] = h;
  auto heat_of = [&](const ExpertId& id) {
    auto it = heat.find(id.Key());
    return it == heat.end() ? 0.0 : it->second;
  };
  // Keep the current members that are still eligible, coldest last.
  std::vector<ExpertId> keep;
  uint64_t used = 0;
  for (const ExpertId& id : current) {
    if (exclude.count(id.Key()) || heat_of(id) < min_heat) continue;
    keep.push_back(id);
  }
  std::stable_sort(keep.begin(), keep.end(),
                   [&](const ExpertId& a, const ExpertId& b) { return heat_of(a) > heat_of(b); });
  std::vector<ExpertId> set;
  for (const ExpertId& id : keep) {
    if (used + block_size(id) > budget_bytes) continue;
    used += block_size(id);
    set.push_back(id);
  }
  std::unordered_set<uint64_t> in;
  for (const ExpertId& id : set) in.insert(id.Key());
  for (const auto& [id, h] : ranked) {
    if (h < min_heat) break;
    if (in.count(id.Key()) || exclude.count(id.Key())) continue;
    const uint64_t size = block_size(id);
    if (used + size <= budget_bytes) {  // free room: no hysteresis needed
      used += size;
      set.push_back(id);
      in.insert(id.Key());
      continue;
    }
    // Displace the coldest member if this outsider is clearly hotter.
    auto coldest = std::min_element(
        set.begin(), set.end(),
        [&](const ExpertId& a, const ExpertId& b) { return heat_of(a) < heat_of(b); });
    if (coldest == set.end() || h <= (1.0 + hysteresis) * heat_of(*coldest)) break;
    if (used - block_size(*coldest) + size > budget_bytes) continue;
    used = used - block_size(*coldest) + size;
    in.erase(coldest->Key());
    *coldest = id;
    in.insert(id.Key());
  }
  std::sort(set.begin(), set.end(),
            [](const ExpertId& a, const ExpertId& b) { return a.Key() < b.Key(); });
  return set;
}

absl::StatusOr<std::unique_ptr<PinController>> PinController::Start(CacheTier* tier,
                                                                    RoutingHeat* heat,
                                                                    PinControllerOptions options) {
  auto c = std::unique_ptr<PinController>(new PinController(tier, heat, std::move(options)));
  if (auto st = tier->SetPinned(c->options_.fixed); !st.ok()) return st;
  if (auto r = c->Rebalance(); !r.ok()) return r.status();
  if (c->options_.interval.count() > 0) c->thread_ = std::thread([p = c.get()] { p->Loop(); });
  return c;
}

PinController::~PinController() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (auto st = SaveHeat(); !st.ok())
    spdlog::warn("routing heat not saved: {}", std::string(st.message()));
}

void PinController::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool warned = false;
  while (!cv_.wait_for(lock, options_.interval, [&] { return stop_; })) {
    lock.unlock();
    auto r = Rebalance();
    absl::Status st = r.ok() ? SaveHeat() : r.status();
    if (!st.ok() && !warned) {
      // Once: a read-only model directory would otherwise log every interval.
      spdlog::warn("pinning: {}", std::string(st.message()));
      warned = true;
    }
    lock.lock();
  }
}

absl::StatusOr<int> PinController::Rebalance() {
  std::lock_guard<std::mutex> lock(mu_);
  if (heat_ == nullptr || options_.learned_budget_bytes == 0) return 0;
  std::unordered_set<uint64_t> fixed;
  for (const ExpertId& id : options_.fixed) fixed.insert(id.Key());
  auto next = PlanLearnedPins(
      heat_->Ranked(), learned_, options_.learned_budget_bytes,
      [&](ExpertId id) { return tier_->BlockSize(id); }, options_.hysteresis, options_.min_heat,
      fixed);
  std::unordered_set<uint64_t> before, after;
  for (const ExpertId& id : learned_) before.insert(id.Key());
  for (const ExpertId& id : next) after.insert(id.Key());
  int changed = 0;
  for (uint64_t k : before) changed += after.count(k) == 0;
  for (uint64_t k : after) changed += before.count(k) == 0;
  std::vector<ExpertId> all = options_.fixed;
  all.insert(all.end(), next.begin(), next.end());
  // Re-issued even when unchanged: pins cleared by Clear() are read back.
  if (auto st = tier_->SetPinned(all); !st.ok()) return st;
  learned_ = std::move(next);
  changes_ += static_cast<uint64_t>(changed);
  return changed;
}

std::vector<ExpertId> PinController::learned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return learned_;
}

uint64_t PinController::changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return changes_;
}

absl::Status PinController::SaveHeat() const {
  if (heat_ == nullptr || options_.heat_path.empty()) return absl::OkStatus();
  return heat_->Save(options_.heat_path);
}

}  // namespace colibri::expert_source
