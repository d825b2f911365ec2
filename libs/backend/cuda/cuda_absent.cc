// cuda_backend.h in a build without the CUDA backend (-DCOLIBRI_CUDA=OFF): no devices, and
// asking for the backend says how to get it.
#include "absl/strings/str_cat.h"
#include "colibri/backend/cuda_backend.h"

namespace colibri::backend {

bool CudaBuilt() { return false; }

int CudaDeviceCount() { return 0; }

CudaVersions GetCudaVersions() { return {}; }

std::string CudaBuildArchitectures() { return ""; }

absl::StatusOr<CudaDeviceInfo> GetCudaDeviceInfo(int device) {
  return absl::FailedPreconditionError(
      absl::StrCat("CUDA device ", device,
                   ": this build has no CUDA backend (configure with -DCOLIBRI_CUDA=ON)"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions&) {
  return absl::FailedPreconditionError(
      "this build has no CUDA backend (configure with -DCOLIBRI_CUDA=ON)");
}

}  // namespace colibri::backend
