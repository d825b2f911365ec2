#include "colibri/plan/planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "colibri/core/units.h"
#include "colibri/plan/kv_limit.h"

namespace colibri::plan {
namespace {

using sysinfo::DiskKind;

// Device memory besides the VRAM tier and KV caches (activations, experts in flight, cuBLAS):
// the same reserve compute_node.cc checks the budgets against.
constexpr uint64_t kDeviceWorkingBytes = 512ull << 20;
// Host-to-device copies of experts the VRAM tier misses (PCIe 4.0 x16, effective).
constexpr double kPcieBytesPerSecond = 20e9;

// Quantized weight bytes one core streams through the vec-dot kernels per second (order of
// magnitude of `bench/` matvec runs of q4_k on one core: scalar ~0.5 GB/s, AVX2 ~2.5 GB/s).
double CoreWeightBytesPerSecond(const MachineFacts& m) {
  auto has = [&](const char* f) {
    return std::find(m.cpu_features.begin(), m.cpu_features.end(), f) != m.cpu_features.end();
  };
  if (has("avx512bw")) return 4e9;
  if (has("avx2")) return 2.5e9;
  if (has("neon")) return 1.5e9;
  return 0.5e9;
}

uint64_t RoundDown(uint64_t v, uint64_t unit) { return unit == 0 ? v : v / unit * unit; }

std::string Gb(double bytes_per_second) {
  return absl::StrFormat("%.2f GB/s", bytes_per_second / 1e9);
}

}  // namespace

uint64_t ArenaSlackBytes(uint64_t largest_block) { return 2 * largest_block + (4ull << 20); }

double TypicalReadBandwidth(DiskKind kind) {
  switch (kind) {
    case DiskKind::kNvme: return 3e9;
    case DiskKind::kSsd: return 0.5e9;
    case DiskKind::kHdd: return 0.1e9;  // block-sized random reads: seeks dominate
    case DiskKind::kMemory: return 8e9;
    case DiskKind::kNetwork: return 0.3e9;
    case DiskKind::kUnknown: break;
  }
  return 1e9;
}

absl::StatusOr<Plan> MakePlan(const MachineFacts& machine, const ModelFacts& model,
                              const PlanRequest& req) {
  if (req.backend != "cpu" && req.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend '", req.backend, "': expected cpu or cuda"));
  }
  const bool cuda = req.backend == "cuda";
  const GpuFacts* gpu = nullptr;
  if (cuda) {
    if (req.device < 0 || static_cast<size_t>(req.device) >= machine.gpus.size()) {
      return absl::FailedPreconditionError(absl::StrCat("--backend cuda --device ", req.device,
                                                        ": ", machine.gpus.size(),
                                                        " CUDA device(s) visible"));
    }
    gpu = &machine.gpus[static_cast<size_t>(req.device)];
  }
  Plan p;
  const uint64_t block = model.expert_block_bytes;
  const uint64_t min_cache = 2 * block;

  // The budget: --memory-limit, or the cgroup's limit, or what the machine has available.
  const uint64_t available = machine.ram_available_bytes;
  std::string budget_text;
  if (req.memory_limit) {
    p.memory_budget = {*req.memory_limit, "set by --memory-limit", true};
    p.budget_is_limit = true;
    budget_text = absl::StrCat("--memory-limit ", FormatSize(*req.memory_limit));
  } else if (machine.cgroup_limit_bytes > 0) {
    const uint64_t base = std::min(machine.cgroup_limit_bytes, available);
    const uint64_t headroom = std::max<uint64_t>(128ull << 20, base / 20);
    const uint64_t v = base > headroom ? base - headroom : 0;
    p.memory_budget = {
        v, absl::StrCat("memory cgroup limit ", FormatSize(machine.cgroup_limit_bytes), " (",
                        machine.cgroup_limit_file, ")",
                        base < machine.cgroup_limit_bytes
                            ? absl::StrCat(", capped by MemAvailable ", FormatSize(available))
                            : "",
                        " less headroom ", FormatSize(headroom))};
    p.budget_is_limit = true;
    budget_text = absl::StrCat("budget ", FormatSize(v), " (cgroup)");
  } else {
    const uint64_t headroom = std::max<uint64_t>(1ull << 30, machine.ram_total_bytes / 20);
    const uint64_t v = available > headroom ? available - headroom : 0;
    p.memory_budget = {v, absl::StrCat("MemAvailable ", FormatSize(available), " less headroom ",
                                       FormatSize(headroom), " (no memory cgroup limit)")};
    budget_text = absl::StrCat("budget ", FormatSize(v), " (MemAvailable)");
  }
  const uint64_t budget = p.memory_budget.value;
  MemorySplit& mem = p.memory;
  mem.dense = model.dense_bytes;
  mem.runtime = kRuntimeBytes;
  mem.scratch = model.scratch_bytes;
  mem.io = ArenaSlackBytes(block);
  mem.drafter = req.drafter_bytes;
  mem.kv_offload = req.kv_offload_bytes;
  const uint64_t fixed_parts = mem.total();
  const uint64_t min_kv = std::max<uint64_t>(model.kv_bytes_per_token, 1) *
                              static_cast<uint64_t>(std::max<int64_t>(model.context_length, 1)) +
                          model.kv_ring_bytes;
  auto parts_text = [&](uint64_t cache, uint64_t kv) {
    return absl::StrCat(
        "dense ", FormatSize(mem.dense), " + runtime ", FormatSize(mem.runtime), " + scratch ",
        FormatSize(mem.scratch), " + I/O ", FormatSize(mem.io),
        mem.drafter ? absl::StrCat(" + drafter ", FormatSize(mem.drafter)) : "",
        mem.kv_offload ? absl::StrCat(" + KV offload ", FormatSize(mem.kv_offload)) : "",
        " + expert cache ", FormatSize(cache), " + KV ", FormatSize(kv));
  };
  // One sequence of the full context and two expert blocks: the least that decodes at all.
  const uint64_t least = fixed_parts + min_cache + (req.kv_cache_bytes ? 0 : min_kv);
  if (!gpu && budget < least) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model '", model.name, "' does not fit the memory budget: it needs at least ",
        FormatSize(least), " (", parts_text(min_cache, req.kv_cache_bytes ? 0 : min_kv),
        "), but the ", p.memory_budget.reason, " gives ", FormatSize(budget),
        "; raise --memory-limit or the container's memory limit, or use a smaller "
        "quantization"));
  }
  const uint64_t host_free = budget > fixed_parts ? budget - fixed_parts : 0;
  const std::string free_text = absl::StrCat(
      budget_text, " - dense ", FormatSize(mem.dense), " - runtime, scratch and I/O ",
      FormatSize(mem.runtime + mem.scratch + mem.io),
      mem.drafter || mem.kv_offload
          ? absl::StrCat(" - drafter and KV offload ", FormatSize(mem.drafter + mem.kv_offload))
          : "",
      " = ", FormatSize(host_free));

  // Host-RAM expert cache.
  if (req.expert_cache_bytes) {
    p.expert_cache_bytes = {*req.expert_cache_bytes, "set by --expert-cache-size", true};
  } else {
    const uint64_t share = host_free / 4 * 3;
    if (share < min_cache) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "model '", model.name, "' does not fit in RAM: it needs dense weights ",
          FormatSize(model.dense_bytes), " + two expert blocks ", FormatSize(min_cache),
          " + runtime, scratch and I/O ", FormatSize(mem.runtime + mem.scratch + mem.io), ", but ",
          free_text, "; free memory or use a smaller quantization"));
    }
    if (model.expert_bytes <= share) {
      p.expert_cache_bytes = {
          model.expert_bytes,
          absl::StrCat("all ", model.n_layers * model.n_experts, " experts (",
                       FormatSize(model.expert_bytes), ") fit in 3/4 of the free budget (",
                       free_text, "): after the first use nothing is read from disk")};
    } else {
      p.expert_cache_bytes = {RoundDown(share, block),
                              absl::StrCat("3/4 of the free budget (", free_text,
                                           "); the experts (", FormatSize(model.expert_bytes),
                                           ") do not all fit, the rest is for KV caches")};
    }
  }
  mem.expert_cache = std::min(p.expert_cache_bytes.value, model.expert_bytes);

  // VRAM tier and KV caches.
  uint64_t device_left = 0;
  if (gpu) {
    const uint64_t reserve = model.dense_bytes + kDeviceWorkingBytes + 2 * block;
    device_left = gpu->free_bytes > reserve ? gpu->free_bytes - reserve : 0;
    if (gpu->free_bytes < reserve) {
      p.warnings.push_back(absl::StrCat("dense weights ", FormatSize(model.dense_bytes),
                                        " + working memory do not fit in ", gpu->name, "'s free ",
                                        FormatSize(gpu->free_bytes)));
    }
  }
  if (req.vram_bytes) {
    p.vram_bytes = {*req.vram_bytes, "set by --vram-budget", true};
  } else if (!gpu) {
    p.vram_bytes = {0, "CPU backend: no VRAM tier"};
  } else {
    const uint64_t share = RoundDown(device_left / 4 * 3, block);
    const std::string left = absl::StrCat(gpu->name, " free ", FormatSize(gpu->free_bytes),
                                          " - dense ", FormatSize(model.dense_bytes),
                                          " - working memory = ", FormatSize(device_left));
    if (model.expert_bytes <= share) {
      p.vram_bytes = {
          model.expert_bytes,
          absl::StrCat("every expert fits in 3/4 of the device memory left (", left, ")")};
    } else {
      p.vram_bytes = {share < min_cache ? 0 : share,
                      absl::StrCat("3/4 of the device memory left (", left, ")")};
    }
  }
  if (req.kv_cache_bytes) {
    p.kv_cache_bytes = {*req.kv_cache_bytes,
                        *req.kv_cache_bytes == 0 ? "set by --kv-cache-limit 0: unbounded"
                                                 : "set by --kv-cache-limit",
                        true};
  } else {
    KvLimitInputs in;
    in.kv_bytes_per_token = model.kv_bytes_per_token;
    in.kv_ring_bytes = model.kv_ring_bytes;
    in.context_length = model.context_length;
    in.max_batch = req.max_batch;
    if (gpu) {
      in.device = true;
      in.memory_free = gpu->free_bytes;
      in.memory_reserved = model.dense_bytes + p.vram_bytes.value + kDeviceWorkingBytes + 2 * block;
    } else {
      in.memory_free = budget;
      in.memory_reserved = fixed_parts + mem.expert_cache;
      in.budget = true;
    }
    const KvLimit kv = DefaultKvCacheLimit(in);
    p.kv_cache_bytes = {kv.bytes, kv.explanation};
  }
  if (!gpu) {
    mem.kv = p.kv_cache_bytes.value;
    if (mem.total() > budget) {
      const std::string over = absl::StrCat(parts_text(mem.expert_cache, mem.kv), " = ",
                                            FormatSize(mem.total()), " exceeds the memory budget ",
                                            FormatSize(budget), " (", p.memory_budget.reason, ")");
      if (p.budget_is_limit) {
        return absl::ResourceExhaustedError(absl::StrCat(
            over, ": lower --expert-cache-size or --kv-cache-limit, or raise --memory-limit"));
      }
      p.warnings.push_back(
          absl::StrCat(over, ": the machine may swap or the kernel may kill the server"));
    }
    if (p.kv_cache_bytes.value == 0) {
      p.warnings.push_back(
          "--kv-cache-limit 0: KV caches are unbounded and outside the memory budget");
    }
  }

  // Lookahead and readers follow the disk the experts come from.
  const DiskKind kind = machine.disks.empty() ? DiskKind::kUnknown : machine.disks[0].kind;
  const std::string disk_name = absl::StrCat(
      sysinfo::DiskKindName(kind), machine.disks.empty() || machine.disks[0].device.empty()
                                       ? ""
                                       : absl::StrCat(" (", machine.disks[0].device, ")"));
  if (req.prefetch_layers) {
    p.prefetch_layers = {*req.prefetch_layers, "set by --prefetch-layers", true};
  } else if (kind == DiskKind::kNvme) {
    p.prefetch_layers = {
        2, absl::StrCat(disk_name, ": deep queues; two layers of lookahead keep reads in flight")};
  } else {
    p.prefetch_layers = {
        1,
        absl::StrCat(disk_name, ": one layer of lookahead (deeper only adds mispredicted reads)")};
  }
  if (req.io_threads) {
    p.io_threads = {*req.io_threads, "set by --io-threads", true};
  } else {
    int threads = 4;
    if (kind == DiskKind::kNvme) threads = 8;
    if (kind == DiskKind::kHdd || kind == DiskKind::kMemory) threads = 2;
    p.io_threads = {
        threads,
        absl::StrCat(disk_name, kind == DiskKind::kNvme     ? ": NVMe serves many reads at once"
                                : kind == DiskKind::kHdd    ? ": more readers only add seeks"
                                : kind == DiskKind::kMemory ? ": memory copies need few readers"
                                                            : ": a moderate queue")};
  }

  // The estimate.
  const double total = static_cast<double>(std::max<uint64_t>(model.expert_bytes, 1));
  const double cached =
      static_cast<double>(std::max(p.expert_cache_bytes.value, gpu ? p.vram_bytes.value : 0));
  p.expected_hit_rate = std::min(1.0, cached / total);
  const double expert_bytes_per_token = static_cast<double>(model.n_layers) *
                                        static_cast<double>(model.top_k) *
                                        static_cast<double>(block);
  p.disk_bytes_per_token = (1.0 - p.expected_hit_rate) * expert_bytes_per_token;
  const bool measured = !machine.disks.empty() && machine.disks[0].read_bytes_per_second > 0;
  const double disk_bw =
      measured ? machine.disks[0].read_bytes_per_second : TypicalReadBandwidth(kind);
  const double active = static_cast<double>(model.dense_bytes) + expert_bytes_per_token;
  struct Term {
    const char* name;
    double seconds;
    std::string how;
  };
  std::vector<Term> terms;
  terms.push_back(
      {"disk", p.disk_bytes_per_token / disk_bw,
       absl::StrCat(FormatSize(static_cast<uint64_t>(p.disk_bytes_per_token)), "/token at ",
                    Gb(disk_bw),
                    measured ? " (measured)" : " (typical for the disk type; not measured)")});
  if (gpu) {
    const double vram_hit = std::min(1.0, static_cast<double>(p.vram_bytes.value) / total);
    const double bw = gpu->memory_bandwidth_bps > 0 ? gpu->memory_bandwidth_bps : 1e12;
    terms.push_back({"memory bandwidth", active / bw,
                     absl::StrCat(FormatSize(static_cast<uint64_t>(active)), "/token at ", Gb(bw),
                                  " (", gpu->name, ")")});
    terms.push_back({"PCIe", (1.0 - vram_hit) * expert_bytes_per_token / kPcieBytesPerSecond,
                     absl::StrCat(absl::StrFormat("%.0f%%", 100 * (1 - vram_hit)),
                                  " of expert reads copied at ", Gb(kPcieBytesPerSecond))});
  } else {
    const bool mem_measured = machine.memory_bandwidth_bps > 0;
    const double bw = mem_measured ? machine.memory_bandwidth_bps : 20e9;
    terms.push_back({"memory bandwidth", active / bw,
                     absl::StrCat(FormatSize(static_cast<uint64_t>(active)), "/token at ", Gb(bw),
                                  mem_measured ? " (measured)" : " (typical)")});
    const double compute_bw =
        CoreWeightBytesPerSecond(machine) * std::max(machine.compute_cores(), 1);
    terms.push_back(
        {"compute", active / compute_bw,
         absl::StrCat(machine.compute_cores(), " cores x ", Gb(CoreWeightBytesPerSecond(machine)),
                      " of quantized weights each")});
  }
  const Term* worst = &terms[0];
  double rest = 0;
  for (const Term& t : terms) {
    if (t.seconds > worst->seconds) worst = &t;
  }
  for (size_t i = 1; i < terms.size(); ++i) rest = std::max(rest, terms[i].seconds);
  const double seconds = p.prefetch_layers.value > 0 ? worst->seconds : terms[0].seconds + rest;
  p.expected_decode_tps = seconds > 0 ? 1.0 / seconds : 0;
  p.bottleneck = worst->name;
  std::vector<std::string> parts;
  for (const Term& t : terms)
    parts.push_back(absl::StrFormat("%s %.1f ms (%s)", t.name, 1e3 * t.seconds, t.how));
  p.estimate_reason =
      absl::StrCat(absl::StrFormat("hit rate %.0f%% (uniform routing: a lower bound); ",
                                   100 * p.expected_hit_rate),
                   absl::StrJoin(parts, "; "),
                   p.prefetch_layers.value > 0 ? "; prefetch overlaps them: the slowest decides"
                                               : "; no prefetch: disk adds to the rest");
  if (kind == DiskKind::kHdd && p.expected_hit_rate < 1.0) {
    p.warnings.push_back(absl::StrCat(
        "experts are read from an HDD: cold decode is ~",
        static_cast<int>(TypicalReadBandwidth(DiskKind::kNvme) / TypicalReadBandwidth(kind)),
        "x slower than from NVMe"));
  }
  if (machine.swap_used_bytes > 0) {
    p.warnings.push_back(absl::StrCat(FormatSize(machine.swap_used_bytes),
                                      " of swap in use: paged-out memory slows "
                                      "every step"));
  }
  return p;
}

namespace {

template <typename T>
nlohmann::json ChoiceJson(const Choice<T>& c) {
  return {{"value", c.value}, {"reason", c.reason}, {"fixed", c.fixed}};
}

}  // namespace

nlohmann::json PlanToJson(const Plan& p, const MachineFacts& m, const ModelFacts& model) {
  nlohmann::json disks = nlohmann::json::array();
  for (const auto& d : m.disks) {
    disks.push_back({{"path", d.path},
                     {"kind", sysinfo::DiskKindName(d.kind)},
                     {"device", d.device},
                     {"read_bytes_per_second", d.read_bytes_per_second},
                     {"read_direct", d.read_direct}});
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : m.gpus) {
    gpus.push_back({{"name", g.name},
                    {"compute_capability", g.compute_capability},
                    {"total_bytes", g.total_bytes},
                    {"free_bytes", g.free_bytes},
                    {"memory_bandwidth_bps", g.memory_bandwidth_bps}});
  }
  return {{"machine",
           {{"ram_total_bytes", m.ram_total_bytes},
            {"ram_available_bytes", m.ram_available_bytes},
            {"cgroup_limit_bytes", m.cgroup_limit_bytes},
            {"swap_total_bytes", m.swap_total_bytes},
            {"swap_used_bytes", m.swap_used_bytes},
            {"cpu_model", m.cpu_model},
            {"physical_cores", m.physical_cores},
            {"logical_cpus", m.logical_cpus},
            {"usable_cores", m.compute_cores()},
            {"cpu_features", m.cpu_features},
            {"memory_bandwidth_bps", m.memory_bandwidth_bps},
            {"gpus", gpus},
            {"disks", disks}}},
          {"model",
           {{"name", model.name},
            {"n_layers", model.n_layers},
            {"n_experts", model.n_experts},
            {"top_k", model.top_k},
            {"context_length", model.context_length},
            {"dense_bytes", model.dense_bytes},
            {"expert_bytes", model.expert_bytes},
            {"expert_block_bytes", model.expert_block_bytes},
            {"kv_bytes_per_token", model.kv_bytes_per_token}}},
          {"memory",
           {{"budget", p.memory_budget.value},
            {"budget_is_limit", p.budget_is_limit},
            {"dense", p.memory.dense},
            {"expert_cache", p.memory.expert_cache},
            {"io", p.memory.io},
            {"kv", p.memory.kv},
            {"kv_offload", p.memory.kv_offload},
            {"scratch", p.memory.scratch},
            {"drafter", p.memory.drafter},
            {"runtime", p.memory.runtime},
            {"total", p.memory.total()}}},
          {"settings",
           {{"memory_limit", ChoiceJson(p.memory_budget)},
            {"expert_cache_size", ChoiceJson(p.expert_cache_bytes)},
            {"vram_budget", ChoiceJson(p.vram_bytes)},
            {"kv_cache_limit", ChoiceJson(p.kv_cache_bytes)},
            {"prefetch_layers", ChoiceJson(p.prefetch_layers)},
            {"io_threads", ChoiceJson(p.io_threads)}}},
          {"estimate",
           {{"decode_tokens_per_second", p.expected_decode_tps},
            {"bottleneck", p.bottleneck},
            {"hit_rate", p.expected_hit_rate},
            {"disk_bytes_per_token", p.disk_bytes_per_token},
            {"reason", p.estimate_reason}}},
          {"warnings", p.warnings}};
}

std::string MemorySplitText(const MemorySplit& m, uint64_t budget) {
  return absl::StrCat(
      "memory split: dense ", FormatSize(m.dense), ", expert cache ", FormatSize(m.expert_cache),
      ", I/O ", FormatSize(m.io), ", KV ", m.kv ? FormatSize(m.kv) : "unbounded",
      m.kv_offload ? absl::StrCat(", KV offload ", FormatSize(m.kv_offload)) : "", ", scratch ",
      FormatSize(m.scratch), m.drafter ? absl::StrCat(", drafter ", FormatSize(m.drafter)) : "",
      ", runtime ", FormatSize(m.runtime), " = ", FormatSize(m.total()), " of the budget ",
      FormatSize(budget));
}

std::string PlanToText(const Plan& p, const MachineFacts& m, const ModelFacts& model) {
  std::string out;
  absl::StrAppend(
      &out, "machine: ", m.cpu_model.empty() ? "CPU" : m.cpu_model, ", ", m.physical_cores,
      " physical cores (", m.logical_cpus, " threads", m.cpu_features.empty() ? "" : "; ",
      absl::StrJoin(m.cpu_features, " "), ")",
      m.compute_cores() < m.physical_cores
          ? absl::StrCat(", ", m.compute_cores(), " usable (affinity mask / cgroup CPU quota)")
          : "",
      ", RAM ", FormatSize(m.ram_total_bytes), " (", FormatSize(m.ram_available_bytes),
      " available), swap ", FormatSize(m.swap_used_bytes), " of ", FormatSize(m.swap_total_bytes),
      " in use",
      m.memory_bandwidth_bps > 0 ? absl::StrCat(", memcpy ", Gb(m.memory_bandwidth_bps)) : "",
      "\n");
  for (const auto& g : m.gpus) {
    absl::StrAppend(&out, "gpu: ", g.name, " (compute ", g.compute_capability / 10, ".",
                    g.compute_capability % 10, "), ", FormatSize(g.free_bytes), " free of ",
                    FormatSize(g.total_bytes), "\n");
  }
  for (const auto& d : m.disks) {
    absl::StrAppend(&out, "disk: ", d.path, ": ", sysinfo::DiskKindName(d.kind),
                    d.device.empty() ? "" : " ", d.device,
                    d.read_bytes_per_second > 0
                        ? absl::StrCat(", random block reads ", Gb(d.read_bytes_per_second),
                                       d.read_direct ? " (O_DIRECT)" : " (buffered)")
                        : "",
                    "\n");
  }
  absl::StrAppend(
      &out, "model: ", model.name, ": ", model.n_layers, " layers x ", model.n_experts,
      " experts (top-", model.top_k, "), dense ", FormatSize(model.dense_bytes), ", experts ",
      FormatSize(model.expert_bytes), " (", FormatSize(model.expert_block_bytes), " each), KV ",
      FormatSize(model.kv_bytes_per_token), "/token, context ", model.context_length, "\n\n");
  auto line = [&](const char* flag, const std::string& value, const std::string& reason,
                  bool fixed) {
    absl::StrAppend(
        &out, absl::StrFormat("  %-20s %-10s %s%s\n", flag, value, fixed ? "" : "auto: ", reason));
  };
  line("--memory-limit", FormatSize(p.memory_budget.value), p.memory_budget.reason,
       p.memory_budget.fixed);
  line("--expert-cache-size", FormatSize(p.expert_cache_bytes.value), p.expert_cache_bytes.reason,
       p.expert_cache_bytes.fixed);
  line("--vram-budget", FormatSize(p.vram_bytes.value), p.vram_bytes.reason, p.vram_bytes.fixed);
  line("--kv-cache-limit", p.kv_cache_bytes.value == 0 ? "0" : FormatSize(p.kv_cache_bytes.value),
       p.kv_cache_bytes.reason, p.kv_cache_bytes.fixed);
  line("--prefetch-layers", std::to_string(p.prefetch_layers.value), p.prefetch_layers.reason,
       p.prefetch_layers.fixed);
  line("--io-threads", std::to_string(p.io_threads.value), p.io_threads.reason, p.io_threads.fixed);
  absl::StrAppend(&out, "\n", MemorySplitText(p.memory, p.memory_budget.value), "\n");
  absl::StrAppend(&out, absl::StrFormat("\nexpected decode: %.1f tok/s, bottleneck: %s\n  %s\n",
                                        p.expected_decode_tps, p.bottleneck, p.estimate_reason));
  for (const auto& w : p.warnings) absl::StrAppend(&out, "warning: ", w, "\n");
  return out;
}

}  // namespace colibri::plan
