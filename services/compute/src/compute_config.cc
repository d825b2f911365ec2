#include "compute_config.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "colibri/core/units.h"
#include "colibri/flags/config_file.h"

namespace colibri::compute {

void AddComputeFlags(CLI::App* app, ComputeConfig* c) {
  ComputeNodeOptions& o = c->node.options;
  app->add_option("--model", o.model_dir,
                  "Model: a colibri model directory, or a GGUF file served where it lies (a split "
                  "set by any of its parts, or a directory holding one)")
      ->required()
      ->check(CLI::ExistingPath);
  app->add_option(
      "--store", o.stores,
      "Expert store address host:port or unix:/path (repeatable: reads spread over the holders; "
      "default: read experts from --model)");
  app->add_option(
      "--store-dns", c->store_dns,
      "Expert stores by DNS name host:port (repeatable): every address the name resolves to is a "
      "store, re-resolved every --store-dns-interval so new replicas join without a restart");
  app->add_option("--store-dns-interval", c->store_dns_interval_s,
                  "Seconds between --store-dns resolutions")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app->add_option("--store-wait", c->store_wait_s,
                  "Seconds to wait at start for --store-dns names to resolve and a store to answer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app->add_option(
         "--store-shm-size", c->store_shm_size,
         "Shared-memory region per unix: store (auto: cache size + two layers in flight; 0: off)")
      ->capture_default_str();
  app->add_option("--client-name", c->client_name,
                  "This node's name in the stores' metrics (default: host name)");
  app->add_option("--listen", c->listen, "gRPC address (port 0 picks one)")->capture_default_str();
  metrics::AddMetricsListenFlags(app, &c->metrics);
  app->add_option("--max-pending-requests", c->max_pending_requests,
                  "Requests allowed to wait for the engine")
      ->capture_default_str();
  app->add_option("--port-file", c->port_file, "Write the bound gRPC port to this file");
  AddNodeFlags(app, &c->node);
  auth::AddSecurityFlags(app, &c->security);
  flags::AddConfigFileFlag(app);
}

absl::StatusOr<ComputeNodeOptions> ResolveComputeNode(const ComputeConfig& c) {
  auto options = ResolveNodeFlags(c.node);
  if (!options.ok()) return options.status();
  if (c.store_shm_size != "auto") {
    auto shm = ParseSize(c.store_shm_size);
    if (!shm.ok())
      return absl::InvalidArgumentError(absl::StrCat("--store-shm-size: ", shm.status().message()));
    options->store_shm_bytes = *shm;
  }
  options->client_name = c.client_name;
  if (options->client_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) options->client_name = host;
  }
  return options;
}

absl::StatusOr<std::vector<DnsName>> ResolveStoreDns(const ComputeConfig& c) {
  std::vector<DnsName> names;
  for (const auto& n : c.store_dns) {
    auto parsed = ParseDnsName(n);
    if (!parsed.ok()) return parsed.status();
    names.push_back(*parsed);
  }
  return names;
}

}  // namespace colibri::compute
