// colibri-compute's configuration: every flag it takes, with its default, parsed once in main.
// The groups it shares are defined once: the compute node's (NodeFlags, as colibri-server and
// colibri-cli take them), the metrics port's (metrics::MetricsListenFlags, as the expert store)
// and security (auth SecurityFlags, as every service).
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "colibri/auth/flags.h"
#include "colibri/metrics/listen_flags.h"
#include "compute_node.h"
#include "node_flags.h"
#include "store_discovery.h"

namespace colibri::compute {

struct ComputeConfig {
  NodeFlags node;  // --model and --store bind node.options.model_dir and .stores
  std::vector<std::string> store_dns;   // host:port names, every address a store
  double store_dns_interval_s = 5;      // between --store-dns resolutions
  double store_wait_s = 300;            // for --store-dns names to resolve and a store to answer
  std::string store_shm_size = "auto";  // per unix: store; auto: ComputeNodeOptions::kAutoShm
  std::string client_name;              // empty: the host name
  std::string listen = "127.0.0.1:50052";
  int max_pending_requests = 64;
  std::string port_file;  // the bound gRPC port
  metrics::MetricsListenFlags metrics{9102};
  auth::SecurityFlags security;
};

void AddComputeFlags(CLI::App* app, ComputeConfig* config);

// What the flags say of the node (NodeFlags resolved, --store-shm-size, --client-name with the
// host name as its default). The transport and the stores found by --store-dns are main's to
// add. InvalidArgument naming the flag.
absl::StatusOr<ComputeNodeOptions> ResolveComputeNode(const ComputeConfig& config);

// The --store-dns names, parsed. InvalidArgument naming the bad one.
absl::StatusOr<std::vector<DnsName>> ResolveStoreDns(const ComputeConfig& config);

}  // namespace colibri::compute
