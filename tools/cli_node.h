// The flags colibri-cli's in-process commands (run, bench, chat --model) share to build a
// compute node over a model directory: --model, --threads, --expert-cache-size and the cache
// flags (cache_flags.h). One definition, so every command takes the same settings.
#pragma once

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "cache_flags.h"
#include "compute_node.h"

struct NodeFlags {
  std::string model_dir;
  int threads = 0;
  colibri::compute::CacheFlags cache;  // --expert-cache-size is among them (auto by default)
};

// `model_required`: chat makes --model optional (it can use --url instead).
void AddNodeFlags(CLI::App* app, NodeFlags* flags, bool model_required = true);

// Ends a subcommand: prints "error: what" and makes `code` main()'s exit status (CLI11 turns a
// RuntimeError thrown from a subcommand callback into it).
[[noreturn]] void Fail(int code, const std::string& what);

// Builds the node into *node and returns 0, or prints the error and returns the exit status:
// 2 for a bad flag (naming it), 1 when the node cannot be built (a bad model, pins file, ...).
int CreateNode(const NodeFlags& flags, std::unique_ptr<colibri::compute::ComputeNode>* node);
