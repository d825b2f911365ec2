#include "cli_node.h"

#include <cstdio>

void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  throw CLI::RuntimeError(code);
}

void AddNodeFlags(CLI::App* app, NodeFlags* f, bool model_required) {
  auto* model = app->add_option("--model", f->model_dir, "Model directory");
  if (model_required) model->required();
  app->add_option("--threads", f->threads, "Compute threads (0: physical cores)");
  colibri::compute::AddCacheFlags(app, &f->cache);
}

int CreateNode(const NodeFlags& f, std::unique_ptr<colibri::compute::ComputeNode>* node) {
  colibri::compute::ComputeNodeOptions options;
  options.model_dir = f.model_dir;
  options.threads = f.threads;
  if (auto st = colibri::compute::ApplyCacheFlags(f.cache, &options); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  auto created = colibri::compute::ComputeNode::Create(options);
  if (!created.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  *node = std::move(*created);
  return 0;
}
