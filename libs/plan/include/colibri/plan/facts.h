// The facts a plan is made from: the machine (memory, CPU, GPUs, the model's disk) and the
// model (dense bytes, experts, KV per token). Plain values: the planner is a pure function of
// them, so tests build them by hand; ProbeMachine (probe.h) fills them from the real machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "colibri/model/manifest.h"
#include "colibri/sysinfo/storage.h"

namespace colibri::plan {

struct GpuFacts {
  std::string name;
  int compute_capability = 0;  // major * 10 + minor
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  double memory_bandwidth_bps = 0;  // theoretical peak, bytes/s
};

struct DiskFacts {
  std::string path;  // a directory on the disk (the model directory, or a --disk)
  sysinfo::DiskKind kind = sysinfo::DiskKind::kUnknown;
  std::string device;                // nvme0n1, sda, vda ("" when none)
  double read_bytes_per_second = 0;  // measured random reads of expert blocks (0: not measured)
  bool read_direct = false;          // the measurement used O_DIRECT
};

struct MachineFacts {
  uint64_t ram_total_bytes = 0;
  uint64_t ram_available_bytes = 0;
  uint64_t swap_total_bytes = 0;
  uint64_t swap_used_bytes = 0;
  // The tightest memory cgroup limit on this process's path (0: none), and its file.
  uint64_t cgroup_limit_bytes = 0;
  std::string cgroup_limit_file;
  std::string cpu_model;
  int physical_cores = 1;
  int logical_cpus = 1;
  // Cores this process may run on (affinity mask, cgroup CPU quota: core/thread_pool.h's
  // UsableCoreCount); 0: all physical_cores. The planner's compute estimate uses it.
  int usable_cores = 0;
  int compute_cores() const {
    return usable_cores > 0 && usable_cores < physical_cores ? usable_cores : physical_cores;
  }
  std::vector<std::string> cpu_features;  // sysinfo::CpuFacts::features
  double memory_bandwidth_bps = 0;        // measured host memcpy bandwidth (0: not measured)
  std::vector<GpuFacts> gpus;
  std::vector<DiskFacts> disks;  // disks[0]: where the experts are read from
};

struct ModelFacts {
  std::string name;
  int64_t n_layers = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t context_length = 0;
  uint64_t dense_bytes = 0;
  uint64_t expert_bytes = 0;        // every block, padded (what a cache holding all of them takes)
  uint64_t expert_block_bytes = 0;  // the largest block, padded
  uint64_t kv_bytes_per_token = 0;  // layers that keep every token
  uint64_t kv_ring_bytes = 0;       // sliding-window rings, per sequence whatever its length
  // Activations of one prefill chunk of engine::EngineOptions().prefill_chunk tokens (the
  // residual stream, attention and expert intermediates, one row of logits per sequence).
  uint64_t scratch_bytes = 0;
};
ModelFacts ModelFactsOf(const model::Manifest& manifest);

}  // namespace colibri::plan
