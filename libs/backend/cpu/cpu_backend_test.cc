// Every op of the Backend interface on the CPU backend, against plain double-precision loops.
#include "colibri/backend/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "colibri/backend/host_ops.h"
#include "colibri/backend/testing/device_like_backend.h"
#include "colibri/backend/testing/test_data.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"

namespace colibri::backend {
namespace {

using quant::DType;

// A quantized weight matrix and its dequantized values (what the matmul must multiply by).
struct Weight {
  DType dtype;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // [rows, cols]
};

Weight MakeWeight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  Weight w{dtype, rows, cols, RandomQuantizedRows(dtype, rows, cols, seed), {}};
  const size_t row_bytes = quant::RowBytes(dtype, cols);
  w.dequantized.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    quant::DequantizeRowReference(dtype, w.bytes.data() + static_cast<size_t>(r) * row_bytes,
                                  w.dequantized.data() + r * cols, cols);
  }
  return w;
}

// Bound on |x - quantized(x)| for element i of an activation row, by the weight's vec-dot type:
// the float types round to their mantissa; Q8_0 / Q8_K round to a step of absmax/127 per block
// (Q8_0 also stores that step as f16).
std::vector<double> ActivationErrorBound(DType weight_type, const float* x, int64_t n) {
  const DType at = quant::Traits(weight_type).vec_dot_type;
  std::vector<double> bound(static_cast<size_t>(n));
  if (at == DType::kF32 || at == DType::kF16 || at == DType::kBF16) {
    const double rel = at == DType::kF32   ? 0.0
                       : at == DType::kF16 ? std::ldexp(1.0, -11)
                                           : std::ldexp(1.0, -8);
    for (int64_t i = 0; i < n; ++i) bound[static_cast<size_t>(i)] = std::fabs(x[i]) * rel;
    return bound;
  }
  const int64_t block = quant::Traits(at).block_elems;
  for (int64_t b = 0; b < n; b += block) {
    double amax = 0;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(double{x[i]}));
    for (int64_t i = b; i < b + block; ++i)
      bound[static_cast<size_t>(i)] = amax * (0.5 / 127 + 1.0 / 1024);
  }
  return bound;
}

class CpuBackendTest : public ::testing::TestWithParam<int> {
 protected:
  // Fixed threads: the region counts below are of every op on every thread (the adaptive
  // choice is tested on its own, AdaptiveThreadsGiveTheBitsOfFixedOnes).
  void SetUp() override { be_ = CreateCpuBackend({.threads = GetParam(), .fixed_threads = true}); }
  std::unique_ptr<Backend> be_;
};

INSTANTIATE_TEST_SUITE_P(Threads, CpuBackendTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "t" + std::to_string(info.param);
                         });

TEST_P(CpuBackendTest, MemoryOps) {
  EXPECT_EQ(be_->name(), "cpu");
  EXPECT_TRUE(be_->zero_copy());
  auto buf = be_->Allocate(1000);
  ASSERT_TRUE(buf.ok());
  EXPECT_EQ((*buf)->size(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*buf)->data()) % 64, 0u);
  const auto* bytes = static_cast<const uint8_t*>((*buf)->data());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(bytes[i], 0) << i;

  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  be_->Upload((*buf)->data(), host.data(), 24);
  std::vector<float> back(6);
  be_->Download(back.data(), (*buf)->data(), 24);
  EXPECT_EQ(back, host);
  float* f = (*buf)->f32();
  be_->Copy(f + 1, f, 16);  // overlapping ranges are allowed
  be_->Download(back.data(), f, 24);
  EXPECT_EQ(back, std::vector<float>({1, 1, 2, 3, 4, 6}));
  be_->Zero(f + 2, 8);
  be_->Download(back.data(), f, 24);
  EXPECT_EQ(back, std::vector<float>({1, 1, 0, 0, 4, 6}));

  std::vector<float> w(8, 1.0f);
  std::unique_ptr<Buffer> storage;
  auto ref = be_->ImportWeight(DType::kF32, 2, 4, w.data(), &storage);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->data, w.data());  // zero copy
  EXPECT_EQ(ref->rows, 2);
  EXPECT_EQ(ref->cols, 4);
  EXPECT_EQ(ref->dtype, DType::kF32);
  EXPECT_TRUE(be_->Synchronize().ok());
  EXPECT_TRUE(be_->RecordFence()->Wait().ok());
  EXPECT_EQ(be_->memory_info().total_bytes, 0u);
}

TEST_P(CpuBackendTest, MatMulEveryWeightTypeMatchesDequantizedWeights) {
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ2_K,
                         DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K};
  const int64_t rows = 37, cols = 512;
  for (bool scalar : {false, true}) {
    quant::ForceScalarKernels(scalar);
    for (DType t : types) {
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{70}}) {  // 70 > the 64-token tile
        SCOPED_TRACE(testing::Message()
                     << quant::DTypeName(t) << " n=" << n << (scalar ? " scalar" : " simd"));
        const Weight w = MakeWeight(t, rows, cols, 17 + static_cast<uint32_t>(t));
        std::vector<float> x =
            RandomNormal(static_cast<size_t>(n * cols), 99 + static_cast<uint32_t>(n));
        x[5] = 6.0f;  // an outlier: its block's quantization step grows
        std::vector<float> y(static_cast<size_t>(n * rows), std::nanf(""));
        std::unique_ptr<Buffer> storage;
        auto ref = be_->ImportWeight(t, rows, cols, w.bytes.data(), &storage);
        ASSERT_TRUE(ref.ok());
        be_->MatMul(*ref, x.data(), n, y.data());
        int bad = 0;
        const DType at = quant::Traits(t).vec_dot_type;
        for (int64_t i = 0; i < n; ++i) {
          const float* xi = x.data() + i * cols;
          const std::vector<double> err = ActivationErrorBound(t, xi, cols);
          // The activations as the kernel sees them (quantized to the vec-dot type).
          std::vector<uint8_t> act(quant::RowBytes(at, cols));
          quant::QuantizeActivations(at, xi, act.data(), cols);
          std::vector<float> xq(static_cast<size_t>(cols));
          quant::DequantizeRowReference(at, act.data(), xq.data(), cols);
          for (int64_t k = 0; k < cols; ++k) {
            ASSERT_LE(std::fabs(double{xq[static_cast<size_t>(k)]} - xi[k]),
                      err[static_cast<size_t>(k)] + 1e-7)
                << k;
          }
          for (int64_t r = 0; r < rows; ++r) {
            const float* wr = w.dequantized.data() + r * cols;
            double exact = 0, exact_q = 0, tol = 0, magnitude = 0;
            for (int64_t k = 0; k < cols; ++k) {
              exact += double{wr[k]} * xi[k];
              exact_q += double{wr[k]} * xq[static_cast<size_t>(k)];
              tol += std::fabs(double{wr[k]}) * err[static_cast<size_t>(k)];
              magnitude += std::fabs(double{wr[k]} * xi[k]);
            }
            const double rounding =
                2e-6 * magnitude + 1e-6;  // float accumulation inside the kernels
            const double got = y[static_cast<size_t>(i * rows + r)];
            // Within the activation-quantization bound of dequantized W times float x...
            if (!(std::fabs(got - exact) <= tol + rounding) && bad++ < 5) {
              ADD_FAILURE() << "y[" << i << ", " << r << "] = " << got << ", want " << exact
                            << " +- " << tol;
            }
            // ...and, tightly, equal to dequantized W times the quantized activations.
            if (!(std::fabs(got - exact_q) <= rounding) && bad++ < 5) {
              ADD_FAILURE() << "y[" << i << ", " << r << "] = " << got << ", want " << exact_q
                            << " +- " << rounding << " (quantized activations)";
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
  quant::ForceScalarKernels(false);
}

TEST_P(CpuBackendTest, MatMulF32IsExactToRounding) {
  // Small integers: every product and partial sum is exact in float.
  const int64_t rows = 3, cols = 4, n = 2;
  const std::vector<float> w = {1, 2, 3, 4, -1, 0, 1, 0, 0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> x = {1, 1, 1, 1, 2, -1, 0, 3};
  std::vector<float> y(static_cast<size_t>(n * rows));
  be_->MatMul(WeightRef{DType::kF32, rows, cols, w.data()}, x.data(), n, y.data());
  EXPECT_EQ(y, std::vector<float>({10, 0, 2, 12, -2, 2}));
}

TEST_P(CpuBackendTest, MatMulAccumulateAddsToOutput) {
  for (DType t : {DType::kF32, DType::kQ8_0, DType::kQ4_K}) {
    SCOPED_TRACE(quant::DTypeName(t));
    const int64_t rows = 9, cols = 256, n = 4;
    const Weight w = MakeWeight(t, rows, cols, 5);
    const std::vector<float> x = RandomNormal(static_cast<size_t>(n * cols), 6);
    const WeightRef ref{t, rows, cols, w.bytes.data()};
    std::vector<float> plain(static_cast<size_t>(n * rows));
    be_->MatMul(ref, x.data(), n, plain.data());
    std::vector<float> acc = RandomNormal(static_cast<size_t>(n * rows), 7);
    const std::vector<float> before = acc;
    be_->MatMul(ref, x.data(), n, acc.data(), /*accumulate=*/true);
    for (size_t i = 0; i < acc.size(); ++i) EXPECT_FLOAT_EQ(acc[i], before[i] + plain[i]) << i;
    // Without accumulate, the old contents are overwritten.
    std::vector<float> over = before;
    be_->MatMul(ref, x.data(), n, over.data(), /*accumulate=*/false);
    EXPECT_EQ(over, plain);
  }
}

TEST_P(CpuBackendTest, GetRowsDequantizesTheRequestedRows) {
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(quant::DTypeName(t));
    const int64_t rows = 10, cols = 256;
    const Weight w = MakeWeight(t, rows, cols, 11);
    const std::vector<int32_t> ids = {3, 0, 9, 3};
    std::vector<float> out(ids.size() * static_cast<size_t>(cols), std::nanf(""));
    be_->GetRows(WeightRef{t, rows, cols, w.bytes.data()}, ids.data(),
                 static_cast<int64_t>(ids.size()), out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < cols; ++k) {
        ASSERT_EQ(out[i * static_cast<size_t>(cols) + static_cast<size_t>(k)],
                  w.dequantized[static_cast<size_t>(ids[i] * cols + k)])
            << "row " << i << " col " << k;
      }
    }
  }
}

TEST_P(CpuBackendTest, RmsNorm) {
  const int64_t n = 3, dim = 96;
  std::vector<float> x = RandomNormal(static_cast<size_t>(n * dim), 21, 3.0f);
  const std::vector<float> weight = RandomNormal(static_cast<size_t>(dim), 22);
  const float eps = 1e-5f;
  std::vector<float> y(x.size());
  be_->RmsNorm(x.data(), weight.data(), n, dim, eps, y.data());
  std::vector<double> want(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += double{x[i * dim + j]} * x[i * dim + j];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t j = 0; j < dim; ++j) {
      want[static_cast<size_t>(i * dim + j)] = x[i * dim + j] * inv * weight[j];
      EXPECT_NEAR(y[i * dim + j], want[i * dim + j], 1e-6 * (1 + std::fabs(want[i * dim + j])));
    }
  }
  // In place gives the same values.
  be_->RmsNorm(x.data(), weight.data(), n, dim, eps, x.data());
  EXPECT_EQ(x, y);
  // eps matters for a tiny row: all-zero input gives zeros, not NaN.
  std::vector<float> zeros(static_cast<size_t>(dim), 0.0f), out(static_cast<size_t>(dim), 1.0f);
  be_->RmsNorm(zeros.data(), weight.data(), 1, dim, eps, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// Unscaled inverse frequencies of `n_rot` rotated dims.
std::vector<double> Freqs(double theta, int64_t n_rot) {
  std::vector<double> f(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = std::pow(theta, -2.0 * static_cast<double>(i) / n_rot);
  return f;
}

// Reference rotation of one head in double.
void RopeRef(std::vector<double>* head, int64_t head_dim, double pos, double theta,
             RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / head_dim);
    const int64_t a = style == RopeStyle::kHalfSplit ? i : 2 * i;
    const int64_t b = style == RopeStyle::kHalfSplit ? i + half : 2 * i + 1;
    const double x0 = (*head)[static_cast<size_t>(a)], x1 = (*head)[static_cast<size_t>(b)];
    (*head)[static_cast<size_t>(a)] = x0 * std::cos(angle) - x1 * std::sin(angle);
    (*head)[static_cast<size_t>(b)] = x0 * std::sin(angle) + x1 * std::cos(angle);
  }
}

TEST_P(CpuBackendTest, RopeBothStylesMatchReference) {
  const int64_t n = 4, n_heads = 3, head_dim = 16;
  const std::vector<int32_t> positions = {0, 1, 7, 1000};
  for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    for (float theta : {10000.0f, 1e6f}) {
      SCOPED_TRACE(testing::Message()
                   << (style == RopeStyle::kHalfSplit ? "half-split" : "interleaved") << " theta "
                   << theta);
      const std::vector<float> x0 = RandomNormal(static_cast<size_t>(n * n_heads * head_dim), 31);
      std::vector<float> x = x0;
      const std::vector<double> freqs = Freqs(theta, head_dim);
      be_->Rope(x.data(), n, n_heads, head_dim, positions.data(),
                {head_dim, 0, style, freqs.data(), 1.0f});
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < n_heads; ++h) {
          const size_t base = static_cast<size_t>((t * n_heads + h) * head_dim);
          std::vector<double> want(x0.begin() + static_cast<ptrdiff_t>(base),
                                   x0.begin() + static_cast<ptrdiff_t>(base + head_dim));
          RopeRef(&want, head_dim, positions[static_cast<size_t>(t)], theta, style);
          for (int64_t d = 0; d < head_dim; ++d) {
            EXPECT_NEAR(x[base + static_cast<size_t>(d)], want[static_cast<size_t>(d)], 2e-6)
                << "t " << t << " h " << h << " d " << d;
          }
        }
      }
      // Position 0 is the identity.
      for (size_t i = 0; i < static_cast<size_t>(n_heads * head_dim); ++i) EXPECT_EQ(x[i], x0[i]);
    }
  }
}

TEST_P(CpuBackendTest, RopeRotatesTheRightPairs) {
  const int64_t head_dim = 8, half = head_dim / 2;
  const int32_t pos = 3;
  for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    for (int64_t j = 0; j < head_dim; ++j) {
      // A unit vector along dimension j may only move within its pair.
      std::vector<float> x(static_cast<size_t>(head_dim), 0.0f);
      x[static_cast<size_t>(j)] = 1.0f;
      const std::vector<double> freqs = Freqs(10000.0, head_dim);
      be_->Rope(x.data(), 1, 1, head_dim, &pos, {head_dim, 0, style, freqs.data(), 1.0f});
      const int64_t i = style == RopeStyle::kHalfSplit ? j % half : j / 2;  // frequency index
      const int64_t partner =
          style == RopeStyle::kHalfSplit ? (j < half ? j + half : j - half) : (j ^ 1);
      const bool first = style == RopeStyle::kHalfSplit ? j < half : j % 2 == 0;
      const double angle = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / head_dim);
      for (int64_t d = 0; d < head_dim; ++d) {
        double want = 0;
        if (d == j) want = std::cos(angle);
        if (d == partner) want = first ? std::sin(angle) : -std::sin(angle);
        EXPECT_NEAR(x[static_cast<size_t>(d)], want, 1e-6)
            << (style == RopeStyle::kHalfSplit ? "half-split" : "interleaved") << " j " << j
            << " d " << d;
      }
    }
  }
}

TEST_P(CpuBackendTest, RopePartialAtAnOffsetWithAFactor) {
  // 3 heads of 40 dims rotating 16 dims from dim 24 (MLA's rope part), cos/sin scaled by 1.3:
  // the other dims are untouched, the rotated ones match the reference times the factor.
  const int64_t n_heads = 3, head_dim = 40, n_rot = 16, offset = 24;
  const float mscale = 1.3f;
  const std::vector<int32_t> positions = {2, 517};
  const std::vector<double> freqs = Freqs(10000.0, n_rot);
  for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    const std::vector<float> x0 = RandomNormal(static_cast<size_t>(2 * n_heads * head_dim), 11);
    std::vector<float> x = x0;
    be_->Rope(x.data(), 2, n_heads, head_dim, positions.data(),
              {n_rot, offset, style, freqs.data(), mscale});
    for (int64_t t = 0; t < 2; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const size_t base = static_cast<size_t>((t * n_heads + h) * head_dim);
        for (int64_t d = 0; d < offset; ++d)
          EXPECT_EQ(x[base + static_cast<size_t>(d)], x0[base + static_cast<size_t>(d)]);
        std::vector<double> want(x0.begin() + static_cast<ptrdiff_t>(base + offset),
                                 x0.begin() + static_cast<ptrdiff_t>(base + offset + n_rot));
        RopeRef(&want, n_rot, positions[static_cast<size_t>(t)], 10000.0, style);
        for (int64_t d = 0; d < n_rot; ++d) {
          EXPECT_NEAR(x[base + static_cast<size_t>(offset + d)],
                      want[static_cast<size_t>(d)] * mscale, 4e-6)
              << "t " << t << " h " << h << " d " << d;
        }
      }
    }
  }
}

// Naive causal attention in double over explicit K/V rows (position j in row j), optionally with
// a sliding window and per-head sink logits.
std::vector<double> AttentionRef(const std::vector<float>& q, const std::vector<float>& k_cache,
                                 const std::vector<float>& v_cache,
                                 const std::vector<int32_t>& positions, int64_t n_heads,
                                 int64_t n_kv_heads, int64_t head_dim, double scale,
                                 int64_t window = 0, const std::vector<float>& sinks = {}) {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  std::vector<double> out(static_cast<size_t>(n * q_dim));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t kvh = h / (n_heads / n_kv_heads);
      const int64_t last = positions[static_cast<size_t>(t)];
      const int64_t first = window > 0 ? std::max<int64_t>(0, last + 1 - window) : 0;
      std::vector<double> s(static_cast<size_t>(last + 1), -INFINITY);
      double m = sinks.empty() ? -INFINITY : double{sinks[static_cast<size_t>(h)]};
      for (int64_t j = first; j <= last; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < head_dim; ++d) {
          dot += double{q[static_cast<size_t>(t * q_dim + h * head_dim + d)]} *
                 k_cache[static_cast<size_t>(j * kv_dim + kvh * head_dim + d)];
        }
        s[static_cast<size_t>(j)] = dot * scale;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      double z = sinks.empty() ? 0.0 : std::exp(double{sinks[static_cast<size_t>(h)]} - m);
      for (double& v : s) z += v = std::exp(v - m);
      for (int64_t d = 0; d < head_dim; ++d) {
        double acc = 0;
        for (int64_t j = first; j <= last; ++j) {
          acc += s[static_cast<size_t>(j)] *
                 v_cache[static_cast<size_t>(j * kv_dim + kvh * head_dim + d)];
        }
        out[static_cast<size_t>(t * q_dim + h * head_dim + d)] = acc / z;
      }
    }
  }
  return out;
}

TEST_P(CpuBackendTest, StoreKvAndCausalGqaAttention) {
  const int64_t n_heads = 4, n_kv_heads = 2, head_dim = 8, capacity = 16;
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> k_cache(static_cast<size_t>(capacity * kv_dim), std::nanf(""));
  std::vector<float> v_cache = k_cache;
  // What the cache must hold after each step (rows never written stay NaN and are never read).
  std::vector<float> k_ref = k_cache, v_ref = v_cache;

  // Prefill 5 tokens at positions 0..4, then decode positions 5 and 6 one at a time.
  const std::vector<std::vector<int32_t>> steps = {{0, 1, 2, 3, 4}, {5}, {6}};
  uint32_t seed = 100;
  for (const auto& positions : steps) {
    SCOPED_TRACE(testing::Message() << "first position " << positions[0]);
    const int64_t n = static_cast<int64_t>(positions.size());
    const std::vector<float> k = RandomNormal(static_cast<size_t>(n * kv_dim), seed++, 2.0f);
    const std::vector<float> v = RandomNormal(static_cast<size_t>(n * kv_dim), seed++);
    const std::vector<float> q = RandomNormal(static_cast<size_t>(n * q_dim), seed++, 2.0f);
    be_->StoreKv(k.data(), v.data(), positions.data(), n, kv_dim, k_cache.data(), v_cache.data());
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(k.begin() + i * kv_dim, kv_dim,
                  k_ref.begin() + positions[static_cast<size_t>(i)] * kv_dim);
      std::copy_n(v.begin() + i * kv_dim, kv_dim,
                  v_ref.begin() + positions[static_cast<size_t>(i)] * kv_dim);
    }
    for (size_t i = 0; i < k_cache.size(); ++i) {
      if (std::isnan(k_ref[i])) {
        ASSERT_TRUE(std::isnan(k_cache[i])) << i;  // untouched rows
      } else {
        ASSERT_EQ(k_cache[i], k_ref[i]) << i;
        ASSERT_EQ(v_cache[i], v_ref[i]) << i;
      }
    }
    std::vector<float> out(static_cast<size_t>(n * q_dim), std::nanf(""));
    AttentionArgs args;
    args.q = q.data();
    args.k_cache = k_cache.data();
    args.v_cache = v_cache.data();
    args.positions = positions.data();
    args.n = n;
    args.n_heads = n_heads;
    args.n_kv_heads = n_kv_heads;
    args.head_dim = head_dim;
    args.scale = scale;
    args.out = out.data();
    be_->Attention(args);
    const std::vector<double> want =
        AttentionRef(q, k_ref, v_ref, positions, n_heads, n_kv_heads, head_dim, scale);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
  }
}

TEST_P(CpuBackendTest, AttentionAtPositionZeroReturnsV) {
  // One key: softmax weight 1, the output is that V row for every head of its group.
  const int64_t n_heads = 4, n_kv_heads = 1, head_dim = 4;
  const std::vector<float> k = {1, 2, 3, 4}, v = {0.5f, -1, 2, 8};
  std::vector<float> k_cache(8 * 4, 0.0f), v_cache(8 * 4, 0.0f);
  const int32_t pos = 0;
  be_->StoreKv(k.data(), v.data(), &pos, 1, 4, k_cache.data(), v_cache.data());
  const std::vector<float> q = RandomNormal(16, 4, 10.0f);
  std::vector<float> out(16);
  AttentionArgs args{q.data(), k_cache.data(), v_cache.data(), &pos, 1,
                     n_heads,  n_kv_heads,     head_dim,       0.5f, out.data()};
  be_->Attention(args);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t d = 0; d < head_dim; ++d)
      EXPECT_FLOAT_EQ(out[static_cast<size_t>(h * head_dim + d)], v[static_cast<size_t>(d)]);
  }
}

// Decode and prefill rows over several key blocks of 64 with a head of 80 (a 64-float slice of
// the weighted value sum plus a tail) and one of 128 (two slices), grouped 4 query heads per KV
// head: the blocked value accumulation against the double reference.
TEST_P(CpuBackendTest, LongContextAttentionAtHeadDims80And128) {
  for (const int64_t head_dim : {80, 128}) {
    SCOPED_TRACE(testing::Message() << "head_dim " << head_dim);
    const int64_t n_heads = 8, n_kv_heads = 2, len = 300;
    const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    const std::vector<float> k = RandomNormal(static_cast<size_t>(len * kv_dim), 41, 1.5f);
    const std::vector<float> v = RandomNormal(static_cast<size_t>(len * kv_dim), 42);
    const std::vector<int32_t> positions = {0, 63, 64, 200, static_cast<int32_t>(len - 1)};
    const int64_t n = static_cast<int64_t>(positions.size());
    const std::vector<float> q = RandomNormal(static_cast<size_t>(n * q_dim), 43, 1.5f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> out(static_cast<size_t>(n * q_dim), std::nanf(""));
    AttentionArgs args{q.data(),   k.data(), v.data(), positions.data(), n, n_heads,
                       n_kv_heads, head_dim, scale,    out.data()};
    be_->Attention(args);
    const std::vector<double> want =
        AttentionRef(q, k, v, positions, n_heads, n_kv_heads, head_dim, scale);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << i;
  }
}

// One decode row with few KV heads: the heads of a group are split over tasks (with 3 threads,
// groups of 6 heads in chunks of 2) and each block of keys is scored against a chunk at once; a
// head of 76 (a tail past 16 and 8 floats) on every score kernel set.
TEST_P(CpuBackendTest, DecodeAttentionSplitsGqaGroupsOverTasks) {
  const int64_t n_heads = 12, n_kv_heads = 2, head_dim = 76, len = 150;
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  const std::vector<float> k = RandomNormal(static_cast<size_t>(len * kv_dim), 51, 1.5f);
  const std::vector<float> v = RandomNormal(static_cast<size_t>(len * kv_dim), 52);
  const std::vector<float> q = RandomNormal(static_cast<size_t>(q_dim), 53, 1.5f);
  const std::vector<int32_t> positions = {static_cast<int32_t>(len - 1)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const std::vector<double> want =
      AttentionRef(q, k, v, positions, n_heads, n_kv_heads, head_dim, scale);
  for (const std::string_view isa : quant::SupportedIsas()) {
    SCOPED_TRACE(isa);
    ASSERT_TRUE(quant::SetKernelIsaCap(isa));
    std::vector<float> out(static_cast<size_t>(q_dim), std::nanf(""));
    AttentionArgs args{q.data(),   k.data(), v.data(), positions.data(), 1, n_heads,
                       n_kv_heads, head_dim, scale,    out.data()};
    be_->Attention(args);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << i;
  }
  ASSERT_TRUE(quant::SetKernelIsaCap("avx512"));
}

TEST_P(CpuBackendTest, AttentionWithLargeScoresStaysFinite) {
  // Scores of several hundred: a naive exp would overflow; the online softmax must not.
  const int64_t n_heads = 2, n_kv_heads = 2, head_dim = 4, len = 6;
  std::vector<float> k_cache(static_cast<size_t>(len * n_kv_heads * head_dim));
  std::vector<float> v_cache = RandomNormal(k_cache.size(), 8);
  for (size_t i = 0; i < k_cache.size(); ++i) k_cache[i] = static_cast<float>((i * 7) % 11) * 10.0f;
  const std::vector<float> q = {10, 10, 10, 10, -10, 5, 10, 0};
  const std::vector<int32_t> positions = {static_cast<int32_t>(len - 1)};
  std::vector<float> out(8);
  AttentionArgs args{q.data(),   k_cache.data(), v_cache.data(), positions.data(), 1, n_heads,
                     n_kv_heads, head_dim,       1.0f,           out.data()};
  be_->Attention(args);
  const std::vector<double> want =
      AttentionRef(q, k_cache, v_cache, positions, n_heads, n_kv_heads, head_dim, 1.0);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i]));
    EXPECT_NEAR(out[i], want[i], 1e-5);
  }
}

// Sliding window + sinks, with the caches as rings: the same function as over linear caches.
TEST_P(CpuBackendTest, WindowedAttentionWithSinksOverRingCaches) {
  const int64_t n_heads = 4, n_kv_heads = 2, head_dim = 8, window = 5, len = 150;
  const int64_t q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
  const std::vector<float> k = RandomNormal(static_cast<size_t>(len * kv_dim), 31, 2.0f);
  const std::vector<float> v = RandomNormal(static_cast<size_t>(len * kv_dim), 32);
  const std::vector<float> sinks = {-1.0f, 0.5f, 3.0f, 9.0f};  // 9: the sink dominates the softmax
  // Queries at positions 0, 3, 70 and the last 7: windows start in the middle of blocks.
  std::vector<int32_t> positions = {0, 3, 70};
  for (int32_t p = len - 7; p < len; ++p) positions.push_back(p);
  const int64_t n = static_cast<int64_t>(positions.size());
  const std::vector<float> q = RandomNormal(static_cast<size_t>(n * q_dim), 33, 2.0f);
  const float scale = 0.35f;
  for (int64_t ring : {int64_t{0}, int64_t{11}, window}) {
    SCOPED_TRACE(testing::Message() << "ring " << ring);
    std::vector<float> out(static_cast<size_t>(n * q_dim), std::nanf(""));
    // Each query sees the cache as it was right after its own position was stored.
    for (int64_t i = 0; i < n; ++i) {
      const int32_t p = positions[static_cast<size_t>(i)];
      const int64_t rows = ring > 0 ? ring : len;
      std::vector<float> kc(static_cast<size_t>(rows * kv_dim), std::nanf("")), vc = kc;
      std::vector<int32_t> slots;
      for (int32_t j = ring > 0 ? std::max<int32_t>(0, p + 1 - static_cast<int32_t>(ring)) : 0;
           j <= p; ++j) {
        slots.push_back(ring > 0 ? static_cast<int32_t>(j % ring) : j);
        be_->StoreKv(k.data() + j * kv_dim, v.data() + j * kv_dim, &slots.back(), 1, kv_dim,
                     kc.data(), vc.data());
      }
      AttentionArgs a{
          q.data() + i * q_dim,  kc.data(), vc.data(), &p, 1, n_heads, n_kv_heads, head_dim, scale,
          out.data() + i * q_dim};
      a.window = window;
      a.ring = ring;
      a.sinks = sinks.data();
      be_->Attention(a);
    }
    const std::vector<double> want =
        AttentionRef(q, k, v, positions, n_heads, n_kv_heads, head_dim, scale, window, sinks);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5) << i;
  }
  // The sink takes weight from the values: with sink 9, head 3's outputs shrink towards 0.
  const std::vector<double> no_sink =
      AttentionRef(q, k, v, positions, n_heads, n_kv_heads, head_dim, scale, window);
  const std::vector<double> sunk =
      AttentionRef(q, k, v, positions, n_heads, n_kv_heads, head_dim, scale, window, sinks);
  double with = 0, without = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < head_dim; ++d) {
      with += std::fabs(sunk[static_cast<size_t>(i * q_dim + 3 * head_dim + d)]);
      without += std::fabs(no_sink[static_cast<size_t>(i * q_dim + 3 * head_dim + d)]);
    }
  }
  EXPECT_LT(with, 0.5 * without);
}

TEST_P(CpuBackendTest, ClampedSwiGlu) {
  // gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7), out = (u + 1) * g * sigmoid(1.702 g).
  std::vector<float> gate = {-20, -2, -0.5f, 0, 0.5f, 2, 6.9f, 7.1f, 100, 3};
  const std::vector<float> up = {1, 2, 3, 4, -5, 6, 0.5f, -100, 100, -1};
  const std::vector<double> want = [&] {
    std::vector<double> w;
    for (size_t i = 0; i < gate.size(); ++i) {
      const double g = std::min<double>(gate[i], 7.0), u = std::clamp<double>(up[i], -7.0, 7.0);
      w.push_back((u + 1) * g / (1 + std::exp(-1.702 * g)));
    }
    return w;
  }();
  be_->ClampedSwiGlu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), 1.702f, 7.0f);
  for (size_t i = 0; i < gate.size(); ++i)
    EXPECT_NEAR(gate[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
  EXPECT_NEAR(gate[8], 8.0 * 7.0 / (1 + std::exp(-1.702 * 7.0)), 1e-4);  // both clamps bite
}

TEST_P(CpuBackendTest, SiluMul) {
  std::vector<float> gate = {-20, -2, -0.5f, 0, 0.5f, 2, 20, 3};
  const std::vector<float> gate0 = gate;
  const std::vector<float> up = {1, 2, 3, 4, -5, 6, 0.5f, 0};
  be_->SiluMul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate0[i];
    const double want = g / (1 + std::exp(-g)) * up[i];
    EXPECT_NEAR(gate[i], want, 1e-6 * (1 + std::fabs(want))) << i;
  }
}

TEST_P(CpuBackendTest, AddAndAddBias) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  be_->Add(x.data(), std::vector<float>{0.5f, -2, 0, 1, 1, 1}.data(), 6);
  EXPECT_EQ(x, std::vector<float>({1.5f, 0, 3, 5, 6, 7}));
  be_->AddBias(x.data(), std::vector<float>{10, 20, 30}.data(), 2, 3);
  EXPECT_EQ(x, std::vector<float>({11.5f, 20, 33, 15, 26, 37}));
}

TEST_P(CpuBackendTest, GatherRows) {
  const int64_t dim = 3;
  const std::vector<float> src = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  const std::vector<int32_t> rows = {2, 0, 2, 3};
  std::vector<float> dst(rows.size() * dim);
  be_->GatherRows(src.data(), rows.data(), static_cast<int64_t>(rows.size()), dim, dst.data());
  EXPECT_EQ(dst, std::vector<float>({20, 21, 22, 0, 1, 2, 20, 21, 22, 30, 31, 32}));
}

TEST_P(CpuBackendTest, CopyStridedCopiesAColumnSlice) {
  // Columns 1..2 of a [3, 4] matrix into columns 0..1 of a [3, 3] one; the rest untouched.
  const std::vector<float> src = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
  std::vector<float> dst(9, -1.0f);
  be_->CopyStrided(dst.data(), 3, src.data() + 1, 4, 3, 2);
  EXPECT_EQ(dst, std::vector<float>({1, 2, -1, 11, 12, -1, 21, 22, -1}));
}

TEST_P(CpuBackendTest, ScatterAddRows) {
  const int64_t dim = 2;
  std::vector<float> dst = {1, 1, 2, 2, 3, 3, 4, 4};
  const std::vector<float> src = {1, 2, 10, 20, -1, 0.5f};
  const std::vector<int32_t> rows = {3, 0, 1};
  const std::vector<float> scales = {0.5f, 2.0f, -4.0f};
  be_->ScatterAddRows(src.data(), rows.data(), scales.data(), 3, dim, dst.data());
  std::vector<double> want = {1, 1, 2, 2, 3, 3, 4, 4};
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      want[static_cast<size_t>(rows[i] * dim + j)] +=
          double{scales[i]} * src[i * dim + static_cast<size_t>(j)];
    }
  }
  for (size_t i = 0; i < dst.size(); ++i) EXPECT_DOUBLE_EQ(dst[i], want[i]) << i;
  EXPECT_EQ(dst, std::vector<float>({21, 41, 6, 0, 3, 3, 4.5f, 5}));
}

// MatMuls gives MatMul's bits for each matrix, in one parallel region when the matrices share
// their width and activation type (q, k, v), and also when they do not.
TEST_P(CpuBackendTest, MatMulsMatchesMatMulForEachMatrix) {
  auto* host = dynamic_cast<HostOps*>(be_.get());
  ASSERT_NE(host, nullptr);
  const int64_t cols = 512;
  for (int64_t n : {1, 6}) {
    for (DType third : {DType::kQ6_K, DType::kQ8_0}) {  // Q8_K activations like Q4_K, or not
      SCOPED_TRACE(::testing::Message() << "n " << n << " third " << quant::DTypeName(third));
      const std::vector<Weight> ws = {MakeWeight(DType::kQ4_K, 200, cols, 1),
                                      MakeWeight(DType::kQ4_K, 72, cols, 2),
                                      MakeWeight(third, 40, cols, 3)};
      const std::vector<float> x = RandomNormal(static_cast<size_t>(n * cols), 4);
      std::vector<std::vector<float>> want(3), got(3);
      std::vector<WeightRef> refs;
      std::vector<float*> outs;
      for (size_t i = 0; i < ws.size(); ++i) {
        refs.push_back({ws[i].dtype, ws[i].rows, ws[i].cols, ws[i].bytes.data()});
        want[i].resize(static_cast<size_t>(n * ws[i].rows));
        got[i].assign(want[i].size(), -1.0f);
        be_->MatMul(refs[i], x.data(), n, want[i].data());
        outs.push_back(got[i].data());
      }
      const uint64_t regions = host->parallel_regions();
      be_->MatMuls(refs, x.data(), n, outs);
      for (size_t i = 0; i < ws.size(); ++i) EXPECT_EQ(got[i], want[i]) << "matrix " << i;
      if (GetParam() > 1 && n == 1) {
        EXPECT_EQ(host->parallel_regions() - regions, third == DType::kQ6_K ? 1u : 3u);
      }
    }
  }
}

// The thread choice (cpu/thread_choice.h) runs passes with every op on every thread first,
// then passes with the small ops on the caller alone, then whichever measured faster: 24 passes
// cover both, and every result must be the bits of a backend that always uses every thread.
// A big op (over 2 MiB of weights) runs on every thread in every pass.
TEST(CpuBackendThreads, AdaptiveThreadsGiveTheBitsOfFixedOnes) {
  auto adaptive = CreateCpuBackend({.threads = 3});
  auto fixed = CreateCpuBackend({.threads = 3, .fixed_threads = true});
  auto* host = dynamic_cast<HostOps*>(adaptive.get());
  auto* fixed_host = dynamic_cast<HostOps*>(fixed.get());
  ASSERT_NE(host, nullptr);
  ASSERT_NE(fixed_host, nullptr);
  // Products (weight, rows of x): three small ones (cost = weight bytes x rows < 2 MiB), one big.
  const Weight q4k = MakeWeight(DType::kQ4_K, 300, 512, 11);
  const Weight q8 = MakeWeight(DType::kQ8_0, 200, 512, 16);
  const Weight mxfp4 = MakeWeight(DType::kMXFP4, 250, 512, 17);
  const Weight big = MakeWeight(DType::kQ8_0, 2048, 1024, 15);  // 2.2 MB
  const std::vector<std::pair<const Weight*, int64_t>> products = {
      {&q4k, 1}, {&q8, 3}, {&mxfp4, 2}, {&big, 1}};
  const int64_t heads = 8, kv_heads = 2, head_dim = 64, ctx = 70;
  const std::vector<float> k = RandomNormal(static_cast<size_t>(ctx * kv_heads * head_dim), 12);
  const std::vector<float> v = RandomNormal(k.size(), 13);
  const std::vector<float> q = RandomNormal(static_cast<size_t>(heads * head_dim), 14);
  const int32_t position = ctx - 1;
  int small_single_passes = 0;
  for (int pass = 0; pass < 24; ++pass) {
    const uint64_t regions = host->parallel_regions(), single = host->single_threaded_calls();
    adaptive->BeginPass(0, 1);
    fixed->BeginPass(0, 1);
    for (const auto& [w, n] : products) {
      const WeightRef ref{w->dtype, w->rows, w->cols, w->bytes.data()};
      const std::vector<float> x = RandomNormal(static_cast<size_t>(n * w->cols), 20 + pass);
      std::vector<float> got(static_cast<size_t>(n * w->rows)), want(got.size());
      adaptive->MatMul(ref, x.data(), n, got.data());
      fixed->MatMul(ref, x.data(), n, want.data());
      ASSERT_EQ(got, want) << quant::DTypeName(w->dtype) << " matmul of " << w->rows
                           << " rows, pass " << pass;
    }
    std::vector<float> got_att(q.size()), want_att(q.size());
    AttentionArgs a;
    a.q = q.data();
    a.k_cache = k.data();
    a.v_cache = v.data();
    a.positions = &position;
    a.n = 1;
    a.n_heads = heads;
    a.n_kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.scale = 0.125f;
    a.out = got_att.data();
    adaptive->Attention(a);
    a.out = want_att.data();
    fixed->Attention(a);
    ASSERT_EQ(got_att, want_att) << "attention, pass " << pass;
    adaptive->EndPass(0, /*completed=*/true);
    fixed->EndPass(0, /*completed=*/true);
    const uint64_t pass_regions = host->parallel_regions() - regions;
    const uint64_t pass_single = host->single_threaded_calls() - single;
    if (pass_single > 0) {
      small_single_passes++;
      EXPECT_EQ(pass_single, 4u) << "the small matmuls and the attention, pass " << pass;
      EXPECT_EQ(pass_regions, 1u) << "the big matmul, pass " << pass;
    } else {
      EXPECT_EQ(pass_regions, 5u) << "pass " << pass;
    }
  }
  // Passes 2-5 measure every thread, 6-9 the small ops on one (thread_choice.h's defaults).
  EXPECT_GE(small_single_passes, 4);
  EXPECT_EQ(fixed_host->single_threaded_calls(), 0u);
  EXPECT_EQ(fixed_host->parallel_regions(), 24u * 5);
}

// Passes that fail part way (EndPass with completed false) are not measured: the class never
// leaves its warm-up, so no pass runs its small ops on one thread.
TEST(CpuBackendThreads, PassesThatFailAreNotMeasured) {
  auto be = CreateCpuBackend({.threads = 2});
  auto* host = dynamic_cast<HostOps*>(be.get());
  ASSERT_NE(host, nullptr);
  const Weight w = MakeWeight(DType::kQ8_0, 200, 512, 18);
  const WeightRef ref{w.dtype, w.rows, w.cols, w.bytes.data()};
  const std::vector<float> x = RandomNormal(512, 19);
  std::vector<float> y(200);
  for (int pass = 0; pass < 24; ++pass) {
    be->BeginPass(0, 1);
    be->MatMul(ref, x.data(), 1, y.data());
    be->EndPass(0, /*completed=*/false);
  }
  EXPECT_EQ(host->single_threaded_calls(), 0u);
  EXPECT_EQ(host->parallel_regions(), 24u);
  // The same passes completed: the class measures one thread from its 7th pass.
  for (int pass = 0; pass < 24; ++pass) {
    be->BeginPass(0, 1);
    be->MatMul(ref, x.data(), 1, y.data());
    be->EndPass(0, /*completed=*/true);
  }
  EXPECT_GE(host->single_threaded_calls(), 4u);
}

// One MoE layer's experts, for the grouped op against the op-by-op path.
struct GroupedCase {
  DType gate_up, down;
  int64_t hidden, ffn;
  bool biases;
  float swiglu_limit;
};

class GroupedExpertsTest : public ::testing::TestWithParam<std::tuple<int, GroupedCase>> {};

// ApplyExperts gives the bits of GatherRows, MatMul (gate, up), SiluMul / ClampedSwiGlu,
// AddBias, MatMul (down) and ScatterAddRows applied expert by expert, over two groups (the
// second one reusing the quantized input, as experts that land late do) and with an expert
// that has no rows.
TEST_P(GroupedExpertsTest, MatchesTheOpByOpPathBitForBit) {
  const auto [threads, tc] = GetParam();
  auto be = CreateCpuBackend({.threads = threads});
  auto* host = dynamic_cast<HostOps*>(be.get());
  ASSERT_NE(host, nullptr);
  const int64_t n = 7, H = tc.hidden, F = tc.ffn, E = 4;
  const std::vector<float> x = RandomNormal(static_cast<size_t>(n * H), 5);
  std::vector<Weight> gate, up, down;
  std::vector<std::vector<float>> gate_bias, up_bias, down_bias;
  for (int64_t e = 0; e < E; ++e) {
    gate.push_back(MakeWeight(tc.gate_up, F, H, 100 + static_cast<uint32_t>(e)));
    up.push_back(MakeWeight(tc.gate_up, F, H, 200 + static_cast<uint32_t>(e)));
    down.push_back(MakeWeight(tc.down, H, F, 300 + static_cast<uint32_t>(e)));
    gate_bias.push_back(RandomNormal(static_cast<size_t>(F), 400 + static_cast<uint32_t>(e), 0.5f));
    up_bias.push_back(RandomNormal(static_cast<size_t>(F), 500 + static_cast<uint32_t>(e), 0.5f));
    down_bias.push_back(RandomNormal(static_cast<size_t>(H), 600 + static_cast<uint32_t>(e), 0.5f));
  }
  // Expert e applies to these rows with these weights; expert 2 has none.
  const std::vector<std::vector<int32_t>> rows = {{0, 2, 3, 6}, {1, 2, 4, 5, 6}, {}, {0, 1, 3}};
  std::vector<std::vector<float>> scales;
  for (int64_t e = 0; e < E; ++e)
    scales.push_back(
        RandomNormal(rows[static_cast<size_t>(e)].size(), 700 + static_cast<uint32_t>(e)));
  auto ref = [](const Weight& w) { return WeightRef{w.dtype, w.rows, w.cols, w.bytes.data()}; };
  constexpr float kAlpha = 1.702f;

  std::vector<float> want = RandomNormal(static_cast<size_t>(n * H), 9);
  std::vector<float> got = want;
  std::vector<float> rows_in(static_cast<size_t>(n * H)), g(static_cast<size_t>(n * F)),
      u(static_cast<size_t>(n * F));
  std::vector<float> rows_out(static_cast<size_t>(n * H));
  for (int64_t e = 0; e < E; ++e) {
    const auto& r = rows[static_cast<size_t>(e)];
    const int64_t m = static_cast<int64_t>(r.size());
    if (m == 0) continue;
    be->GatherRows(x.data(), r.data(), m, H, rows_in.data());
    be->MatMul(ref(gate[static_cast<size_t>(e)]), rows_in.data(), m, g.data());
    be->MatMul(ref(up[static_cast<size_t>(e)]), rows_in.data(), m, u.data());
    if (tc.biases) {
      be->AddBias(g.data(), gate_bias[static_cast<size_t>(e)].data(), m, F);
      be->AddBias(u.data(), up_bias[static_cast<size_t>(e)].data(), m, F);
    }
    if (tc.swiglu_limit > 0) {
      be->ClampedSwiGlu(g.data(), u.data(), m * F, kAlpha, tc.swiglu_limit);
    } else {
      be->SiluMul(g.data(), u.data(), m * F);
    }
    be->MatMul(ref(down[static_cast<size_t>(e)]), g.data(), m, rows_out.data());
    if (tc.biases) be->AddBias(rows_out.data(), down_bias[static_cast<size_t>(e)].data(), m, H);
    be->ScatterAddRows(rows_out.data(), r.data(), scales[static_cast<size_t>(e)].data(), m, H,
                       want.data());
  }

  std::vector<GroupedExpert> experts;
  for (int64_t e = 0; e < E; ++e) {
    const size_t i = static_cast<size_t>(e);
    experts.push_back(
        {ref(gate[i]), ref(up[i]), ref(down[i]), tc.biases ? gate_bias[i].data() : nullptr,
         tc.biases ? up_bias[i].data() : nullptr, tc.biases ? down_bias[i].data() : nullptr,
         rows[i].data(), scales[i].data(), static_cast<int64_t>(rows[i].size())});
  }
  GroupedExpertsArgs args;
  args.x = x.data();
  args.n = n;
  args.hidden = H;
  args.ffn = F;
  args.out = got.data();
  args.swiglu_alpha = kAlpha;
  args.swiglu_limit = tc.swiglu_limit;
  args.experts = std::span<const GroupedExpert>(experts.data(), 3);  // the first group
  be->ApplyExperts(args);
  args.experts = std::span<const GroupedExpert>(experts.data() + 3, 1);  // one that landed late
  args.input_prepared = true;
  be->ApplyExperts(args);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
  if (threads > 1) {
    EXPECT_GE(host->parallel_regions(), 4u);
  }
  // A backend without a fused form (the device-like one: op by op, ApplyExpertsByOps, in the
  // scratch the args give) gives the same bits from the same groups.
  DeviceLikeBackend device(0, threads);
  std::vector<float> on_device = RandomNormal(static_cast<size_t>(n * H), 9);
  args.out = on_device.data();
  args.rows_in = rows_in.data();
  args.gate = g.data();
  args.up = u.data();
  args.rows_out = rows_out.data();
  args.experts = std::span<const GroupedExpert>(experts.data(), 3);
  args.input_prepared = false;
  device.ApplyExperts(args);
  args.experts = std::span<const GroupedExpert>(experts.data() + 3, 1);
  args.input_prepared = true;
  device.ApplyExperts(args);
  for (size_t i = 0; i < on_device.size(); ++i)
    ASSERT_EQ(on_device[i], want[i]) << "device-like, element " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Types, GroupedExpertsTest,
    ::testing::Combine(
        ::testing::Values(1, 3),
        ::testing::Values(GroupedCase{DType::kQ4_K, DType::kQ6_K, 512, 768, false, 0},
                          GroupedCase{DType::kQ4_K, DType::kQ6_K, 256, 512, true, 1.0f},
                          GroupedCase{DType::kQ8_0, DType::kQ8_0, 256, 544, false, 0},
                          GroupedCase{DType::kMXFP4, DType::kMXFP4, 320, 320, true, 7.0f},
                          GroupedCase{DType::kF32, DType::kF16, 64, 96, true, 0})),
    [](const auto& info) {
      const GroupedCase& c = std::get<1>(info.param);
      return "t" + std::to_string(std::get<0>(info.param)) + "_" +
             std::string(quant::DTypeName(c.gate_up)) + "_" +
             std::string(quant::DTypeName(c.down)) + (c.swiglu_limit > 0 ? "_clamped" : "");
    });

}  // namespace
}  // namespace colibri::backend
