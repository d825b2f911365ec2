// The flags of a service's own metrics port, one definition for the binaries that have one
// (colibri-compute, colibri-expert-store): --metrics-port, --metrics-host, --metrics-port-file.
// The port's default is each binary's (9102 compute, 9101 store: deploy/ and the READMEs name
// them), given when its Config is made; the rest default alike.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "colibri/metrics/metrics.h"

namespace colibri::metrics {

struct MetricsListenFlags {
  explicit MetricsListenFlags(int default_port) : port(default_port) {}
  int port;                        // 0 picks one, -1: no metrics port
  std::string host = "127.0.0.1";  // 0.0.0.0: every interface (an explicit choice)
  std::string port_file;           // the bound port is written here once serving
};

void AddMetricsListenFlags(CLI::App* app, MetricsListenFlags* flags);

// Starts the MetricsServer the flags ask for and writes --metrics-port-file; nullptr when the
// port is -1. The error names the address or the file.
absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsListener(
    const MetricsListenFlags& flags, std::shared_ptr<prometheus::Registry> registry,
    std::function<void()> before_scrape, std::vector<HttpRoute> routes, auth::HttpPolicy access);

}  // namespace colibri::metrics
