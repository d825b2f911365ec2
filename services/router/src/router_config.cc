#include "router_config.h"

#include "colibri/flags/config_file.h"

namespace colibri::router {

void AddRouterFlags(CLI::App* app, RouterConfig* c) {
  app->add_option("--model", c->model_dir,
                  "Model (its tokenizer): a colibri model directory, or a GGUF file or a "
                  "directory holding one")
      ->required()
      ->check(CLI::ExistingPath);
  app->add_option("--compute", c->computes,
                  "colibri-compute address host:port; several (repeated or comma-separated): each "
                  "conversation "
                  "sticks to one, failing over when it is unreachable")
      ->required()
      ->delimiter(',');
  app->add_option("--grpc-listen", c->grpc_listen, "Router gRPC address")->capture_default_str();
  AddFrontFlags(app, &c->front);
  auth::AddSecurityFlags(app, &c->security);
  flags::AddConfigFileFlag(app);
}

}  // namespace colibri::router
