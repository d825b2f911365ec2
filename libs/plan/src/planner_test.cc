#include "colibri/plan/planner.h"

#include "gtest/gtest.h"

namespace colibri::plan {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

// The user of the issue: 32 GB of RAM, a 12 GB GPU, an NVMe disk, a ~200 GB model.
MachineFacts Workstation() {
  MachineFacts m;
  m.ram_total_bytes = 32 * kGiB;
  m.ram_available_bytes = 28 * kGiB;
  m.cpu_model = "Test CPU";
  m.physical_cores = 8;
  m.logical_cpus = 16;
  m.cpu_features = {"avx2", "fma", "f16c"};
  m.memory_bandwidth_bps = 40e9;
  m.disks.push_back({"/models/big", sysinfo::DiskKind::kNvme, "nvme0n1", 3e9, true});
  return m;
}

// The Workstation's budget without a cgroup: MemAvailable 28 GiB less 5% of 32 GiB of RAM.
constexpr uint64_t kWorkstationBudget = 28 * kGiB - 32 * kGiB / 20;
// What BigModel's plan sets aside before the cache: dense 6 GiB, runtime, two 16 MiB blocks
// and 4 MiB of arena slack (its facts have no scratch).
constexpr uint64_t kBigFixed = 6 * kGiB + kRuntimeBytes + 2 * 16 * kMiB + 4 * kMiB;
constexpr uint64_t kBigCache = (kWorkstationBudget - kBigFixed) / 4 * 3 / (16 * kMiB) * (16 * kMiB);

ModelFacts BigModel() {
  ModelFacts f;
  f.name = "big";
  f.n_layers = 94;
  f.n_experts = 128;
  f.top_k = 8;
  f.context_length = 32768;
  f.dense_bytes = 6 * kGiB;
  f.expert_block_bytes = 16 * kMiB;
  f.expert_bytes = 94ull * 128 * 16 * kMiB;
  f.kv_bytes_per_token = 96 * 1024;
  return f;
}

TEST(Planner, BigModelOnCpuIsDiskBound) {
  auto p = MakePlan(Workstation(), BigModel(), {});
  ASSERT_TRUE(p.ok()) << p.status();
  // free = the budget less the fixed parts; 3/4 of it rounded down to whole 16 MiB blocks.
  EXPECT_EQ(p->memory_budget.value, kWorkstationBudget);
  EXPECT_FALSE(p->budget_is_limit);
  EXPECT_EQ(kBigCache, 971 * 16 * kMiB);
  EXPECT_EQ(p->expert_cache_bytes.value, kBigCache);
  EXPECT_FALSE(p->expert_cache_bytes.fixed);
  EXPECT_NE(p->expert_cache_bytes.reason.find("3/4 of the free budget"), std::string::npos)
      << p->expert_cache_bytes.reason;
  // KV: 16 x 32768 x 96 KiB wanted (48 GiB), capped by half of what is left of the budget.
  EXPECT_EQ(p->kv_cache_bytes.value, (kWorkstationBudget - kBigFixed - kBigCache) / 2);
  EXPECT_LE(p->memory.total(), p->memory_budget.value);
  EXPECT_EQ(p->vram_bytes.value, 0u);
  EXPECT_EQ(p->prefetch_layers.value, 2);
  EXPECT_EQ(p->io_threads.value, 8);
  EXPECT_EQ(p->bottleneck, "disk");
  EXPECT_NEAR(p->expected_hit_rate, 971.0 / (94 * 128), 1e-9);
  // Per token 94 x 8 blocks of 16 MiB; 92% of them from disk at 3 GB/s.
  const double disk = (1 - 971.0 / (94 * 128)) * 94 * 8 * 16 * kMiB;
  EXPECT_NEAR(p->disk_bytes_per_token, disk, 1);
  EXPECT_NEAR(p->expected_decode_tps, 3e9 / disk, 1e-6);
  EXPECT_TRUE(p->warnings.empty());
}

TEST(Planner, SmallModelIsCachedWholeAndComputeBound) {
  ModelFacts f = BigModel();
  f.n_layers = 16;
  f.n_experts = 8;
  f.expert_bytes = 16 * 8 * 16 * kMiB;  // 2 GiB
  f.dense_bytes = 1 * kGiB;
  auto p = MakePlan(Workstation(), f, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->expert_cache_bytes.value, 2 * kGiB);
  EXPECT_NE(p->expert_cache_bytes.reason.find("all 128 experts"), std::string::npos)
      << p->expert_cache_bytes.reason;
  EXPECT_DOUBLE_EQ(p->expected_hit_rate, 1.0);
  EXPECT_EQ(p->disk_bytes_per_token, 0);
  // 1 GiB dense + 16 x 8 x 16 MiB per token over 8 cores x 2.5 GB/s (compute) vs 40 GB/s.
  EXPECT_EQ(p->bottleneck, "compute");
  EXPECT_NEAR(p->expected_decode_tps, 8 * 2.5e9 / (1.0 * kGiB + 16 * 8 * 16 * kMiB), 1e-9);
}

TEST(Planner, ComputeEstimateUsesTheUsableCores) {
  ModelFacts f = BigModel();
  f.n_layers = 16;
  f.n_experts = 8;
  f.expert_bytes = 16 * 8 * 16 * kMiB;
  f.dense_bytes = 1 * kGiB;
  MachineFacts m = Workstation();
  m.usable_cores = 2;  // e.g. a container held to 2 CPUs by its cgroup quota
  auto p = MakePlan(m, f, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bottleneck, "compute");
  EXPECT_NEAR(p->expected_decode_tps, 2 * 2.5e9 / (1.0 * kGiB + 16 * 8 * 16 * kMiB), 1e-9);
  const std::string text = PlanToText(*p, m, f);
  EXPECT_NE(text.find("8 physical cores (16 threads; avx2 fma f16c), 2 usable"), std::string::npos)
      << text;
  m.usable_cores = 16;  // more than the physical cores (hyperthreads): the physical count
  EXPECT_EQ(m.compute_cores(), 8);
}

TEST(Planner, FixedValuesAreKeptAndPlannedAround) {
  PlanRequest r;
  r.expert_cache_bytes = 4 * kGiB;
  r.prefetch_layers = 0;
  r.io_threads = 3;
  auto p = MakePlan(Workstation(), BigModel(), r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->expert_cache_bytes.value, 4 * kGiB);
  EXPECT_TRUE(p->expert_cache_bytes.fixed);
  EXPECT_EQ(p->prefetch_layers.value, 0);
  EXPECT_EQ(p->io_threads.value, 3);
  // KV gets half of what the fixed cache leaves.
  EXPECT_EQ(p->kv_cache_bytes.value, (kWorkstationBudget - kBigFixed - 4 * kGiB) / 2);
  // Without prefetch the disk time adds to compute instead of overlapping it.
  auto overlapped = MakePlan(Workstation(), BigModel(), {.expert_cache_bytes = 4 * kGiB});
  ASSERT_TRUE(overlapped.ok());
  EXPECT_LT(p->expected_decode_tps, overlapped->expected_decode_tps);
  r.kv_cache_bytes = 0;
  auto unbounded = MakePlan(Workstation(), BigModel(), r);
  ASSERT_TRUE(unbounded.ok());
  EXPECT_EQ(unbounded->kv_cache_bytes.value, 0u);
  EXPECT_NE(unbounded->kv_cache_bytes.reason.find("unbounded"), std::string::npos);
  r.expert_cache_bytes = 30 * kGiB;
  auto too_big = MakePlan(Workstation(), BigModel(), r);
  ASSERT_TRUE(too_big.ok());  // over MemAvailable alone: a warning, not a refusal
  ASSERT_EQ(too_big->warnings.size(), 2u);
  EXPECT_NE(too_big->warnings[0].find("exceeds the memory budget"), std::string::npos)
      << too_big->warnings[0];
  EXPECT_NE(too_big->warnings[1].find("unbounded"), std::string::npos) << too_big->warnings[1];
}

TEST(Planner, CgroupLimitIsTheBudgetAndEveryPartFitsIt) {
  MachineFacts m = Workstation();
  m.cgroup_limit_bytes = 12 * kGiB;
  m.cgroup_limit_file = "/sys/fs/cgroup/memory/app/memory.limit_in_bytes";
  ModelFacts f = BigModel();
  f.scratch_bytes = 40 * kMiB;
  auto p = MakePlan(m, f, {.drafter_bytes = 300 * kMiB});
  ASSERT_TRUE(p.ok()) << p.status();
  const uint64_t budget = 12 * kGiB - 12 * kGiB / 20;  // less 5% headroom
  EXPECT_EQ(p->memory_budget.value, budget);
  EXPECT_TRUE(p->budget_is_limit);
  EXPECT_NE(p->memory_budget.reason.find("memory cgroup limit 12"), std::string::npos)
      << p->memory_budget.reason;
  EXPECT_NE(p->memory_budget.reason.find("app/memory.limit_in_bytes"), std::string::npos);
  const uint64_t fixed = kBigFixed + 40 * kMiB + 300 * kMiB;
  EXPECT_EQ(p->memory.drafter, 300 * kMiB);
  EXPECT_EQ(p->memory.scratch, 40 * kMiB);
  EXPECT_EQ(p->expert_cache_bytes.value, (budget - fixed) / 4 * 3 / (16 * kMiB) * (16 * kMiB));
  EXPECT_EQ(p->memory.expert_cache, p->expert_cache_bytes.value);
  EXPECT_EQ(p->memory.kv, p->kv_cache_bytes.value);
  EXPECT_LE(p->memory.total(), budget);
  EXPECT_GT(p->memory.total(), budget / 10 * 9);  // the budget is used, not wasted
  // A cgroup above MemAvailable is capped by what is available.
  m.cgroup_limit_bytes = 64 * kGiB;
  auto capped = MakePlan(m, f, {});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->memory_budget.value, 28 * kGiB - 28 * kGiB / 20);
}

TEST(Planner, MemoryLimitIsAHardBudget) {
  PlanRequest r;
  r.memory_limit = 10 * kGiB;
  auto p = MakePlan(Workstation(), BigModel(), r);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->memory_budget.fixed);
  EXPECT_EQ(p->memory_budget.value, 10 * kGiB);
  EXPECT_LE(p->memory.total(), 10 * kGiB);
  // Fixed parts that do not fit a real limit are refused with the sum and each part.
  r.expert_cache_bytes = 8 * kGiB;
  auto over = MakePlan(Workstation(), BigModel(), r);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("expert cache 8"), std::string::npos) << over.status();
  EXPECT_NE(over.status().message().find("--memory-limit"), std::string::npos) << over.status();
  // Too small for the model at all: refused with the least it needs.
  r = {};
  r.memory_limit = 6 * kGiB;
  auto small = MakePlan(Workstation(), BigModel(), r);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("needs at least 9.19 GiB"), std::string::npos)
      << small.status();
}

TEST(Planner, GpuBudgetsFitTheDevice) {
  MachineFacts m = Workstation();
  m.gpus.push_back({"RTX 4070", 89, 12 * kGiB, 11 * kGiB + 512 * kMiB, 504e9});
  auto p = MakePlan(m, BigModel(), {.backend = "cuda"});
  ASSERT_TRUE(p.ok()) << p.status();
  const uint64_t working = 512 * kMiB + 2 * 16 * kMiB;
  EXPECT_GT(p->vram_bytes.value, 0u);
  EXPECT_EQ(p->vram_bytes.value % (16 * kMiB), 0u);
  EXPECT_EQ(p->vram_bytes.value,
            (11 * kGiB + 512 * kMiB - 6 * kGiB - working) / 4 * 3 / (16 * kMiB) * (16 * kMiB));
  EXPECT_LE(6 * kGiB + p->vram_bytes.value + p->kv_cache_bytes.value + working,
            11 * kGiB + 512 * kMiB);
  EXPECT_NE(p->kv_cache_bytes.reason.find("device"), std::string::npos) << p->kv_cache_bytes.reason;
  EXPECT_EQ(p->bottleneck, "disk");
  EXPECT_EQ(MakePlan(Workstation(), BigModel(), {.backend = "cuda"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(MakePlan(Workstation(), BigModel(), {.backend = "tpu"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Planner, HddAndSwapAreWarnedAbout) {
  MachineFacts m = Workstation();
  m.disks[0] = {"/slow", sysinfo::DiskKind::kHdd, "sdb", 0, false};
  m.swap_total_bytes = 8 * kGiB;
  m.swap_used_bytes = 2 * kGiB;
  auto p = MakePlan(m, BigModel(), {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->io_threads.value, 2);
  EXPECT_EQ(p->prefetch_layers.value, 1);
  ASSERT_EQ(p->warnings.size(), 2u);
  EXPECT_NE(p->warnings[0].find("HDD"), std::string::npos);
  EXPECT_NE(p->warnings[0].find("30x"), std::string::npos) << p->warnings[0];
  EXPECT_NE(p->warnings[1].find("swap"), std::string::npos);
  // Not measured: the typical HDD bandwidth, said so.
  EXPECT_NE(p->estimate_reason.find("not measured"), std::string::npos) << p->estimate_reason;
}

TEST(Planner, ModelThatCannotFitIsRefusedWithTheNumbers) {
  MachineFacts m = Workstation();
  m.ram_available_bytes = 7 * kGiB;  // dense 6 GiB + 1.6 GiB headroom already exceed it
  auto p = MakePlan(m, BigModel(), {});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("does not fit the memory budget"), std::string::npos)
      << p.status();
  EXPECT_NE(p.status().message().find("dense 6"), std::string::npos) << p.status();
}

TEST(Planner, JsonAndTextNameEverySetting) {
  auto p = MakePlan(Workstation(), BigModel(), {});
  ASSERT_TRUE(p.ok());
  const nlohmann::json j = PlanToJson(*p, Workstation(), BigModel());
  EXPECT_EQ(j["settings"]["expert_cache_size"]["value"].get<uint64_t>(), kBigCache);
  EXPECT_EQ(j["settings"]["memory_limit"]["value"].get<uint64_t>(), kWorkstationBudget);
  EXPECT_EQ(j["memory"]["total"].get<uint64_t>(), p->memory.total());
  EXPECT_EQ(j["settings"]["io_threads"]["value"].get<int>(), 8);
  EXPECT_EQ(j["estimate"]["bottleneck"], "disk");
  EXPECT_EQ(j["machine"]["disks"][0]["kind"], "NVMe");
  EXPECT_EQ(j["model"]["n_experts"], 128);
  const std::string text = PlanToText(*p, Workstation(), BigModel());
  for (const char* s : {"--memory-limit", "--expert-cache-size", "--vram-budget",
                        "--kv-cache-limit", "memory split:", "--prefetch-layers", "--io-threads",
                        "bottleneck: disk", "NVMe nvme0n1", "94 layers x 128 experts"}) {
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
  }
}

}  // namespace
}  // namespace colibri::plan
