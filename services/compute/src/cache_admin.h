// Operations on a running compute node's expert cache: the numbers `colibri-cli stats` prints
// (GET /admin/stats) and `colibri-cli cache clear` (POST /admin/cache/clear). colibri-compute
// serves these routes on its metrics port, colibri-server on its HTTP port.
//
// GET /admin/stats -> 200 {"model", "policy", "tiers": [...], "prefetch": {...}, "tokens",
//   "expert_bytes_per_token", "stall_seconds", "stall_ms_per_token", "memory": {...},
//   "pins": {...}, "disk": {...}}  (see NodeStatsJson)
// POST /admin/cache/clear {"model": NAME} -> 200 {"model", "cleared_blocks", "cleared_bytes"};
//   404 when NAME is not the node's model, 400 on a malformed body.
#pragma once

#include <vector>

#include "colibri/metrics/metrics.h"
#include "compute_node.h"
#include "nlohmann/json.hpp"

namespace colibri::compute {

nlohmann::ordered_json NodeStatsJson(ComputeNode& node);

// Where the experts are, for the web page's tier bar and heat map: {"layers", "experts",
// "expert_bytes" (the model's), "tiers": {"ram": {"bytes", "capacity_bytes"}, "vram": {...}}}
// (vram only with a VRAM tier).
nlohmann::ordered_json TierSummaryJson(ComputeNode& node);

// The admin routes; `node` must outlive the server serving them.
std::vector<metrics::HttpRoute> AdminRoutes(ComputeNode* node);

}  // namespace colibri::compute
