#include "node_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/cache_policy.h"

namespace colibri::compute {

void AddNodeFlags(CLI::App* app, NodeFlags* f) {
  ComputeNodeOptions& o = f->options;
  ExpertCacheConfig& c = o.cache;
  app->add_option(
         "--threads", o.threads,
         "Compute threads (0: the cores this process may use: affinity mask, cgroup CPU quota)")
      ->capture_default_str();
  app->add_flag("--fixed-threads", o.fixed_threads,
                "Run every CPU op on all --threads threads. By default forward passes of a size "
                "where that measures faster (other processes busy on the cores) run their small "
                "ops on one thread");
  app->add_option("--memory-limit", f->memory_limit,
                  "The process's host-memory budget, split into dense weights, expert cache, KV, "
                  "scratch, I/O and drafter (auto: the memory cgroup's limit, else MemAvailable, "
                  "less headroom; see colibri-cli plan)")
      ->capture_default_str();
  app->add_option("--expert-cache-size", f->expert_cache_size,
                  "Host-RAM expert cache budget, e.g. 512M, 8G (auto: every expert if they fit in "
                  "3/4 of what --memory-limit leaves, else that 3/4; see colibri-cli plan)")
      ->capture_default_str();
  app->add_option("--backend", o.backend, "Where layers compute: cpu, or cuda (an NVIDIA GPU)")
      ->capture_default_str();
  app->add_option("--device", o.device, "CUDA device index (--backend cuda)")
      ->capture_default_str();
  app->add_option("--vram-budget", f->vram_budget,
                  "VRAM expert cache budget (--backend cuda; auto: 3/4 of the device memory left; "
                  "the CPU backend "
                  "ignores it)")
      ->capture_default_str();
  app->add_option("--kv-cache-limit", f->kv_cache_limit,
                  "Bytes of KV caches, apart from dense weights (auto: max-batch full contexts "
                  "within a share of "
                  "free memory, logged at start; 0: unlimited)")
      ->capture_default_str();
  app->add_option("--kv-offload-limit", f->kv_offload_limit,
                  "Host RAM for KV caches evicted from --kv-cache-limit, reused when a "
                  "conversation resumes (0: "
                  "dropped)")
      ->capture_default_str();
  app->add_flag(
      "--kv-offload-8bit", o.kv_offload_8bit,
      "Keep offloaded/persisted KV as 8-bit (Q8_0): 3.8x smaller, restored approximately");
  app->add_option(
      "--kv-persist-dir", o.kv_persist_dir,
      "Directory for KV caches across restarts (written when RAM is full and at shutdown)");
  app->add_option(
         "--kv-persist-limit", f->kv_persist_limit,
         "Bytes of KV cache files kept in --kv-persist-dir, oldest deleted first (0: no cap)")
      ->capture_default_str();
  app->add_option("--cache-policy", f->cache_policy,
                  "Expert cache policy: adaptive, lru, lfu or routing (auto: a tune profile's, "
                  "else adaptive)")
      ->capture_default_str();
  app->add_option("--prefetch-layers", f->prefetch_layers,
                  "Layers of lookahead prefetch (auto: 2 on NVMe, else 1; 0: off)")
      ->capture_default_str();
  app->add_option("--prefetch-min-weight", c.prefetch_min_weight,
                  "Prefetch only predicted experts with at least this predicted gate weight")
      ->capture_default_str();
  app->add_option(
         "--io-threads", f->io_threads,
         "Expert reader threads below the cache (auto: 8 NVMe, 4 SSD, 2 HDD; 0: read inline)")
      ->capture_default_str();
  app->add_option("--direct-io", c.direct_io, "O_DIRECT expert reads from the model directory")
      ->capture_default_str();
  app->add_option("--pinned-experts", c.pinned_experts,
                  "JSON file of experts never evicted: [[layer, expert], ...]");
  app->add_option(
      "--routing-heat", c.routing_heat,
      "Routing heat file for learned pins (default <model>/routing_heat.json; 'none': not kept)");
  app->add_option(
         "--learned-pins", f->learned_pins,
         "Share of the expert cache pinned from routing heat (auto: a tune profile's, else 0.25)")
      ->capture_default_str();
  app->add_option("--warm-start", c.warm_start,
                  "Read experts into the cache in the background at start-up: auto (all when they "
                  "fit, else the "
                  "hottest by routing heat) or off")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  app->add_option(
      "--tune-profile", o.tune_profile,
      "Settings measured by colibri-cli tune, applied to those left on auto when binary, model and "
      "machine match (default <model>/tune_profile.json; 'none': not read)");
  app->add_option("--trace-out", c.trace_out,
                  "Write a routing trace (one JSON line per token and layer)");
  app->add_option("--max-batch", o.max_batch,
                  "Requests decoded together in one batch (1: one at a time)")
      ->capture_default_str();
  app->add_option("--prefill-chunk", o.prefill_chunk,
                  "Prompt tokens per sequence in one forward step (smaller: decode rows of other "
                  "requests wait less)")
      ->capture_default_str();
  app->add_flag("--fair-prefill,!--no-fair-prefill", o.fair_prefill,
                "While other requests decode, cap a step's prompt tokens so the step takes about "
                "two decode steps at most (measured): streams keep their pace while a long prompt "
                "prefills")
      ->capture_default_str();
  app->add_option("--max-queued", o.max_queued, "Requests waiting for a batch slot; more get 429")
      ->capture_default_str();
  app->add_option("--speculative", o.speculative,
                  "Speculative decoding: off, auto (drafts per sequence when measured to pay), "
                  "ngram (prompt lookup), "
                  "self (--draft-experts), draft (--draft-model) or mtp (the model's own "
                  "MTP/NextN layer: DeepSeek-V3, GLM-4.5)")
      ->capture_default_str();
  app->add_option("--draft-max", o.draft_max, "Drafted tokens verified per pass, at most (1..16)")
      ->capture_default_str();
  app->add_option("--draft-experts", o.draft_experts,
                  "Self-speculation: a copy of the experts quantized to this type at load (e.g. "
                  "q2_k), held in RAM");
  app->add_option("--draft-model", o.draft_model_dir,
                  "Speculation with a second colibri model (same vocabulary), held in RAM");
}

namespace {

absl::StatusOr<uint64_t> Size(const std::string& flag, const std::string& value) {
  auto v = ParseSize(value);
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", v.status().message()));
  return *v;
}

// "auto" -> kAuto; else a size.
absl::StatusOr<uint64_t> AutoSize(const std::string& flag, const std::string& value) {
  if (value == "auto") return ComputeNodeOptions::kAuto;
  return Size(flag, value);
}

// "auto" -> -1; else an integer in [lo, hi].
absl::StatusOr<int> AutoInt(const std::string& flag, const std::string& value, int lo, int hi) {
  if (value == "auto") return -1;
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "': expected auto or an integer from ", lo, " to ", hi));
  }
  return v;
}

}  // namespace

absl::StatusOr<ComputeNodeOptions> ResolveNodeFlags(const NodeFlags& f) {
  ComputeNodeOptions o = f.options;
  ASSIGN_OR_RETURN(o.memory_limit, AutoSize("--memory-limit", f.memory_limit));
  if (o.memory_limit == 0) return absl::InvalidArgumentError("--memory-limit must be positive");
  ASSIGN_OR_RETURN(o.expert_cache_bytes, AutoSize("--expert-cache-size", f.expert_cache_size));
  ASSIGN_OR_RETURN(o.cache.vram_bytes, AutoSize("--vram-budget", f.vram_budget));
  ASSIGN_OR_RETURN(o.cache.prefetch_layers, AutoInt("--prefetch-layers", f.prefetch_layers, 0, 8));
  ASSIGN_OR_RETURN(o.cache.io_threads, AutoInt("--io-threads", f.io_threads, 0, 64));
  ASSIGN_OR_RETURN(o.kv_cache_limit, AutoSize("--kv-cache-limit", f.kv_cache_limit));
  ASSIGN_OR_RETURN(o.kv_offload_limit, Size("--kv-offload-limit", f.kv_offload_limit));
  ASSIGN_OR_RETURN(o.kv_persist_limit, Size("--kv-persist-limit", f.kv_persist_limit));
  o.cache.policy = f.cache_policy == "auto" ? "" : f.cache_policy;
  if (auto p = expert_source::ParseCachePolicy(o.cache.policy);
      !o.cache.policy.empty() && !p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cache-policy: ", p.status().message()));
  }
  if (f.learned_pins == "auto") {
    o.cache.learned_pin_fraction = -1;
  } else if (!absl::SimpleAtod(f.learned_pins, &o.cache.learned_pin_fraction) ||
             o.cache.learned_pin_fraction < 0 || o.cache.learned_pin_fraction > 0.9) {
    return absl::InvalidArgumentError(
        absl::StrCat("--learned-pins '", f.learned_pins, "': expected auto or 0 to 0.9"));
  }
  if (o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend '", o.backend, "': expected cpu or cuda"));
  }
  if (o.device < 0) return absl::InvalidArgumentError("--device must be >= 0");
  if (o.max_batch < 1 || o.max_queued < 0) {
    return absl::InvalidArgumentError("--max-batch must be >= 1 and --max-queued >= 0");
  }
  if (o.prefill_chunk < 1 || o.prefill_chunk > 65536) {
    return absl::InvalidArgumentError("--prefill-chunk must be between 1 and 65536");
  }
  if (auto m = engine::ParseSpeculativeMode(o.speculative); !m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--speculative: ", m.status().message()));
  }
  if (o.draft_max < 1 || o.draft_max > 16)
    return absl::InvalidArgumentError("--draft-max must be between 1 and 16");
  return o;
}

}  // namespace colibri::compute
