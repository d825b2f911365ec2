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
  // The tightest memory cgroup limit on this process's path (0: none), and the file it is in.
  uint64_t cgroup_limit_bytes = 0;
  std::string cgroup_limit_file;
};
// <proc>/meminfo, and the cgroup limit (ReadCgroupMemoryLimit). NotFound without MemTotal or
// MemAvailable.
absl::StatusOr<MemoryFacts> ReadMemory(const Roots& roots = {});

struct CgroupLimit {
  uint64_t bytes = 0;  // 0: no limit found
  std::string file;    // where the tightest one is
};
// The tightest memory limit over this process's cgroup and its ancestors, as docker, Kubernetes
// and systemd set it: v1 (<sys>/fs/cgroup/memory/<path>/memory.limit_in_bytes; values of 2^62
// and more mean none) and v2 (<sys>/fs/cgroup[/unified]/<path>/memory.max; "max" means none),
// the path read from <proc>/self/cgroup. A path that is not under the mount (a container's
// namespace) is looked up from the mount's root. Never fails: unreadable files count as none.
CgroupLimit ReadCgroupMemoryLimit(const Roots& roots = {});

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
