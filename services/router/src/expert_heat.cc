#include "expert_heat.h"

#include <algorithm>

namespace colibri::router {

void ExpertHeat::Record(const std::string& session_id,
                        const std::vector<expert_source::ExpertUse>& counts) {
  if (counts.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& c : counts) global_[{c.id.layer, c.id.expert}] += c.count;
  if (session_id.empty()) return;
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) {
    lru_.push_front(session_id);
    it = sessions_.emplace(session_id, std::make_pair(Heat{}, lru_.begin())).first;
    while (sessions_.size() > max_sessions_) {
      sessions_.erase(lru_.back());
      lru_.pop_back();
    }
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.second);
  }
  Heat& heat = it->second.first;
  for (auto& [key, h] : heat) h *= 0.5;
  for (const auto& c : counts) heat[{c.id.layer, c.id.expert}] += c.count;
  std::erase_if(heat, [](const auto& kv) { return kv.second < 0.01; });
}

std::vector<expert_source::ExpertId> ExpertHeat::Top(const Heat& heat, size_t max) {
  std::vector<std::pair<double, std::pair<int32_t, int32_t>>> ranked;
  ranked.reserve(heat.size());
  for (const auto& [key, h] : heat) ranked.push_back({h, key});
  const size_t n = std::min(max, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<ptrdiff_t>(n), ranked.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  ranked.resize(n);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<expert_source::ExpertId> out;
  out.reserve(n);
  for (const auto& r : ranked) out.push_back({r.second.first, r.second.second});
  return out;
}

std::vector<expert_source::ExpertId> ExpertHeat::Hints(const std::string& session_id,
                                                       size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session_id);
  if (session_id.empty() || it == sessions_.end()) return {};
  return Top(it->second.first, max);
}

std::vector<expert_source::ExpertId> ExpertHeat::GlobalHints(size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  return Top(global_, max);
}

std::vector<ExpertHeat::Cell> ExpertHeat::GlobalCells() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Cell> out;
  out.reserve(global_.size());
  for (const auto& [key, h] : global_) out.push_back({key.first, key.second, h});
  return out;
}

size_t ExpertHeat::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_.size();
}

}  // namespace colibri::router
