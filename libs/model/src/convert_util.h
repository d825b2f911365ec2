// Row-format conversion shared by the Hugging Face and GGUF importers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

class SafetensorsCheckpoint;
struct SafetensorsTensor;

// The values of checkpoint tensor `name` (`t`) as floats. FP8 e4m3 matrices (DeepSeek-V3 / R1,
// Kimi K2) are multiplied by their block scales: each 128x128 block by its entry of
// `name`_scale_inv [ceil(rows / 128), ceil(cols / 128)]; a missing or misshapen scale tensor is
// an error naming it.
absl::StatusOr<std::vector<float>> CheckpointFloats(const SafetensorsCheckpoint& ckpt,
                                                    const std::string& name,
                                                    const SafetensorsTensor& t);
// True for those block-scale tensors (read with their weights, never on their own).
bool IsBlockScaleName(std::string_view name);

// Encodes `rows` x `cols` floats as `dst` rows.
std::vector<uint8_t> EncodeRows(const float* values, int64_t rows, int64_t cols, quant::DType dst);

// Re-encodes rows stored as `src` into `dst` (a plain copy when the types are equal: GGML blocks
// move unchanged).
std::vector<uint8_t> ConvertRows(quant::DType src, std::span<const uint8_t> bytes, int64_t cols,
                                 quant::DType dst);

// Latent attention: the key/value up-projection kv_b [n_heads * (nope + v), kv_lora] (Hugging
// Face kv_b_proj, GGUF attn_kv_b) split into the per-head forms the engine uses: k_b [n_heads *
// kv_lora, nope] (each head's key part transposed) and v_b [n_heads * v, kv_lora].
struct SplitKvB {
  std::vector<float> k_b, v_b;
};
SplitKvB SplitKvBProjection(const float* kv_b, int64_t n_heads, int64_t nope, int64_t v,
                            int64_t kv_lora);

}  // namespace colibri::model
