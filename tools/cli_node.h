// The flags colibri-cli's in-process commands (run, bench, chat --model, tune) share to build a
// compute node over a model directory: --model and the compute node's flags (NodeFlags, the
// same as colibri-server and colibri-compute take). One definition, so every command takes the
// same settings.
#pragma once

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "compute_node.h"
#include "node_flags.h"

using colibri::compute::NodeFlags;

// --model (into flags->options.model_dir) and the node's flags. `model_required`: chat makes
// --model optional (it can use --url instead).
void AddCliNodeFlags(CLI::App* app, NodeFlags* flags, bool model_required = true);

// Ends a subcommand: prints "error: what" and makes `code` main()'s exit status (CLI11 turns a
// RuntimeError thrown from a subcommand callback into it).
[[noreturn]] void Fail(int code, const std::string& what);

// Builds the node into *node and returns 0, or prints the error and returns the exit status:
// 2 for a bad flag (naming it), 1 when the node cannot be built (a bad model, pins file, ...).
int CreateNode(const NodeFlags& flags, std::unique_ptr<colibri::compute::ComputeNode>* node);
