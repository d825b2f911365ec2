#include "server_config.h"

#include "colibri/flags/config_file.h"

namespace colibri::server {

void AddServerFlags(CLI::App* app, ServerConfig* c) {
  app->add_option("--model", c->node.options.model_dir,
                  "Model: a GGUF file served where it lies (a split set by any of its parts, or "
                  "a directory holding one), or a model directory made by colibri-convert")
      ->required()
      ->check(CLI::ExistingPath);
  compute::AddNodeFlags(app, &c->node);
  router::AddFrontFlags(app, &c->front);
  app->add_option("--grpc-listen", c->grpc_listen,
                  "Also serve the Router gRPC API here (host:port)");
  auth::AddSecurityFlags(app, &c->security);
  flags::AddConfigFileFlag(app);
}

}  // namespace colibri::server
