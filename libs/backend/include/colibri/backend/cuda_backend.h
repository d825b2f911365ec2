// The CUDA backend: every op of backend.h on one NVIDIA GPU.
//
// Memory. Allocate() is device memory from the device's stream-ordered pool (freed in op order,
// so a buffer dropped while ops that use it are queued stays valid until they ran). Weights are
// copied in by ImportWeight (zero_copy() is false): dense weights once at load, expert blocks
// per use unless a VRAM tier holds them (expert_source/device_tier_memory.h). Host-side index
// arrays the ops take (positions, ids, rows, scales) are staged through a pinned ring.
//
// Streams. Ops run in order on one compute stream. ImportWeight copies on an import stream
// through double-buffered pinned staging, and the compute stream waits for the copy with an
// event, so the next expert's upload overlaps the current expert's kernels. TransferIn (VRAM
// tier reader threads) uses stagers with streams of their own.
//
// Numerics. MatMul with fewer than `gemm_min_rows` rows quantizes the activations to the weight
// type's vec-dot format exactly as the CPU does (Q8_0, Q8_K, F16, BF16, F32) and sums integer
// products per block the way the CPU reference does (results differ only by float summation
// order). With more rows (prefill) it dequantizes the weights to F16 (BF16 stays BF16, F32 stays
// F32) in row chunks and runs a cuBLAS GEMM with F32 accumulation, activations in the same
// 16-bit type; that is more precise than the quantized path, not bit-equal to the CPU's.
// Attention uses an online softmax (no quadratic memory) in F32.
//
// Errors. CUDA errors never abort: ops record the first error, skip later work, and
// Synchronize() returns it; Allocate() returns ResourceExhausted when the device is full.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"

namespace colibri::backend {

struct CudaBackendOptions {
  int device = 0;
  // MatMul rows from which the dequantize + cuBLAS GEMM path is used instead of the quantized
  // matrix-vector kernels.
  int64_t gemm_min_rows = 16;
  // Device scratch for dequantized weight rows in the GEMM path (the matrix goes in chunks).
  uint64_t gemm_scratch_bytes = 64ull << 20;
};

// True when this build has the CUDA backend (-DCOLIBRI_CUDA=ON).
bool CudaBuilt();

// Usable CUDA devices: 0 without the CUDA backend, a driver or a device (never an error).
int CudaDeviceCount();

struct CudaDeviceInfo {
  std::string name;
  int compute_capability = 0;  // major * 10 + minor
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  double memory_bandwidth_gbps = 0;  // theoretical peak from the memory clock and bus width
  int multiprocessors = 0;
};
absl::StatusOr<CudaDeviceInfo> GetCudaDeviceInfo(int device);

struct CudaVersions {
  int driver = 0;   // cudaDriverGetVersion (12040 = 12.4); 0 when no driver answers
  int runtime = 0;  // cudaRuntimeGetVersion of the runtime this build links
};
// Zeros without the CUDA backend (never an error).
CudaVersions GetCudaVersions();
// The build's CMAKE_CUDA_ARCHITECTURES, comma-separated ("80-real,86-real,89-real,90"); ""
// without the CUDA backend.
std::string CudaBuildArchitectures();

// FailedPrecondition when the build has no CUDA backend, Unavailable when there is no device.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace colibri::backend
