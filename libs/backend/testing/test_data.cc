#include "colibri/backend/testing/test_data.h"

#include <cstring>
#include <random>

#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"

namespace colibri::backend {

std::vector<float> RandomNormal(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

namespace {

// Blocks of an import-only type (the codebook i-quants have no quantizer): random bytes with an
// f16 super-scale near 0.01 in each block (IQ1_M keeps it in the top nibbles of its last 8 bytes).
std::vector<uint8_t> RandomCodes(quant::DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(quant::RowBytes(type, cols) * static_cast<size_t>(rows));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  const size_t bb = quant::Traits(type).block_bytes;
  for (size_t off = 0; off < out.size(); off += bb) {
    const uint16_t d = quant::F32ToF16(0.005f + 0.0001f * static_cast<float>(rng() % 100));
    if (type == quant::DType::kIQ1_M) {
      for (int k = 0; k < 4; ++k) {
        uint8_t& hi = out[off + bb - 8 + 2 * k + 1];
        hi = static_cast<uint8_t>((hi & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
      }
    } else {
      std::memcpy(&out[off], &d, sizeof(d));
    }
  }
  return out;
}

}  // namespace

std::vector<uint8_t> RandomQuantizedRows(quant::DType type, int64_t rows, int64_t cols,
                                         uint32_t seed) {
  if (!quant::HasQuantizer(type)) return RandomCodes(type, rows, cols, seed);
  const std::vector<float> f = RandomNormal(static_cast<size_t>(rows * cols), seed, 0.05f);
  const size_t row_bytes = quant::RowBytes(type, cols);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quant::QuantizeRow(type, f.data() + r * cols, out.data() + static_cast<size_t>(r) * row_bytes,
                       cols);
  }
  return out;
}

}  // namespace colibri::backend
