// Expert heat the router learns from compute's routing reports (the experts each request's rows
// used most), per conversation and over all requests, to send prefetch hints: when a
// conversation resumes, compute starts loading the experts its earlier turns used while the
// request is queued and its first layers run, instead of discovering each one at its layer.
//
// Per conversation: the counts of its last turn plus half of the older ones (a conversation's
// topic drifts). Conversations beyond `max_sessions` are forgotten least recently used.
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "colibri/expert_source/expert_id.h"

namespace colibri::router {

class ExpertHeat {
 public:
  explicit ExpertHeat(size_t max_sessions = 4096) : max_sessions_(max_sessions) {}

  // Adds one finished request's report to its conversation (if any) and the global heat.
  void Record(const std::string& session_id, const std::vector<expert_source::ExpertUse>& counts);

  // Up to `max` experts to warm for the next request of `session_id`: the conversation's
  // hottest, in layer order (the order the forward pass needs them). Empty for a conversation
  // never seen.
  std::vector<expert_source::ExpertId> Hints(const std::string& session_id, size_t max) const;

  // The globally hottest experts, in layer order.
  std::vector<expert_source::ExpertId> GlobalHints(size_t max) const;

  // Every expert's heat over all requests, in (layer, expert) order (the web page's heat map).
  struct Cell {
    int32_t layer = 0, expert = 0;
    double heat = 0;
  };
  std::vector<Cell> GlobalCells() const;

  size_t sessions() const;

 private:
  using Heat = std::map<std::pair<int32_t, int32_t>, double>;  // (layer, expert) -> heat
  static std::vector<expert_source::ExpertId> Top(const Heat& heat, size_t max);

  const size_t max_sessions_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::pair<Heat, std::list<std::string>::iterator>> sessions_;
  std::list<std::string> lru_;  // front = most recent
  Heat global_;
};

}  // namespace colibri::router
