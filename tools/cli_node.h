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
  std::string cache_size = "2G";
  colibri::compute::CacheFlags cache;
};

// `model_required`: chat makes --model optional (it can use --url instead).
void AddNodeFlags(CLI::App* app, NodeFlags* flags, bool model_required = true);

// Ends a subcommand: prints "error: what" and makes `code` main()'s exit status (CLI11 turns a
// RuntimeError thrown from a subcommand callback into it).
[[noreturn]] void Fail(int code, const std::string& what);

// The node; InvalidArgument naming the flag for a bad size, the node's own error otherwise.
absl::StatusOr<std::unique_ptr<colibri::compute::ComputeNode>> CreateNode(const NodeFlags& flags);
