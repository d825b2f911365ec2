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

}  // namespace colibri::model
