#include "colibri/expert_source/routing_heat.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "nlohmann/json.hpp"

namespace colibri::expert_source {

RoutingHeat::RoutingHeat(std::string model, int n_layers, int n_experts, int top_k,
                         double half_life_tokens)
    : model_(std::move(model)),
      n_layers_(n_layers),
      n_experts_(n_experts),
      top_k_(std::max(1, top_k)),
      half_life_(half_life_tokens > 0 ? half_life_tokens : 4096),
      heat_(static_cast<size_t>(n_layers) * static_cast<size_t>(n_experts), 0.0),
      stamp_(heat_.size(), 0.0) {}

double RoutingHeat::DecayedLocked(size_t i) const {
  return heat_[i] * std::exp2(-(clock_ - stamp_[i]) / half_life_);
}

void RoutingHeat::Record(std::span<const RoutingHint> hints) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t layer0_selected = 0;
  for (const RoutingHint& h : hints) {
    if (h.id.layer == 0) layer0_selected += h.selected;
  }
  clock_ += static_cast<double>(layer0_selected) / top_k_;
  for (const RoutingHint& h : hints) {
    if (h.id.layer < 0 || h.id.layer >= n_layers_ || h.id.expert < 0 || h.id.expert >= n_experts_)
      continue;
    if (h.selected == 0) continue;
    const size_t i = Index(h.id);
    heat_[i] = DecayedLocked(i) + h.selected;
    stamp_[i] = clock_;
  }
}

double RoutingHeat::Heat(ExpertId id) const {
  if (id.layer < 0 || id.layer >= n_layers_ || id.expert < 0 || id.expert >= n_experts_) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return DecayedLocked(Index(id));
}

std::vector<std::pair<ExpertId, double>> RoutingHeat::Ranked() const {
  std::vector<std::pair<ExpertId, double>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(heat_.size());
    for (int l = 0; l < n_layers_; ++l) {
      for (int e = 0; e < n_experts_; ++e) {
        out.emplace_back(ExpertId{l, e}, DecayedLocked(Index(ExpertId{l, e})));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

double RoutingHeat::tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clock_;
}

std::string RoutingHeat::ToJson() const {
  nlohmann::ordered_json j;
  j["format"] = "colibri-routing-heat";
  j["version"] = 1;
  j["model"] = model_;
  j["n_layers"] = n_layers_;
  j["n_experts"] = n_experts_;
  j["top_k"] = top_k_;
  j["half_life_tokens"] = half_life_;
  std::lock_guard<std::mutex> lock(mu_);
  j["tokens"] = clock_;
  nlohmann::json rows = nlohmann::json::array();
  for (int l = 0; l < n_layers_; ++l) {
    nlohmann::json row = nlohmann::json::array();
    for (int e = 0; e < n_experts_; ++e) {
      // Six significant digits are plenty for a ranking.
      row.push_back(std::round(DecayedLocked(Index(ExpertId{l, e})) * 1e4) / 1e4);
    }
    rows.push_back(std::move(row));
  }
  j["heat"] = std::move(rows);
  return j.dump();
}

absl::Status RoutingHeat::FromJson(std::string_view text) {
  nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "colibri-routing-heat") {
    return absl::InvalidArgumentError("not a colibri routing heat file");
  }
  if (j.value("model", "") != model_ || j.value("n_layers", -1) != n_layers_ ||
      j.value("n_experts", -1) != n_experts_) {
    return absl::FailedPreconditionError(
        absl::StrCat("routing heat is for model '", j.value("model", ""), "' (",
                     j.value("n_layers", -1), " layers x ", j.value("n_experts", -1),
                     " experts), not '", model_, "' (", n_layers_, " x ", n_experts_, ")"));
  }
  const auto& rows = j["heat"];
  if (!rows.is_array() || rows.size() != static_cast<size_t>(n_layers_)) {
    return absl::InvalidArgumentError("routing heat: 'heat' must hold one row per layer");
  }
  std::vector<double> heat(heat_.size());
  for (int l = 0; l < n_layers_; ++l) {
    const auto& row = rows[static_cast<size_t>(l)];
    if (!row.is_array() || row.size() != static_cast<size_t>(n_experts_)) {
      return absl::InvalidArgumentError(
          absl::StrCat("routing heat: row ", l, " must hold ", n_experts_, " numbers"));
    }
    for (int e = 0; e < n_experts_; ++e) {
      const auto& v = row[static_cast<size_t>(e)];
      if (!v.is_number() || v.get<double>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("routing heat: bad value at layer ", l, ", expert ", e));
      }
      heat[Index(ExpertId{l, e})] = v.get<double>();
    }
  }
  const double tokens = j.value("tokens", 0.0);
  std::lock_guard<std::mutex> lock(mu_);
  clock_ = tokens >= 0 ? tokens : 0;  // the heat values are as of this clock
  heat_ = std::move(heat);
  std::fill(stamp_.begin(), stamp_.end(), clock_);
  return absl::OkStatus();
}

absl::Status RoutingHeat::Save(const std::filesystem::path& path) const {
  // Several processes may serve one model directory: each writes its own temp file, and the
  // last rename wins whole.
  std::filesystem::path mine = path;
  mine += absl::StrCat(".", ::getpid());
  if (auto st = WriteFileAtomic(mine, ToJson()); !st.ok()) return st;
  std::error_code ec;
  std::filesystem::rename(mine, path, ec);
  if (ec) {
    std::filesystem::remove(mine, ec);
    return absl::UnavailableError(absl::StrCat("cannot write routing heat '", path.string(), "'"));
  }
  return absl::OkStatus();
}

absl::Status RoutingHeat::Load(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return absl::NotFoundError(absl::StrCat("no routing heat at ", path.string()));
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::Status st = FromJson(*text);
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(path.string(), ": ", st.message()));
  return absl::OkStatus();
}

}  // namespace colibri::expert_source
