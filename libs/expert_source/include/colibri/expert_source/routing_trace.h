// Routing traces: what the router chose, one JSON line per token and layer, and their replay
// through a cache tier against Belady's offline optimum, with or without lookahead prefetch.
//
// File format (JSON lines). The first line is a header:
//   {"format": "colibri-routing-trace", "version": 1 | 2, "model": NAME, "n_layers": L,
//    "n_experts": E, "top_k": K, "block_bytes": B, "lookahead_layers": N}
// then one record per token (batch row) and layer, in execution order:
//   {"step": S, "item": I, "pos": P, "layer": l, "experts": [e1, e2], "weights": [w1, w2],
//    "probs": [p0, ..., pE-1], "lookahead": [[experts for l+1], ..., [experts for l+N]]}
// `step` numbers the forward passes (a batch of rows shares a step), `item` is the row in the
// batch, `pos` its position in its sequence, `weights` the gate weights applied to the chosen
// experts, `probs` the router's softmax over every expert of the layer (optional on read).
// Version 2 adds `lookahead_layers` (header, 1..16) and `lookahead` (optional per record): the
// experts the next layers' routers pick when applied to this layer's hidden state (what the
// engine prefetches); entry d-1 is for layer l+d, at most N entries, none past the last layer.
// A version 1 file must not carry lookahead. The reader rejects anything else with
// InvalidArgument naming the file and line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/expert_source/cache_policy.h"
#include "colibri/expert_source/expert_source.h"

namespace colibri::expert_source {

inline constexpr int kMaxTraceLookahead = 16;  // most lookahead layers a trace may record

struct TraceHeader {
  std::string model;
  int n_layers = 0;
  int n_experts = 0;
  int top_k = 0;
  uint64_t block_bytes = 0;  // bytes of one expert block (0: unknown)
  int lookahead_layers = 0;  // > 0: version 2, records may carry lookahead predictions
};

struct TraceRecord {
  int64_t step = 0;
  int64_t item = 0;
  int64_t pos = 0;
  int32_t layer = 0;
  std::vector<int32_t> experts;
  std::vector<float> weights;
  std::vector<float> probs;  // empty when not recorded
  // lookahead[d - 1]: experts predicted for layer + d from this layer's hidden state.
  std::vector<std::vector<int32_t>> lookahead;
};

// Appends records to a trace file. Thread-safe; lines are never interleaved.
class RoutingTraceWriter {
 public:
  static absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> Open(const std::filesystem::path& path,
                                                                  const TraceHeader& header);
  ~RoutingTraceWriter();
  void Write(const TraceRecord& record);
  // The next forward pass's step number (the engine calls it once per forward).
  int64_t NextStep();
  absl::Status Flush();
  uint64_t records() const;

 private:
  RoutingTraceWriter() = default;
  mutable std::mutex mu_;
  std::ofstream out_;
  std::filesystem::path path_;
  int64_t step_ = 0;
  uint64_t records_ = 0;
};

struct Trace {
  TraceHeader header;
  std::vector<TraceRecord> records;
};

// InvalidArgument naming the line for malformed input.
absl::StatusOr<Trace> ReadTrace(const std::filesystem::path& path);

// One forward pass's demand on one layer: the union of the experts its rows chose (what the
// engine fetches, once each), and the routing hints it reports first.
struct TraceAccess {
  int32_t layer = 0;
  std::vector<int32_t> experts;  // ascending
  std::vector<RoutingHint> hints;
  // lookahead[d - 1]: the union over the rows of the experts predicted for layer + d (ascending).
  std::vector<std::vector<int32_t>> lookahead;
};
std::vector<TraceAccess> TraceAccesses(const Trace& trace);

struct ReplayResult {
  uint64_t lookups = 0;
  uint64_t hits = 0;
  double hit_rate() const {
    return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0;
  }
};

// Replays the accesses through a real CacheTier holding `capacity_blocks` blocks (unit-sized,
// reads on the caller's thread) with `policy`, reporting its demand hit rate.
ReplayResult ReplayWithPolicy(const std::vector<TraceAccess>& accesses, uint64_t capacity_blocks,
                              CachePolicyKind policy, const CachePolicyParams& params);
// The same with the budget split evenly per layer (one tier per layer, the remainder going to
// the first layers) instead of one pool.
ReplayResult ReplayPerLayer(const std::vector<TraceAccess>& accesses, int n_layers,
                            uint64_t capacity_blocks, CachePolicyKind policy, int n_experts,
                            int top_k);

struct PrefetchReplayResult {
  uint64_t lookups = 0;
  uint64_t hits = 0;              // resident at the demand (prefetched blocks included)
  uint64_t prefetch_hits = 0;     // of those, blocks a prefetch had read: in time by construction
  uint64_t prefetch_reads = 0;    // blocks read by prefetch
  uint64_t prefetch_wasted = 0;   // prefetch reads no demand used
  uint64_t prefetch_dropped = 0;  // predictions not read: no room without evicting guarded blocks
  uint64_t wasted_bytes = 0;      // prefetch_wasted x the trace's block_bytes (x 1 without one)
  // Demanded blocks that were resident, whether cached or prefetched in time.
  double coverage() const {
    return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0;
  }
};
// Replays the accesses as the engine runs them, through a real CacheTier of `capacity_blocks`
// unit blocks: per layer, Prefetch(the predictions of the next `depth` layers, nearest first),
// Hint, Cancel(the layer's mispredicted blocks), FetchMany. Every prefetch completes before the
// next demand (the bound for a disk fast enough to read a prediction within a layer's compute);
// a prefetched block is guarded for two tokens. depth 0: no prefetch.
PrefetchReplayResult ReplayWithPrefetch(const std::vector<TraceAccess>& accesses,
                                        uint64_t capacity_blocks, CachePolicyKind policy,
                                        const CachePolicyParams& params, int depth,
                                        uint64_t block_bytes);
// Belady's MIN: the offline optimum for the same accesses and capacity (every miss admitted,
// the block whose next use is furthest away evicted).
ReplayResult ReplayBelady(const std::vector<TraceAccess>& accesses, uint64_t capacity_blocks);

}  // namespace colibri::expert_source
