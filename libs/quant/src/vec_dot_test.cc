#include "colibri/quant/vec_dot.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "colibri/quant/blocks.h"
#include "colibri/quant/dtype.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"
#include "gtest/gtest.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace colibri::quant {
namespace {

constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                  DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                                  DType::kQ6_K, DType::kQ8_K};

std::vector<float> RandomRow(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

struct Case {
  std::vector<uint8_t> w;    // weight row
  std::vector<uint8_t> act;  // activations in the vec_dot type
  double exact = 0;          // sum of dequantized w * dequantized act, in double
  double magnitude = 0;      // sum of |w * act|
};

Case MakeCase(DType t, int64_t n, uint32_t seed) {
  Case c;
  const std::vector<float> wf = RandomRow(n, seed, 0.05f);
  const std::vector<float> xf = RandomRow(n, seed + 1000, 2.0f);
  c.w.resize(RowBytes(t, n));
  QuantizeRow(t, wf.data(), c.w.data(), n);
  const DType at = Traits(t).vec_dot_type;
  c.act.resize(RowBytes(at, n));
  QuantizeActivations(at, xf.data(), c.act.data(), n);
  std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
  DequantizeRowReference(t, c.w.data(), wd.data(), n);
  DequantizeRowReference(at, c.act.data(), ad.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    c.exact += double{wd[i]} * ad[i];
    c.magnitude += std::fabs(double{wd[i]} * ad[i]);
  }
  return c;
}

int64_t LengthFor(DType t, int k) {
  return Traits(t).quantized ? Traits(t).block_elems * (k + 1) * 3 : 37 + 101 * k;
}

TEST(VecDotTest, ReferenceMatchesDequantizedDot) {
  for (DType t : kWeightTypes) {
    for (int k = 0; k < 6; ++k) {
      const int64_t n = LengthFor(t, k);
      const Case c = MakeCase(t, n, 10 * k + 1);
      const float ref = VecDotReference(t, c.w.data(), c.act.data(), n);
      EXPECT_NEAR(ref, c.exact, 1e-5 * c.magnitude + 1e-30) << DTypeName(t) << " n=" << n;
    }
  }
}

// The SIMD kernel sets this CPU has ("avx2", "avx512"), each made active in turn.
class IsaCap {
 public:
  explicit IsaCap(std::string_view isa) { EXPECT_TRUE(SetKernelIsaCap(isa)); }
  ~IsaCap() { SetKernelIsaCap("avx512"); }
};

std::vector<std::string_view> SimdIsas() {
  std::vector<std::string_view> out;
  for (std::string_view isa : SupportedIsas()) {
    if (isa != "scalar") out.push_back(isa);
  }
  return out;
}

TEST(VecDotTest, SimdMatchesReference) {
  for (std::string_view isa : SimdIsas()) {
    IsaCap cap(isa);
    ASSERT_EQ(ActiveIsa(), isa);
    for (DType t : kWeightTypes) {
      for (int k = 0; k < 6; ++k) {
        const int64_t n = LengthFor(t, k);
        const Case c = MakeCase(t, n, 10 * k + 2);
        const float ref = VecDotReference(t, c.w.data(), c.act.data(), n);
        const float got = VecDot(t, c.w.data(), c.act.data(), n);
        EXPECT_NEAR(got, ref, 1e-5 * c.magnitude) << DTypeName(t) << " n=" << n << " isa=" << isa;
        // The AVX2 k-quant kernels use exact integer block sums and the reference's float tail:
        // identical bits.
        if (isa == "avx2" && Traits(t).vec_dot_type == DType::kQ8_K) {
          EXPECT_EQ(got, ref) << DTypeName(t) << " n=" << n;
        }
      }
    }
  }
}

TEST(VecDotTest, SimdMatchesReferenceOnArbitraryBlocks) {
  // Random bytes (not produced by our quantizer) with sane scales: every bit pattern of the
  // quants, including -128 in Q8_0 / Q8_K weights.
  std::mt19937 rng(77);
  for (DType t : {DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kQ8_K}) {
    const int64_t n = 8 * 256;
    std::vector<uint8_t> w(RowBytes(t, n));
    for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
    const size_t bb = Traits(t).block_bytes;
    for (size_t off = 0; off < w.size(); off += bb) {
      const uint16_t h = F32ToF16(0.01f * (1 + rng() % 50));
      switch (t) {
        case DType::kQ8_0: std::memcpy(&w[off], &h, 2); break;
        case DType::kQ2_K:
          std::memcpy(&w[off + 80], &h, 2);
          std::memcpy(&w[off + 82], &h, 2);
          break;
        case DType::kQ3_K: std::memcpy(&w[off + 108], &h, 2); break;
        case DType::kQ4_K:
        case DType::kQ5_K:
          std::memcpy(&w[off], &h, 2);
          std::memcpy(&w[off + 2], &h, 2);
          break;
        case DType::kQ6_K: std::memcpy(&w[off + 208], &h, 2); break;
        case DType::kQ8_K: {
          const float d = 0.01f;
          std::memcpy(&w[off], &d, 4);
          break;
        }
        default: break;
      }
    }
    const DType at = Traits(t).vec_dot_type;
    const std::vector<float> xf = RandomRow(n, 5, 3.0f);
    std::vector<uint8_t> act(RowBytes(at, n));
    QuantizeActivations(at, xf.data(), act.data(), n);
    std::vector<float> wd(n), ad(n);
    DequantizeRowReference(t, w.data(), wd.data(), n);
    DequantizeRowReference(at, act.data(), ad.data(), n);
    double exact = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += double{wd[i]} * ad[i];
      magnitude += std::fabs(double{wd[i]} * ad[i]);
    }
    const float ref = VecDotReference(t, w.data(), act.data(), n);
    EXPECT_NEAR(ref, exact, 1e-5 * magnitude) << DTypeName(t);
    for (std::string_view isa : SimdIsas()) {
      IsaCap cap(isa);
      const float got = VecDot(t, w.data(), act.data(), n);
      EXPECT_NEAR(got, ref, 1e-5 * magnitude) << DTypeName(t) << " isa=" << isa;
      if (isa == "avx2" && at == DType::kQ8_K) {
        EXPECT_EQ(got, ref) << DTypeName(t);
      }
    }
  }
}

TEST(VecDotTest, MatVecIsRowwiseVecDot) {
  // 70 super-blocks: longer than the AVX-512 kernel's 64-block activation segment. Rows are
  // padded (stride > row bytes) as a sub-matrix view would be.
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0}) {
    for (int64_t n : {int64_t{512}, int64_t{256 * 70}}) {
      const int64_t rows = 9;
      const std::vector<float> wf = RandomRow(n * rows, 3);
      const size_t row_bytes = RowBytes(t, n);
      const size_t stride = row_bytes + 64;
      std::vector<uint8_t> w(stride * rows);
      for (int64_t r = 0; r < rows; ++r) {
        QuantizeRow(t, wf.data() + r * n, w.data() + r * stride, n);
      }
      const std::vector<float> x = RandomRow(n, 4);
      const DType at = Traits(t).vec_dot_type;
      std::vector<uint8_t> act(RowBytes(at, n));
      QuantizeActivations(at, x.data(), act.data(), n);
      for (std::string_view isa : SupportedIsas()) {
        IsaCap cap(isa);
        std::vector<float> out(rows);
        MatVec(t, w.data(), stride, rows, act.data(), n, out.data());
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_EQ(out[r], VecDot(t, w.data() + r * stride, act.data(), n))
              << DTypeName(t) << " n=" << n << " isa=" << isa << " row " << r;
          EXPECT_NEAR(out[r], VecDotReference(t, w.data() + r * stride, act.data(), n),
                      1e-4 * std::fabs(out[r]) + 1e-3)
              << DTypeName(t) << " n=" << n << " isa=" << isa;
        }
      }
    }
  }
}

TEST(VecDotTest, MatVecMultiIsMatVecPerActivationRow) {
  // 1..7 activation rows (the multi-row kernels take up to four at a time), rows and segments
  // as above: every output is MatVec's bits, under every kernel set.
  for (DType t :
       {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0, DType::kQ3_K, DType::kQ2_K,
        DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL, DType::kMXFP4, DType::kIQ4_XS}) {
    for (int64_t n : {int64_t{512}, int64_t{256 * 70}, int64_t{256 * 70 + 32 * 3}}) {
      if (n % Traits(t).block_elems != 0) continue;
      const int64_t rows = 11;
      const std::vector<float> wf = RandomRow(n * rows, 5);
      const size_t stride = RowBytes(t, n) + 64;
      std::vector<uint8_t> w(stride * rows);
      for (int64_t r = 0; r < rows; ++r)
        QuantizeRow(t, wf.data() + r * n, w.data() + r * stride, n);
      const DType at = Traits(t).vec_dot_type;
      constexpr int kActs = 7;
      std::vector<std::vector<uint8_t>> acts(kActs);
      std::vector<const void*> act_ptrs;
      for (int a = 0; a < kActs; ++a) {
        const std::vector<float> x = RandomRow(n, 40 + a);
        acts[a].resize(RowBytes(at, n));
        QuantizeActivations(at, x.data(), acts[a].data(), n);
        act_ptrs.push_back(acts[a].data());
      }
      for (std::string_view isa : SupportedIsas()) {
        IsaCap cap(isa);
        for (int count = 1; count <= kActs; ++count) {
          std::vector<std::vector<float>> outs(count, std::vector<float>(rows, -1.0f));
          std::vector<float*> out_ptrs;
          for (auto& o : outs) out_ptrs.push_back(o.data());
          MatVecMulti(t, w.data(), stride, rows, {act_ptrs.data(), static_cast<size_t>(count)}, n,
                      out_ptrs);
          for (int a = 0; a < count; ++a) {
            std::vector<float> one(rows);
            MatVec(t, w.data(), stride, rows, acts[a].data(), n, one.data());
            EXPECT_EQ(outs[a], one) << DTypeName(t) << " n=" << n << " isa=" << isa
                                    << " count=" << count << " act " << a;
          }
        }
      }
    }
  }
}

TEST(VecDotTest, IsaCapNamesAndFallback) {
  const std::vector<std::string_view> isas = SupportedIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), "scalar");
  EXPECT_FALSE(SetKernelIsaCap("sse9"));
  EXPECT_EQ(ActiveIsa(), isas.back());
  // Asking for more than the CPU has gives its best set.
  EXPECT_TRUE(SetKernelIsaCap("avx512"));
  EXPECT_EQ(ActiveIsa(), isas.back());
  EXPECT_TRUE(SetKernelIsaCap("scalar"));
  EXPECT_EQ(ActiveIsa(), "scalar");
  SetKernelIsaCap("avx512");
}

TEST(QuantizeActivationsTest, Q8_0RoundsHalfToEvenWithScale127OverMax) {
  // amax 127 makes the scale exactly 1, so x * scale keeps the .5 ties.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 0.5f + j;
  x[31] = 127.0f;
  BlockQ8_0 act, weight;
  QuantizeActivations(DType::kQ8_0, x, &act, 32);
  EXPECT_EQ(act.d, F32ToF16(1.0f));
  EXPECT_EQ(act.qs[0], 0);  // 0.5 -> 0 (even)
  EXPECT_EQ(act.qs[1], 2);  // 1.5 -> 2
  EXPECT_EQ(act.qs[2], 2);  // 2.5 -> 2
  // The weight quantizer (quantize_row_q8_0_ref) rounds half away from zero instead.
  QuantizeRow(DType::kQ8_0, x, &weight, 32);
  EXPECT_EQ(weight.qs[0], 1);
  EXPECT_EQ(weight.qs[2], 3);
}

TEST(QuantizeActivationsTest, FloatFormats) {
  const std::vector<float> x = RandomRow(33, 8);
  std::vector<float> f32(33);
  QuantizeActivations(DType::kF32, x.data(), f32.data(), 33);
  EXPECT_EQ(f32, x);
  std::vector<uint16_t> h(33), b(33);
  QuantizeActivations(DType::kF16, x.data(), h.data(), 33);
  QuantizeActivations(DType::kBF16, x.data(), b.data(), 33);
  for (int i = 0; i < 33; ++i) {
    EXPECT_EQ(h[i], F32ToF16(x[i]));
    EXPECT_EQ(b[i], F32ToBF16(x[i]));
  }
}

TEST(QuantizeActivationsTest, Q8_KMatchesWeightQuantizer) {
  const std::vector<float> x = RandomRow(1024, 12);
  std::vector<BlockQ8_K> a(4), b(4);
  QuantizeActivations(DType::kQ8_K, x.data(), a.data(), 1024);
  QuantizeRow(DType::kQ8_K, x.data(), b.data(), 1024);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(BlockQ8_K) * 4), 0);
  for (const BlockQ8_K& blk : a) {
    for (int8_t q : blk.qs) {
      EXPECT_GE(q, -127);
      EXPECT_LE(q, 127);
    }
  }
}

TEST(VecDotTest, ActiveIsaReportsTheKernelSet) {
  const std::string_view isa = ActiveIsa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "scalar") << isa;
  ForceScalarKernels(true);
  EXPECT_EQ(ActiveIsa(), "scalar");
  const Case c = MakeCase(DType::kQ8_0, 1024, 99);
  EXPECT_EQ(VecDot(DType::kQ8_0, c.w.data(), c.act.data(), 1024),
            VecDotReference(DType::kQ8_0, c.w.data(), c.act.data(), 1024));
  ForceScalarKernels(false);
  EXPECT_EQ(ActiveIsa(), isa);
#if defined(__x86_64__)
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  if (avx512) {
    EXPECT_EQ(isa, "avx512");
  } else if (avx2) {
    EXPECT_EQ(isa, "avx2");
  }
#endif
}

}  // namespace
}  // namespace colibri::quant
