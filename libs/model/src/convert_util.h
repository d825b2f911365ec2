// Row-format conversion shared by the Hugging Face and GGUF importers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "colibri/quant/dtype.h"

namespace colibri::model {

// Encodes `rows` x `cols` floats as `dst` rows.
std::vector<uint8_t> EncodeRows(const float* values, int64_t rows, int64_t cols, quant::DType dst);

// Re-encodes rows stored as `src` into `dst` (a plain copy when the types are equal: GGML blocks
// move unchanged).
std::vector<uint8_t> ConvertRows(quant::DType src, std::span<const uint8_t> bytes, int64_t cols, quant::DType dst);

// Latent attention: the key/value up-projection kv_b [n_heads * (nope + v), kv_lora] (Hugging
// Face kv_b_proj, GGUF attn_kv_b) split into the per-head forms the engine uses: k_b [n_heads *
// kv_lora, nope] (each head's key part transposed) and v_b [n_heads * v, kv_lora].
struct SplitKvB {
  std::vector<float> k_b, v_b;
};
SplitKvB SplitKvBProjection(const float* kv_b, int64_t n_heads, int64_t nope, int64_t v, int64_t kv_lora);

}  // namespace colibri::model
