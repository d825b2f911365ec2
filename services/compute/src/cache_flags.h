// The expert-cache flags shared by colibri-server, colibri-compute and colibri-cli run, parsed
// into ComputeNodeOptions (--expert-cache-size stays with each binary):
//   --backend cpu|cuda        where layers compute (cpu)
//   --device N                CUDA device index (0)
//   --vram-budget SIZE        VRAM tier budget (0; needs --backend cuda, no effect on the CPU one)
//   --kv-cache-limit SIZE     bytes of KV caches, apart from dense weights (auto: kv_limit.h; 0: unlimited)
//   --kv-offload-limit SIZE   host RAM for KV caches evicted from that limit (0: dropped)
//   --kv-offload-8bit         keep offloaded KV as Q8_0 (approximate: tokens may differ)
//   --kv-persist-dir DIR      KV caches kept on disk across restarts (conversations reopen warm)
//   --kv-persist-limit SIZE   bytes of KV files in that directory, oldest deleted first (0: no cap)
//   --cache-policy P          adaptive | lru | lfu | routing (adaptive)
//   --prefetch-layers N       lookahead prefetch depth (1; 0: off)
//   --prefetch-min-weight W   prefetch only predictions with a predicted gate weight >= W (0)
//   --io-threads N            reader threads below the cache (4)
//   --direct-io BOOL          O_DIRECT reads of the model directory (true; falls back to buffered)
//   --pinned-experts FILE     experts never evicted: JSON [[layer, expert], ...]
//   --routing-heat FILE       persisted routing heat (<model>/routing_heat.json; "none": not kept)
//   --learned-pins FRACTION   share of the expert cache pinned from routing heat (0.25)
//   --warm-start auto|off     read experts into the cache in the background at start-up (auto:
//                             all of them when they fit, else the hottest by routing heat)
//   --trace-out FILE          routing trace: one JSON line per token and layer
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "compute_node.h"

namespace colibri::compute {

struct CacheFlags {
  std::string backend = "cpu";
  int device = 0;
  std::string vram_budget = "0";
  std::string kv_cache_limit = "auto";
  std::string kv_offload_limit = "0";
  bool kv_offload_8bit = false;
  std::string kv_persist_dir;
  std::string kv_persist_limit = "0";
  ExpertCacheConfig cache;
  bool kv_flag_added = false;
  int max_batch = 16;    // sequences decoded together (continuous batching)
  int max_queued = 256;  // requests waiting for a batch slot
  int64_t prefill_chunk = 512;  // prompt tokens per sequence per forward step
};

void AddCacheFlags(CLI::App* app, CacheFlags* flags);
// Sizes parsed and checked; InvalidArgument naming the flag.
absl::Status ApplyCacheFlags(const CacheFlags& flags, ComputeNodeOptions* options);

}  // namespace colibri::compute
