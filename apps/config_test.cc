// Every binary's flag table parses the shared groups alike: each group's command line gives the
// same values through colibri-server, colibri-compute, colibri-router, colibri-expert-store and
// colibri-cli (run / bench / chat / tune), and no flag two binaries share defaults differently.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli_node.h"
#include "colibri/flags/config_file.h"
#include "compute_config.h"
#include "router_config.h"
#include "server_config.h"
#include "store_config.h"

namespace colibri {
namespace {

using compute::ComputeNodeOptions;

// What every table needs besides the group under test (a directory that exists: ".", the
// source tree, where CTest runs the tests).
const std::vector<std::string> kServerArgs = {"--model", "."};
const std::vector<std::string> kComputeArgs = {"--model", "."};
const std::vector<std::string> kRouterArgs = {"--model", ".", "--compute", "127.0.0.1:1"};
const std::vector<std::string> kCliArgs = {"run", "--model", "."};

void Parse(CLI::App& app, std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
}

// One binary's table, holding its config: parse() fills it.
struct Binary {
  std::string name;
  std::unique_ptr<CLI::App> app = std::make_unique<CLI::App>();
  std::vector<std::string> required;
  void parse(const std::vector<std::string>& args) { Parse(*app, required, args); }
};

struct Configs {
  server::ServerConfig server;
  compute::ComputeConfig compute;
  router::RouterConfig router;
  store::StoreConfig store;
  NodeFlags cli;

  Binary Server() { return Make("colibri-server", kServerArgs, server::AddServerFlags, &server); }
  Binary Compute() {
    return Make("colibri-compute", kComputeArgs, compute::AddComputeFlags, &compute);
  }
  Binary Router() { return Make("colibri-router", kRouterArgs, router::AddRouterFlags, &router); }
  Binary Store() { return Make("colibri-expert-store", {}, store::AddStoreFlags, &store); }
  Binary Cli() {
    Binary b{"colibri-cli run", std::make_unique<CLI::App>(), kCliArgs};
    AddCliNodeFlags(b.app->add_subcommand("run"), &cli);
    return b;
  }

 private:
  template <typename Config>
  static Binary Make(std::string name, std::vector<std::string> required,
                     void (*add)(CLI::App*, Config*), Config* config) {
    Binary b{std::move(name), std::make_unique<CLI::App>(), std::move(required)};
    add(b.app.get(), config);
    return b;
  }
};

// Every field NodeFlags sets, as text: equal strings, equal options.
std::string Describe(const ComputeNodeOptions& o) {
  const auto& c = o.cache;
  return absl::StrCat(
      "model_dir=", o.model_dir, " threads=", o.threads, " backend=", o.backend,
      " device=", o.device, " expert_cache=", o.expert_cache_bytes, " vram=", c.vram_bytes,
      " kv=", o.kv_cache_limit, " kv_offload=", o.kv_offload_limit, " kv_8bit=", o.kv_offload_8bit,
      " kv_dir=", o.kv_persist_dir, " kv_persist=", o.kv_persist_limit, " policy=", c.policy,
      " prefetch_layers=", c.prefetch_layers, " min_weight=", c.prefetch_min_weight,
      " io_threads=", c.io_threads, " direct_io=", c.direct_io, " pinned=", c.pinned_experts,
      " heat=", c.routing_heat, " pins=", c.learned_pin_fraction, " warm=", c.warm_start,
      " tune=", o.tune_profile, " trace=", c.trace_out, " batch=", o.max_batch,
      " queued=", o.max_queued, " chunk=", o.prefill_chunk, " spec=", o.speculative,
      " draft_max=", o.draft_max, " draft_experts=", o.draft_experts,
      " draft_model=", o.draft_model_dir);
}

std::string Resolved(const NodeFlags& flags) {
  auto o = compute::ResolveNodeFlags(flags);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? Describe(*o) : "";
}

TEST(NodeFlags, SameValuesThroughServerComputeAndCli) {
  const std::vector<std::string> args = {"--threads",
                                         "3",
                                         "--expert-cache-size",
                                         "3G",
                                         "--backend",
                                         "cpu",
                                         "--device",
                                         "1",
                                         "--vram-budget",
                                         "1G",
                                         "--kv-cache-limit",
                                         "1G",
                                         "--kv-offload-limit",
                                         "256M",
                                         "--kv-offload-8bit",
                                         "--kv-persist-dir",
                                         "/tmp/kv",
                                         "--kv-persist-limit",
                                         "2G",
                                         "--cache-policy",
                                         "lru",
                                         "--prefetch-layers",
                                         "2",
                                         "--prefetch-min-weight",
                                         "0.125",
                                         "--io-threads",
                                         "5",
                                         "--direct-io",
                                         "false",
                                         "--pinned-experts",
                                         "pins.json",
                                         "--routing-heat",
                                         "none",
                                         "--learned-pins",
                                         "0.5",
                                         "--warm-start",
                                         "off",
                                         "--tune-profile",
                                         "none",
                                         "--trace-out",
                                         "trace.jsonl",
                                         "--max-batch",
                                         "4",
                                         "--max-queued",
                                         "9",
                                         "--prefill-chunk",
                                         "128",
                                         "--speculative",
                                         "ngram",
                                         "--draft-max",
                                         "6",
                                         "--draft-experts",
                                         "q2_k",
                                         "--draft-model",
                                         "/tmp/draft"};
  Configs c;
  auto server = c.Server(), compute = c.Compute(), cli = c.Cli();
  server.parse(args);
  compute.parse(args);
  cli.parse(args);
  const std::string want =
      "model_dir=. threads=3 backend=cpu device=1 expert_cache=3221225472 vram=1073741824 "
      "kv=1073741824 kv_offload=268435456 kv_8bit=1 kv_dir=/tmp/kv kv_persist=2147483648 "
      "policy=lru prefetch_layers=2 min_weight=0.125 io_threads=5 direct_io=0 pinned=pins.json "
      "heat=none pins=0.5 warm=off tune=none trace=trace.jsonl batch=4 queued=9 chunk=128 "
      "spec=ngram draft_max=6 draft_experts=q2_k draft_model=/tmp/draft";
  EXPECT_EQ(Resolved(c.server.node), want);
  EXPECT_EQ(Resolved(c.compute.node), want);
  EXPECT_EQ(Resolved(c.cli), want);
}

TEST(NodeFlags, SameDefaultsThroughServerComputeAndCli) {
  Configs c;
  auto server = c.Server(), compute = c.Compute(), cli = c.Cli();
  server.parse({});
  compute.parse({});
  cli.parse({});
  const std::string defaults = Resolved(c.server.node);
  EXPECT_EQ(Resolved(c.compute.node), defaults);
  EXPECT_EQ(Resolved(c.cli), defaults);
  // The text flags' "auto": left to the planner.
  EXPECT_NE(defaults.find(absl::StrCat("expert_cache=", ComputeNodeOptions::kAuto, " ")),
            std::string::npos)
      << defaults;
  EXPECT_NE(defaults.find(absl::StrCat("kv=", ComputeNodeOptions::kAutoKvLimit, " ")),
            std::string::npos)
      << defaults;
  EXPECT_NE(defaults.find(" prefetch_layers=-1 "), std::string::npos) << defaults;
  EXPECT_NE(defaults.find(" threads=0 backend=cpu "), std::string::npos) << defaults;
}

TEST(NodeFlags, BadValueNamesTheFlagInEveryBinary) {
  Configs c;
  auto server = c.Server(), compute = c.Compute(), cli = c.Cli();
  for (Binary* b : {&server, &compute, &cli}) b->parse({"--learned-pins", "2"});
  for (const NodeFlags* f : {&c.server.node, &c.compute.node, &c.cli}) {
    auto o = compute::ResolveNodeFlags(*f);
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find("--learned-pins '2'"), std::string::npos) << o.status();
  }
}

std::string Describe(const auth::SecurityFlags& s) {
  return absl::StrCat("keys=", absl::StrJoin(s.keys.api_keys, ","),
                      " key_file=", s.keys.api_key_file, " public=", s.keys.metrics_public,
                      " cert=", s.tls.cert, " key=", s.tls.key, " ca=", s.tls.ca,
                      " name=", s.tls.server_name, " insecure=", s.tls.insecure);
}

TEST(SecurityFlags, SameValuesThroughEveryService) {
  const std::vector<std::string> args = {"--api-key",
                                         "k1",
                                         "--api-key",
                                         "k2",
                                         "--api-key-file",
                                         "keys.txt",
                                         "--metrics-public",
                                         "--tls-cert",
                                         "c.pem",
                                         "--tls-key",
                                         "k.pem",
                                         "--tls-ca",
                                         "ca.pem",
                                         "--tls-server-name",
                                         "colibri.internal",
                                         "--insecure"};
  Configs c;
  auto server = c.Server(), compute = c.Compute(), router = c.Router(), store = c.Store();
  const std::string want =
      "keys=k1,k2 key_file=keys.txt public=1 cert=c.pem key=k.pem ca=ca.pem "
      "name=colibri.internal insecure=1";
  for (Binary* b : {&server, &compute, &router, &store}) b->parse(args);
  EXPECT_EQ(Describe(c.server.security), want);
  EXPECT_EQ(Describe(c.compute.security), want);
  EXPECT_EQ(Describe(c.router.security), want);
  EXPECT_EQ(Describe(c.store.security), want);
}

std::string Describe(const router::FrontFlags& f) {
  return absl::StrCat("host=", f.http.host, " port=", f.http.port, " threads=", f.http.threads,
                      " keepalive=", f.http.sse_keepalive_ms,
                      " allowed=", absl::StrJoin(f.http.allowed_hosts, ","),
                      " max_body=", f.http.max_request_bytes,
                      " names=", absl::StrJoin(f.served_names, ","), " hints=", f.prefetch_hints,
                      " port_file=", f.port_file, " grpc_port_file=", f.grpc_port_file);
}

TEST(FrontFlags, SameValuesThroughServerAndRouter) {
  const std::vector<std::string> args = {"--host",
                                         "0.0.0.0",
                                         "--port",
                                         "9000",
                                         "--http-threads",
                                         "3",
                                         "--sse-keepalive-ms",
                                         "250",
                                         "--allowed-hosts",
                                         "a.example,b.example",
                                         "--max-request-bytes",
                                         "1M",
                                         "--served-model-name",
                                         "m1,m2",
                                         "--prefetch-hints",
                                         "7",
                                         "--port-file",
                                         "http.port",
                                         "--grpc-port-file",
                                         "grpc.port"};
  Configs c;
  auto server = c.Server(), router = c.Router();
  server.parse(args);
  router.parse(args);
  const std::string want =
      "host=0.0.0.0 port=9000 threads=3 keepalive=250 allowed=a.example,b.example "
      "max_body=1048576 names=m1,m2 hints=7 port_file=http.port grpc_port_file=grpc.port";
  EXPECT_EQ(Describe(c.server.front), want);
  EXPECT_EQ(Describe(c.router.front), want);

  Configs d;
  auto server_defaults = d.Server(), router_defaults = d.Router();
  server_defaults.parse({});
  router_defaults.parse({});
  EXPECT_EQ(Describe(d.server.front), Describe(d.router.front));
  EXPECT_EQ(d.server.front.http.port, 8080);
  EXPECT_EQ(d.server.front.prefetch_hints, 64u);
  // --grpc-listen is each binary's own: the router always serves gRPC, the server when asked.
  EXPECT_EQ(d.router.grpc_listen, "127.0.0.1:50050");
  EXPECT_EQ(d.server.grpc_listen, "");
}

TEST(MetricsListenFlags, SameValuesThroughComputeAndStore) {
  const std::vector<std::string> args = {
      "--metrics-port", "0", "--metrics-host", "0.0.0.0", "--metrics-port-file", "metrics.port"};
  Configs c;
  auto compute = c.Compute(), store = c.Store();
  compute.parse(args);
  store.parse(args);
  for (const auto* m : {&c.compute.metrics, &c.store.metrics}) {
    EXPECT_EQ(m->port, 0);
    EXPECT_EQ(m->host, "0.0.0.0");
    EXPECT_EQ(m->port_file, "metrics.port");
  }
  Configs d;
  auto compute_defaults = d.Compute(), store_defaults = d.Store();
  compute_defaults.parse({});
  store_defaults.parse({});
  // The ports deploy/ and the READMEs name; the rest alike.
  EXPECT_EQ(d.compute.metrics.port, 9102);
  EXPECT_EQ(d.store.metrics.port, 9101);
  EXPECT_EQ(d.compute.metrics.host, "127.0.0.1");
  EXPECT_EQ(d.store.metrics.host, d.compute.metrics.host);
  EXPECT_EQ(d.store.metrics.port_file, "");
}

// A flag two binaries take has one default everywhere (as --help shows it), but for the ones
// whose meaning is the binary's own.
TEST(Flags, NoSharedFlagDefaultsDifferently) {
  // --io-threads: the store's is an ignored leftover, compute's the cache's reader threads.
  const std::set<std::string> own = {"--metrics-port", "--grpc-listen", "--listen",
                                     "--model",        "--port-file",   "--io-threads"};
  Configs c;
  std::vector<Binary> binaries;
  binaries.push_back(c.Server());
  binaries.push_back(c.Compute());
  binaries.push_back(c.Router());
  binaries.push_back(c.Store());
  binaries.push_back(c.Cli());
  // name -> (default, first binary with it)
  std::map<std::string, std::pair<std::string, std::string>> seen;
  size_t shared = 0;
  for (const Binary& b : binaries) {
    const CLI::App* app = b.app.get();
    if (b.name == "colibri-cli run") app = app->get_subcommand("run");
    for (const CLI::Option* o : app->get_options()) {
      const std::string name = o->get_name();
      if (name.rfind("--", 0) != 0 || own.count(name) > 0) continue;
      auto [it, first] = seen.emplace(name, std::make_pair(o->get_default_str(), b.name));
      if (first) continue;
      ++shared;
      EXPECT_EQ(o->get_default_str(), it->second.first)
          << name << ": " << b.name << " defaults differently from " << it->second.second;
    }
  }
  // The node's, the front's, the metrics port's and the security flags, at least.
  EXPECT_GT(shared, 60u);
}

// --config FILE: the same Config as the flags it holds; the command line wins over it.
class ConfigFile : public ::testing::Test {
 protected:
  // A file of its own per test and call: CTest runs the tests of this binary in parallel
  // processes, which must not overwrite each other's files.
  std::string Write(const std::string& text) {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string path = ::testing::TempDir() + "/colibri_config_" + test->test_suite_name() +
                             "_" + test->name() + "_" + std::to_string(files_++) + ".toml";
    std::ofstream(path) << text;
    return path;
  }
  int files_ = 0;
};

TEST_F(ConfigFile, GivesTheConfigOfItsFlags) {
  const std::string file = Write(
      "threads = 3\n"
      "expert-cache-size = \"3G\"\n"
      "kv-offload-8bit = true\n"
      "cache-policy = \"lru\"\n"
      "prefetch-layers = \"2\"\n"
      "store = [\"10.0.0.1:50051\", \"unix:/run/store.sock\"]\n"
      "listen = \"0.0.0.0:6000\"\n"
      "metrics-port = 0\n"
      "api-key = [\"k1\", \"k2\"]\n"
      "insecure = true\n");
  Configs from_file, from_flags;
  auto a = from_file.Compute(), b = from_flags.Compute();
  a.parse({"--config", file});
  b.parse({"--threads",
           "3",
           "--expert-cache-size",
           "3G",
           "--kv-offload-8bit",
           "--cache-policy",
           "lru",
           "--prefetch-layers",
           "2",
           "--store",
           "10.0.0.1:50051",
           "--store",
           "unix:/run/store.sock",
           "--listen",
           "0.0.0.0:6000",
           "--metrics-port",
           "0",
           "--api-key",
           "k1",
           "--api-key",
           "k2",
           "--insecure"});
  EXPECT_EQ(Resolved(from_file.compute.node), Resolved(from_flags.compute.node));
  EXPECT_NE(Resolved(from_file.compute.node).find(" threads=3 "), std::string::npos);
  EXPECT_EQ(from_file.compute.node.options.stores, from_flags.compute.node.options.stores);
  EXPECT_EQ(from_file.compute.node.options.stores.size(), 2u);
  EXPECT_EQ(from_file.compute.listen, "0.0.0.0:6000");
  EXPECT_EQ(from_file.compute.metrics.port, 0);
  EXPECT_EQ(Describe(from_file.compute.security), Describe(from_flags.compute.security));
  EXPECT_TRUE(from_file.compute.security.tls.insecure);
}

TEST_F(ConfigFile, ReachesOptionGroupsInEveryService) {
  const std::string file = Write(
      "io-backend = \"threads\"\n"
      "disk = [\"/d1\", \"/d2\"]\n"
      "tls-server-name = \"store.internal\"\n"
      "max-streams = 7\n");
  Configs c;
  auto store = c.Store();
  store.parse({"--config", file});
  EXPECT_EQ(c.store.io_backend, "threads");
  EXPECT_EQ(c.store.disks, (std::vector<std::string>{"/d1", "/d2"}));
  EXPECT_EQ(c.store.security.tls.server_name, "store.internal");
  EXPECT_EQ(c.store.max_streams, 7);
  EXPECT_EQ(c.store.command, store::StoreConfig::Command::kServe);
  // The router and the server take the same file format for their own groups.
  const std::string front = Write("port = 9001\nserved-model-name = [\"m\"]\nprefetch-hints = 5\n");
  auto router = c.Router(), server = c.Server();
  router.parse({"--config", front});
  server.parse({"--config", front});
  EXPECT_EQ(Describe(c.router.front), Describe(c.server.front));
  EXPECT_EQ(c.server.front.http.port, 9001);
  EXPECT_EQ(c.server.front.prefetch_hints, 5u);
}

TEST_F(ConfigFile, CommandLineWinsAndUnknownNamesFail) {
  const std::string file = Write("threads = 3\nmax-batch = 8\n");
  Configs c;
  auto server = c.Server();
  server.parse({"--config", file, "--threads", "5"});
  EXPECT_EQ(c.server.node.options.threads, 5);
  EXPECT_EQ(c.server.node.options.max_batch, 8);

  // A required flag may come from the file (README.md's example: the model directory).
  Configs m;
  auto from_file = m.Server();
  from_file.required.clear();
  from_file.parse({"--config", Write("model = \".\"\nexpert-cache-size = \"16G\"\n")});
  EXPECT_EQ(m.server.node.options.model_dir, ".");
  EXPECT_EQ(m.server.node.expert_cache_size, "16G");

  const std::string bad = Write("thread = 3\n");
  Configs d;
  auto compute = d.Compute();
  EXPECT_THROW(compute.parse({"--config", bad}), CLI::ParseError);
}

// colibri-cli's --config: a file of flags for whichever subcommand runs.
class SubcommandConfig : public ConfigFile {
 protected:
  SubcommandConfig() {
    app.require_subcommand(1);
    auto* run = app.add_subcommand("run");
    run->add_option("--model", run_model);
    run->add_option("--threads", threads);
    run->add_option("--max-tokens", max_tokens);
    run->add_option("--store", stores);
    run->add_flag("--ignore-eos", ignore_eos);
    auto* plan = app.add_subcommand("plan");
    plan->add_option("--model", plan_model);
    plan->add_option("--memory", memory);
    auto* cache = app.add_subcommand("cache");
    cache->add_subcommand("clear")->add_option("--url", url);
  }
  // Expands and parses a command line (without the program name).
  void Parse(std::vector<std::string> args) {
    args = flags::ExpandSubcommandConfig(app, std::move(args));
    std::vector<const char*> argv{"colibri-cli"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
  }

  CLI::App app{"colibri-cli"};
  std::string run_model, plan_model, memory, url;
  int threads = 0, max_tokens = 0;
  std::vector<std::string> stores;
  bool ignore_eos = false;
};

TEST_F(SubcommandConfig, TopLevelNamesGoToTheSubcommandThatHasThem) {
  const std::string file = Write(
      "model = \"/models/q\"\nthreads = 3\nmemory = \"8G\"\nignore-eos = true\n"
      "store = [\"a:1\", \"b:2\"]\nurl = \"http://h:8080\"\n");
  Parse({"run", "--config", file, "--max-tokens", "5"});
  EXPECT_EQ(run_model, "/models/q");
  EXPECT_EQ(threads, 3);
  EXPECT_EQ(max_tokens, 5);
  EXPECT_TRUE(ignore_eos);
  EXPECT_EQ(stores, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(memory, "");  // plan's flag: not for run
  Parse({"plan", "--config=" + file});
  EXPECT_EQ(plan_model, "/models/q");
  EXPECT_EQ(memory, "8G");
  Parse({"cache", "clear", "--config", file});  // nested subcommands
  EXPECT_EQ(url, "http://h:8080");
}

TEST_F(SubcommandConfig, CommandLineWinsSectionsAreForOneSubcommand) {
  const std::string file =
      Write("threads = 3\nignore-eos = false\n[run]\nmax-tokens = 64\n[plan]\nmemory = \"4G\"\n");
  Parse({"run", "--threads", "7", "--config", file});
  EXPECT_EQ(threads, 7);
  EXPECT_EQ(max_tokens, 64);
  EXPECT_FALSE(ignore_eos);  // a switch set to false stays off
  EXPECT_EQ(memory, "");
  Parse({"plan", "--config", file, "--memory", "2G"});
  EXPECT_EQ(memory, "2G");
  // Without --config the command line is untouched.
  EXPECT_EQ(flags::ExpandSubcommandConfig(app, {"run", "--threads", "2"}),
            (std::vector<std::string>{"run", "--threads", "2"}));
}

TEST_F(SubcommandConfig, UnknownNamesAndSectionsAndMissingFilesFail) {
  EXPECT_THROW(Parse({"run", "--config", Write("thread = 3\n")}), CLI::ConfigError);
  EXPECT_THROW(Parse({"run", "--config", Write("[serve]\nthreads = 3\n")}), CLI::ConfigError);
  EXPECT_THROW(Parse({"run", "--config", Write("[plan]\nmax-tokens = 3\n")}), CLI::ConfigError);
  EXPECT_THROW(Parse({"run", "--config", ::testing::TempDir() + "/no_such_colibri.toml"}),
               CLI::FileError);
}

}  // namespace
}  // namespace colibri
