// The SIMD dot products and matrix-vector kernels against the scalar reference at the row
// widths of real MoE experts (768, 1536, 2048, 2880: Qwen3, DeepSeek-like, gpt-oss) and at odd
// block counts, on arbitrary block bytes, with every kernel set this CPU has; and the kernel
// table dispatch (the AVX-512 VNNI kernels installed where the CPU has them, the
// COLIBRI_KERNEL_ISA start cap).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string_view>
#include <vector>

#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"
#include "gtest/gtest.h"
#include "kernels.h"
#include "nonk_quant_test_util.h"

namespace colibri::quant {
namespace {

// Formats with Q8_0 activations, and the 256-element ones the decode path uses most.
constexpr DType kBlock32Types[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL,
                                   DType::kMXFP4};
constexpr DType kKQuantTypes[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS};

// Expert widths, plus odd block counts: 25, 33 and 91 blocks of 32; for the k-quants (256
// per block: 2880 is not a multiple) 3, 5, 11 and 13 super-blocks.
constexpr int64_t kBlock32Widths[] = {768, 1536, 2048, 2880, 800, 1056, 2912};
constexpr int64_t kKQuantWidths[] = {768, 1536, 2048, 1280, 2816, 3328};

struct Row {
  std::vector<uint8_t> w, act;
  double magnitude = 0;  // sum of |w_i * a_i| over the dequantized values
};

Row MakeRow(DType t, int64_t n, std::mt19937& rng) {
  Row r;
  r.w = ArbitraryRow(t, n, rng);
  const DType at = Traits(t).vec_dot_type;
  std::normal_distribution<float> nd(0, 2);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  r.act.resize(RowBytes(at, n));
  QuantizeActivations(at, x.data(), r.act.data(), n);
  std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
  DequantizeRowReference(t, r.w.data(), wd.data(), n);
  DequantizeRowReference(at, r.act.data(), ad.data(), n);
  for (int64_t i = 0; i < n; ++i) r.magnitude += std::fabs(double{wd[i]} * ad[i]);
  return r;
}

// Whether `isa`'s kernel for `t` must give the reference's exact bits: IQ4_XS and the 32-element
// formats but Q8_0 in every set (the SIMD Q8_0 kernels sum in float lanes), and the k-quants in
// AVX2 (the AVX-512 k-quant kernels sum block terms in float lanes).
bool BitIdentical(std::string_view isa, DType t) {
  if (isa == "scalar" || t == DType::kIQ4_XS) return true;
  if (Traits(t).vec_dot_type == DType::kQ8_K) return isa != "avx512";
  return t != DType::kQ8_0;
}

void CheckWidths(DType t, const int64_t* widths, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t k = 0; k < count; ++k) {
    const int64_t n = widths[k];
    const Row r = MakeRow(t, n, rng);
    const float ref = VecDotReference(t, r.w.data(), r.act.data(), n);
    ASSERT_TRUE(std::isfinite(ref)) << DTypeName(t) << " n=" << n;
    // 5 rows with a padded stride (a sub-matrix view), row 2 the checked one.
    constexpr int kRows = 5;
    const size_t stride = r.w.size() + 96;
    std::vector<uint8_t> mat(stride * kRows);
    for (int i = 0; i < kRows; ++i) {
      if (i == 2) {
        std::memcpy(mat.data() + i * stride, r.w.data(), r.w.size());
      } else {
        const std::vector<uint8_t> other = ArbitraryRow(t, n, rng);
        std::memcpy(mat.data() + i * stride, other.data(), other.size());
      }
    }
    for (std::string_view isa : SupportedIsas()) {
      ASSERT_TRUE(SetKernelIsaCap(isa));
      const float got = VecDot(t, r.w.data(), r.act.data(), n);
      std::vector<float> out(kRows);
      MatVec(t, mat.data(), stride, kRows, r.act.data(), n, out.data());
      // A kernel that dropped or misplaced one block of n / 32 would miss by far more than
      // this float-summation-order bound.
      EXPECT_NEAR(got, ref, 1e-5 * r.magnitude) << DTypeName(t) << " n=" << n << " " << isa;
      if (BitIdentical(isa, t)) {
        EXPECT_EQ(got, ref) << DTypeName(t) << " n=" << n << " " << isa;
      }
      for (int i = 0; i < kRows; ++i) {
        EXPECT_EQ(out[i], VecDot(t, mat.data() + i * stride, r.act.data(), n))
            << DTypeName(t) << " n=" << n << " " << isa << " row " << i;
      }
    }
    ForceScalarKernels(false);
  }
}

TEST(SimdWidthsTest, Block32KernelsAtExpertWidths) {
  uint32_t seed = 1;
  for (DType t : kBlock32Types) CheckWidths(t, kBlock32Widths, std::size(kBlock32Widths), seed++);
}

TEST(SimdWidthsTest, SuperBlockKernelsAtExpertWidths) {
  uint32_t seed = 100;
  for (DType t : kKQuantTypes) CheckWidths(t, kKQuantWidths, std::size(kKQuantWidths), seed++);
}

TEST(SimdWidthsTest, LongRows) {
  // 300 blocks of 32 (37 groups of 8 and a tail of 4), longer than any expert row.
  const int64_t widths[] = {300 * 32};
  uint32_t seed = 200;
  for (DType t : kBlock32Types) CheckWidths(t, widths, 1, seed++);
}

// Activations as the decode path meets them (normal, some large outliers), plus the cases the
// quantizers branch on: an all-zero block, ties at .5 after scaling, and the largest |x|
// appearing with both signs (Q8_K takes the first one's sign).
std::vector<float> ActivationRow(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng) * (rng() % 64 == 0 ? 40.0f : 1.0f);
  for (int64_t j = 0; j < 32 && j < n; ++j) x[static_cast<size_t>(j)] = 0.0f;
  if (n >= 256) {
    for (int64_t j = 0; j < 32; ++j) x[static_cast<size_t>(64 + j)] = 0.5f + static_cast<float>(j);
    x[64 + 31] = 127.0f;  // scale exactly 1 in its Q8_0 block: every other value a tie
    x[300 % n] = -1000.0f;
    x[(300 + 7) % n] = 1000.0f;
  }
  if (n >= 2048) std::fill(x.begin() + 1792, x.begin() + 2048, 0.0f);  // an all-zero Q8_K block
  return x;
}

TEST(SimdWidthsTest, ActivationQuantizersAreTheScalarBytes) {
  std::mt19937 rng(9);
  for (DType at : {DType::kQ8_0, DType::kQ8_K}) {
    for (int64_t n : {int64_t{768}, int64_t{1536}, int64_t{2048}, int64_t{2816}, int64_t{4096}}) {
      if (at == DType::kQ8_0) n += 64;  // and an odd count of Q8_0 blocks
      const std::vector<float> x = ActivationRow(n, rng);
      ASSERT_TRUE(SetKernelIsaCap("scalar"));
      std::vector<uint8_t> ref(RowBytes(at, n));
      QuantizeActivations(at, x.data(), ref.data(), n);
      for (std::string_view isa : SupportedIsas()) {
        ASSERT_TRUE(SetKernelIsaCap(isa));
        std::vector<uint8_t> got(ref.size(), 0xAA);
        QuantizeActivations(at, x.data(), got.data(), n);
        EXPECT_EQ(got, ref) << DTypeName(at) << " n=" << n << " " << isa;
      }
      ForceScalarKernels(false);
    }
  }
}

bool CpuHasAvx512Vnni() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return SupportedIsas().back() == "avx512" && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

TEST(SimdWidthsTest, Avx512VnniKernelsInstalledWhereTheCpuHasThem) {
  EXPECT_EQ(internal::HasAvx512Vnni(), CpuHasAvx512Vnni());
  if (!CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  ASSERT_TRUE(SetKernelIsaCap("avx512"));
  const internal::KernelTable& avx512 = internal::ActiveKernels();
  ASSERT_TRUE(SetKernelIsaCap("avx2"));
  const internal::KernelTable& avx2 = internal::ActiveKernels();
  ForceScalarKernels(false);
  for (DType t :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kIQ4_NL, DType::kMXFP4, DType::kIQ4_XS}) {
    const auto id = static_cast<uint32_t>(t);
    EXPECT_NE(avx512.vec_dot[id], avx2.vec_dot[id]) << DTypeName(t);
    EXPECT_NE(avx512.mat_vec[id], nullptr) << DTypeName(t);
  }
}

TEST(SimdWidthsTest, IsaNamesParse) {
  internal::Isa isa = internal::Isa::kAvx512;
  EXPECT_TRUE(internal::ParseIsa("avx2", &isa));
  EXPECT_EQ(isa, internal::Isa::kAvx2);
  EXPECT_TRUE(internal::ParseIsa("scalar", &isa));
  EXPECT_EQ(isa, internal::Isa::kScalar);
  EXPECT_FALSE(internal::ParseIsa("AVX2", &isa));
  EXPECT_FALSE(internal::ParseIsa("", &isa));
  EXPECT_EQ(isa, internal::Isa::kScalar);
}

// Run by the quant_test_isa_env ctest entry with COLIBRI_KERNEL_ISA=avx2: the process starts
// capped there, and ForceScalarKernels(false) returns to that cap, not above it.
TEST(KernelIsaEnvTest, StartCapComesFromTheEnvironment) {
  const char* env = std::getenv(internal::kIsaEnvVar);
  if (env == nullptr) GTEST_SKIP() << internal::kIsaEnvVar << " not set";
  internal::Isa cap;
  ASSERT_TRUE(internal::ParseIsa(env, &cap));
  const std::string_view expected =
      SupportedIsas()[std::min<size_t>(static_cast<size_t>(cap), SupportedIsas().size() - 1)];
  EXPECT_EQ(ActiveIsa(), expected);
  ForceScalarKernels(true);
  EXPECT_EQ(ActiveIsa(), "scalar");
  ForceScalarKernels(false);
  EXPECT_EQ(ActiveIsa(), expected);
}

}  // namespace
}  // namespace colibri::quant
