// colibri-cli tune: measures candidate settings on the real engine and keeps one only when it
// is faster beyond noise with identical greedy tokens; saves a tune profile (fingerprinted by
// binary, model and machine) that colibri-server applies to the settings left on auto.
//
// Coordinate descent: --prefetch-layers, then --io-threads, --cache-policy, --learned-pins,
// each tried with the others at their best so far. With --speculative auto, the costs its engine
// measured (passes, drafting, catch-up, acceptance) are kept too, so a new process starts from
// them instead of exploring. A candidate replaces the best when its mean
// decode tok/s exceeds the best's by more than two standard errors of the difference and by
// at least --min-gain, and its greedy tokens equal the baseline's.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli_node.h"
#include "colibri/core/status.h"
#include "colibri/plan/probe.h"
#include "colibri/plan/tune_profile.h"
#include "compute_node.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace {

struct TuneFlags {
  NodeFlags node;  // --model and the node's flags (cli_node.h)
  std::string prompt_tokens;
  int64_t max_tokens = 16;
  int repeats = 3;
  std::string out;
  std::string state = "cold";
  double min_gain = 0.03;
};

struct Knobs {
  int prefetch_layers = 1;
  int io_threads = 4;
  std::string policy = "adaptive";
  double learned_pins = 0.25;
};

struct Measurement {
  double mean = 0;
  double sd = 0;
  std::vector<int32_t> tokens;
  nlohmann::json speculation_costs;  // auto's, as its engine measured them (else null)
};

absl::StatusOr<Measurement> Measure(const colibri::compute::ComputeNodeOptions& base,
                                    const Knobs& k, const std::vector<int32_t>& prompt,
                                    const TuneFlags& f) {
  colibri::compute::ComputeNodeOptions o = base;
  o.cache.prefetch_layers = k.prefetch_layers;
  o.cache.io_threads = k.io_threads;
  o.cache.policy = k.policy;
  o.cache.learned_pin_fraction = k.learned_pins;
  o.cache.routing_heat = "none";  // every candidate starts from the same (empty) heat
  ASSIGN_OR_RETURN(auto node, colibri::compute::ComputeNode::Create(o));
  colibri::engine::GenerationRequest req;
  req.prompt = prompt;
  req.max_tokens = f.max_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  Measurement m;
  std::vector<double> tps;
  for (int r = 0; r <= f.repeats; ++r) {  // run 0 warms the page cache of dense weights and code
    if (f.state == "cold") node->ClearCache();
    ASSIGN_OR_RETURN(
        auto result,
        node->engine().Generate(req, [](const colibri::engine::SampledToken&) { return true; }));
    if (r == 0) {
      m.tokens = result.tokens;
      continue;
    }
    if (result.tokens != m.tokens)
      return absl::InternalError("greedy tokens differ between repetitions of one setting");
    tps.push_back(result.decode_seconds > 0
                      ? static_cast<double>(result.tokens.size()) / result.decode_seconds
                      : 0);
  }
  if (o.speculative == "auto") m.speculation_costs = node->engine().speculation_costs().ToJson();
  m.mean = std::accumulate(tps.begin(), tps.end(), 0.0) / static_cast<double>(tps.size());
  double var = 0;
  for (double t : tps) var += (t - m.mean) * (t - m.mean);
  m.sd = tps.size() > 1 ? std::sqrt(var / static_cast<double>(tps.size() - 1)) : 0;
  return m;
}

std::string Describe(const Knobs& k) {
  return absl::StrCat("prefetch_layers=", k.prefetch_layers, " io_threads=", k.io_threads,
                      " cache_policy=", k.policy, " learned_pins=", k.learned_pins);
}

int RunTune(const TuneFlags& f) {
  if (f.repeats < 2 || f.max_tokens < 2 || (f.state != "cold" && f.state != "warm")) {
    spdlog::error("tune: --repeats and --max-tokens must be >= 2, --state cold or warm");
    return 2;
  }
  auto resolved_flags = colibri::compute::ResolveNodeFlags(f.node);
  if (!resolved_flags.ok()) {
    spdlog::error("{}", std::string(resolved_flags.status().message()));
    return 2;
  }
  colibri::compute::ComputeNodeOptions base = *std::move(resolved_flags);
  base.tune_profile = "none";  // measure from the plan, never from an older profile
  // The plan's values for the knobs left on auto (one node, then the others reuse them).
  auto planned = colibri::compute::ComputeNode::Create(base);
  if (!planned.ok()) {
    spdlog::error("{}", std::string(planned.status().message()));
    return 1;
  }
  const colibri::compute::ComputeNodeOptions& resolved = (*planned)->options();
  Knobs best{resolved.cache.prefetch_layers, resolved.cache.io_threads, resolved.cache.policy,
             resolved.cache.learned_pin_fraction};
  base.expert_cache_bytes = resolved.expert_cache_bytes;
  base.cache.vram_bytes = resolved.cache.vram_bytes;
  base.kv_cache_limit = resolved.kv_cache_limit;
  const colibri::model::Manifest manifest = (*planned)->manifest();
  const std::filesystem::path state_dir = (*planned)->container().state_dir();
  planned->reset();

  std::vector<int32_t> prompt;
  if (f.prompt_tokens.empty()) {
    for (int32_t i = 1; i <= 16 && i < manifest.config.vocab_size; ++i) prompt.push_back(i);
  } else {
    for (absl::string_view part : absl::StrSplit(f.prompt_tokens, ',', absl::SkipWhitespace())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id) || id < 0 || id >= manifest.config.vocab_size) {
        spdlog::error("--prompt-tokens: '{}' is not a token id of this model", std::string(part));
        return 2;
      }
      prompt.push_back(id);
    }
  }
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // each candidate's node would log its start-up
  nlohmann::json measurements = nlohmann::json::array();
  auto baseline = Measure(base, best, prompt, f);
  if (!baseline.ok()) {
    spdlog::set_level(level);
    spdlog::error("tune: baseline run failed: {}", std::string(baseline.status().message()));
    return 1;
  }
  Measurement best_m = *baseline;
  const std::vector<int32_t> reference = baseline->tokens;
  auto record = [&](const Knobs& k, const Measurement& m, bool identical, bool kept,
                    const std::string& note) {
    measurements.push_back({{"setting", Describe(k)},
                            {"tokens_per_second", m.mean},
                            {"sd", m.sd},
                            {"tokens_identical", identical},
                            {"kept", kept},
                            {"note", note}});
    std::cout << absl::StrCat(kept ? "keep " : "     ", Describe(k), ": ", m.mean, " tok/s (sd ",
                              m.sd, ")", note.empty() ? "" : absl::StrCat(" - ", note))
              << std::endl;
  };
  record(best, best_m, true, true, "baseline (plan)");
  const int n = f.repeats;
  auto try_knob = [&](auto set, const auto& values) {
    for (const auto& v : values) {
      Knobs k = best;
      set(k, v);
      if (Describe(k) == Describe(best)) continue;
      auto m = Measure(base, k, prompt, f);
      if (!m.ok()) {
        measurements.push_back(
            {{"setting", Describe(k)}, {"error", std::string(m.status().message())}});
        continue;
      }
      const bool identical = m->tokens == reference;
      const double noise = 2 * std::sqrt((m->sd * m->sd + best_m.sd * best_m.sd) / n);
      const bool faster = m->mean > best_m.mean + noise && m->mean > best_m.mean * (1 + f.min_gain);
      const bool keep = identical && faster;
      record(k, *m, identical, keep,
             !identical ? "greedy tokens differ: refused"
             : faster   ? ""
                        : absl::StrCat("not faster beyond noise (", noise, " tok/s)"));
      if (keep) {
        best = k;
        best_m = *m;
      }
    }
  };
  try_knob([](Knobs& k, int v) { k.prefetch_layers = v; }, std::vector<int>{0, 1, 2, 3});
  try_knob([](Knobs& k, int v) { k.io_threads = v; }, std::vector<int>{1, 2, 4, 8, 16});
  try_knob([](Knobs& k, const std::string& v) { k.policy = v; },
           std::vector<std::string>{"adaptive", "lru", "lfu", "routing"});
  try_knob([](Knobs& k, double v) { k.learned_pins = v; }, std::vector<double>{0.0, 0.25, 0.5});
  spdlog::set_level(level);

  auto machine = colibri::plan::ProbeMachine({.model_dir = f.node.options.model_dir}, nullptr);
  if (!machine.ok()) {
    spdlog::error("{}", std::string(machine.status().message()));
    return 1;
  }
  colibri::plan::TuneProfile profile;
  profile.fingerprint = colibri::plan::CurrentFingerprint(manifest, *machine);
  profile.settings = {best.prefetch_layers, best.io_threads, best.policy, best.learned_pins};
  profile.measurements = measurements;
  if (base.speculative == "auto") {
    // auto's costs, at the best settings, from runs long enough for it to try its drafter (a
    // drafter's catch-up over the prompt is only paid when the tokens left can earn it back).
    TuneFlags longer = f;
    longer.max_tokens = std::max<int64_t>(f.max_tokens, 8 * static_cast<int64_t>(prompt.size()));
    spdlog::set_level(spdlog::level::warn);
    auto m = Measure(base, best, prompt, longer);
    spdlog::set_level(level);
    if (m.ok() && !m->speculation_costs.is_null()) {
      profile.speculation[colibri::compute::SpeculationKey(base)] = m->speculation_costs;
      std::cout << "speculation costs measured over " << longer.max_tokens
                << "-token runs: " << m->speculation_costs.dump() << std::endl;
    } else if (!m.ok()) {
      spdlog::warn("tune: measuring speculation costs failed: {}",
                   std::string(m.status().message()));
    }
  }
  const std::filesystem::path out = f.out.empty() ? colibri::plan::DefaultTuneProfilePath(state_dir)
                                                  : std::filesystem::path(f.out);
  if (auto st = colibri::plan::WriteTuneProfile(out, profile); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    return 1;
  }
  std::cout << absl::StrCat("best: ", Describe(best), ": ", best_m.mean, " tok/s (baseline ",
                            baseline->mean, "); profile written to ", out.string())
            << std::endl;
  return 0;
}

}  // namespace

void AddTuneCommand(CLI::App& app) {
  auto shared = std::make_shared<TuneFlags>();
  TuneFlags& f = *shared;
  auto* tune = app.add_subcommand(
      "tune",
      "Measure prefetch depth, reader threads, cache policy and pin share on this machine; keep "
      "what is "
      "faster beyond noise with identical greedy tokens; save a profile colibri-server applies");
  AddCliNodeFlags(tune, &f.node);
  tune->add_option("--prompt-tokens", f.prompt_tokens,
                   "Prompt as comma-separated ids (default: ids 1..16)");
  tune->add_option("--max-tokens", f.max_tokens, "Tokens generated per run")->capture_default_str();
  tune->add_option("--repeats", f.repeats, "Measured runs per candidate (after one warm-up run)")
      ->capture_default_str();
  tune->add_option("--state", f.state, "cold: expert cache cleared before each run; warm: kept")
      ->capture_default_str();
  tune->add_option("--min-gain", f.min_gain, "Smallest relative speed-up kept")
      ->capture_default_str();
  tune->add_option("--out", f.out,
                   "Profile file (default <model>/tune_profile.json, where the server looks)");
  tune->callback([shared] { throw CLI::RuntimeError(RunTune(*shared)); });
}
