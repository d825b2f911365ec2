// GGML block layouts, byte for byte (little-endian hosts). A row of a quantized type is an array
// of these structs; GGUF files store exactly these bytes. Field comments give the meaning; the
// exact bit packing is documented beside each struct and implemented in quantize.cc /
// dequantize.cc. f16 fields are raw IEEE binary16 bits (see fp16.h). The natural layout of
// these structs (no packing) is GGML's; the static_asserts pin sizes and offsets.
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::quant {

inline constexpr int kQK8_0 = 32;       // elements per Q8_0 block
inline constexpr int kQK_K = 256;       // elements per k-quant super-block
inline constexpr int kKScaleSize = 12;  // bytes of packed 6-bit scales/mins (Q3_K..Q5_K)

// y[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

// Activation format for the k-quant dot products: y[i] = d * qs[i]; bsums[j] is the sum of
// qs[16j .. 16j+15].
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block must be 292 bytes");

// 16 groups of 16: y = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q in 0..3.
// Element 128h + 32s + l (l < 32) is bits 2s..2s+1 of qs[32h + l]; group = element / 16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble: scale, high nibble: min
  uint8_t qs[kQK_K / 4];
  uint16_t d;     // f16 super-scale for the scales
  uint16_t dmin;  // f16 super-scale for the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block must be 84 bytes");

// 16 groups of 16: y = d * (s[g] - 32) * (q - 4), s 6-bit, q = low 2 bits | high bit << 2.
// Low bits packed as in Q2_K; the high bit of element e is bit e/32 of hmask[e % 32].
// s[g]: low 4 bits in scales[g % 8] (low nibble for g < 8, high nibble otherwise), high 2 bits
// at bits 2*(g/4) of scales[8 + g % 4].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleSize];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block must be 110 bytes");

// 8 groups of 32: y = d * sc[g] * q - dmin * m[g], q in 0..15, sc/m 6-bit packed in `scales`
// (g < 4: sc = scales[g] & 63, m = scales[g+4] & 63; g >= 4: low nibbles from scales[g+4],
// high 2 bits from the top bits of scales[g-4] (sc) and scales[g] (m)).
// Element 64h + l (l < 32) is the low nibble of qs[32h + l]; 64h + 32 + l the high nibble.
struct BlockQ4_K {
  uint16_t d;     // f16
  uint16_t dmin;  // f16
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block must be 144 bytes");

// As Q4_K with a fifth bit: element 64h + l takes bit 2h of qh[l], 64h + 32 + l bit 2h+1;
// q in 0..31.
struct BlockQ5_K {
  uint16_t d;     // f16
  uint16_t dmin;  // f16
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block must be 176 bytes");

// 16 groups of 16: y = d * scales[g] * (q - 32), q in 0..63. Within each half h (128
// elements), for l < 32: element l is ql[64h+l] low nibble, l+32 is ql[64h+32+l] low nibble,
// l+64 is ql[64h+l] high nibble, l+96 is ql[64h+32+l] high nibble; their high 2 bits are bits
// 0-1, 2-3, 4-5, 6-7 of qh[32h + l].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block must be 210 bytes");

// ---- Legacy 32-element blocks (still found in many GGUF files) -----------------------------
// Element j (< 16) is the low nibble of qs[j], element j + 16 its high nibble.

// y = d * (q - 8), q in 0..15.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");

// y = d * q + m, q in 0..15.
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block must be 20 bytes");

// y = d * (q - 16), q = nibble | bit j of qh (little-endian uint32) << 4.
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block must be 22 bytes");

// y = d * q + m, q as in Q5_0 without the offset.
struct BlockQ5_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block must be 24 bytes");

// Activation format for Q4_1 / Q5_1: y = d * qs; s = d * sum(qs) (f16).
struct BlockQ8_1 {
  uint16_t d;  // f16
  uint16_t s;  // f16
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block must be 36 bytes");

// ---- Non-linear and codebook quants (i-quants, MXFP4) --------------------------------------

// The 16 levels of IQ4_NL / IQ4_XS (int8 codebook, GGML's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// y = d * kIq4nlValues[nibble]; nibbles laid out as in Q4_0.
struct BlockIQ4_NL {
  uint16_t d;  // f16
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block must be 18 bytes");

// 8 groups of 32: y = d * (ls[g] - 32) * kIq4nlValues[nibble], ls 6-bit: low 4 bits in
// scales_l[g / 2] (low nibble for even g), high 2 bits at bits 2g of scales_h. Group g's
// nibbles are qs[16g .. 16g + 15], laid out as in Q4_0.
struct BlockIQ4_XS {
  uint16_t d;  // f16
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS block must be 136 bytes");

// 8 groups of 32, each 4 uint16 of qs read as two uint32 a (low) and b (high): the 4 bytes of a
// index 4 grid points of 8 values (kIq2xxsGrid, bytes of each uint64); 7-bit fields of b
// (bits 7l) pick the sign pattern of point l (kIq2xsSigns: even parity, bit j negates value
// j); b >> 28 is the group scale s: y = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_XXS {
  uint16_t d;  // f16
  uint16_t qs[kQK_K / 8];
};
static_assert(sizeof(BlockIQ2_XXS) == 66, "IQ2_XXS block must be 66 bytes");

// The remaining i-quants index shared codebooks (GGML's iq2xs_grid, iq2s_grid, iq3xxs_grid,
// iq3s_grid, iq1s_grid; the sign patterns are ksigns_iq2xs, as for IQ2_XXS). Every block is 256
// elements in 8 groups of 32, each group 4 (IQ3: 8) grid points of 8 (IQ3: 4) values.

// Each uint16 of qs is one grid point: bits 0-8 index kIq2xsGrid (512 points of 8 magnitudes
// from {8, 25, 43}), bits 9-15 pick the sign pattern. scales[g]: low nibble s for points 0-1 of
// group g, high nibble for points 2-3: y = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_XS {
  uint16_t d;  // f16
  uint16_t qs[kQK_K / 8];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_XS) == 74, "IQ2_XS block must be 74 bytes");

// Point l of group g (l < 4) indexes kIq2sGrid (1024 points) with qs[4g + l] | bits 2l..2l+1 of
// qh[g] << 8; its 8 sign bits are qs[32 + 4g + l] (bit j negates value j, no parity rule).
// Scales as IQ2_XS: y = d * (0.5 + s) * 0.25 * grid * sign.
struct BlockIQ2_S {
  uint16_t d;             // f16
  uint8_t qs[kQK_K / 4];  // 32 bytes of grid indices, then 32 bytes of signs
  uint8_t qh[kQK_K / 32];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ2_S) == 82, "IQ2_S block must be 82 bytes");

// qs[0..63]: one byte per 4 values indexing kIq3xxsGrid (256 points of 4 magnitudes from 4..62);
// qs[64 + 4g .. 64 + 4g + 3] is group g's uint32: 7-bit sign fields at bits 7l for its 8-value
// pieces l (kIq2xsSigns, even parity) and the scale s = bits 28-31:
// y = d * (0.5 + s) * 0.5 * grid * sign.
struct BlockIQ3_XXS {
  uint16_t d;  // f16
  uint8_t qs[3 * kQK_K / 8];
};
static_assert(sizeof(BlockIQ3_XXS) == 98, "IQ3_XXS block must be 98 bytes");

// 4 values per grid point: point k (0..63) indexes kIq3sGrid (512 points of 4 odd magnitudes
// 1..15) with qs[k] | bit (k % 8) of qh[k / 8] << 8. signs: one bit per value, element order.
// scales[p]: low nibble s for group 2p, high nibble for group 2p + 1: y = d * (1 + 2s) * grid *
// sign.
struct BlockIQ3_S {
  uint16_t d;  // f16
  uint8_t qs[kQK_K / 4];
  uint8_t qh[kQK_K / 32];
  uint8_t signs[kQK_K / 8];
  uint8_t scales[kQK_K / 64];
};
static_assert(sizeof(BlockIQ3_S) == 110, "IQ3_S block must be 110 bytes");

// Ternary codebook kIq1sGrid (2048 points of 8 values in {-1, 0, 1}). Point l of group g indexes
// it with qs[4g + l] | bits 3l..3l+2 of qh[g] << 8; qh[g] bits 12-14 are the scale s and bit 15
// the sign of the shift: y = d * (2s + 1) * (grid + (bit 15 ? -0.125 : 0.125)).
struct BlockIQ1_S {
  uint16_t d;  // f16
  uint8_t qs[kQK_K / 8];
  uint16_t qh[kQK_K / 32];
};
static_assert(sizeof(BlockIQ1_S) == 50, "IQ1_S block must be 50 bytes");

// As IQ1_S with a scale per 16 values and a shift sign per 8. Point l of group g: index qs[4g + l]
// | bits 4(l%2)..4(l%2)+2 of qh[2g + l/2] << 8, shift sign bit 4(l%2)+3 of the same byte. The
// four little-endian uint16 of `scales` hold 3-bit scales s (uint16 g/2, bits 6(g%2) for the
// first 16 values of group g, 6(g%2)+3 for the last 16) and, in their top nibbles (uint16 0
// lowest), the f16 super-scale d: y = d * (2s + 1) * (grid +/- 0.125).
struct BlockIQ1_M {
  uint8_t qs[kQK_K / 8];
  uint8_t qh[kQK_K / 16];
  uint8_t scales[kQK_K / 32];
};
static_assert(sizeof(BlockIQ1_M) == 56, "IQ1_M block must be 56 bytes");

// MXFP4 (OCP microscaling, gpt-oss): 32 e2m1 values sharing a power-of-two scale
// 2^(e - 127); nibbles laid out as in Q4_0. kMxfp4Values holds the e2m1 levels doubled (GGML's
// int8 table), so y = 2^(e - 128) * kMxfp4Values[nibble].
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

struct BlockMXFP4 {
  uint8_t e;  // E8M0 exponent
  uint8_t qs[16];
};
static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 block must be 17 bytes");

static_assert(offsetof(BlockQ4_K, qs) == 16 && offsetof(BlockQ5_K, qh) == 16 &&
                  offsetof(BlockQ6_K, d) == 208 && offsetof(BlockQ3_K, d) == 108 &&
                  offsetof(BlockQ2_K, d) == 80 && offsetof(BlockQ8_K, bsums) == 260,
              "GGML field offsets");

}  // namespace colibri::quant
