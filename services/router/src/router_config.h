// colibri-router's configuration: every flag it takes, with its default, parsed once in main.
// The groups it shares with colibri-server (FrontFlags) and every service (auth SecurityFlags)
// are defined once, there.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/auth/flags.h"
#include "front_flags.h"

namespace colibri::router {

struct RouterConfig {
  std::string model_dir;              // tokenizer files and manifest
  std::vector<std::string> computes;  // colibri-compute addresses; a conversation sticks to one
  std::string grpc_listen = "127.0.0.1:50050";
  FrontFlags front;
  auth::SecurityFlags security;
};

void AddRouterFlags(CLI::App* app, RouterConfig* config);

}  // namespace colibri::router
