// Stop strings over streamed text: what can be shown now, what must wait because it may still
// grow into a stop string, and where the first stop string cuts the text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace colibri::router {

class StopStringMatcher {
 public:
  // Empty strings in `stops` never match.
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Step {
    std::string text;  // safe to emit now
    bool stopped = false;
    std::string stop;  // the stop string that ended the text (when stopped)
  };
  // Appends decoded text. When a stop string is complete, `text` is everything before the
  // earliest one (of all of them, whatever their order) and nothing may follow; otherwise all
  // but the longest tail that is the beginning of a stop string.
  Step Push(std::string_view text);
  // Everything held back (the generation ended without completing a stop string).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace colibri::router
