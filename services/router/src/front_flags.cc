#include "front_flags.h"

namespace colibri::router {

void AddFrontFlags(CLI::App* app, FrontFlags* flags) {
  AddHttpFlags(app, &flags->http);
  AddServedNameFlag(app, &flags->served_names);
  app->add_option("--prefetch-hints", flags->prefetch_hints,
                  "Before a request of a known conversation (session_id / user), ask compute to "
                  "warm up to N of "
                  "the experts its earlier turns used most (0: off)")
      ->capture_default_str();
  app->add_option("--port-file", flags->port_file, "Write the bound HTTP port to this file");
  app->add_option("--grpc-port-file", flags->grpc_port_file,
                  "Write the bound gRPC port to this file");
}

absl::Status ApplyFrontFlags(const FrontFlags& flags, RouterCore* core) {
  core->set_prefetch_hints(flags.prefetch_hints);
  return core->SetServedNames(flags.served_names);
}

}  // namespace colibri::router
