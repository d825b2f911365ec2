#include "cache_flags.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"
#include "colibri/expert_source/cache_policy.h"

namespace colibri::compute {

void AddCacheFlags(CLI::App* app, CacheFlags* f) {
  ExpertCacheConfig& c = f->cache;
  app->add_option("--backend", f->backend, "Where layers compute: cpu, or cuda (an NVIDIA GPU)")
      ->capture_default_str();
  app->add_option("--device", f->device, "CUDA device index (--backend cuda)")->capture_default_str();
  app->add_option("--vram-budget", f->vram_budget,
                  "VRAM expert cache budget (--backend cuda; the CPU backend ignores it and says so)")
      ->capture_default_str();
  // Another component may define the flag too: never twice.
  if (app->get_option_no_throw("--kv-cache-limit") == nullptr) {
    app->add_option("--kv-cache-limit", f->kv_cache_limit,
                    "Bytes of KV caches, apart from dense weights (auto: max-batch full contexts within a share of "
                    "free memory, logged at start; 0: unlimited)")
        ->capture_default_str();
    f->kv_flag_added = true;
  }
  app->add_option("--kv-offload-limit", f->kv_offload_limit,
                  "Host RAM for KV caches evicted from --kv-cache-limit, reused when a conversation resumes (0: "
                  "dropped)")
      ->capture_default_str();
  app->add_flag("--kv-offload-8bit", f->kv_offload_8bit,
                "Keep offloaded/persisted KV as 8-bit (Q8_0): 3.8x smaller, restored approximately");
  app->add_option("--kv-persist-dir", f->kv_persist_dir,
                  "Directory for KV caches across restarts (written when RAM is full and at shutdown)");
  app->add_option("--kv-persist-limit", f->kv_persist_limit,
                  "Bytes of KV cache files kept in --kv-persist-dir, oldest deleted first (0: no cap)")
      ->capture_default_str();
  app->add_option("--cache-policy", c.policy, "Expert cache policy: adaptive, lru, lfu or routing")->capture_default_str();
  app->add_option("--prefetch-layers", c.prefetch_layers, "Layers of lookahead prefetch (0: off)")->capture_default_str();
  app->add_option("--prefetch-min-weight", c.prefetch_min_weight,
                  "Prefetch only predicted experts with at least this predicted gate weight")
      ->capture_default_str();
  app->add_option("--io-threads", c.io_threads, "Expert reader threads below the cache (0: read inline)")
      ->capture_default_str();
  app->add_option("--direct-io", c.direct_io, "O_DIRECT expert reads from the model directory")->capture_default_str();
  app->add_option("--pinned-experts", c.pinned_experts, "JSON file of experts never evicted: [[layer, expert], ...]");
  app->add_option("--routing-heat", c.routing_heat,
                  "Routing heat file for learned pins (default <model>/routing_heat.json; 'none': not kept)");
  app->add_option("--learned-pins", c.learned_pin_fraction, "Share of the expert cache pinned from routing heat")
      ->capture_default_str();
  app->add_option("--warm-start", c.warm_start,
                  "Read experts into the cache in the background at start-up: auto (all when they fit, else the "
                  "hottest by routing heat) or off")
      ->check(CLI::IsMember({"auto", "off"}))
      ->capture_default_str();
  app->add_option("--trace-out", c.trace_out, "Write a routing trace (one JSON line per token and layer)");
  app->add_option("--max-batch", f->max_batch, "Requests decoded together in one batch (1: one at a time)")
      ->capture_default_str();
  app->add_option("--prefill-chunk", f->prefill_chunk,
                  "Prompt tokens per sequence in one forward step (smaller: decode rows of other requests wait less)")
      ->capture_default_str();
  app->add_option("--max-queued", f->max_queued, "Requests waiting for a batch slot; more get 429")
      ->capture_default_str();
}

absl::Status ApplyCacheFlags(const CacheFlags& f, ComputeNodeOptions* o) {
  o->cache = f.cache;
  auto vram = ParseSize(f.vram_budget);
  if (!vram.ok()) return absl::InvalidArgumentError(absl::StrCat("--vram-budget: ", vram.status().message()));
  o->cache.vram_bytes = *vram;
  if (f.backend != "cpu" && f.backend != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("--backend '", f.backend, "': expected cpu or cuda"));
  }
  if (f.device < 0) return absl::InvalidArgumentError("--device must be >= 0");
  o->backend = f.backend;
  o->device = f.device;
  if (f.kv_flag_added && f.kv_cache_limit == "auto") {
    o->kv_cache_limit = ComputeNodeOptions::kAutoKvLimit;
  } else if (f.kv_flag_added) {
    auto kv = ParseSize(f.kv_cache_limit);
    if (!kv.ok()) return absl::InvalidArgumentError(absl::StrCat("--kv-cache-limit: ", kv.status().message()));
    o->kv_cache_limit = *kv;
  }
  auto offload = ParseSize(f.kv_offload_limit);
  if (!offload.ok()) return absl::InvalidArgumentError(absl::StrCat("--kv-offload-limit: ", offload.status().message()));
  o->kv_offload_limit = *offload;
  o->kv_offload_8bit = f.kv_offload_8bit;
  o->kv_persist_dir = f.kv_persist_dir;
  auto persist_limit = ParseSize(f.kv_persist_limit);
  if (!persist_limit.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-persist-limit: ", persist_limit.status().message()));
  }
  o->kv_persist_limit = *persist_limit;
  if (auto p = expert_source::ParseCachePolicy(f.cache.policy); !p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--cache-policy: ", p.status().message()));
  }
  if (f.max_batch < 1 || f.max_queued < 0) {
    return absl::InvalidArgumentError("--max-batch must be >= 1 and --max-queued >= 0");
  }
  o->max_batch = f.max_batch;
  o->max_queued = f.max_queued;
  if (f.prefill_chunk < 1 || f.prefill_chunk > 65536) {
    return absl::InvalidArgumentError("--prefill-chunk must be between 1 and 65536");
  }
  o->prefill_chunk = f.prefill_chunk;
  if (f.cache.prefetch_layers < 0) return absl::InvalidArgumentError("--prefetch-layers must be >= 0");
  if (f.cache.io_threads < 0 || f.cache.io_threads > 64) {
    return absl::InvalidArgumentError("--io-threads must be between 0 and 64");
  }
  return absl::OkStatus();
}

}  // namespace colibri::compute
