// Internal: the per-type kernel tables behind DequantizeRow / VecDot. Not part of the public
// API.
//
// The *_avx2.cc files are compiled with -mavx2 -mfma -mf16c. They must not instantiate inline
// functions or templates that other translation units also instantiate (the linker could keep
// the AVX2 copy for everyone and crash CPUs without AVX2), so they include only this header,
// blocks.h and codebooks.h (plain structs and constants), scale_min_k4.h and avx2_helpers.h
// (helpers in an unnamed namespace), <immintrin.h> and C headers, and keep their helpers in an unnamed
// namespace. The float expressions they share with the scalar kernels are repeated there, not
// shared through inline functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::quant::internal {

inline constexpr size_t kNumTypeIds = 40;  // GGML type ids 0..39 cover every DType

// The DType values as plain ids, for the SIMD files (dispatch.cc checks they match dtype.h).
inline constexpr uint32_t kIdF32 = 0, kIdF16 = 1, kIdQ8_0 = 8, kIdQ2_K = 10, kIdQ3_K = 11,
                          kIdQ4_K = 12, kIdQ5_K = 13, kIdQ6_K = 14, kIdQ8_K = 15, kIdBF16 = 30;

using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using VecDotFn = float (*)(const void* w, const void* act, int64_t n);
// out[r] = dot(row r, act) for rows at w + r * row_stride_bytes; must give the same bits as
// calling the same table's vec_dot row by row.
using MatVecFn = void (*)(const void* w, size_t row_stride_bytes, int64_t rows, const void* act,
                          int64_t n, float* out);

// outs[t][r] = dot(row r, acts[t]) for `count` activation rows (at most kMaxMultiActs): each
// weight block decoded once for all of them. Must give the same bits as mat_vec per act.
inline constexpr int kMaxMultiActs = 4;
using MatVecMultiFn = void (*)(const void* w, size_t row_stride_bytes, int64_t rows,
                               const void* const* acts, int count, int64_t n, float* const* outs);

// Float activations to their vec_dot type (n a multiple of the block size).
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t n);

struct KernelTable {
  DequantizeFn dequantize[kNumTypeIds];
  VecDotFn vec_dot[kNumTypeIds];
  MatVecFn mat_vec[kNumTypeIds];             // nullptr: vec_dot row by row
  MatVecMultiFn mat_vec_multi[kNumTypeIds];  // nullptr: mat_vec per activation row
  // QuantizeActivations' Q8_0 and Q8_K quantizers (byte-identical in every set).
  QuantizeActFn quantize_q8_0_act;
  QuantizeActFn quantize_q8_k;
};

// Kernel sets, from the portable one up; each includes the ones below it.
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Fill every DType's entry with the scalar reference (dequantize.cc, vec_dot.cc).
void FillScalarDequantize(KernelTable* table);
void FillScalarVecDot(KernelTable* table);

// Overwrite the entries that have AVX2 kernels; return false (changing nothing) when this
// build has none (non-x86 targets).
bool FillAvx2Dequantize(KernelTable* table);
bool FillAvx2VecDot(KernelTable* table);
// IQ4_NL, IQ4_XS and MXFP4 (vec_dot_iquants_avx2.cc), IQ1_S..IQ3_S
// (vec_dot_iquants_lowbit_avx2.cc), Q4_0..Q5_1 (vec_dot_legacy_avx2.cc): bit-identical to the
// scalar reference.
bool FillAvx2IQuantVecDot(KernelTable* table);
bool FillAvx2LowBitIQuantVecDot(KernelTable* table);
bool FillAvx2LegacyVecDot(KernelTable* table);
// The Q8_0 and Q8_K activation quantizers (quantize_act_avx2.cc): byte-identical to
// quantize.cc's.
bool FillAvx2ActivationQuantizers(KernelTable* table);
// Same for the AVX-512 (F + BW + VL) kernels, applied on top of the AVX2 table
// (vec_dot_avx512.cc).
bool FillAvx512VecDot(KernelTable* table);
// With AVX-512 VNNI as well (vec_dot_avx512_vnni.cc): Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS and
// MXFP4, on top of the AVX-512 table where the CPU has VNNI.
bool FillAvx512VnniVecDot(KernelTable* table);

// legacy_quants.cc (Q4_0, Q4_1, Q5_0, Q5_1) and iquants.cc (IQ2_XXS, IQ4_NL, IQ4_XS, MXFP4):
// their scalar dequantizers and dot products, into both tables' entries.
void FillLegacyQuantKernels(KernelTable* table);
// Sets one type's scalar pair (called by those two only; never from a SIMD file).
inline void SetKernels(KernelTable* table, uint32_t id, DequantizeFn dq, VecDotFn vd) {
  table->dequantize[id] = dq;
  table->vec_dot[id] = vd;
}
void FillIQuantKernels(KernelTable* table);
// iquants_lowbit.cc: IQ3_XXS, IQ3_S, IQ2_XS, IQ2_S, IQ1_S, IQ1_M (codebooks.h).
void FillLowBitIQuantKernels(KernelTable* table);

// quantize_nonk.cc: weight quantizers for the legacy formats (GGML's reference algorithms) and
// IQ4_NL, IQ4_XS, MXFP4 (our codebook scale search).
void QuantizeQ4_0(const float* x, void* dst, int64_t n);
void QuantizeQ4_1(const float* x, void* dst, int64_t n);
void QuantizeQ5_0(const float* x, void* dst, int64_t n);
void QuantizeQ5_1(const float* x, void* dst, int64_t n);
void QuantizeIQ4_NL(const float* x, void* dst, int64_t n);
void QuantizeIQ4_XS(const float* x, void* dst, int64_t n);
void QuantizeMXFP4(const float* x, void* dst, int64_t n);

// quantize.cc: Q8_K (quantize_row_q8_K_ref, bsums included) and the Q8_0 activation
// quantizer (GGML's x86 SIMD rounding: scale 127/absmax, round half to even).
void QuantizeQ8_K(const float* x, void* dst, int64_t n);
void QuantizeQ8_0Activations(const float* x, void* dst, int64_t n);
// Q8_1 (for Q4_1 / Q5_1): the Q8_0 quants plus s = f16(d * sum of the quants), d unrounded.
void QuantizeQ8_1Activations(const float* x, void* dst, int64_t n);

// dispatch.cc: the scalar table; the table in use now (the best set the CPU has, capped by
// SetIsaCap); which set that is; the best set this CPU supports; the cap (tests, benchmarks).
// The cap starts at kIsaEnvVar's value when that names a set, else at kAvx512 (none);
// ResetIsaCap returns to that start.
const KernelTable& ScalarKernels();
const KernelTable& ActiveKernels();
Isa ActiveIsaLevel();
Isa BestIsa();
void SetIsaCap(Isa cap);
void ResetIsaCap();
// Whether the AVX-512 table holds the VNNI kernels (the CPU has AVX-512 VNNI).
bool HasAvx512Vnni();

inline constexpr char kIsaEnvVar[] = "COLIBRI_KERNEL_ISA";
inline constexpr const char* kIsaNames[] = {"scalar", "avx2", "avx512"};
// The set named `name` (kIsaNames); false for anything else.
bool ParseIsa(const char* name, Isa* isa);

}  // namespace colibri::quant::internal
