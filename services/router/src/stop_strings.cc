#include "stop_strings.h"

#include <algorithm>
#include <utility>

namespace colibri::router {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Step StopStringMatcher::Push(std::string_view text) {
  held_.append(text);
  Step step;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t pos = held_.find(s);
    // The earliest match wins (at a tie, the first in the list).
    if (pos < cut) {
      cut = pos;
      step.stop = s;
    }
  }
  if (cut != std::string::npos) {
    step.text = held_.substr(0, cut);
    step.stopped = true;
    held_.clear();
    return step;
  }
  size_t keep = 0;  // the longest tail that could still grow into a stop string
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  step.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return step;
}

std::string StopStringMatcher::Flush() { return std::exchange(held_, std::string()); }

}  // namespace colibri::router
