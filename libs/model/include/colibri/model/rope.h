// Rotary position embedding as the checkpoints define it: the base frequencies of the rotated
// pairs, and the context-extension schemes that rewrite them (linear position interpolation, YaRN).
// The engine turns a config into a RopeTable once at load; backends rotate with the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace colibri::model {

struct RopeScaling {
  enum class Type { kNone, kLinear, kYarn };
  Type type = Type::kNone;
  double factor = 1.0;
  // YaRN: the context the model was trained with (original_max_position_embeddings).
  int64_t original_context = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  // DeepSeek's keys: cos/sin are scaled by mscale(factor, mscale) / mscale(factor, mscale_all_dim)
  // when both are set (0 = absent).
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  // An explicit cos/sin factor (0 = derived as above, else 0.1·ln(factor) + 1).
  double attention_factor = 0.0;
  // Round the YaRN correction range outwards to whole dimensions (the Hugging Face default and
  // llama.cpp's behaviour); gpt-oss sets `truncate: false`.
  bool truncate = true;

  bool operator==(const RopeScaling&) const = default;
};

// What a backend rotates with: one inverse frequency per rotated pair, and the factor applied to
// cos and sin.
struct RopeTable {
  std::vector<double> inv_freq;
  double mscale = 1.0;
};

// YaRN's magnitude correction: 0.1·m·ln(scale) + 1 for scale > 1, else 1.
double YarnMscale(double scale, double m = 1.0);

// The table for `n_rot` rotated dimensions (even) with base `theta`.
RopeTable MakeRopeTable(double theta, int64_t n_rot, const RopeScaling& scaling);

// Hugging Face `rope_scaling` (null or an object with `rope_type`/`type`). `max_position` is the
// config's max_position_embeddings, the YaRN original context when the object has none. Types
// whose frequencies depend on the sequence (dynamic NTK) or that no supported family uses are
// refused, naming the type.
absl::StatusOr<RopeScaling> RopeScalingFromHuggingFace(const nlohmann::json& rope_scaling,
                                                       int64_t max_position,
                                                       const std::string& where);

// Manifest form: the Hugging Face object with every field written out (type "default": none).
nlohmann::json RopeScalingToJson(const RopeScaling& s);
absl::StatusOr<RopeScaling> RopeScalingFromJson(const nlohmann::json& j, const std::string& where);

absl::Status ValidateRopeScaling(const RopeScaling& s);

}  // namespace colibri::model
