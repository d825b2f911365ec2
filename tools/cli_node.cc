#include "cli_node.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/core/units.h"

void Fail(int code, const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  throw CLI::RuntimeError(code);
}

void AddNodeFlags(CLI::App* app, NodeFlags* f, bool model_required) {
  auto* model = app->add_option("--model", f->model_dir, "Model directory");
  if (model_required) model->required();
  app->add_option("--threads", f->threads, "Compute threads (0: physical cores)");
  app->add_option("--expert-cache-size", f->cache_size, "Host-RAM expert cache budget")->capture_default_str();
  colibri::compute::AddCacheFlags(app, &f->cache);
}

absl::StatusOr<std::unique_ptr<colibri::compute::ComputeNode>> CreateNode(const NodeFlags& f) {
  auto cache_bytes = colibri::ParseSize(f.cache_size);
  if (!cache_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--expert-cache-size: ", cache_bytes.status().message()));
  }
  colibri::compute::ComputeNodeOptions options;
  options.model_dir = f.model_dir;
  options.threads = f.threads;
  options.expert_cache_bytes = *cache_bytes;
  RETURN_IF_ERROR(colibri::compute::ApplyCacheFlags(f.cache, &options));
  return colibri::compute::ComputeNode::Create(options);
}
