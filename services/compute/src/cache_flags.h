// The expert-cache flags shared by colibri-server, colibri-compute and colibri-cli run, parsed
// into ComputeNodeOptions. "auto" (the default of the budgets and knobs marked so) leaves the
// value to the planner (colibri/plan/planner.h) and a matching tune profile, resolved and
// logged by ComputeNode::Create; a value given explicitly always wins.
//   --expert-cache-size SIZE  host-RAM expert cache budget (auto)
//   --backend cpu|cuda        where layers compute (cpu)
//   --device N                CUDA device index (0)
//   --vram-budget SIZE        VRAM tier budget (auto; 0 on the CPU backend, which ignores it)
//   --kv-cache-limit SIZE     bytes of KV caches, apart from dense weights (auto; 0: unlimited)
//   --kv-offload-limit SIZE   host RAM for KV caches evicted from that limit (0: dropped)
//   --kv-offload-8bit         keep offloaded KV as Q8_0 (approximate: tokens may differ)
//   --kv-persist-dir DIR      KV caches kept on disk across restarts (conversations reopen warm)
//   --kv-persist-limit SIZE   bytes of KV files in that directory, oldest deleted first (0: no cap)
//   --cache-policy P          auto | adaptive | lru | lfu | routing (auto: a tune profile's, else adaptive)
//   --prefetch-layers N       lookahead prefetch depth (auto; 0: off)
//   --prefetch-min-weight W   prefetch only predictions with a predicted gate weight >= W (0)
//   --io-threads N            reader threads below the cache (auto; 0: read inline)
//   --direct-io BOOL          O_DIRECT reads of the model directory (true; falls back to buffered)
//   --pinned-experts FILE     experts never evicted: JSON [[layer, expert], ...]
//   --routing-heat FILE       persisted routing heat (<model>/routing_heat.json; "none": not kept)
//   --learned-pins FRACTION   share of the expert cache pinned from routing heat (auto: a tune
//                             profile's, else 0.25)
//   --tune-profile FILE       settings measured by colibri-cli tune (<model>/tune_profile.json; none)
//   --warm-start auto|off     read experts into the cache in the background at start-up (auto:
//                             all of them when they fit, else the hottest by routing heat)
//   --trace-out FILE          routing trace: one JSON line per token and layer
//   --speculative MODE        off | auto | ngram | self | draft | mtp (speculative decoding; off)
//   --draft-max N             drafted tokens per verify pass, at most (4)
//   --draft-experts TYPE      self drafter: the experts quantized to TYPE (q2_k) held in RAM
//   --draft-model DIR         draft drafter: a second colibri model, same vocabulary, in RAM
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "compute_node.h"

namespace colibri::compute {

struct CacheFlags {
  std::string expert_cache_size = "auto";
  std::string backend = "cpu";
  int device = 0;
  std::string vram_budget = "auto";
  std::string kv_cache_limit = "auto";
  std::string kv_offload_limit = "0";
  bool kv_offload_8bit = false;
  std::string kv_persist_dir;
  std::string kv_persist_limit = "0";
  std::string prefetch_layers = "auto";
  std::string io_threads = "auto";
  std::string cache_policy = "auto";
  std::string learned_pins = "auto";
  std::string tune_profile;
  ExpertCacheConfig cache;  // the other cache settings, bound directly
  bool kv_flag_added = false;
  int max_batch = 16;           // sequences decoded together (continuous batching)
  int max_queued = 256;         // requests waiting for a batch slot
  int64_t prefill_chunk = 512;  // prompt tokens per sequence per forward step
  std::string speculative = "off";
  int draft_max = 4;
  std::string draft_experts;
  std::string draft_model;
};

void AddCacheFlags(CLI::App* app, CacheFlags* flags);
// Sizes parsed and checked; InvalidArgument naming the flag.
absl::Status ApplyCacheFlags(const CacheFlags& flags, ComputeNodeOptions* options);

}  // namespace colibri::compute
