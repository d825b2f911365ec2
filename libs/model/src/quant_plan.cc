#include "colibri/model/quant_plan.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/quant/quantize.h"

namespace colibri::model {

using quant::DType;

absl::StatusOr<QuantPlan> QuantPlan::Parse(const std::string& preset, const ModelConfig& config) {
  QuantPlan p;
  p.preset_ = preset;
  p.n_layers_ = config.n_layers;
  p.n_experts_ = config.n_experts;
  if (preset == "keep") {
    p.keep_ = true;
    return p;
  }
  if (preset == "q4_k_m" || preset == "q5_k_m" || preset == "q3_k_m") {
    p.mixed_ = true;
    p.base_ = preset == "q4_k_m" ? DType::kQ4_K : preset == "q5_k_m" ? DType::kQ5_K : DType::kQ3_K;
    return p;
  }
  auto dt = quant::ParseDType(preset);
  if (!dt.ok() || *dt == DType::kQ8_K || *dt == DType::kQ8_1 || !quant::HasQuantizer(*dt)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown --quantize '", preset,
        "' (choose f32, f16, bf16, q8_0, q6_k, q5_k, q4_k, q3_k, q2_k, q5_1, q5_0, q4_1, q4_0, "
        "iq4_xs, iq4_nl, mxfp4, q5_k_m, q4_k_m, q3_k_m, keep)"));
  }
  p.base_ = *dt;
  return p;
}

bool QuantPlan::MoreBits(int64_t layer) const {
  const int64_t n = n_layers_;
  return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
}

DType QuantPlan::Base(const TensorRole& role) const {
  if (!mixed_) return base_;
  const bool moe8 = n_experts_ == 8;
  switch (role.kind) {
    case TensorKind::kOutput: return DType::kQ6_K;
    case TensorKind::kAttnK: return moe8 ? DType::kQ8_0 : base_;
    case TensorKind::kAttnV:
      if (moe8) return DType::kQ8_0;
      if (base_ == DType::kQ3_K) return role.layer < 2 ? DType::kQ5_K : DType::kQ4_K;
      return MoreBits(role.layer) ? DType::kQ6_K : base_;
    case TensorKind::kAttnOutput:
      if (moe8 && base_ != DType::kQ5_K) return DType::kQ5_K;
      return base_ == DType::kQ3_K ? DType::kQ4_K : base_;
    case TensorKind::kExpertDown:
    case TensorKind::kSharedDown:
    case TensorKind::kDenseDown:
      if (base_ == DType::kQ3_K) {
        if (role.layer < n_layers_ / 16) return DType::kQ5_K;
        return MoreBits(role.layer) ? DType::kQ4_K : DType::kQ3_K;
      }
      return MoreBits(role.layer) ? DType::kQ6_K : base_;
    default: return base_;
  }
}

DType QuantPlan::TypeFor(const TensorRole& role, DType source) const {
  if (role.kind == TensorKind::kRouter || role.kind == TensorKind::kVector) return DType::kF32;
  DType t = keep_ ? source : Base(role);
  // Rows must hold whole blocks: fall back like llama.cpp does for odd shapes.
  if (role.cols % quant::Traits(t).block_elems != 0) {
    t = role.cols % quant::Traits(DType::kQ8_0).block_elems == 0 && quant::Traits(t).quantized
            ? DType::kQ8_0
            : DType::kF16;
  }
  return t;
}

}  // namespace colibri::model
