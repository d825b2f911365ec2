// Fills MachineFacts from the real machine: sysinfo for memory, CPU and disks, the CUDA backend
// for GPUs (none in a CPU-only build), and, when asked, short measurements: random reads of the
// model's own expert blocks (as the engine reads them) and host memcpy bandwidth.
//
// Contract: read-only (never writes to the model or the disks); a measurement takes at most
// `read_seconds` plus one block. Errors only for what every plan needs (meminfo, cpuinfo);
// a disk sysfs does not describe is kUnknown. Thread-safe.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/model/container.h"
#include "colibri/plan/doctor.h"
#include "colibri/plan/facts.h"
#include "colibri/sysinfo/bandwidth.h"
#include "colibri/sysinfo/machine.h"

namespace colibri::plan {

struct ProbeOptions {
  std::filesystem::path model_dir;       // disks[0]
  std::vector<std::string> extra_disks;  // --disk directories (described, not measured)
  bool measure = false;                  // measure read and memory bandwidth
  double read_seconds = 0.5;
  int read_threads = 4;
  sysinfo::Roots roots;
};

// `container` may be null (no read measurement, the model directory's disk still described).
absl::StatusOr<MachineFacts> ProbeMachine(const ProbeOptions& options,
                                          const model::Container* container);

// The CUDA side of the machine for the doctor: build, driver/runtime versions, devices.
CudaFacts ProbeCuda(const MachineFacts& machine);

// The random-read extents of a model: every expert block at its offset and padded size.
std::vector<sysinfo::ReadExtent> ExpertExtents(const model::Container& container);

}  // namespace colibri::plan
