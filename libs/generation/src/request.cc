#include "colibri/generation/request.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"

namespace colibri::generation {
namespace {

// Compared in float, the parameters' type (0.01f is below the double 0.01).
absl::Status InRange(const char* field, double v, double lo, double hi) {
  if (v >= static_cast<float>(lo) && v <= static_cast<float>(hi))
    return absl::OkStatus();  // false for NaN too
  return absl::InvalidArgumentError(
      absl::StrCat("'", field, "': must be between ", lo, " and ", hi, " (got ", v, ")"));
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  RETURN_IF_ERROR(InRange("temperature", p.temperature, 0, 2));
  RETURN_IF_ERROR(InRange("top_p", p.top_p, 0, 1));
  RETURN_IF_ERROR(InRange("min_p", p.min_p, 0, 1));
  RETURN_IF_ERROR(InRange("top_k", p.top_k, 0, 1 << 20));
  RETURN_IF_ERROR(InRange("repetition_penalty", p.repetition_penalty, 0.01, 10));
  RETURN_IF_ERROR(InRange("presence_penalty", p.presence_penalty, -2, 2));
  RETURN_IF_ERROR(InRange("frequency_penalty", p.frequency_penalty, -2, 2));
  RETURN_IF_ERROR(InRange("top_logprobs", p.top_logprobs, 0, 20));
  return absl::OkStatus();
}

}  // namespace colibri::generation
