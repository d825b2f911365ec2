// Tensor element formats: the plain float types and the GGML block-quantized types.
//
// The enum values are the GGML type ids, so a GGUF tensor's type field converts directly once
// IsKnownDType() has accepted it. A quantized row of n elements is n / block_elems blocks of
// block_bytes each, stored back to back (GGML's layout); n must be a multiple of block_elems.
// Everything here is a pure function of its arguments and safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace colibri::quant {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kIQ1_M = 29,
  kBF16 = 30,
  kMXFP4 = 39,
};

struct TypeTraits {
  std::string_view name;  // "f32", "q4_k", ... (lower case, as DTypeName)
  int64_t block_elems;    // elements per block (1 for the float types)
  size_t block_bytes;     // bytes per block
  DType vec_dot_type;     // format VecDot() expects the activations in (vec_dot.h)
  bool quantized;         // true for the block types
};

// Traits of `type`. A value outside the enum (a programmer error) gets an entry named
// "invalid" with block_elems 1 and block_bytes 0.
const TypeTraits& Traits(DType type);

// True when `ggml_type_id` is one of the DType values above.
bool IsKnownDType(uint32_t ggml_type_id);

std::string_view DTypeName(DType type);

// Accepts the DTypeName() spellings in any letter case ("Q4_K", "bf16"); anything else is
// InvalidArgument naming the text.
absl::StatusOr<DType> ParseDType(std::string_view name);

// Bytes of a row of `n_elems` elements. Requires n_elems >= 0 and a multiple of block_elems
// (a programmer error otherwise; the result is then meaningless). Use CheckedRowBytes for
// untrusted sizes.
size_t RowBytes(DType type, int64_t n_elems);

// Like RowBytes, but InvalidArgument for a negative count, a count that is not a whole number
// of blocks, an unknown type, or a byte size that does not fit in size_t.
absl::StatusOr<size_t> CheckedRowBytes(DType type, int64_t n_elems);

}  // namespace colibri::quant
