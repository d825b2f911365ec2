// Random inputs for the backend tests (library colibri::backend_testing): the same values for a
// given seed on every machine and backend, so each backend is checked on the CPU's inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "colibri/quant/dtype.h"

namespace colibri::backend {

// n values ~ N(0, sigma^2) from std::mt19937(seed).
std::vector<float> RandomNormal(size_t n, uint32_t seed, float sigma = 1.0f);

// A weight matrix: rows x cols values ~ N(0, 0.05^2) quantized to `type`, row r at
// r * quant::RowBytes(type, cols). Types without a quantizer (quant::HasQuantizer) get random
// codes under per-block scales that give values of a similar size.
std::vector<uint8_t> RandomQuantizedRows(quant::DType type, int64_t rows, int64_t cols,
                                         uint32_t seed);

}  // namespace colibri::backend
