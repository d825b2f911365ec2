// What a machine offers a model: memory, swap and CPU, read from procfs/sysfs.
//
// Contract: every reader takes the roots it reads (Roots), so tests point them at fake trees;
// the defaults are the real /proc and /sys. Readers only read; they never write or probe
// hardware. A missing optional file leaves its field at 0 / empty; a missing required file
// (meminfo, cpuinfo) is NotFound naming the path. Thread-safe (no shared state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace colibri::sysinfo {

struct Roots {
  std::filesystem::path proc = "/proc";
  std::filesystem::path sys = "/sys";
};

struct MemoryFacts {
  uint64_t total_bytes = 0;      // MemTotal
  uint64_t available_bytes = 0;  // MemAvailable
  uint64_t swap_total_bytes = 0;
  uint64_t swap_free_bytes = 0;
  uint64_t swap_used_bytes() const {
    return swap_total_bytes - std::min(swap_free_bytes, swap_total_bytes);
  }
};
// <proc>/meminfo. NotFound without MemTotal or MemAvailable.
absl::StatusOr<MemoryFacts> ReadMemory(const Roots& roots = {});

struct CpuFacts {
  std::string model;       // "model name" of the first processor
  int logical_cpus = 0;    // processor entries
  int physical_cores = 0;  // distinct (physical id, core id); logical_cpus when those are absent
  // The instruction-set extensions the quant kernels use, in this order when present:
  // avx2, fma, f16c, avx512f, avx512bw, avx512vnni, neon (asimd), sve.
  std::vector<std::string> features;
  bool Has(const std::string& feature) const;
};
// <proc>/cpuinfo. NotFound when it is missing; InvalidArgument when it lists no processor.
absl::StatusOr<CpuFacts> ReadCpu(const Roots& roots = {});

}  // namespace colibri::sysinfo
