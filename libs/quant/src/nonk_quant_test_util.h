// Helpers shared by the quant tests (nonk_quant_test.cc, iquants_lowbit_test.cc,
// simd_widths_test.cc).
#pragma once

#include <cstdint>
#include <random>
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

// A row of n elements of arbitrary block bytes (every bit pattern of the quants, signs and
// indices) under sane scales, for the legacy, i-quant, MXFP4, Q8_0 and Q4_K..Q6_K formats.
std::vector<uint8_t> ArbitraryRow(DType t, int64_t n, std::mt19937& rng);

}  // namespace colibri::quant
