// Decode matrix-vector kernels for the legacy formats (Q4_0, Q4_1, Q5_0, Q5_1), IQ4_NL and MXFP4
// (32-element blocks, one part per block, Q8_0 / Q8_1 activations) and the 256-element codebook
// formats IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ4_XS (one part per 32-value
// group, Q8_K activations). Each part sums integers exactly as the CPU reference does for that
// group and applies the reference's float factors uncontracted; a row then differs from the
// CPU only by the order its part values are added in.
#include "matvec.cuh"

namespace colibri::backend::cuda {

namespace {

constexpr float kIq1Delta = 0.125f;

// Integer sum over the 32 elements of w(l) * a[l].
template <typename Weight>
__device__ __forceinline__ int PartSum(const int8_t* a, Weight w) {
  const int2 h = HalfSums(a, w);
  return h.x + h.y;
}

}  // namespace

// ---- 32-element blocks -------------------------------------------------------------------

template <>
__device__ float PartDotI<DType::kQ4_0, BlockQ8_0>(const uint8_t* wb, const BlockQ8_0& y, int,
                                                   const DeviceCodebooks&) {
  const auto& x = *reinterpret_cast<const BlockQ4_0*>(wb);
  const int isum = PartSum(y.qs, [&](int l) { return Nibble(x.qs, l) - 8; });
  return __fmul_rn(static_cast<float>(isum), __fmul_rn(HalfBits(x.d), HalfBits(y.d)));
}

template <>
__device__ float PartDotI<DType::kQ5_0, BlockQ8_0>(const uint8_t* wb, const BlockQ8_0& y, int,
                                                   const DeviceCodebooks&) {
  const auto& x = *reinterpret_cast<const BlockQ5_0*>(wb);
  const int isum = PartSum(y.qs, [&](int l) { return Q5Quant(x.qs, x.qh, l) - 16; });
  return __fmul_rn(__fmul_rn(HalfBits(x.d), HalfBits(y.d)), static_cast<float>(isum));
}

// Q4_1 / Q5_1: d * dy * isum + m * s (the activation block's scaled sum).
__device__ __forceinline__ float MinTail(uint16_t d, uint16_t m, const BlockQ8_1& y, int isum) {
  return __fadd_rn(__fmul_rn(__fmul_rn(HalfBits(d), HalfBits(y.d)), static_cast<float>(isum)),
                   __fmul_rn(HalfBits(m), HalfBits(y.s)));
}

template <>
__device__ float PartDotI<DType::kQ4_1, BlockQ8_1>(const uint8_t* wb, const BlockQ8_1& y, int,
                                                   const DeviceCodebooks&) {
  const auto& x = *reinterpret_cast<const BlockQ4_1*>(wb);
  return MinTail(x.d, x.m, y, PartSum(y.qs, [&](int l) { return Nibble(x.qs, l); }));
}

template <>
__device__ float PartDotI<DType::kQ5_1, BlockQ8_1>(const uint8_t* wb, const BlockQ8_1& y, int,
                                                   const DeviceCodebooks&) {
  const auto& x = *reinterpret_cast<const BlockQ5_1*>(wb);
  return MinTail(x.d, x.m, y, PartSum(y.qs, [&](int l) { return Q5Quant(x.qs, x.qh, l); }));
}

template <>
__device__ float PartDotI<DType::kIQ4_NL, BlockQ8_0>(const uint8_t* wb, const BlockQ8_0& y, int,
                                                     const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ4_NL*>(wb);
  const int isum =
      PartSum(y.qs, [&](int l) { return static_cast<int>(books.iq4nl[Nibble(x.qs, l)]); });
  return __fmul_rn(__fmul_rn(HalfBits(y.d), HalfBits(x.d)), static_cast<float>(isum));
}

template <>
__device__ float PartDotI<DType::kMXFP4, BlockQ8_0>(const uint8_t* wb, const BlockQ8_0& y, int,
                                                    const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockMXFP4*>(wb);
  const int isum =
      PartSum(y.qs, [&](int l) { return static_cast<int>(books.mxfp4[Nibble(x.qs, l)]); });
  return __fmul_rn(__fmul_rn(E8M0Half(x.e), HalfBits(y.d)), static_cast<float>(isum));
}

// ---- 256-element codebook blocks (part g = group g) --------------------------------------

template <>
__device__ float PartDotI<DType::kIQ4_XS, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                     const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ4_XS*>(wb);
  const int isum = PartSum(y.qs + 32 * g, [&](int l) {
    return static_cast<int>(books.iq4nl[Nibble(x.qs + 16 * g, l)]);
  });
  return __fmul_rn(__fmul_rn(__fmul_rn(HalfBits(x.d), y.d), static_cast<float>(Iq4xsScale(x, g))),
                   static_cast<float>(isum));
}

// 1/8 (IQ2) or 1/4 (IQ3_XXS) of d * dy * isum, the reference's final scaling per part.
__device__ __forceinline__ float ScaledPart(float factor, uint16_t d, float dy, int isum) {
  return __fmul_rn(factor, __fmul_rn(__fmul_rn(HalfBits(d), dy), static_cast<float>(isum)));
}

template <>
__device__ float PartDotI<DType::kIQ2_XXS, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                      const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ2_XXS*>(wb);
  const int s = PartSum(y.qs + 32 * g, [&](int l) { return Iq2xxsWeight(x, g, l, books); });
  return ScaledPart(0.125f, x.d, y.d, s * (2 * Iq2xxsScale(x, g) + 1));
}

template <>
__device__ float PartDotI<DType::kIQ2_XS, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                     const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ2_XS*>(wb);
  const int2 h = HalfSums(y.qs + 32 * g, [&](int l) { return Iq2xsWeight(x, g, l, books); });
  const int isum = h.x * (2 * (x.scales[g] & 0xF) + 1) + h.y * (2 * (x.scales[g] >> 4) + 1);
  return ScaledPart(0.125f, x.d, y.d, isum);
}

template <>
__device__ float PartDotI<DType::kIQ2_S, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                    const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ2_S*>(wb);
  const int2 h = HalfSums(y.qs + 32 * g, [&](int l) { return Iq2sWeight(x, g, l, books); });
  const int isum = h.x * (2 * (x.scales[g] & 0xF) + 1) + h.y * (2 * (x.scales[g] >> 4) + 1);
  return ScaledPart(0.125f, x.d, y.d, isum);
}

template <>
__device__ float PartDotI<DType::kIQ3_XXS, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                      const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ3_XXS*>(wb);
  const int s = PartSum(y.qs + 32 * g, [&](int l) { return Iq3xxsWeight(x, g, l, books); });
  return ScaledPart(0.25f, x.d, y.d, s * (2 * static_cast<int>(Iq3xxsAux(x, g) >> 28) + 1));
}

template <>
__device__ float PartDotI<DType::kIQ3_S, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                    const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ3_S*>(wb);
  const int s = PartSum(y.qs + 32 * g, [&](int l) { return Iq3sWeight(x, g, l, books); });
  return ScaledPart(1.0f, x.d, y.d, s * Iq3sScale(x, g));
}

template <>
__device__ float PartDotI<DType::kIQ1_S, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                    const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ1_S*>(wb);
  const int ls = 2 * ((x.qh[g] >> 12) & 7) + 1;
  const int delta = x.qh[g] & 0x8000 ? -1 : 1;
  const int lsum = PartSum(y.qs + 32 * g, [&](int l) { return Iq1sWeight(x, g, l, books); });
  const int shift = ls * delta * (y.bsums[2 * g] + y.bsums[2 * g + 1]);
  return __fmul_rn(
      __fmul_rn(HalfBits(x.d), y.d),
      __fadd_rn(static_cast<float>(ls * lsum), __fmul_rn(kIq1Delta, static_cast<float>(shift))));
}

template <>
__device__ float PartDotI<DType::kIQ1_M, BlockQ8_K>(const uint8_t* wb, const BlockQ8_K& y, int g,
                                                    const DeviceCodebooks& books) {
  const auto& x = *reinterpret_cast<const BlockIQ1_M*>(wb);
  const int2 grid = HalfSums(y.qs + 32 * g, [&](int l) { return Iq1mWeight(x, g, l, books); });
  const int2 shift = HalfSums(y.qs + 32 * g, [&](int l) { return Iq1mShiftSign(x, g, l); });
  const int ls1 = Iq1mScale(x, g, 0), ls2 = Iq1mScale(x, g, 1);
  const int sumi1 = grid.x * ls1 + grid.y * ls2, sumi2 = shift.x * ls1 + shift.y * ls2;
  return __fmul_rn(
      __fmul_rn(Iq1mSuperScale(x), y.d),
      __fadd_rn(static_cast<float>(sumi1), __fmul_rn(kIq1Delta, static_cast<float>(sumi2))));
}

namespace {

template <DType kType, typename WBlock, typename ActBlock>
cudaError_t LaunchSmall(const MatVecCall& call) {
  return LaunchMatVecBlocks<kType, WBlock, ActBlock, 1>(call, 32);
}

template <DType kType, typename WBlock>
cudaError_t LaunchCodebook(const MatVecCall& call) {
  return LaunchMatVecBlocks<kType, WBlock, BlockQ8_K, quant::kQK_K / 32>(call, quant::kQK_K);
}

}  // namespace

cudaError_t MatVecIQuant(DType w_type, const MatVecCall& call) {
  switch (w_type) {
    case DType::kQ4_0: return LaunchSmall<DType::kQ4_0, BlockQ4_0, BlockQ8_0>(call);
    case DType::kQ4_1: return LaunchSmall<DType::kQ4_1, BlockQ4_1, BlockQ8_1>(call);
    case DType::kQ5_0: return LaunchSmall<DType::kQ5_0, BlockQ5_0, BlockQ8_0>(call);
    case DType::kQ5_1: return LaunchSmall<DType::kQ5_1, BlockQ5_1, BlockQ8_1>(call);
    case DType::kIQ4_NL: return LaunchSmall<DType::kIQ4_NL, BlockIQ4_NL, BlockQ8_0>(call);
    case DType::kMXFP4: return LaunchSmall<DType::kMXFP4, BlockMXFP4, BlockQ8_0>(call);
    case DType::kIQ4_XS: return LaunchCodebook<DType::kIQ4_XS, BlockIQ4_XS>(call);
    case DType::kIQ2_XXS: return LaunchCodebook<DType::kIQ2_XXS, BlockIQ2_XXS>(call);
    case DType::kIQ2_XS: return LaunchCodebook<DType::kIQ2_XS, BlockIQ2_XS>(call);
    case DType::kIQ2_S: return LaunchCodebook<DType::kIQ2_S, BlockIQ2_S>(call);
    case DType::kIQ3_XXS: return LaunchCodebook<DType::kIQ3_XXS, BlockIQ3_XXS>(call);
    case DType::kIQ3_S: return LaunchCodebook<DType::kIQ3_S, BlockIQ3_S>(call);
    case DType::kIQ1_S: return LaunchCodebook<DType::kIQ1_S, BlockIQ1_S>(call);
    case DType::kIQ1_M: return LaunchCodebook<DType::kIQ1_M, BlockIQ1_M>(call);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace colibri::backend::cuda
