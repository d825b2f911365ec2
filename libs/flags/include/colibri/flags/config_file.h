// --config FILE, one definition for the service binaries (colibri-server, colibri-compute,
// colibri-router, colibri-expert-store): their flags read from a TOML file as well as from the
// command line. A line per flag, named as the flag without its leading dashes:
//
//   expert-cache-size = "8G"
//   store = ["10.0.0.1:50051", "10.0.0.2:50051"]   # a repeatable flag takes an array
//   kv-offload-8bit = true                          # a switch takes true / false
//
// A flag given on the command line wins over the file; a name the binary does not know is an
// error, as it is on the command line. CLI11 reads the file during parse, so a binary's Config
// is the same whether a value came from the file or a flag.
#pragma once

#include "CLI/CLI.hpp"

namespace colibri::flags {

void AddConfigFileFlag(CLI::App* app);

}  // namespace colibri::flags
