#include "auto_settings.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "colibri/engine/speculative.h"
#include "colibri/expert_source/cache_policy.h"
#include "colibri/plan/planner.h"
#include "colibri/plan/probe.h"
#include "colibri/plan/tune_profile.h"
#include "colibri/quant/dtype.h"
#include "spdlog/spdlog.h"

namespace colibri::compute {
namespace {

constexpr uint64_t kAuto = ComputeNodeOptions::kAuto;

bool AnyAuto(const ComputeNodeOptions& o) {
  return o.memory_limit == kAuto || o.expert_cache_bytes == kAuto || o.cache.vram_bytes == kAuto ||
         o.kv_cache_limit == kAuto || o.cache.prefetch_layers < 0 || o.cache.io_threads < 0 ||
         o.cache.policy.empty() || o.cache.learned_pin_fraction < 0;
}

// Applies the profile's settings to the knobs still on auto; returns what it changed.
std::string ApplyProfile(const plan::TuneSettings& s, ComputeNodeOptions* o) {
  std::string applied;
  if (s.prefetch_layers && o->cache.prefetch_layers < 0) {
    o->cache.prefetch_layers = *s.prefetch_layers;
    absl::StrAppend(&applied, " --prefetch-layers ", *s.prefetch_layers);
  }
  if (s.io_threads && o->cache.io_threads < 0) {
    o->cache.io_threads = *s.io_threads;
    absl::StrAppend(&applied, " --io-threads ", *s.io_threads);
  }
  if (s.cache_policy && o->cache.policy.empty() &&
      expert_source::ParseCachePolicy(*s.cache_policy).ok()) {
    o->cache.policy = *s.cache_policy;
    absl::StrAppend(&applied, " --cache-policy ", *s.cache_policy);
  }
  if (s.learned_pins && o->cache.learned_pin_fraction < 0) {
    o->cache.learned_pin_fraction = *s.learned_pins;
    absl::StrAppend(&applied, " --learned-pins ", *s.learned_pins);
  }
  return applied;
}

}  // namespace

uint64_t DrafterBytes(const ComputeNodeOptions& o, const model::Manifest& m) {
  auto mode = engine::ParseSpeculativeMode(o.speculative);
  if (!mode.ok()) return 0;
  const bool own = !o.draft_experts.empty() || !o.draft_model_dir.empty();
  const bool has_mtp = m.config.nextn_layers > 0 && m.FindExtra("nextn.0.eh_proj") != nullptr;
  if (*mode == engine::SpeculativeMode::kMtp ||
      (*mode == engine::SpeculativeMode::kAuto && has_mtp && !own)) {
    return m.extra_size;  // the MTP layer: its dense tensors and experts
  }
  if (*mode == engine::SpeculativeMode::kOff || *mode == engine::SpeculativeMode::kNgram) return 0;
  if (!o.draft_experts.empty()) {
    auto type = quant::ParseDType(o.draft_experts);
    if (!type.ok()) return 0;
    uint64_t sum = 0;
    for (const auto& b : m.experts) {
      uint64_t bytes = 0;
      for (const auto& part : b.parts) {
        auto row = quant::CheckedRowBytes(*type, part.cols());
        bytes += row.ok() ? *row * static_cast<uint64_t>(part.rows()) : part.size;
      }
      sum += AlignUp(bytes, 4096);
    }
    return sum;
  }
  if (!o.draft_model_dir.empty()) {
    auto c = model::Container::Open(o.draft_model_dir);
    if (c.ok()) return (*c)->manifest().dense_size + (*c)->manifest().PaddedExpertBytes();
  }
  return 0;
}

absl::StatusOr<AutoSettingsReport> ResolveAutoSettings(ComputeNodeOptions* o,
                                                       const model::Container& container,
                                                       const backend::Backend& be,
                                                       const sysinfo::Roots& roots) {
  AutoSettingsReport report;
  report.planned = AnyAuto(*o);
  // The plan runs even when every value is given: its split checks them against the budget.
  auto machine = plan::ProbeMachine({.model_dir = container.dir(), .roots = roots}, nullptr);
  if (!machine.ok() && !report.planned) machine = plan::MachineFacts{};
  if (!machine.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot choose the auto settings (", machine.status().message(),
                     "): set --expert-cache-size, --kv-cache-limit, --vram-budget, "
                     "--prefetch-layers and --io-threads explicitly"));
  }
  const model::Manifest& m = container.manifest();
  const plan::Fingerprint fingerprint =
      plan::CurrentFingerprint(m, *machine);  // as tune computes it
  // The backend knows its device's memory better than a fresh probe (and in a CUDA build the
  // probe lists every GPU, not the one in use).
  machine->gpus.clear();
  const backend::MemoryInfo mem = be.memory_info();
  const bool device = mem.total_bytes > 0;
  if (device)
    machine->gpus.push_back({std::string(be.name()), 0, mem.total_bytes, mem.free_bytes, 0});

  // The tune profile first: its knobs are measured, so the plan is made around them.
  const std::string path = o->tune_profile.empty()
                               ? plan::DefaultTuneProfilePath(container.state_dir()).string()
                               : o->tune_profile;
  if (o->tune_profile != "none") {
    auto profile = plan::ReadTuneProfile(path);
    if (profile.ok()) {
      report.profile_path = path;
      const std::string mismatch = plan::FingerprintMismatch(profile->fingerprint, fingerprint);
      if (mismatch.empty()) {
        std::string applied = ApplyProfile(profile->settings, o);
        const std::string key = SpeculationKey(*o);
        if (o->speculative == "auto" && o->speculation_costs.is_null() &&
            profile->speculation.contains(key)) {
          o->speculation_costs = profile->speculation[key];
          absl::StrAppend(&applied, " speculation costs (", key, ")");
        }
        report.profile_applied = true;
        report.profile_note = applied.empty()
                                  ? "matches; every setting it holds was given explicitly"
                                  : absl::StrCat("applied:", applied);
        spdlog::info("tune profile {} {}", path, report.profile_note);
      } else {
        report.profile_note = absl::StrCat("ignored: ", mismatch, "; rerun colibri-cli tune");
        spdlog::warn("tune profile {} {}", path, report.profile_note);
      }
    } else if (profile.status().code() != absl::StatusCode::kNotFound) {
      report.profile_path = path;
      report.profile_note = absl::StrCat("ignored: ", profile.status().message());
      spdlog::warn("tune profile {}", report.profile_note);
    }
  }

  plan::PlanRequest req;
  req.backend = device ? "cuda" : "cpu";
  req.max_batch = o->max_batch;
  req.kv_offload_bytes = o->kv_offload_limit;
  req.drafter_bytes = DrafterBytes(*o, m);
  if (o->memory_limit != kAuto) req.memory_limit = o->memory_limit;
  if (o->expert_cache_bytes != kAuto) req.expert_cache_bytes = o->expert_cache_bytes;
  if (o->cache.vram_bytes != kAuto) req.vram_bytes = o->cache.vram_bytes;
  if (o->kv_cache_limit != kAuto) req.kv_cache_bytes = o->kv_cache_limit;
  if (o->cache.prefetch_layers >= 0) req.prefetch_layers = o->cache.prefetch_layers;
  if (o->cache.io_threads >= 0) req.io_threads = o->cache.io_threads;
  ASSIGN_OR_RETURN(plan::Plan p, plan::MakePlan(*machine, plan::ModelFactsOf(m), req));
  auto log = [](const char* flag, const std::string& value, const std::string& reason) {
    spdlog::info("{} {} (auto: {})", flag, value, reason);
  };
  if (o->memory_limit == kAuto) {
    o->memory_limit = p.memory_budget.value;
    log("--memory-limit", FormatSize(o->memory_limit), p.memory_budget.reason);
  }
  report.memory = p.memory;
  report.memory_budget = p.memory_budget.value;
  if (o->expert_cache_bytes == kAuto) {
    o->expert_cache_bytes = p.expert_cache_bytes.value;
    log("--expert-cache-size", FormatSize(o->expert_cache_bytes), p.expert_cache_bytes.reason);
  }
  if (o->cache.vram_bytes == kAuto) {
    o->cache.vram_bytes = p.vram_bytes.value;
    log("--vram-budget", FormatSize(o->cache.vram_bytes), p.vram_bytes.reason);
  }
  if (o->kv_cache_limit == kAuto) {
    o->kv_cache_limit = p.kv_cache_bytes.value;
    log("--kv-cache-limit", FormatSize(o->kv_cache_limit),
        absl::StrCat(p.kv_cache_bytes.reason, "; --kv-cache-limit 0 for unbounded"));
  }
  if (o->cache.prefetch_layers < 0) {
    o->cache.prefetch_layers = p.prefetch_layers.value;
    log("--prefetch-layers", std::to_string(o->cache.prefetch_layers), p.prefetch_layers.reason);
  }
  if (o->cache.io_threads < 0) {
    o->cache.io_threads = p.io_threads.value;
    log("--io-threads", std::to_string(o->cache.io_threads), p.io_threads.reason);
  }
  if (o->cache.policy.empty())
    o->cache.policy = std::string(expert_source::kDefaultCachePolicyName);
  if (o->cache.learned_pin_fraction < 0)
    o->cache.learned_pin_fraction = ExpertCacheConfig{}.learned_pin_fraction;
  // The split with the values in effect (the cache and KV limit may have been given).
  report.memory.expert_cache = std::min(o->expert_cache_bytes, m.PaddedExpertBytes());
  report.memory.kv = o->kv_cache_limit;
  spdlog::info("{}", plan::MemorySplitText(report.memory, report.memory_budget));
  for (const auto& w : p.warnings) spdlog::warn("plan: {}", w);
  return report;
}

}  // namespace colibri::compute
