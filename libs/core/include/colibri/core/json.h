// Parsing JSON that comes from outside the process (request bodies, gRPC fields holding JSON,
// files users download) with a bound on nesting depth. nlohmann's parser itself is iterative,
// but everything done with a value afterwards (dump, copy, conversion into template values)
// recurses once per level: a 400 KB body of '[' would overflow a thread's stack. Every value
// this returns is at most `max_depth` levels deep, so later recursion over it is bounded.
//
// Thread-safe (no state). Errors: InvalidArgument naming `what` and, for nesting, the limit.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace colibri {

// Levels of arrays/objects a request may nest (the outermost value counts as level 1).
inline constexpr int kMaxJsonDepth = 64;

// `too_deep`, when given, says whether a failure was the nesting bound (callers that word their
// own error).
template <class Json = nlohmann::json>
absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what,
                               int max_depth = kMaxJsonDepth, bool* too_deep_out = nullptr) {
  bool too_deep = false;
  // `depth` is the nesting of the value being started: 0 for the outermost one.
  auto bound = [&](int depth, nlohmann::detail::parse_event_t event, Json&) {
    if ((event == nlohmann::detail::parse_event_t::object_start ||
         event == nlohmann::detail::parse_event_t::array_start) &&
        depth >= max_depth) {
      too_deep = true;
      return false;  // skipped (still scanned iteratively), and the whole parse is refused below
    }
    return true;
  };
  Json j = Json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/false);
  if (too_deep_out != nullptr) *too_deep_out = too_deep;
  if (too_deep) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": JSON nested deeper than ",
                                                   max_depth, " levels (the limit)"));
  }
  if (j.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), " is not valid JSON"));
  return j;
}

}  // namespace colibri
