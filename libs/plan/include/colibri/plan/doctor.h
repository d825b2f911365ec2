// The doctor: a read-only preflight of a model directory and the machine it will run on. Each
// check yields findings that name the problem and its fix:
//   model     directory complete (manifest, dense.bin and every expert block present with the
//             sizes the manifest needs; an interrupted conversion - <dir>.partial, or data
//             files without manifest.json - named as such); with `deep`, every checksum
//   disk      type (SATA SSD / HDD / network: the expected slow-down against NVMe), NVMe
//             temperature and throttling (hwmon), filesystem and mount options, O_DIRECT,
//             free space
//   memory    RAM headroom against the plan (the model must fit), swap in use
//   cuda      (CUDA builds) a device present, driver version >= runtime version, the device's
//             compute capability covered by the build's architectures
// Never writes anything. Thread-safe (no shared state).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "colibri/plan/facts.h"
#include "colibri/plan/planner.h"
#include "colibri/sysinfo/machine.h"
#include "nlohmann/json.hpp"

namespace colibri::plan {

enum class Severity { kOk, kWarn, kError };

struct Finding {
  Severity severity = Severity::kOk;
  std::string check;    // model | disk | memory | cuda
  std::string message;  // what was found, with the numbers
  std::string fix;      // what to do ("" for kOk)
};

// Completeness (and, deep, checksums) of a model directory. `model` is filled when the
// manifest could be read.
std::vector<Finding> CheckModelDirectory(const std::filesystem::path& dir, bool deep,
                                         ModelFacts* model);

// The storage under `dir`: described from `roots` (fake trees in tests); free space and
// O_DIRECT (of `probe_file`, when it exists) measured on the real path.
std::vector<Finding> CheckStorage(const std::filesystem::path& dir,
                                  const std::filesystem::path& probe_file,
                                  const sysinfo::Roots& roots);

// Memory against the plan for `model` (nullptr: only swap is checked).
std::vector<Finding> CheckMemory(const MachineFacts& machine, const ModelFacts* model,
                                 const PlanRequest& request);

struct CudaFacts {
  bool built = false;
  int device_count = 0;
  int driver_version = 0;           // cudaDriverGetVersion: 12040 = 12.4
  int runtime_version = 0;          // cudaRuntimeGetVersion
  std::string build_architectures;  // CMAKE_CUDA_ARCHITECTURES, e.g. "80-real;86-real;89-real;90"
  std::vector<GpuFacts> gpus;
};
// `wanted`: the run uses the CUDA backend; otherwise a missing driver or device is a warning.
std::vector<Finding> CheckCuda(const CudaFacts& cuda, bool wanted = true);
// Whether a device of `compute_capability` (major*10+minor) runs code of these architectures:
// SASS for sm_XY runs on X.Y' with Y' >= Y; PTX for compute_XY is JIT-compiled on any later one.
bool ArchitecturesCover(const std::string& architectures, int compute_capability);

bool HasErrors(const std::vector<Finding>& findings);
std::string FindingsToText(const std::vector<Finding>& findings);
nlohmann::json FindingsToJson(const std::vector<Finding>& findings);

}  // namespace colibri::plan
