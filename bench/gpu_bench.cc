// GPU benchmark (CUDA backend), the numbers bench/RESULTS.md records for a GPU host:
//   1. quantized matrix-vector (decode) bandwidth per weight type, as a fraction of the device's
//      peak memory bandwidth (weights [rows, cols], one token, back-to-back MatMuls);
//      the F16-GEMM prefill path's throughput for the same weights at 512 tokens;
//   2. host -> device copy bandwidth: from pinned memory (cudaMemcpyAsync), and from pageable
//      memory through the backend's pinned staging (Backend::TransferIn, what the VRAM tier uses);
//   3. decode tokens/s of a Mixtral-shaped synthetic model (hidden 4096, expert ffn 14336,
//      8 experts top-2, 32 heads / 8 KV heads; --layers of Mixtral's 32) with every expert in
//      the VRAM tier, and with a VRAM tier holding --small-tier of the experts (RAM tier holds
//      all), plus tokens/s scaled to 32 layers.
// Usage: gpu_bench [--layers 4] [--quant q4_k] [--tokens 32] [--small-tier 0.25] [--dir DIR]
//                  [--skip-decode] [--json FILE]
// Weights are random but valid GGML blocks (rows drawn from a small quantized pool).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/backend/cuda_backend.h"
#include "colibri/core/logging.h"
#include "colibri/model/container.h"
#include "colibri/quant/quantize.h"
#include "compute_node.h"
#include "nlohmann/json.hpp"
#include "synthetic_weights.h"

namespace {

using colibri::bench::RandomRows;
using colibri::quant::DType;
namespace fs = std::filesystem;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), std::string(st.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  colibri::InitLogging("warn");
  int64_t layers = 4, tokens = 32, prompt = 16;
  double small_tier = 0.25;
  bool skip_decode = false;
  std::string quant = "q4_k", json_out,
              dir = (fs::temp_directory_path() / "colibri-gpu-bench").string();
  CLI::App app{"gpu_bench: CUDA backend matvec bandwidth, host->device copies, decode tokens/s"};
  app.add_option("--layers", layers, "Layers of the Mixtral-shaped decode model")
      ->capture_default_str();
  app.add_option("--quant", quant, "Weight type of the decode model")->capture_default_str();
  app.add_option("--tokens", tokens, "Decoded tokens per run")->capture_default_str();
  app.add_option("--small-tier", small_tier, "Share of the experts the small VRAM tier holds")
      ->capture_default_str();
  app.add_option("--dir", dir, "Where the synthetic model is written");
  app.add_flag("--skip-decode", skip_decode, "Only the kernel and copy measurements");
  app.add_option("--json", json_out, "Also write the results as JSON");
  CLI11_PARSE(app, argc, argv);
  auto dt = colibri::quant::ParseDType(quant);
  if (!dt.ok()) return Fail("--quant", dt.status());

  auto info = colibri::backend::GetCudaDeviceInfo(0);
  if (!info.ok()) return Fail("no CUDA device", info.status());
  const double peak = info->memory_bandwidth_gbps;
  std::printf("device: %s (sm_%d, %d SMs), %.1f GiB, peak memory bandwidth %.0f GB/s\n\n",
              info->name.c_str(), info->compute_capability, info->multiprocessors,
              static_cast<double>(info->total_bytes) / (1 << 30), peak);
  nlohmann::json out = {{"device", info->name}, {"peak_bandwidth_gbps", peak}};

  auto be = colibri::backend::CreateCudaBackend({});
  if (!be.ok()) return Fail("CUDA backend", be.status());
  colibri::backend::Backend& gpu = **be;
  std::mt19937_64 rng(1);

  // 1. Matvec bandwidth per type, and the GEMM path at 512 tokens.
  const int64_t rows = 14336, cols = 4096;
  std::printf(
      "| weight type | decode matvec [%lld x %lld], 1 token | of peak | prefill GEMM, 512 tokens "
      "|\n",
      static_cast<long long>(rows), static_cast<long long>(cols));
  std::printf("|---|---|---|---|\n");
  auto x = gpu.Allocate(512 * cols * sizeof(float));
  auto y = gpu.Allocate(512 * rows * sizeof(float));
  if (!x.ok() || !y.ok()) return Fail("activations", x.ok() ? y.status() : x.status());
  {
    std::vector<float> host(static_cast<size_t>(512 * cols));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : host) v = nd(rng);
    gpu.Upload((*x)->data(), host.data(), host.size() * sizeof(float));
  }
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ6_K, DType::kQ5_K, DType::kQ4_K,
                  DType::kQ3_K, DType::kQ2_K}) {
    const std::vector<uint8_t> w = RandomRows(t, rows, cols, rng);
    std::unique_ptr<colibri::backend::Buffer> storage;
    auto ref = gpu.ImportWeight(t, rows, cols, w.data(), &storage);
    if (!ref.ok()) return Fail("import", ref.status());
    for (int i = 0; i < 10; ++i) gpu.MatMul(*ref, (*x)->f32(), 1, (*y)->f32());
    if (auto st = gpu.Synchronize(); !st.ok()) return Fail("matvec", st);
    const int iters = 200;
    double t0 = Now();
    for (int i = 0; i < iters; ++i) gpu.MatMul(*ref, (*x)->f32(), 1, (*y)->f32());
    if (auto st = gpu.Synchronize(); !st.ok()) return Fail("matvec", st);
    const double gbps = static_cast<double>(w.size()) * iters / (Now() - t0) / 1e9;
    gpu.MatMul(*ref, (*x)->f32(), 512, (*y)->f32());
    (void)gpu.Synchronize();
    t0 = Now();
    const int gemm_iters = 10;
    for (int i = 0; i < gemm_iters; ++i) gpu.MatMul(*ref, (*x)->f32(), 512, (*y)->f32());
    if (auto st = gpu.Synchronize(); !st.ok()) return Fail("gemm", st);
    const double tflops = 2.0 * rows * cols * 512 * gemm_iters / (Now() - t0) / 1e12;
    std::printf("| %s | %.0f GB/s | %.0f%% | %.1f TFLOP/s |\n",
                std::string(colibri::quant::DTypeName(t)).c_str(), gbps,
                peak > 0 ? 100.0 * gbps / peak : 0.0, tflops);
    out["matvec"][std::string(colibri::quant::DTypeName(t))] = {
        {"gbps", gbps},
        {"fraction_of_peak", peak > 0 ? gbps / peak : 0.0},
        {"gemm_tflops", tflops}};
  }

  // 2. Host -> device copies.
  {
    const size_t bytes = 512u << 20;
    auto dst = gpu.Allocate(bytes);
    if (!dst.ok()) return Fail("copy buffer", dst.status());
    void* pinned = nullptr;
    if (cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault) != cudaSuccess) {
      std::fprintf(stderr, "cudaHostAlloc of 512 MiB failed\n");
      return 1;
    }
    std::memset(pinned, 1, bytes);
    std::vector<uint8_t> pageable(bytes, 2);
    double best_pinned = 0, best_staged = 0;
    for (int rep = 0; rep < 3; ++rep) {
      double t0 = Now();
      if (auto st = gpu.TransferIn((*dst)->data(), pinned, bytes); !st.ok())
        return Fail("pinned copy", st);
      best_pinned = std::max(best_pinned, bytes / (Now() - t0) / 1e9);
      t0 = Now();
      if (auto st = gpu.TransferIn((*dst)->data(), pageable.data(), bytes); !st.ok())
        return Fail("staged copy", st);
      best_staged = std::max(best_staged, bytes / (Now() - t0) / 1e9);
    }
    (void)cudaFreeHost(pinned);
    std::printf("\n| host -> device (512 MiB, best of 3) | GB/s |\n|---|---|\n");
    std::printf(
        "| from pinned memory | %.1f |\n| from pageable memory via pinned staging | %.1f |\n",
        best_pinned, best_staged);
    out["h2d"] = {{"pinned_gbps", best_pinned}, {"staged_gbps", best_staged}};
  }
  x->reset();
  y->reset();
  be->reset();
  if (skip_decode) {
    if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
    return 0;
  }

  // 3. Decode on a Mixtral-shaped model.
  const colibri::model::ModelConfig c =
      colibri::bench::MixtralConfig({.layers = layers});  // Mixtral 8x7B's shape
  const int64_t vocab = c.vocab_size;
  const double gen_start = Now();
  if (auto st = colibri::bench::WriteRandomModel(dir, "gpu-bench", c, *dt, *dt, DType::kQ6_K, rng);
      !st.ok()) {
    return Fail("model", st);
  }
  std::printf("\nsynthetic model: %lld layers of Mixtral's shape, %s, written in %.0f s\n",
              static_cast<long long>(layers), quant.c_str(), Now() - gen_start);

  std::printf(
      "\n| decode (%lld-token prompt, %lld tokens) | VRAM tier | tok/s | tok/s scaled to 32 layers "
      "| VRAM hit rate |\n",
      static_cast<long long>(prompt), static_cast<long long>(tokens));
  std::printf("|---|---|---|---|---|\n");
  for (double share : {1.0, small_tier}) {
    colibri::compute::ComputeNodeOptions opt;
    opt.model_dir = dir;
    opt.backend = "cuda";
    opt.expert_cache_bytes = 64ull << 30;
    opt.kv_cache_limit = 1ull << 30;
    opt.cache.prefetch_layers = 1;
    opt.cache.routing_heat = "none";
    auto probe = colibri::model::Container::Open(dir);
    if (!probe.ok()) return Fail("model", probe.status());
    const auto& m = (*probe)->manifest();
    uint64_t slot = 0;
    for (const auto& b : m.experts) slot = std::max(slot, b.size);
    slot = (slot + 255) / 256 * 256;
    const uint64_t blocks = static_cast<uint64_t>(
        std::max(2.0, std::ceil(share * static_cast<double>(m.experts.size()))));
    opt.cache.vram_bytes = blocks * slot;
    auto node = colibri::compute::ComputeNode::Create(opt);
    if (!node.ok()) return Fail("compute node", node.status());
    if (auto n = (*node)->PreloadExperts(); !n.ok()) return Fail("preload", n.status());
    // Fill the VRAM tier (all of it, or its share) before measuring.
    auto* front = (*node)->expert_cache().front();
    for (uint64_t i = 0; i < std::min<uint64_t>(blocks, m.experts.size()); ++i) {
      const auto& b = m.experts[i];
      auto lease = front->Fetch(b.id, colibri::expert_source::Priority::kDemand);
      if (!lease.ok()) return Fail("vram fill", lease.status());
    }
    const auto before = (*node)->expert_cache().vram()->Stats();
    colibri::engine::GenerationRequest req;
    for (int64_t i = 0; i < prompt; ++i)
      req.prompt.push_back(static_cast<int32_t>(3 + (i * 104729) % (vocab - 3)));
    req.max_tokens = static_cast<int>(tokens);
    req.ignore_eos = true;
    auto r =
        (*node)->engine().Generate(req, [](const colibri::engine::SampledToken&) { return true; });
    if (!r.ok()) return Fail("generate", r.status());
    const double tps = (static_cast<double>(r->tokens.size()) - 1) / r->decode_seconds;
    const auto after = (*node)->expert_cache().vram()->Stats();
    const double lookups = static_cast<double>(after.lookups() - before.lookups());
    const double hit = lookups > 0 ? static_cast<double>(after.hits - before.hits) / lookups : 0;
    const std::string label = share >= 1.0 ? "all experts"
                                           : std::to_string(blocks) + " of " +
                                                 std::to_string(m.experts.size()) + " experts";
    std::printf("| %s | %s | %.1f | %.1f | %.0f%% |\n", quant.c_str(), label.c_str(), tps,
                tps * static_cast<double>(layers) / 32.0, 100.0 * hit);
    out["decode"].push_back({{"vram_experts", blocks},
                             {"experts", m.experts.size()},
                             {"tokens_per_s", tps},
                             {"tokens_per_s_32_layers", tps * static_cast<double>(layers) / 32.0},
                             {"vram_hit_rate", hit},
                             {"layers", layers},
                             {"quant", quant}});
  }
  fs::remove_all(dir);
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
}
