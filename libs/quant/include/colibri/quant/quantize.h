// Row conversion between float32 and every DType.
//
// QuantizeRow is the reference quantizer: for each type it produces the same blocks as GGML's
// reference quantizers (quantize_row_*_ref, i.e. what llama-quantize writes when it has no
// importance matrix): Q8_0 by absmax with round-half-away, the k-quants by the same weighted
// scale/min searches, F16/BF16 by round-to-nearest-even. It is deterministic and independent
// of the CPU (the searches never use SIMD or fused multiply-add).
//
// DequantizeRow expands blocks to floats; its SIMD and scalar paths give identical bits.
//
// Both take n elements, a multiple of Traits(type).block_elems; the block side is
// RowBytes(type, n) bytes, aligned to its element or block struct (2 bytes for f16, bf16 and
// the q*_k / q8_0 blocks, 4 for f32 and q8_k; GGUF tensor data in a mapped file always is).
// Violating that is a programmer error (checked only by assertions in debug builds).
// Thread-safe: no state.
#pragma once

#include <cstdint>

#include "colibri/quant/dtype.h"

namespace colibri::quant {

void DequantizeRow(DType type, const void* src, float* dst, int64_t n);
void QuantizeRow(DType type, const float* src, void* dst, int64_t n);

// Whether QuantizeRow can make `type` (every type but the codebook i-quants below 4 bits,
// IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S, which are only imported: their
// quantizers need an importance matrix to be worth having). Q4_0..Q5_1 follow GGML's reference
// quantizers; IQ4_NL, IQ4_XS and MXFP4 use our own scale search (valid blocks, not the bytes
// llama-quantize would write).
bool HasQuantizer(DType type);

// The portable scalar dequantizer DequantizeRow is checked against.
void DequantizeRowReference(DType type, const void* src, float* dst, int64_t n);

}  // namespace colibri::quant
