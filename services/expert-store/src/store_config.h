// colibri-expert-store's configuration: every flag of the binary and of its subcommands, with
// its default, parsed once in main.
//
//   colibri-expert-store --disk D1 --disk D2 [--model DIR] [serving flags]   serve
//   colibri-expert-store import --model DIR --disk D1 --disk D2 [--stripe-size 512K]
//   colibri-expert-store list --disk D1 --disk D2
//   colibri-expert-store remove --disk D1 --disk D2 NAME
//
// The groups it shares are defined once: the metrics port's (metrics::MetricsListenFlags, as
// colibri-compute) and security (auth SecurityFlags, as every service).
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/auth/flags.h"
#include "colibri/metrics/listen_flags.h"
#include "colibri/store/layout.h"

namespace colibri::store {

struct StoreConfig {
  enum class Command { kServe, kImport, kList, kRemove };
  Command command = Command::kServe;  // set by the subcommand given

  // Serving.
  std::vector<std::string> models;  // served as they are
  std::vector<std::string> disks;
  std::string catalog;  // empty: found on the disks
  std::vector<std::string> listen = {"127.0.0.1:50051"};
  metrics::MetricsListenFlags metrics{9101};
  std::string chunk_size = "1M";  // 1M..4M
  std::string read_cache_size = "0";
  std::string max_buffered = "64M";
  int queue_depth = 32;
  int max_reads_in_flight = 16;
  int max_queued_requests = 1024;
  int max_streams = 256;
  int max_streams_per_client = 64;
  double idle_stream_timeout_s = 300;
  std::string io_backend = "auto";
  bool no_direct_io = false;
  bool no_shm = false;
  std::vector<std::string> faults;  // --inject-fault specs
  std::string port_file;            // the bound TCP port (0: unix only)
  auth::SecurityFlags security;

  // import, list and remove.
  std::vector<std::string> sub_disks;
  std::string sub_catalog;
  std::string import_model;
  std::string import_name;    // empty: the model's
  std::string import_layers;  // FIRST-LAST; empty: every layer
  std::string import_stripe_size = std::to_string(kDefaultStripeSize / 1024) + "K";
  std::string remove_name;
};

void AddStoreFlags(CLI::App* app, StoreConfig* config);

}  // namespace colibri::store
