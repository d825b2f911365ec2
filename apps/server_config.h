// colibri-server's configuration: every flag it takes, with its default, parsed once in main.
// Its groups are the ones the cluster's binaries define: the compute node's (NodeFlags, as
// colibri-compute and colibri-cli take them), the router's front (FrontFlags, as
// colibri-router) and security (auth SecurityFlags, as every service).
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "colibri/auth/flags.h"
#include "front_flags.h"
#include "node_flags.h"

namespace colibri::server {

struct ServerConfig {
  compute::NodeFlags node;  // --model binds node.options.model_dir
  router::FrontFlags front;
  std::string grpc_listen;  // empty: no Router gRPC API
  auth::SecurityFlags security;
};

void AddServerFlags(CLI::App* app, ServerConfig* config);

}  // namespace colibri::server
