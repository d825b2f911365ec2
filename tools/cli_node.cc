#include "cli_node.h"

#include <cstdio>

void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  throw CLI::RuntimeError(code);
}

void AddCliNodeFlags(CLI::App* app, NodeFlags* f, bool model_required) {
  auto* model = app->add_option("--model", f->options.model_dir, "Model directory or GGUF file");
  if (model_required) model->required();
  colibri::compute::AddNodeFlags(app, f);
}

int CreateNode(const NodeFlags& f, std::unique_ptr<colibri::compute::ComputeNode>* node) {
  auto options = colibri::compute::ResolveNodeFlags(f);
  if (!options.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  auto created = colibri::compute::ComputeNode::Create(*options);
  if (!created.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  *node = std::move(*created);
  return 0;
}
