// store_bench: delivered expert bandwidth from the expert store into compute, per path, against
// a raw O_DIRECT sequential read of the same files measured in the same run; striping scale-out
// over emulated disks (a bandwidth cap per disk from the fault-injecting file layer); and a
// stripe-size sweep (how the default stripe size was chosen).
//
//   store_bench [--dir /tmp/colibri-store-bench] [--layers 4] [--experts 16] [--passes 3]
//               [--disk-rate 200M] [--batch 8]
//
// "Delivered" is measured at the ExpertSource boundary right below compute's cache tier: the
// consumer calls FetchMany for a batch of experts (a layer's union) and holds the verified
// leases, exactly what the cache tier receives. Prints markdown tables (bench/RESULTS.md).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/core/file_util.h"
#include "colibri/core/logging.h"
#include "colibri/core/units.h"
#include "colibri/model/container.h"
#include "colibri/rpc/remote_store_source.h"
#include "colibri/store/block_store.h"
#include "colibri/store/ingest.h"
#include "colibri/store/striped_source.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "store_service.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using colibri::expert_source::ExpertId;
using colibri::expert_source::ExpertSource;
using colibri::expert_source::Lease;

struct Args {
  std::string dir = "/tmp/colibri-store-bench";
  int layers = 4;
  int experts = 16;
  int hidden = 1024;
  int ffn = 1408;  // f16 gate+up+down: 8.25 MiB per expert
  int passes = 3;
  int batch = 8;
  std::string disk_rate = "200M";
  bool keep = false;
};

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double GBps(uint64_t bytes, double secs) { return static_cast<double>(bytes) / secs / 1e9; }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

// A model directory with random f16 experts (the bytes do not matter, their size does).
void WriteModel(const fs::path& dir, const Args& a) {
  colibri::model::ModelConfig c;
  c.hidden_size = a.hidden;
  c.n_layers = a.layers;
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.head_dim = a.hidden / 8;
  c.expert_ffn = a.ffn;
  c.n_experts = a.experts;
  c.top_k = 2;
  c.vocab_size = 32;
  auto w = colibri::model::ContainerWriter::Create(dir, "bench", c, {.overwrite = true});
  Check(w.status(), "create model");
  std::vector<uint8_t> norm(static_cast<size_t>(a.hidden) * 4);
  Check((*w)->AddDense("output_norm", colibri::quant::DType::kF32, {a.hidden}, norm), "dense");
  std::mt19937_64 rng(42);
  const size_t part = static_cast<size_t>(a.hidden) * static_cast<size_t>(a.ffn) * 2;
  std::vector<uint8_t> g(part), u(part), d(part);
  for (int l = 0; l < a.layers; ++l) {
    for (int e = 0; e < a.experts; ++e) {
      for (auto* v : {&g, &u, &d}) {
        for (size_t i = 0; i + 8 <= v->size(); i += 8) {
          const uint64_t x = rng() & 0x3bff3bff3bff3bffull;  // finite f16 values
          std::memcpy(v->data() + i, &x, 8);
        }
      }
      using colibri::quant::DType;
      Check((*w)->AddExpert(l, e,
                            {{"gate", DType::kF16, {a.ffn, a.hidden}, g},
                             {"up", DType::kF16, {a.ffn, a.hidden}, u},
                             {"down", DType::kF16, {a.hidden, a.ffn}, d}}),
            "expert");
    }
  }
  Check((*w)->Finish(), "finish model");
}

std::vector<fs::path> Import(const fs::path& base, const fs::path& model, int n_disks,
                             uint64_t stripe) {
  std::vector<fs::path> disks;
  fs::remove_all(base);
  for (int i = 0; i < n_disks; ++i) disks.push_back(base / ("disk" + std::to_string(i)));
  colibri::store::ImportOptions o;
  o.stripe_size = stripe;
  Check(colibri::store::ImportModel(model, colibri::store::StoreLocation{disks, {}}, o).status(),
        "import");
  return disks;
}

// Raw sequential read of `files`, one after the other: 4 MiB reads with `depth` reads in flight
// (threads over consecutive ranges), O_DIRECT (the device's streaming rate) or buffered (from
// the page cache when the files are hot). No store involved.
double RawRead(const std::vector<fs::path>& files, int depth, bool direct = true) {
  uint64_t total = 0;
  const auto t0 = Clock::now();
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) return 0;
    const uint64_t size = fs::file_size(f);
    const uint64_t chunk = 4ull << 20;
    std::atomic<uint64_t> next{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < depth; ++t) {
      threads.emplace_back([&] {
        auto buf = colibri::AllocateAligned(chunk, 4096, false);
        for (;;) {
          const uint64_t off = next.fetch_add(chunk);
          if (off >= size) return;
          if (::pread(fd, buf->get(), chunk, static_cast<off_t>(off)) <= 0) return;
        }
      });
    }
    for (auto& t : threads) t.join();
    ::close(fd);
    total += size;
  }
  return GBps(total, Seconds(t0));
}

// Fetches every expert in batches of `batch` through `src`, holding each batch's leases until
// the batch is complete (as the cache does), `passes` times; the median rate in GB/s.
double Deliver(ExpertSource* src, const Args& a, int batch, int passes, uint64_t block_bytes) {
  std::vector<ExpertId> ids;
  for (int l = 0; l < a.layers; ++l)
    for (int e = 0; e < a.experts; ++e) ids.push_back({l, e});
  std::vector<double> rates;
  for (int p = 0; p <= passes; ++p) {  // pass 0 warms up (streams, shared memory)
    const auto t0 = Clock::now();
    uint64_t bytes = 0;
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(batch)) {
      const size_t n = std::min(ids.size() - i, static_cast<size_t>(batch));
      std::vector<Lease> held;
      Check(src->FetchMany(std::span<const ExpertId>(ids.data() + i, n),
                           [&](size_t, Lease l) {
                             bytes += l->size;
                             held.push_back(std::move(l));
                           }),
            "fetch");
    }
    if (p > 0) rates.push_back(GBps(bytes, Seconds(t0)));
  }
  (void)block_bytes;
  return rates.empty() ? 0 : Median(rates);
}

struct Server {
  std::unique_ptr<colibri::store::BlockStore> store;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<colibri::store::StoreMetrics> metrics;
  std::unique_ptr<colibri::store::ExpertStoreService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

std::unique_ptr<Server> Serve(const std::vector<fs::path>& disks, const std::string& unix_path,
                              bool direct = true) {
  auto s = std::make_unique<Server>();
  colibri::store::BlockStoreOptions bo{disks};
  bo.io.direct_io = direct;
  auto store = colibri::store::BlockStore::Open(bo);
  Check(store.status(), "open store");
  s->store = std::move(*store);
  s->metrics = std::make_unique<colibri::store::StoreMetrics>(s->registry);
  s->service = std::make_unique<colibri::store::ExpertStoreService>(
      s->store.get(), colibri::store::StoreOptions{}, s->metrics.get());
  grpc::ServerBuilder b;
  b.AddListeningPort("unix:" + unix_path, grpc::InsecureServerCredentials());
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &s->port);
  b.RegisterService(s->service.get());
  s->server = b.BuildAndStart();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging("warn");
  Args a;
  CLI::App app{"store_bench: expert delivery from the store vs raw O_DIRECT reads"};
  app.add_option("--dir", a.dir, "Scratch directory (on the disk to measure)")
      ->capture_default_str();
  app.add_option("--layers", a.layers)->capture_default_str();
  app.add_option("--experts", a.experts)->capture_default_str();
  app.add_option("--passes", a.passes)->capture_default_str();
  app.add_option("--ffn", a.ffn, "Expert FFN width (f16, hidden 1024): 1408 = 8.25 MiB experts")
      ->capture_default_str();
  bool sweep_only = false, reverse = false;
  std::string only;
  app.add_option("--only", only, "Profiling: run one path repeatedly (inproc | shm) and exit");
  app.add_flag("--reverse", reverse, "Measure the paths in reverse order (order effects)");
  app.add_flag("--sweep-only", sweep_only, "Only the stripe-size sweep");
  app.add_option("--batch", a.batch, "Experts per FetchMany (a layer's union)")
      ->capture_default_str();
  app.add_option("--disk-rate", a.disk_rate, "Bandwidth cap of each emulated disk")
      ->capture_default_str();
  app.add_flag("--keep", a.keep, "Keep the scratch directory");
  CLI11_PARSE(app, argc, argv);
  const uint64_t rate = *colibri::ParseSize(a.disk_rate);

  const fs::path root(a.dir);
  fs::create_directories(root);
  const fs::path model = root / "model";
  WriteModel(model, a);
  auto container = colibri::model::Container::Open(model);
  Check(container.status(), "open model");
  const auto& man = (*container)->manifest();
  const uint64_t block = man.experts[0].padded_size;
  const uint64_t total = man.TotalExpertBytes();
  std::printf(
      "model: %d layers x %d experts of %s (%s of experts); batch %d; %d passes (median); %d "
      "cores\n\n",
      a.layers, a.experts, colibri::FormatSize(block).c_str(), colibri::FormatSize(total).c_str(),
      a.batch, a.passes, static_cast<int>(std::thread::hardware_concurrency()));

  // 1. Paths, one real disk, default stripe.
  for (bool direct : {true, false}) {
    if (sweep_only) break;
    const auto disks = Import(root / "paths", model, 1, colibri::store::kDefaultStripeSize);
    if (!direct)
      RawRead({colibri::store::StripeFilePath(disks[0], "bench")}, 1, false);  // make the file hot
    const std::vector<fs::path> files = {colibri::store::StripeFilePath(disks[0], "bench")};
    const std::string sock = (root / "store.sock").string();
    auto server = Serve(disks, sock, direct);
    auto in_process = colibri::store::StripedSource::Create(server->store.get(), "bench");
    auto connect = [&](const std::string& target, uint64_t shm) {
      colibri::rpc::RemoteStoreOptions o;
      o.target = target;
      o.model = "bench";
      o.shm_bytes = shm;
      auto src = colibri::rpc::RemoteStoreSource::Connect(o, &man);
      Check(src.status(), "connect");
      return std::move(*src);
    };
    auto shm = connect("unix:" + sock, 4ull * a.batch * block);
    auto uds = connect("unix:" + sock, 0);
    auto tcp = connect("127.0.0.1:" + std::to_string(server->port), 0);
    struct Row {
      const char* path;
      ExpertSource* src;
      std::vector<double> gbps, ratio;
    };
    std::vector<Row> rows = {
        {"in-process (StripedSource, io_uring O_DIRECT)", in_process->get(), {}, {}},
        {"unix socket + shared memory", shm.get(), {}, {}},
        {"unix socket, chunks on the stream", uds.get(), {}, {}},
        {"TCP loopback, chunks on the stream", tcp.get(), {}, {}}};
    if (!only.empty()) {
      ExpertSource* src = only == "shm" ? static_cast<ExpertSource*>(shm.get()) : in_process->get();
      Deliver(src, a, a.batch, 0, block);
      for (int p = 0; p < a.passes; ++p)
        std::printf("%s: %.2f GB/s\n", only.c_str(), Deliver(src, a, a.batch, 1, block));
      return 0;
    }
    if (reverse) std::reverse(rows.begin(), rows.end());
    for (auto& r : rows)
      Deliver(r.src, a, a.batch, 0, block);  // warm up: streams, shared memory, buffers
    // The disk's rate drifts (a shared virtual disk here): each path is compared with raw reads
    // measured right before and after it.
    std::vector<double> raws;
    double raw_before = std::max(RawRead(files, 1, direct), RawRead(files, 8, direct));
    raws.push_back(raw_before);
    for (int p = 0; p < a.passes; ++p) {
      for (auto& r : rows) {
        const double got = Deliver(r.src, a, a.batch, 1, block);
        const double raw_after = std::max(RawRead(files, 1, direct), RawRead(files, 8, direct));
        raws.push_back(raw_after);
        r.gbps.push_back(got);
        r.ratio.push_back(got / ((raw_before + raw_after) / 2));
        raw_before = raw_after;
      }
    }
    const double raw = Median(raws);
    if (direct) {
      std::printf("### Delivered into compute: 1 disk, O_DIRECT (stripe %s)\n\n",
                  colibri::FormatSize(colibri::store::kDefaultStripeSize).c_str());
      std::printf(
          "raw O_DIRECT sequential read of the same file (4 MiB reads, 1 or 8 in flight, best): "
          "median %.2f GB/s, "
          "range %.2f-%.2f over %zu runs interleaved with the paths\n\n",
          raw, *std::min_element(raws.begin(), raws.end()),
          *std::max_element(raws.begin(), raws.end()), raws.size());
    } else {
      std::printf(
          "### Transport ceilings: the store reading a hot file through the page cache (no disk "
          "limit)\n\n");
      std::printf("raw buffered read of the same hot file: median %.2f GB/s, range %.2f-%.2f\n\n",
                  raw, *std::min_element(raws.begin(), raws.end()),
                  *std::max_element(raws.begin(), raws.end()));
    }
    std::printf(
        "| path | GB/s (median) | of raw read (vs the raw reads beside it, median) "
        "|\n|---|---|---|\n");
    for (const auto& r : rows)
      std::printf("| %s | %.2f | %.0f%% |\n", r.path, Median(r.gbps), 100 * Median(r.ratio));
    std::printf("\n");
    in_process->reset();
    shm.reset();
    uds.reset();
    tcp.reset();
    server->server->Shutdown();
    server.reset();
  }

  // 2. Striping scale-out: emulated disks, each capped at `rate`.
  if (!sweep_only) {
    std::printf("### Striping scale-out (emulated disks, %s/s each, in-process path)\n\n",
                colibri::FormatSize(rate).c_str());
    std::printf("| disks | cap total GB/s | delivered GB/s | of cap |\n|---|---|---|---|\n");
    for (int n : {1, 2, 4}) {
      const auto disks = Import(root / ("scale" + std::to_string(n)), model, n,
                                colibri::store::kDefaultStripeSize);
      colibri::store::FaultInjector faults;
      for (int d = 0; d < n; ++d) faults.SetDiskBandwidth(static_cast<uint32_t>(d), rate);
      colibri::store::BlockStoreOptions bo{disks};
      bo.io.faults = &faults;
      auto store = colibri::store::BlockStore::Open(bo);
      Check(store.status(), "open");
      auto src = colibri::store::StripedSource::Create(store->get(), "bench");
      const double got = Deliver(src->get(), a, a.batch, 1, block);
      const double cap = static_cast<double>(rate) * n / 1e9;
      std::printf("| %d | %.2f | %.2f | %.0f%% |\n", n, cap, got, 100 * got / cap);
      fs::remove_all(root / ("scale" + std::to_string(n)));
    }
    std::printf("\n");
  }

  // 3. Stripe size: 4 emulated disks with decode-like batches of 1 and 2 experts (latency-bound),
  // and 1 real disk with full batches.
  {
    std::printf(
        "### Stripe size, %s experts (in-process; 4 emulated disks at %s/s; 1 real disk)\n\n",
        colibri::FormatSize(block).c_str(), colibri::FormatSize(rate).c_str());
    std::printf(
        "| stripe | 4 capped disks, batch 1 | 4 capped disks, batch 2 | 1 real disk, batch %d |\n"
        "|---|---|---|---|\n",
        a.batch);
    for (uint64_t stripe : {64ull << 10, 128ull << 10, 256ull << 10, 512ull << 10, 1ull << 20,
                            2ull << 20, 4ull << 20}) {
      double capped1, capped2, real;
      {
        const auto disks = Import(root / "sweep4", model, 4, stripe);
        colibri::store::FaultInjector faults;
        for (int d = 0; d < 4; ++d) faults.SetDiskBandwidth(static_cast<uint32_t>(d), rate);
        colibri::store::BlockStoreOptions bo{disks};
        bo.io.faults = &faults;
        auto store = colibri::store::BlockStore::Open(bo);
        auto src = colibri::store::StripedSource::Create(store->get(), "bench");
        capped1 = Deliver(src->get(), a, 1, 1, block);
        capped2 = Deliver(src->get(), a, 2, 1, block);
      }
      {
        const auto disks = Import(root / "sweep1", model, 1, stripe);
        auto store = colibri::store::BlockStore::Open(colibri::store::BlockStoreOptions{disks});
        auto src = colibri::store::StripedSource::Create(store->get(), "bench");
        real = Deliver(src->get(), a, a.batch, a.passes, block);
      }
      std::printf("| %s | %.2f | %.2f | %.2f |\n", colibri::FormatSize(stripe).c_str(), capped1,
                  capped2, real);
      std::fflush(stdout);
    }
    fs::remove_all(root / "sweep4");
    fs::remove_all(root / "sweep1");
    std::printf("\n");
  }
  if (!a.keep) fs::remove_all(root);
  return 0;
}
