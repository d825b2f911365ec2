// The flags of the router's front, one definition for colibri-router and colibri-server: the
// HTTP API's (AddHttpFlags), --served-model-name, --prefetch-hints, --port-file (the bound HTTP
// port) and --grpc-port-file (the bound Router gRPC port). --grpc-listen is each binary's own:
// colibri-router always serves gRPC (127.0.0.1:50050), colibri-server only when it is given.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "http_api.h"
#include "router_core.h"

namespace colibri::router {

struct FrontFlags {
  HttpOptions http;
  std::vector<std::string> served_names;  // empty: the model's own name
  size_t prefetch_hints = 64;             // experts hinted per known conversation (0: off)
  std::string port_file;
  std::string grpc_port_file;
};

void AddFrontFlags(CLI::App* app, FrontFlags* flags);

// Gives `core` what the flags say of it: the served names (InvalidArgument for a bad one) and
// the prefetch hint budget.
absl::Status ApplyFrontFlags(const FrontFlags& flags, RouterCore* core);

}  // namespace colibri::router
