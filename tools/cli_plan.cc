// colibri-cli plan and doctor: the settings this machine should use for a model, and a
// read-only preflight naming each problem and its fix.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/core/units.h"
#include "colibri/model/container.h"
#include "colibri/plan/doctor.h"
#include "colibri/plan/planner.h"
#include "colibri/plan/probe.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace {

struct PlanFlags {
  std::string model_dir;
  std::vector<std::string> disks;
  std::string backend = "cpu";
  int device = 0;
  int max_batch = 16;
  double measure_seconds = 0.5;
  bool json = false;
  bool deep = false;
  std::string memory_limit = "auto";
};

int RunPlan(const PlanFlags& f) {
  auto container = colibri::model::Container::Open(f.model_dir);
  if (!container.ok()) {
    spdlog::error("{} (colibri-cli doctor --model {} says why)",
                  std::string(container.status().message()), f.model_dir);
    return 1;
  }
  auto machine = colibri::plan::ProbeMachine({.model_dir = f.model_dir,
                                              .extra_disks = f.disks,
                                              .measure = f.measure_seconds > 0,
                                              .read_seconds = f.measure_seconds},
                                             container->get());
  if (!machine.ok()) {
    spdlog::error("{}", std::string(machine.status().message()));
    return 1;
  }
  const colibri::plan::ModelFacts model = colibri::plan::ModelFactsOf((*container)->manifest());
  colibri::plan::PlanRequest req{
      .backend = f.backend, .device = f.device, .max_batch = f.max_batch};
  if (f.memory_limit != "auto") {
    auto bytes = colibri::ParseSize(f.memory_limit);
    if (!bytes.ok() || *bytes == 0) {
      spdlog::error("--memory-limit '{}': expected auto or a size such as 12G", f.memory_limit);
      return 1;
    }
    req.memory_limit = *bytes;
  }
  auto p = colibri::plan::MakePlan(*machine, model, req);
  if (!p.ok()) {
    spdlog::error("{}", std::string(p.status().message()));
    return 1;
  }
  if (f.json) {
    std::cout << colibri::plan::PlanToJson(*p, *machine, model).dump(2) << std::endl;
  } else {
    std::cout << colibri::plan::PlanToText(*p, *machine, model)
              << "\nThese are the defaults (auto) of colibri-server, colibri-compute and "
                 "colibri-cli run; a flag "
                 "given explicitly wins.\n";
  }
  return 0;
}

int RunDoctor(const PlanFlags& f) {
  using colibri::plan::Finding;
  colibri::plan::ModelFacts model;
  std::vector<Finding> findings = colibri::plan::CheckModelDirectory(f.model_dir, f.deep, &model);
  const bool have_model = model.n_layers > 0;
  std::string probe_file;
  if (have_model) {
    auto container = colibri::model::Container::Open(f.model_dir);
    if (container.ok() && !(*container)->manifest().experts.empty()) {
      probe_file = (*container)->ExpertFilePath((*container)->manifest().experts[0]).string();
    }
  }
  auto add = [&](std::vector<Finding> more) {
    findings.insert(findings.end(), more.begin(), more.end());
  };
  std::error_code ec;
  const std::string where = std::filesystem::exists(f.model_dir, ec)
                                ? f.model_dir
                                : std::filesystem::absolute(f.model_dir).parent_path().string();
  add(colibri::plan::CheckStorage(where, probe_file, {}));
  for (const auto& d : f.disks) add(colibri::plan::CheckStorage(d, "", {}));
  auto machine = colibri::plan::ProbeMachine({.model_dir = where}, nullptr);
  if (!machine.ok()) {
    findings.push_back({colibri::plan::Severity::kError, "memory",
                        std::string(machine.status().message()),
                        "run on Linux with /proc mounted"});
  } else {
    add(colibri::plan::CheckMemory(
        *machine, have_model ? &model : nullptr,
        {.backend = f.backend, .device = f.device, .max_batch = f.max_batch}));
    add(colibri::plan::CheckCuda(colibri::plan::ProbeCuda(*machine), f.backend == "cuda"));
  }
  const bool errors = colibri::plan::HasErrors(findings);
  if (f.json) {
    std::cout << nlohmann::json{{"ok", !errors},
                                {"findings", colibri::plan::FindingsToJson(findings)}}
                     .dump(2)
              << std::endl;
  } else {
    std::cout << colibri::plan::FindingsToText(findings);
  }
  return errors ? 1 : 0;
}

}  // namespace

void AddPlanCommands(CLI::App& app) {
  // CLI11 turns the RuntimeError into main()'s return value (cli_tokenizer.cc does the same).
  auto shared = std::make_shared<PlanFlags>();
  PlanFlags& flags = *shared;
  auto* plan = app.add_subcommand("plan",
                                  "Read this machine and a model; print each budget, prefetch "
                                  "depth and reader threads with why, and the "
                                  "expected decode speed with its bottleneck");
  plan->add_option("--model", flags.model_dir, "Model directory or GGUF file")->required();
  plan->add_option("--disk", flags.disks,
                   "Also describe these disks (expert-store disks; repeatable)");
  plan->add_option("--backend", flags.backend, "cpu or cuda")->capture_default_str();
  plan->add_option("--device", flags.device, "CUDA device (--backend cuda)")->capture_default_str();
  plan->add_option("--max-batch", flags.max_batch, "Sequences decoded together (KV budget)")
      ->capture_default_str();
  plan->add_option("--measure-seconds", flags.measure_seconds,
                   "Seconds of random expert reads to measure the disk (0: do not measure)")
      ->capture_default_str();
  plan->add_flag("--json", flags.json, "JSON for tools");
  plan->add_option("--memory-limit", flags.memory_limit,
                   "The host-memory budget to plan for (auto: the memory cgroup's limit, else "
                   "MemAvailable, less headroom)")
      ->capture_default_str();
  plan->callback([shared] { throw CLI::RuntimeError(RunPlan(*shared)); });

  auto* doctor = app.add_subcommand("doctor",
                                    "Read-only preflight: model complete, disk "
                                    "type/temperature/mount/O_DIRECT/space, memory, CUDA; "
                                    "names each problem and its fix; exit code 1 on errors");
  doctor->add_option("--model", flags.model_dir, "Model directory or GGUF file")->required();
  doctor->add_option("--disk", flags.disks, "Also check these disks (repeatable)");
  doctor->add_flag("--deep", flags.deep, "Also verify every checksum (reads the whole model)");
  doctor->add_option("--backend", flags.backend, "cpu or cuda")->capture_default_str();
  doctor->add_option("--device", flags.device, "CUDA device (--backend cuda)")
      ->capture_default_str();
  doctor->add_option("--max-batch", flags.max_batch, "Sequences decoded together (KV budget)")
      ->capture_default_str();
  doctor->add_flag("--json", flags.json, "JSON for tools");
  doctor->callback([shared] { throw CLI::RuntimeError(RunDoctor(*shared)); });
}
