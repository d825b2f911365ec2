// Helpers shared by the non-k-quant tests (nonk_quant_test.cc, iquants_lowbit_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "colibri/quant/blocks.h"
#include "colibri/quant/dtype.h"

namespace colibri::quant {

inline constexpr uint16_t kOne = 0x3C00;   // f16 1.0
inline constexpr uint16_t kHalf = 0x3800;  // f16 0.5

// Writes f16 `d` as IQ1_M's super-scale (the top nibbles of its four scale words).
void SetIq1mSuperScale(BlockIQ1_M* b, uint16_t d);

// DequantizeRow's output, checked equal to DequantizeRowReference's.
std::vector<float> Dequant(DType t, const void* blocks, int64_t n);

}  // namespace colibri::quant
