#include "colibri/backend/test_data.h"

#include <random>

#include "colibri/quant/quantize.h"

namespace colibri::backend {

std::vector<float> RandomNormal(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> RandomQuantizedRows(quant::DType type, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = RandomNormal(static_cast<size_t>(rows * cols), seed, 0.05f);
  const size_t row_bytes = quant::RowBytes(type, cols);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quant::QuantizeRow(type, f.data() + r * cols, out.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  return out;
}

}  // namespace colibri::backend
