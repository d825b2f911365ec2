// The i-quant codebooks (GGML's iq*_grid tables and ksigns_iq2xs) as plain constant data, for
// the CPU kernels and for backends that copy them to a device.
//
// Grid point i of a table is one uint64 (8 values, IQ1/IQ2) or uint32 (4 values, IQ3); value j
// is byte j (little-endian): unsigned magnitudes, except kIq1sGrid whose bytes are int8 -1, 0, 1.
// The tables are plain structs (no functions), so the SIMD translation units may read them (see
// src/kernels.h). Defined in src/codebooks.cc; immutable, safe from any thread.
#pragma once

#include <cstdint>

namespace colibri::quant {

template <typename T, int kPoints>
struct Codebook {
  T v[kPoints];
};

extern const Codebook<uint64_t, 256> kIq2xxsGrid;  // bytes from {8, 25, 43}
extern const Codebook<uint64_t, 512> kIq2xsGrid;   // bytes from {8, 25, 43}
extern const Codebook<uint64_t, 1024> kIq2sGrid;   // bytes from {8, 25, 43}
extern const Codebook<uint32_t, 256> kIq3xxsGrid;  // bytes from {4, 12, ..., 52, 62}
extern const Codebook<uint32_t, 512> kIq3sGrid;    // bytes from {1, 3, ..., 15}
extern const Codebook<uint64_t, 2048> kIq1sGrid;   // int8 bytes from {-1, 0, 1}

// The 128 sign patterns with an even number of negatives: a 7-bit field i gives i plus, in bit
// 7, the parity of i. Bit j set negates value j.
extern const Codebook<uint8_t, 128> kIq2xsSigns;

}  // namespace colibri::quant
