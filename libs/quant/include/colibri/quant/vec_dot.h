// Dot products of one quantized weight row with activations, the way GGML's CPU backend does
// them: the activations are first quantized to the weight type's vec_dot_type
// (Traits(weight_type).vec_dot_type: F32 for F32, F16 for F16, BF16 for BF16, Q8_0 for Q8_0,
// Q8_K for the k-quants), then the row is reduced with integer sums per block and one float
// scale per block. Matching that quantization is what makes logits agree with llama.cpp.
//
// Kernels: the best set the CPU has is used (checked once at run time with
// __builtin_cpu_supports; the library never needs the features to build or run): "avx512"
// (AVX-512 F/BW/VL on top of AVX2; with VNNI also Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS, MXFP4) > "avx2"
// (AVX2/FMA/F16C) > the portable "scalar" set; the environment variable COLIBRI_KERNEL_ISA
// (scalar, avx2, avx512) caps the set a process starts with. The AVX2 k-quant dot products and
// every SIMD legacy / i-quant / MXFP4 one return exactly the scalar reference's bits (exact
// integer block sums, the reference's float tail in its order); the AVX-512 k-quant ones
// accumulate the per-block float terms in vector lanes, and Q8_0 and the float types do so in
// every SIMD set, so those differ from the reference by float summation order only. One set
// always gives the same bits for the same inputs, and MatVec gives the same bits as VecDot row
// by row.
//
// Activations given to VecDot must come from QuantizeActivations (int8 quants in -127..127).
// Rows and activations are aligned as quantize.h requires.
// Thread-safe; ForceScalarKernels affects every thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "colibri/quant/dtype.h"

namespace colibri::quant {

// Converts n float activations to `vec_dot_type` into dst (RowBytes(vec_dot_type, n) bytes):
// F32 copies, F16/BF16 round to nearest even, Q8_K is quantize_row_q8_K_ref (with bsums),
// Q8_0 is what GGML's x86 SIMD path computes (scale 127/absmax, round half to even), which is
// the activation quantization the oracle logits were produced with. n must be a multiple of
// the type's block size.
void QuantizeActivations(DType vec_dot_type, const float* x, void* dst, int64_t n);

// Sum over n elements of w_row[i] * act[i]; act in Traits(weight_type).vec_dot_type.
float VecDot(DType weight_type, const void* w_row, const void* act, int64_t n);

// out[r] = VecDot(weight_type, w + r * row_stride_bytes, act, n) for r in [0, rows).
void MatVec(DType weight_type, const void* w, size_t row_stride_bytes, int64_t rows,
            const void* act, int64_t n, float* out);

// outs[t][r] = VecDot(weight_type, w + r * row_stride_bytes, acts[t], n) for every activation
// row t, with the same bits as MatVec for each: the kernels that have it (AVX-512 Q4_K, Q5_K,
// Q6_K) decode each weight block once for up to four rows (prefill, verify passes, batched
// decode).
void MatVecMulti(DType weight_type, const void* w, size_t row_stride_bytes, int64_t rows,
                 std::span<const void* const> acts, int64_t n, std::span<float* const> outs);

// The portable scalar kernel VecDot is tested against.
float VecDotReference(DType weight_type, const void* w_row, const void* act, int64_t n);

// "avx512", "avx2" or "scalar": the kernel set VecDot / MatVec / DequantizeRow use now.
std::string_view ActiveIsa();

// The kernel sets this CPU can run, from "scalar" up to the best.
std::vector<std::string_view> SupportedIsas();

// Caps the kernel set at `isa` ("scalar", "avx2", "avx512"; a set the CPU lacks falls back to
// the best below it). Returns false, changing nothing, for an unknown name. For tests and
// benchmarks; takes effect for calls that start after it returns.
bool SetKernelIsaCap(std::string_view isa);

// Forces the scalar kernels (true) or restores automatic selection (false: the best set, capped
// by COLIBRI_KERNEL_ISA when that is set).
void ForceScalarKernels(bool force);

}  // namespace colibri::quant
