#include "colibri/plan/probe.h"

#include "colibri/backend/cuda_backend.h"
#include "colibri/core/status.h"
#include "colibri/core/thread_pool.h"
#include "colibri/sysinfo/storage.h"

namespace colibri::plan {
namespace {

DiskFacts DescribeDisk(const std::string& path, const sysinfo::Roots& roots) {
  DiskFacts d;
  d.path = path;
  auto storage = sysinfo::DescribePathStorage(path, roots);
  if (storage.ok()) {
    d.kind = storage->disk.kind;
    d.device = storage->disk.device;
  }
  return d;
}

}  // namespace

std::vector<sysinfo::ReadExtent> ExpertExtents(const model::Container& container) {
  std::vector<sysinfo::ReadExtent> out;
  for (const auto& b : container.manifest().experts) {
    b.ForEachRange([&](const model::FileRange& r) {
      out.push_back({container.FilePath(r.file), r.offset, r.length});
    });
  }
  return out;
}

CudaFacts ProbeCuda(const MachineFacts& machine) {
  CudaFacts c;
  c.built = backend::CudaBuilt();
  const backend::CudaVersions v = backend::GetCudaVersions();
  c.driver_version = v.driver;
  c.runtime_version = v.runtime;
  c.device_count = backend::CudaDeviceCount();
  c.build_architectures = backend::CudaBuildArchitectures();
  c.gpus = machine.gpus;
  return c;
}

absl::StatusOr<MachineFacts> ProbeMachine(const ProbeOptions& o,
                                          const model::Container* container) {
  MachineFacts m;
  ASSIGN_OR_RETURN(sysinfo::MemoryFacts mem, sysinfo::ReadMemory(o.roots));
  m.ram_total_bytes = mem.total_bytes;
  m.ram_available_bytes = mem.available_bytes;
  m.swap_total_bytes = mem.swap_total_bytes;
  m.swap_used_bytes = mem.swap_used_bytes();
  m.cgroup_limit_bytes = mem.cgroup_limit_bytes;
  m.cgroup_limit_file = mem.cgroup_limit_file;
  ASSIGN_OR_RETURN(sysinfo::CpuFacts cpu, sysinfo::ReadCpu(o.roots));
  m.cpu_model = cpu.model;
  m.physical_cores = cpu.physical_cores;
  m.logical_cpus = cpu.logical_cpus;
  // The affinity mask and cgroup are this process's: only read them for the real /proc.
  if (o.roots.proc == sysinfo::Roots{}.proc) m.usable_cores = UsableCoreCount();
  m.cpu_features = cpu.features;
  for (int i = 0; i < backend::CudaDeviceCount(); ++i) {
    auto info = backend::GetCudaDeviceInfo(i);
    if (!info.ok()) continue;
    m.gpus.push_back({info->name, info->compute_capability, info->total_bytes, info->free_bytes,
                      info->memory_bandwidth_gbps * 1e9});
  }
  if (!o.model_dir.empty()) m.disks.push_back(DescribeDisk(o.model_dir.string(), o.roots));
  for (const auto& d : o.extra_disks) m.disks.push_back(DescribeDisk(d, o.roots));
  if (o.measure) {
    m.memory_bandwidth_bps = sysinfo::MeasureMemoryBandwidth();
    if (container != nullptr && !m.disks.empty()) {
      auto bw = sysinfo::MeasureRandomRead(ExpertExtents(*container),
                                           {.threads = o.read_threads, .seconds = o.read_seconds});
      if (bw.ok()) {
        m.disks[0].read_bytes_per_second = bw->bytes_per_second;
        m.disks[0].read_direct = bw->direct;
      }
    }
  }
  return m;
}

}  // namespace colibri::plan
