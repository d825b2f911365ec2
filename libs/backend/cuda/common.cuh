// Device helpers shared by the kernels: 16-bit float conversions, warp reductions, and the GGML
// block formats (colibri/quant/blocks.h) decoded on the device, one element at a time
// (dequantization) or one 32-element part of a block at a time (dot products with quantized
// activations, summing integers exactly as the CPU reference vec_dot.cc does).
//
// Float expressions that the CPU evaluates without fused multiply-add are written with
// __fmul_rn / __fsub_rn so nvcc cannot contract them: per block the results then equal the
// CPU's bits, and whole dot products differ only by summation order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "colibri/quant/blocks.h"
#include "colibri/quant/dtype.h"
#include "kernels.h"

namespace colibri::backend::cuda {

using quant::BlockIQ1_M;
using quant::BlockIQ1_S;
using quant::BlockIQ2_S;
using quant::BlockIQ2_XS;
using quant::BlockIQ2_XXS;
using quant::BlockIQ3_S;
using quant::BlockIQ3_XXS;
using quant::BlockIQ4_NL;
using quant::BlockIQ4_XS;
using quant::BlockMXFP4;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;
using quant::DType;

inline constexpr int kWarp = 32;

__device__ __forceinline__ float HalfBits(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float Bf16Bits(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t ToHalfBits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ uint16_t ToBf16Bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Grid-stride helpers.
__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GlobalStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

inline unsigned GridFor(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

// 6-bit scale and min of group j (0..7) of a Q4_K / Q5_K block.
__device__ __forceinline__ void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Signed 6-bit scale (minus 32) of group g (0..15) of a Q3_K block.
__device__ __forceinline__ int ScaleQ3K(const uint8_t* scales, int g) {
  const int low = g < 8 ? scales[g] & 0xF : scales[g - 8] >> 4;
  const int high = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// ---- Decoding the legacy, codebook and MXFP4 formats (blocks.h, codebooks.h) ---------------
// Each helper gives element l (0..31) of 32-element group g of a block: an integer weight (grid
// value times sign, or the quant) and the float factors, with the CPU reference's float
// expressions (dequantize: iquants*.cc, legacy_quants.cc).

__device__ __forceinline__ uint32_t Load32(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
__device__ __forceinline__ int GridByte(uint64_t point, int j) {
  return static_cast<int>((point >> (8 * j)) & 0xFF);
}
__device__ __forceinline__ int GridInt8(uint64_t point, int j) {
  return static_cast<int>(static_cast<int8_t>((point >> (8 * j)) & 0xFF));
}
__device__ __forceinline__ int SignOf(uint32_t bits, int j) { return (bits >> j) & 1 ? -1 : 1; }

// Nibble of element l of a 16-byte Q4_0-layout array.
__device__ __forceinline__ int Nibble(const uint8_t* qs, int l) {
  return l < 16 ? qs[l] & 0xF : qs[l - 16] >> 4;
}
// The 5-bit quant of element l of a Q5_0 / Q5_1 block.
__device__ __forceinline__ int Q5Quant(const uint8_t* qs, const uint8_t* qh, int l) {
  return Nibble(qs, l) | (((Load32(qh) >> l) & 1) << 4);
}

// 2^(e - 128): the E8M0 scale halved (kMxfp4Values holds the e2m1 levels doubled).
__device__ __forceinline__ float E8M0Half(uint8_t e) {
  return __uint_as_float(e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23);
}

__device__ __forceinline__ int Iq4xsScale(const BlockIQ4_XS& b, int g) {
  return (((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b.scales_h >> (2 * g)) & 3) << 4)) - 32;
}

// IQ2_XXS group g: grid magnitude times sign of element l; the group's scale field.
__device__ __forceinline__ int Iq2xxsWeight(const BlockIQ2_XXS& b, int g, int l,
                                            const DeviceCodebooks& books) {
  const uint32_t a = b.qs[4 * g] | (static_cast<uint32_t>(b.qs[4 * g + 1]) << 16);
  const uint32_t s = b.qs[4 * g + 2] | (static_cast<uint32_t>(b.qs[4 * g + 3]) << 16);
  const uint64_t point = books.iq2xxs[(a >> (8 * (l / 8))) & 0xFF];
  return GridByte(point, l % 8) * SignOf(books.signs[(s >> (7 * (l / 8))) & 127], l % 8);
}
__device__ __forceinline__ int Iq2xxsScale(const BlockIQ2_XXS& b, int g) {
  return b.qs[4 * g + 3] >> 12;
}

__device__ __forceinline__ int Iq2xsWeight(const BlockIQ2_XS& b, int g, int l,
                                           const DeviceCodebooks& books) {
  const uint16_t q = b.qs[4 * g + l / 8];
  return GridByte(books.iq2xs[q & 511], l % 8) * SignOf(books.signs[q >> 9], l % 8);
}

__device__ __forceinline__ int Iq2sWeight(const BlockIQ2_S& b, int g, int l,
                                          const DeviceCodebooks& books) {
  const int k = l / 8;
  const uint32_t index =
      b.qs[4 * g + k] | ((static_cast<uint32_t>(b.qh[g]) << (8 - 2 * k)) & 0x300);
  return GridByte(books.iq2s[index], l % 8) * SignOf(b.qs[quant::kQK_K / 8 + 4 * g + k], l % 8);
}

__device__ __forceinline__ uint32_t Iq3xxsAux(const BlockIQ3_XXS& b, int g) {
  return Load32(b.qs + quant::kQK_K / 4 + 4 * g);
}
__device__ __forceinline__ int Iq3xxsWeight(const BlockIQ3_XXS& b, int g, int l,
                                            const DeviceCodebooks& books) {
  const uint32_t aux = Iq3xxsAux(b, g);
  const uint32_t point = books.iq3xxs[b.qs[8 * g + l / 4]];
  return GridByte(point, l % 4) * SignOf(books.signs[(aux >> (7 * (l / 8))) & 127], l % 8);
}

__device__ __forceinline__ int Iq3sWeight(const BlockIQ3_S& b, int g, int l,
                                          const DeviceCodebooks& books) {
  const int k = 8 * g + l / 4;
  const uint32_t point = books.iq3s[b.qs[k] | (((b.qh[k / 8] >> (k % 8)) & 1) << 8)];
  return GridByte(point, l % 4) * SignOf(b.signs[4 * g + l / 8], l % 8);
}
__device__ __forceinline__ int Iq3sScale(const BlockIQ3_S& b, int g) {
  return 2 * ((b.scales[g / 2] >> (4 * (g % 2))) & 0xF) + 1;
}

__device__ __forceinline__ int Iq1sWeight(const BlockIQ1_S& b, int g, int l,
                                          const DeviceCodebooks& books) {
  const int k = l / 8;
  return GridInt8(books.iq1s[b.qs[4 * g + k] | (((b.qh[g] >> (3 * k)) & 7) << 8)], l % 8);
}

__device__ __forceinline__ uint16_t Iq1mScaleWord(const BlockIQ1_M& b, int k) {
  return static_cast<uint16_t>(b.scales[2 * k] | (b.scales[2 * k + 1] << 8));
}
__device__ __forceinline__ float Iq1mSuperScale(const BlockIQ1_M& b) {
  const uint16_t bits =
      static_cast<uint16_t>((Iq1mScaleWord(b, 0) >> 12) | ((Iq1mScaleWord(b, 1) >> 8) & 0x00F0) |
                            ((Iq1mScaleWord(b, 2) >> 4) & 0x0F00) | (Iq1mScaleWord(b, 3) & 0xF000));
  return HalfBits(bits);
}
// 2s + 1 for half `half` (0, 1) of group g.
__device__ __forceinline__ int Iq1mScale(const BlockIQ1_M& b, int g, int half) {
  return 2 * ((Iq1mScaleWord(b, g / 2) >> (6 * (g % 2) + 3 * half)) & 7) + 1;
}
__device__ __forceinline__ int Iq1mWeight(const BlockIQ1_M& b, int g, int l,
                                          const DeviceCodebooks& books) {
  const int k = l / 8;
  const uint32_t qh = b.qh[2 * g + k / 2];
  return GridInt8(books.iq1s[b.qs[4 * g + k] | (((qh >> (4 * (k % 2))) & 7) << 8)], l % 8);
}
// -1 when the grid shift of element l is negative, else +1.
__device__ __forceinline__ int Iq1mShiftSign(const BlockIQ1_M& b, int g, int l) {
  const int k = l / 8;
  return (b.qh[2 * g + k / 2] >> (4 * (k % 2) + 3)) & 1 ? -1 : 1;
}

// Bytes per block of the block types decoded below (quant::Traits is host code).
__device__ __forceinline__ size_t DeviceBlockBytes(DType type) {
  switch (type) {
    case DType::kQ4_0: return sizeof(BlockQ4_0);
    case DType::kQ4_1: return sizeof(BlockQ4_1);
    case DType::kQ5_0: return sizeof(BlockQ5_0);
    case DType::kQ5_1: return sizeof(BlockQ5_1);
    case DType::kQ8_1: return sizeof(BlockQ8_1);
    case DType::kIQ4_NL: return sizeof(BlockIQ4_NL);
    case DType::kMXFP4: return sizeof(BlockMXFP4);
    case DType::kIQ1_S: return sizeof(BlockIQ1_S);
    case DType::kIQ1_M: return sizeof(BlockIQ1_M);
    case DType::kIQ2_XXS: return sizeof(BlockIQ2_XXS);
    case DType::kIQ2_XS: return sizeof(BlockIQ2_XS);
    case DType::kIQ2_S: return sizeof(BlockIQ2_S);
    case DType::kIQ3_XXS: return sizeof(BlockIQ3_XXS);
    case DType::kIQ3_S: return sizeof(BlockIQ3_S);
    case DType::kIQ4_XS: return sizeof(BlockIQ4_XS);
    default: return 0;
  }
}

// Element e of a 256-element block of the codebook types, as the CPU dequantizes it.
__device__ __forceinline__ float IQuantElement(DType type, const uint8_t* blk, int e,
                                               const DeviceCodebooks& books) {
  const int g = e / 32, l = e % 32;
  constexpr float kDelta = 0.125f;
  switch (type) {
    case DType::kIQ2_XXS: {
      const auto& b = *reinterpret_cast<const BlockIQ2_XXS*>(blk);
      const float db =
          __fmul_rn(__fmul_rn(HalfBits(b.d), 0.5f + static_cast<float>(Iq2xxsScale(b, g))), 0.25f);
      return __fmul_rn(db, static_cast<float>(Iq2xxsWeight(b, g, l, books)));
    }
    case DType::kIQ2_XS: {
      const auto& b = *reinterpret_cast<const BlockIQ2_XS*>(blk);
      const int s = (b.scales[g] >> (4 * (l / 16))) & 0xF;
      const float db = __fmul_rn(__fmul_rn(HalfBits(b.d), 0.5f + static_cast<float>(s)), 0.25f);
      return __fmul_rn(db, static_cast<float>(Iq2xsWeight(b, g, l, books)));
    }
    case DType::kIQ2_S: {
      const auto& b = *reinterpret_cast<const BlockIQ2_S*>(blk);
      const int s = (b.scales[g] >> (4 * (l / 16))) & 0xF;
      const float db = __fmul_rn(__fmul_rn(HalfBits(b.d), 0.5f + static_cast<float>(s)), 0.25f);
      return __fmul_rn(db, static_cast<float>(Iq2sWeight(b, g, l, books)));
    }
    case DType::kIQ3_XXS: {
      const auto& b = *reinterpret_cast<const BlockIQ3_XXS*>(blk);
      const float db = __fmul_rn(
          __fmul_rn(HalfBits(b.d), 0.5f + static_cast<float>(Iq3xxsAux(b, g) >> 28)), 0.5f);
      return __fmul_rn(db, static_cast<float>(Iq3xxsWeight(b, g, l, books)));
    }
    case DType::kIQ3_S: {
      const auto& b = *reinterpret_cast<const BlockIQ3_S*>(blk);
      const float db = __fmul_rn(HalfBits(b.d), static_cast<float>(Iq3sScale(b, g)));
      return __fmul_rn(db, static_cast<float>(Iq3sWeight(b, g, l, books)));
    }
    case DType::kIQ1_S: {
      const auto& b = *reinterpret_cast<const BlockIQ1_S*>(blk);
      const float dl = __fmul_rn(HalfBits(b.d), static_cast<float>(2 * ((b.qh[g] >> 12) & 7) + 1));
      const float delta = b.qh[g] & 0x8000 ? -kDelta : kDelta;
      return __fmul_rn(dl, static_cast<float>(Iq1sWeight(b, g, l, books)) + delta);
    }
    case DType::kIQ1_M: {
      const auto& b = *reinterpret_cast<const BlockIQ1_M*>(blk);
      const float dl = __fmul_rn(Iq1mSuperScale(b), static_cast<float>(Iq1mScale(b, g, l / 16)));
      return __fmul_rn(
          dl, static_cast<float>(Iq1mWeight(b, g, l, books)) + kDelta * Iq1mShiftSign(b, g, l));
    }
    case DType::kIQ4_XS: {
      const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(blk);
      const float dl = __fmul_rn(HalfBits(b.d), static_cast<float>(Iq4xsScale(b, g)));
      return __fmul_rn(dl, static_cast<float>(books.iq4nl[Nibble(b.qs + 16 * g, l)]));
    }
    default: return 0.0f;
  }
}

// Element l of a 32-element block of the legacy formats, IQ4_NL or MXFP4.
__device__ __forceinline__ float SmallBlockElement(DType type, const uint8_t* blk, int l,
                                                   const DeviceCodebooks& books) {
  switch (type) {
    case DType::kQ4_0: {
      const auto& b = *reinterpret_cast<const BlockQ4_0*>(blk);
      return __fmul_rn(static_cast<float>(Nibble(b.qs, l) - 8), HalfBits(b.d));
    }
    case DType::kQ4_1: {
      const auto& b = *reinterpret_cast<const BlockQ4_1*>(blk);
      return __fadd_rn(__fmul_rn(static_cast<float>(Nibble(b.qs, l)), HalfBits(b.d)),
                       HalfBits(b.m));
    }
    case DType::kQ5_0: {
      const auto& b = *reinterpret_cast<const BlockQ5_0*>(blk);
      return __fmul_rn(static_cast<float>(Q5Quant(b.qs, b.qh, l) - 16), HalfBits(b.d));
    }
    case DType::kQ5_1: {
      const auto& b = *reinterpret_cast<const BlockQ5_1*>(blk);
      return __fadd_rn(__fmul_rn(static_cast<float>(Q5Quant(b.qs, b.qh, l)), HalfBits(b.d)),
                       HalfBits(b.m));
    }
    case DType::kQ8_1: {
      const auto& b = *reinterpret_cast<const BlockQ8_1*>(blk);
      return __fmul_rn(HalfBits(b.d), static_cast<float>(b.qs[l]));
    }
    case DType::kIQ4_NL: {
      const auto& b = *reinterpret_cast<const BlockIQ4_NL*>(blk);
      return __fmul_rn(HalfBits(b.d), static_cast<float>(books.iq4nl[Nibble(b.qs, l)]));
    }
    case DType::kMXFP4: {
      const auto& b = *reinterpret_cast<const BlockMXFP4*>(blk);
      return __fmul_rn(static_cast<float>(books.mxfp4[Nibble(b.qs, l)]), E8M0Half(b.e));
    }
    default: return 0.0f;
  }
}

// Element i of a row of `type` (any DType).
__device__ __forceinline__ float DequantElement(DType type, const uint8_t* row, int64_t i,
                                                const DeviceCodebooks& books) {
  switch (type) {
    case DType::kF32: return reinterpret_cast<const float*>(row)[i];
    case DType::kF16: return HalfBits(reinterpret_cast<const uint16_t*>(row)[i]);
    case DType::kBF16: return Bf16Bits(reinterpret_cast<const uint16_t*>(row)[i]);
    case DType::kQ8_0: {
      const auto& b = reinterpret_cast<const BlockQ8_0*>(row)[i / quant::kQK8_0];
      return HalfBits(b.d) * static_cast<float>(b.qs[i % quant::kQK8_0]);
    }
    case DType::kQ8_K: {
      const auto& b = reinterpret_cast<const BlockQ8_K*>(row)[i / quant::kQK_K];
      return b.d * static_cast<float>(b.qs[i % quant::kQK_K]);
    }
    case DType::kQ2_K: {
      const auto& b = reinterpret_cast<const BlockQ2_K*>(row)[i / quant::kQK_K];
      const int e = static_cast<int>(i % quant::kQK_K), g = e / 16;
      const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const float dl = HalfBits(b.d) * static_cast<float>(b.scales[g] & 0xF);
      const float ml = HalfBits(b.dmin) * static_cast<float>(b.scales[g] >> 4);
      return dl * static_cast<float>(q) - ml;
    }
    case DType::kQ3_K: {
      const auto& b = reinterpret_cast<const BlockQ3_K*>(row)[i / quant::kQK_K];
      const int e = static_cast<int>(i % quant::kQK_K);
      const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int v = low - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4);
      return HalfBits(b.d) * static_cast<float>(ScaleQ3K(b.scales, e / 16)) * static_cast<float>(v);
    }
    case DType::kQ4_K: {
      const auto& b = reinterpret_cast<const BlockQ4_K*>(row)[i / quant::kQK_K];
      const int e = static_cast<int>(i % quant::kQK_K), g = e / 32;
      int sc, m;
      ScaleMinK4(g, b.scales, &sc, &m);
      const int q = (b.qs[32 * (g / 2) + e % 32] >> (4 * (g % 2))) & 0xF;
      return HalfBits(b.d) * static_cast<float>(sc) * static_cast<float>(q) -
             HalfBits(b.dmin) * static_cast<float>(m);
    }
    case DType::kQ5_K: {
      const auto& b = reinterpret_cast<const BlockQ5_K*>(row)[i / quant::kQK_K];
      const int e = static_cast<int>(i % quant::kQK_K), g = e / 32;
      int sc, m;
      ScaleMinK4(g, b.scales, &sc, &m);
      const int q =
          ((b.qs[32 * (g / 2) + e % 32] >> (4 * (g % 2))) & 0xF) | (((b.qh[e % 32] >> g) & 1) << 4);
      return HalfBits(b.d) * static_cast<float>(sc) * static_cast<float>(q) -
             HalfBits(b.dmin) * static_cast<float>(m);
    }
    case DType::kQ6_K: {
      const auto& b = reinterpret_cast<const BlockQ6_K*>(row)[i / quant::kQK_K];
      const int e = static_cast<int>(i % quant::kQK_K);
      const int half = e / 128, quarter = (e % 128) / 32, off = e % 32;
      const int low = (b.ql[64 * half + 32 * (quarter % 2) + off] >> (4 * (quarter / 2))) & 0xF;
      const int high = (b.qh[32 * half + off] >> (2 * quarter)) & 3;
      return HalfBits(b.d) * static_cast<float>(b.scales[e / 16]) *
             static_cast<float>((low | (high << 4)) - 32);
    }
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_1:
    case DType::kIQ4_NL:
    case DType::kMXFP4:
      return SmallBlockElement(type, row + static_cast<size_t>(i / 32) * DeviceBlockBytes(type),
                               static_cast<int>(i % 32), books);
    case DType::kIQ1_S:
    case DType::kIQ1_M:
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ4_XS:
      return IQuantElement(type,
                           row + static_cast<size_t>(i / quant::kQK_K) * DeviceBlockBytes(type),
                           static_cast<int>(i % quant::kQK_K), books);
  }
  return 0.0f;
}

// The float tail of the k-quant dot products (vec_dot.cc KBlockSum), uncontracted.
__device__ __forceinline__ float KBlockSum(float d, float dmin, int isum, int imin) {
  return __fsub_rn(__fmul_rn(d, static_cast<float>(isum)),
                   __fmul_rn(dmin, static_cast<float>(imin)));
}

// Dot product of part p (elements 32p..32p+31) of a weight block with the matching Q8_K
// activation block. Parts of one block summed = the CPU's per-block value up to float order.
template <DType kType>
__device__ __forceinline__ float PartDotK(const uint8_t* wb, const BlockQ8_K& y, int p);

// Integer sums of the two 16-element halves of a part (each half has its own scale): x over
// elements 0..15, y over 16..31; value(l) is weight l of the part, a the activations.
template <typename Value>
__device__ __forceinline__ int2 HalfSums(const int8_t* a, Value value) {
  int2 s = make_int2(0, 0);
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    if (l < 16) {
      s.x += value(l) * a[l];
    } else {
      s.y += value(l) * a[l];
    }
  }
  return s;
}

template <>
__device__ __forceinline__ float PartDotK<DType::kQ2_K>(const uint8_t* wb, const BlockQ8_K& y,
                                                        int p) {
  const auto& x = *reinterpret_cast<const BlockQ2_K*>(wb);
  const uint8_t* q = x.qs + 32 * (p / 4);
  const int shift = 2 * (p % 4);
  const int2 g = HalfSums(y.qs + 32 * p, [&](int l) { return (q[l] >> shift) & 3; });
  const uint8_t s0 = x.scales[2 * p], s1 = x.scales[2 * p + 1];
  const int isum = (s0 & 0xF) * g.x + (s1 & 0xF) * g.y;
  const int imin = (s0 >> 4) * y.bsums[2 * p] + (s1 >> 4) * y.bsums[2 * p + 1];
  return KBlockSum(__fmul_rn(HalfBits(x.d), y.d), __fmul_rn(HalfBits(x.dmin), y.d), isum, imin);
}

template <>
__device__ __forceinline__ float PartDotK<DType::kQ3_K>(const uint8_t* wb, const BlockQ8_K& y,
                                                        int p) {
  const auto& x = *reinterpret_cast<const BlockQ3_K*>(wb);
  const uint8_t* q = x.qs + 32 * (p / 4);
  const int shift = 2 * (p % 4);
  const int2 g = HalfSums(y.qs + 32 * p, [&](int l) {
    return ((q[l] >> shift) & 3) - (((x.hmask[l] >> p) & 1) ? 0 : 4);
  });
  const int isum = ScaleQ3K(x.scales, 2 * p) * g.x + ScaleQ3K(x.scales, 2 * p + 1) * g.y;
  return KBlockSum(__fmul_rn(HalfBits(x.d), y.d), 0.0f, isum, 0);
}

// Q4_K and Q5_K: group g of 4-bit values (Q5_K: a fifth bit from qh), a 6-bit scale and min.
template <typename Block>
__device__ __forceinline__ float PartDotK4or5(const uint8_t* wb, const BlockQ8_K& y, int g) {
  const auto& x = *reinterpret_cast<const Block*>(wb);
  int sc, m;
  ScaleMinK4(g, x.scales, &sc, &m);
  const uint8_t* q = x.qs + 32 * (g / 2);
  const int shift = 4 * (g % 2);
  const int8_t* a = y.qs + 32 * g;
  int gsum = 0;
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    int v = (q[l] >> shift) & 0xF;
    if constexpr (std::is_same_v<Block, BlockQ5_K>) v |= ((x.qh[l] >> g) & 1) << 4;
    gsum += v * a[l];
  }
  const int imin = m * (y.bsums[2 * g] + y.bsums[2 * g + 1]);
  return KBlockSum(__fmul_rn(HalfBits(x.d), y.d), __fmul_rn(HalfBits(x.dmin), y.d), sc * gsum,
                   imin);
}

template <>
__device__ __forceinline__ float PartDotK<DType::kQ4_K>(const uint8_t* wb, const BlockQ8_K& y,
                                                        int g) {
  return PartDotK4or5<BlockQ4_K>(wb, y, g);
}

template <>
__device__ __forceinline__ float PartDotK<DType::kQ5_K>(const uint8_t* wb, const BlockQ8_K& y,
                                                        int g) {
  return PartDotK4or5<BlockQ5_K>(wb, y, g);
}

template <>
__device__ __forceinline__ float PartDotK<DType::kQ6_K>(const uint8_t* wb, const BlockQ8_K& y,
                                                        int p) {
  const auto& x = *reinterpret_cast<const BlockQ6_K*>(wb);
  const int half = p / 4, quarter = p % 4;
  const uint8_t* ql = x.ql + 64 * half + 32 * (quarter % 2);
  const uint8_t* qh = x.qh + 32 * half;
  const int low_shift = 4 * (quarter / 2), high_shift = 2 * quarter;
  const int2 g = HalfSums(y.qs + 32 * p, [&](int l) {
    return (((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4)) - 32;
  });
  const int isum = x.scales[2 * p] * g.x + x.scales[2 * p + 1] * g.y;
  return KBlockSum(__fmul_rn(HalfBits(x.d), y.d), 0.0f, isum, 0);
}

template <>
__device__ __forceinline__ float PartDotK<DType::kQ8_K>(const uint8_t* wb, const BlockQ8_K& y,
                                                        int p) {
  const auto& x = *reinterpret_cast<const BlockQ8_K*>(wb);
  const int8_t* w = x.qs + 32 * p;
  const int8_t* a = y.qs + 32 * p;
  int isum = 0;
#pragma unroll
  for (int l = 0; l < 32; ++l) isum += w[l] * a[l];
  return __fmul_rn(__fmul_rn(x.d, y.d), static_cast<float>(isum));
}

// Q8_0 weights with Q8_0 activations: one whole 32-element block.
__device__ __forceinline__ float BlockDotQ8_0(const BlockQ8_0& x, const BlockQ8_0& y) {
  int isum = 0;
#pragma unroll
  for (int j = 0; j < quant::kQK8_0; ++j) isum += x.qs[j] * y.qs[j];
  return __fmul_rn(static_cast<float>(isum), __fmul_rn(HalfBits(x.d), HalfBits(y.d)));
}

}  // namespace colibri::backend::cuda
