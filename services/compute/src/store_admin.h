// Admin routes for a compute node's expert stores (served next to /admin/stats):
//
// GET  /admin/stores -> 200 {"stores": [{"target", "up", "full_copy", "received_bytes",
//   "shm_blocks", "outstanding_bytes", "reconnects"}], "failovers"}
// POST /admin/stores {"target": "host:port" | "unix:/path"} -> 200 {"added": target}: the store
//   joins the running node (its reads start once a probe finds it up, within a second);
//   400 on a malformed body or target (host:port with port 1..65535, or unix:/absolute/path; a
//   plaintext non-loopback target without --insecure), 409 for a store the node has already or
//   when the node reads experts from its model directory.
#pragma once

#include <vector>

#include "colibri/metrics/metrics.h"
#include "compute_node.h"

namespace colibri::compute {

// `node` must outlive the server serving them.
std::vector<metrics::HttpRoute> StoreAdminRoutes(ComputeNode* node);

}  // namespace colibri::compute
