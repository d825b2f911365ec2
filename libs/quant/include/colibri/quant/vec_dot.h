// Dot products of one quantized weight row with activations, the way GGML's CPU backend does
// them: the activations are first quantized to the weight type's vec_dot_type
// (Traits(weight_type).vec_dot_type: F32 for F32, F16 for F16, BF16 for BF16, Q8_0 for Q8_0,
// Q8_K for the k-quants), then the row is reduced with integer sums per block and one float
// scale per block. Matching that quantization is what makes logits agree with llama.cpp.
//
// Kernels: an AVX2/FMA/F16C set is used when the CPU has those features (checked once at run
// time with __builtin_cpu_supports; the library never needs them to build or run), else the
// portable scalar set. The k-quant SIMD dot products return exactly the scalar reference's
// bits; Q8_0 and the float types differ from it only by float summation order.
//
// Activations given to VecDot must come from QuantizeActivations (int8 quants in -127..127).
// Rows and activations are aligned as quantize.h requires.
// Thread-safe; ForceScalarKernels affects every thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

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

// The portable scalar kernel VecDot is tested against.
float VecDotReference(DType weight_type, const void* w_row, const void* act, int64_t n);

// "avx2" or "scalar": the kernel set VecDot / DequantizeRow use now.
std::string_view ActiveIsa();

// Forces the scalar kernels (true) or restores automatic selection (false). For tests and
// benchmarks; takes effect for calls that start after it returns.
void ForceScalarKernels(bool force);

}  // namespace colibri::quant
