#include "colibri/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace colibri::model {

double YarnMscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

namespace {

// The dimension (of `n_rot`) whose wavelength makes `rotations` turns over `context` positions.
double CorrectionDim(double rotations, int64_t n_rot, double theta, double context) {
  return static_cast<double>(n_rot) * std::log(context / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(theta));
}

}  // namespace

RopeTable MakeRopeTable(double theta, int64_t n_rot, const RopeScaling& s) {
  RopeTable t;
  const int64_t pairs = n_rot / 2;
  t.inv_freq.resize(static_cast<size_t>(pairs));
  for (int64_t i = 0; i < pairs; ++i) {
    t.inv_freq[static_cast<size_t>(i)] =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  }
  switch (s.type) {
    case RopeScaling::Type::kNone: break;
    case RopeScaling::Type::kLinear:
      for (double& f : t.inv_freq) f /= s.factor;
      break;
    case RopeScaling::Type::kYarn: {
      // Pairs that turn fewer than beta_slow times over the original context are interpolated
      // (frequency / factor), those turning more than beta_fast times are kept, with a linear
      // ramp between.
      const double context = static_cast<double>(s.original_context);
      double low = CorrectionDim(s.beta_fast, n_rot, theta, context);
      double high = CorrectionDim(s.beta_slow, n_rot, theta, context);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(n_rot - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < pairs; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double keep = 1.0 - ramp;  // weight of the unscaled frequency
        double& f = t.inv_freq[static_cast<size_t>(i)];
        f = f / s.factor * (1.0 - keep) + f * keep;
      }
      if (s.attention_factor > 0) {
        t.mscale = s.attention_factor;
      } else if (s.mscale != 0 && s.mscale_all_dim != 0) {
        t.mscale = YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim);
      } else {
        t.mscale = YarnMscale(s.factor);
      }
      break;
    }
  }
  return t;
}

absl::Status ValidateRopeScaling(const RopeScaling& s) {
  if (s.type == RopeScaling::Type::kNone) return absl::OkStatus();
  if (!(s.factor > 0) || !std::isfinite(s.factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope scaling: factor must be a positive number, not ", s.factor));
  }
  if (s.type == RopeScaling::Type::kYarn) {
    if (s.original_context <= 0) {
      return absl::InvalidArgumentError(
          "rope scaling: YaRN needs a positive original context length");
    }
    if (!(s.beta_fast > 0) || !(s.beta_slow > 0) || !std::isfinite(s.beta_fast) ||
        !std::isfinite(s.beta_slow)) {
      return absl::InvalidArgumentError(
          "rope scaling: YaRN beta_fast and beta_slow must be positive");
    }
    for (double v : {s.mscale, s.mscale_all_dim, s.attention_factor}) {
      if (!std::isfinite(v) || v < 0) {
        return absl::InvalidArgumentError(
            "rope scaling: mscale, mscale_all_dim and attention_factor must be >= 0");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace colibri::model
