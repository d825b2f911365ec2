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

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace colibri::flags {

void AddConfigFileFlag(CLI::App* app);

// --config FILE for a binary of subcommands (colibri-cli), where CLI11 reads a config file for
// the top app only. Takes the command line without the program name, removes `--config FILE`
// (or --config=FILE) from it and puts the file's flags on the invoked subcommand (the leading
// words naming subcommands) as `--name=value` after the last of those words:
//
//   model = "/models/qwen3"     # top level: for whichever subcommand has a --model flag
//   threads = 2
//   [run]                       # a section: for `run` only
//   max-tokens = 64
//
// A flag the command line gives wins; a switch set to false is left off. Throws
// CLI::ConfigError for a top-level name no subcommand knows, a section naming no subcommand, a
// name the section's subcommand does not know, and CLI::FileError for a missing file.
std::vector<std::string> ExpandSubcommandConfig(const CLI::App& app, std::vector<std::string> args);

}  // namespace colibri::flags
