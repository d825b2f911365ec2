// The router's ComputeClient over a compute node in the same process (colibri-server, colibri-cli
// chat): the engine called directly, no gRPC. Here in apps/, so the router links no compute.
#pragma once

#include <memory>

#include "compute_client.h"
#include "compute_node.h"

namespace colibri::router {

std::unique_ptr<ComputeClient> MakeInProcessComputeClient(compute::ComputeNode* node);

}  // namespace colibri::router
