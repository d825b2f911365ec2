#include "store_config.h"

#include "colibri/flags/config_file.h"

namespace colibri::store {

void AddStoreFlags(CLI::App* app, StoreConfig* c) {
  app->require_subcommand(0, 1);
  app->add_option("--disk", c->disks, "A disk root of the store (repeatable, any order)");
  app->add_option("--catalog", c->catalog, "The catalog directory (default: found on the disks)");
  app->add_option("--model", c->models, "Also serve this model directory as it is (repeatable)")
      ->check(CLI::ExistingDirectory);
  app->add_option("--listen", c->listen,
                  "Address: host:port (port 0 picks one) or unix:/path (repeatable)")
      ->capture_default_str();
  metrics::AddMetricsListenFlags(app, &c->metrics);
  auth::AddSecurityFlags(app, &c->security);
  flags::AddConfigFileFlag(app);
  app->add_option("--read-cache-size", c->read_cache_size,
                  "RAM cache of recently read blocks (0: none)")
      ->capture_default_str();
  app->add_option("--queue-depth", c->queue_depth, "Reads in flight per disk")
      ->capture_default_str();
  app->add_option("--chunk-size", c->chunk_size, "Bytes per streamed chunk (1M..4M)")
      ->capture_default_str();
  app->add_option("--max-reads-in-flight", c->max_reads_in_flight,
                  "Block reads in progress per stream")
      ->capture_default_str();
  app->add_option("--max-buffered", c->max_buffered,
                  "Read bytes waiting for the network per stream")
      ->capture_default_str();
  app->add_option("--max-queued-requests", c->max_queued_requests,
                  "Requests queued per stream (RESOURCE_EXHAUSTED past it)")
      ->capture_default_str();
  app->add_option("--max-streams", c->max_streams,
                  "Open Fetch streams (RESOURCE_EXHAUSTED past it)")
      ->capture_default_str();
  app->add_option("--max-streams-per-client", c->max_streams_per_client,
                  "Open Fetch streams from one peer host (RESOURCE_EXHAUSTED past it)")
      ->capture_default_str();
  app->add_option(
         "--idle-stream-timeout", c->idle_stream_timeout_s,
         "Seconds a Fetch stream may go without a request before the store ends it (0: never)")
      ->capture_default_str();
  app->add_flag("--no-shm", c->no_shm, "Refuse shared-memory delivery to co-located clients");
  app->add_option("--port-file", c->port_file,
                  "Write the bound TCP port (0: unix only) here once serving");
  auto* tuning = app->add_option_group("Testing and tuning");
  tuning->add_option("--io-backend", c->io_backend, "auto | io_uring | threads")
      ->check(CLI::IsMember({"auto", "io_uring", "threads"}))
      ->capture_default_str();
  tuning->add_flag("--no-direct-io", c->no_direct_io,
                   "Read through the page cache instead of O_DIRECT");
  tuning->add_option(
      "--inject-fault", c->faults,
      "Fault injection for tests: kind=eio|short|eof|corrupt[,disk=N][,offset=A-B][,count=N] or "
      "kind=slow,disk=N,rate=100M (repeatable)");
  // Accepted so that old scripts still start; the I/O engine sizes itself by --queue-depth.
  tuning->add_option("--io-threads", "Ignored (kept for old scripts; see --queue-depth)")
      ->check(CLI::NonNegativeNumber);

  auto* imp = app->add_subcommand(
      "import",
      "Stripe a model onto the disks (atomic, resumable): a converted model directory, or a "
      "GGUF file read where it lies");
  imp->add_option("--model", c->import_model,
                  "Converted model directory, or a GGUF file (a split set by any of its parts)")
      ->required()
      ->check(CLI::ExistingPath);
  imp->add_option("--disk", c->sub_disks,
                  "A disk root (repeatable; the first import creates the store)")
      ->required();
  imp->add_option("--catalog", c->sub_catalog, "Catalog directory (default: on the first disk)");
  imp->add_option("--stripe-size", c->import_stripe_size, "Stripe unit (multiple of 4K)")
      ->capture_default_str();
  imp->add_option("--name", c->import_name, "Name in the store (default: the model's)");
  imp->add_option("--layers", c->import_layers, "Hold only layers FIRST-LAST (a partial copy)");
  imp->callback([c] { c->command = StoreConfig::Command::kImport; });
  auto* lst = app->add_subcommand("list", "List the models on the disks");
  lst->add_option("--disk", c->sub_disks, "A disk root (repeatable)")->required();
  lst->add_option("--catalog", c->sub_catalog, "Catalog directory (default: found on the disks)");
  lst->callback([c] { c->command = StoreConfig::Command::kList; });
  auto* rm = app->add_subcommand("remove", "Remove a model from the disks");
  rm->add_option("--disk", c->sub_disks, "A disk root (repeatable)")->required();
  rm->add_option("--catalog", c->sub_catalog, "Catalog directory (default: found on the disks)");
  rm->add_option("name", c->remove_name, "Model name")->required();
  rm->callback([c] { c->command = StoreConfig::Command::kRemove; });
}

}  // namespace colibri::store
