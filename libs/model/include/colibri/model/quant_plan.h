// Which format each tensor is stored in: a uniform type (f32, f16, bf16, q8_0, q6_k, q5_k,
// q4_k, q3_k, q2_k), a llama.cpp-style mixed preset (q4_k_m, q5_k_m, q3_k_m: some tensors get
// a higher type), or `keep` (GGUF input: blocks copied unchanged).
//
// The mixed presets follow llama.cpp's rules for MoE models: the output matrix gets Q6_K;
// attn_v and ffn_down get a higher type on the "more bits" layers (the first and last eighth,
// and every third layer between); with 8 experts attn_k and attn_v get Q8_0 and attn_output
// Q5_K (the expert FFNs dominate the size, so attention is cheap to keep precise). Routers,
// norms and biases always stay F32.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/model/model_config.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

enum class TensorKind {
  kEmbedding,
  kOutput,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kExpertGate,
  kExpertUp,
  kExpertDown,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kDenseGate,
  kDenseUp,
  kDenseDown,  // the MLP of a dense layer
  kRouter,
  kVector,
};

struct TensorRole {
  TensorKind kind = TensorKind::kVector;
  int64_t layer = -1;  // -1 for non-layer tensors
  int64_t cols = 0;    // row length (innermost dimension)
};

class QuantPlan {
 public:
  static absl::StatusOr<QuantPlan> Parse(const std::string& preset, const ModelConfig& config);

  // The stored type of a tensor with this role whose source type is `source`.
  quant::DType TypeFor(const TensorRole& role, quant::DType source) const;
  const std::string& preset() const { return preset_; }
  bool keep() const { return keep_; }

 private:
  quant::DType Base(const TensorRole& role) const;
  bool MoreBits(int64_t layer) const;

  std::string preset_;
  bool keep_ = false;
  bool mixed_ = false;
  quant::DType base_ = quant::DType::kF16;
  int64_t n_layers_ = 0;
  int64_t n_experts_ = 0;
};

}  // namespace colibri::model
