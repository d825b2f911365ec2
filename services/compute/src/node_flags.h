// The flags of a compute node, one definition for every binary that builds one (colibri-server,
// colibri-compute, colibri-cli run / bench / chat / tune): threads, backend, expert cache, KV,
// batching and speculative decoding. A flag whose value is the option's own is bound straight
// into ComputeNodeOptions (its default is the one in compute_node.h); a flag typed as text
// ("auto" or a size) is parsed by ResolveNodeFlags. "auto" (the default of the budgets and knobs
// marked so) leaves the value to the planner (colibri/plan/planner.h) and a matching tune
// profile, resolved and logged by ComputeNode::Create; a value given explicitly always wins.
//   --threads N               compute threads (0: the usable cores: affinity mask, cgroup quota)
//   --fixed-threads           every CPU op on all of them, even where one thread measures faster
//   --memory-limit SIZE       the process's host-memory budget, split by the planner (auto:
//                             the memory cgroup's limit, else MemAvailable, less headroom)
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
//   --max-batch N             sequences decoded together (16)
//   --max-queued N            requests waiting for a batch slot (256)
//   --prefill-chunk N         prompt tokens per sequence per forward step (512)
//   --[no-]fair-prefill       next to decode rows, a step's prompt tokens capped (on)
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "compute_node.h"

namespace colibri::compute {

struct NodeFlags {
  // Bound directly: model_dir and stores are the binary's to bind (--model, --store); the
  // rest below from the flags of AddNodeFlags.
  ComputeNodeOptions options;
  // Typed as text, parsed by ResolveNodeFlags.
  std::string memory_limit = "auto";
  std::string expert_cache_size = "auto";
  std::string vram_budget = "auto";
  std::string kv_cache_limit = "auto";
  std::string kv_offload_limit = "0";
  std::string kv_persist_limit = "0";
  std::string prefetch_layers = "auto";
  std::string io_threads = "auto";
  std::string cache_policy = "auto";
  std::string learned_pins = "auto";
};

void AddNodeFlags(CLI::App* app, NodeFlags* flags);
// flags.options with the text flags parsed and every value checked; InvalidArgument naming the
// flag.
absl::StatusOr<ComputeNodeOptions> ResolveNodeFlags(const NodeFlags& flags);

}  // namespace colibri::compute
