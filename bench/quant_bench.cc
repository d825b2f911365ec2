// Throughput of the quant kernels, in GB/s of weight bytes, against memcpy of the same bytes.
//
// Each weight type gets a matrix of ~64 MiB (rows of 4096 elements), larger than any cache,
// as when experts stream from NVMe through RAM:
//   Dequantize: every row expanded into one reused 16 KiB float buffer.
//   VecDot:     every row dotted with one activation row (already in the vec_dot type).
//   Quantize:   reference quantizer speed (the converter's cost) in M elements/s, on a
//               1M-element slice.
//   Expert:     MatVec on expert-shaped matrices (768 x 2048 ... 2880 x 2880) for the decode
//               types, AVX2 against the best set: streaming over 64 MiB of experts, the same
//               with the activations quantized per call, and one cache-resident expert. A
//               second table summarizes it (e.g. --benchmark_filter='BM_Memcpy|BM_Expert').
// Each runs with the kernels DequantizeRow / VecDot pick (avx2 where the CPU has it) and with
// the scalar reference forced. Single thread. After the usual Google Benchmark output a
// markdown table summarizes it; `--benchmark_filter=` works as usual.
//
//   quant_bench [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "colibri/quant/dtype.h"
#include "colibri/quant/fp16.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"

namespace colibri::quant {
namespace {

constexpr int64_t kCols = 4096;
constexpr size_t kTargetBytes = size_t{64} << 20;

constexpr DType kTypes[] = {
    DType::kF32,   DType::kF16,    DType::kBF16,    DType::kQ8_0,  DType::kQ6_K,  DType::kQ5_K,
    DType::kQ4_K,  DType::kQ3_K,   DType::kQ2_K,    DType::kQ5_1,  DType::kQ5_0,  DType::kQ4_1,
    DType::kQ4_0,  DType::kIQ4_XS, DType::kIQ4_NL,  DType::kMXFP4, DType::kIQ3_S, DType::kIQ3_XXS,
    DType::kIQ2_S, DType::kIQ2_XS, DType::kIQ2_XXS, DType::kIQ1_M, DType::kIQ1_S};

struct Matrix {
  int64_t rows = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> weights;
  std::vector<uint8_t> activations;  // one row, in the vec_dot type
};

std::map<std::pair<DType, int64_t>, Matrix>& MatrixCache() {
  static auto* cache = new std::map<std::pair<DType, int64_t>, Matrix>();
  return *cache;
}

// Built once per type and width (quantizing 64 MiB of k-quants takes a while): ~64 MiB of rows
// of `cols` elements. `only` drops every other width's matrices first (the expert rows use
// many widths; each is needed by consecutive benchmarks only).
const Matrix& GetMatrix(DType type, int64_t cols = kCols, bool only = false) {
  std::map<std::pair<DType, int64_t>, Matrix>* cache = &MatrixCache();
  if (only)
    std::erase_if(*cache, [&](const auto& kv) { return kv.first != std::make_pair(type, cols); });
  auto it = cache->find({type, cols});
  if (it != cache->end()) return it->second;
  Matrix m;
  m.row_bytes = RowBytes(type, cols);
  m.rows = static_cast<int64_t>(kTargetBytes / m.row_bytes);
  m.weights.resize(m.row_bytes * m.rows);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  // Quantize a few distinct rows and tile them: the bytes are realistic, the build is quick.
  constexpr int64_t kDistinct = 64;
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < kDistinct; ++r) {
    for (float& v : row) v = normal(rng);
    uint8_t* dst = m.weights.data() + r * m.row_bytes;
    if (HasQuantizer(type)) {
      QuantizeRow(type, row.data(), dst, cols);
      continue;
    }
    // Import-only types (the codebook i-quants): random codes under a plausible f16 scale,
    // leading each block (IQ1_M: in the top nibbles of its last 8 bytes).
    for (size_t b = 0; b < m.row_bytes; ++b) dst[b] = static_cast<uint8_t>(rng());
    const size_t bb = Traits(type).block_bytes;
    const uint16_t d = F32ToF16(0.002f);
    for (size_t b = 0; b < m.row_bytes; b += bb) {
      if (type == DType::kIQ1_M) {
        for (int k = 0; k < 4; ++k) {
          uint8_t& hi = dst[b + bb - 8 + 2 * k + 1];
          hi = static_cast<uint8_t>((hi & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
        }
      } else {
        std::memcpy(dst + b, &d, sizeof(d));
      }
    }
  }
  for (int64_t r = kDistinct; r < m.rows; ++r) {
    std::memcpy(m.weights.data() + r * m.row_bytes,
                m.weights.data() + (r % kDistinct) * m.row_bytes, m.row_bytes);
  }
  const DType act_type = Traits(type).vec_dot_type;
  m.activations.resize(RowBytes(act_type, cols));
  for (float& v : row) v = normal(rng) * 50;
  QuantizeActivations(act_type, row.data(), m.activations.data(), cols);
  return cache->emplace(std::make_pair(type, cols), std::move(m)).first->second;
}

// range(1): 0 the best kernel set, 1 the scalar reference, 2 the AVX2 set (to compare with
// AVX-512 on CPUs that have both).
constexpr std::string_view kIsaArg[] = {"avx512", "scalar", "avx2"};
void SetIsa(const benchmark::State& state, int arg = 1) {
  SetKernelIsaCap(kIsaArg[state.range(arg)]);
}
std::string IsaLabel(const benchmark::State& state, int arg = 1) {
  return state.range(arg) == 1 ? "/scalar" : state.range(arg) == 2 ? "/avx2" : "/simd";
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<uint8_t> src(kTargetBytes, 1), dst(kTargetBytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kTargetBytes);
}

void BM_Dequantize(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const Matrix& m = GetMatrix(type);
  SetIsa(state);
  std::vector<float> out(kCols);
  for (auto _ : state) {
    for (int64_t r = 0; r < m.rows; ++r) {
      DequantizeRow(type, m.weights.data() + r * m.row_bytes, out.data(), kCols);
      benchmark::DoNotOptimize(out.data());
    }
    benchmark::ClobberMemory();
  }
  ForceScalarKernels(false);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * m.rows * m.row_bytes);
  state.SetLabel(std::string(DTypeName(type)) + IsaLabel(state));
}

void BM_VecDot(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const Matrix& m = GetMatrix(type);
  SetIsa(state);
  std::vector<float> out(static_cast<size_t>(m.rows));
  for (auto _ : state) {
    MatVec(type, m.weights.data(), m.row_bytes, m.rows, m.activations.data(), kCols, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  ForceScalarKernels(false);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * m.rows * m.row_bytes);
  state.SetLabel(std::string(DTypeName(type)) + IsaLabel(state));
}

// Expert-shaped matrices (rows x cols of one projection of one expert): Qwen3-30B-A3B
// (768 x 2048), Qwen3-235B (1536 x 4096), DeepSeek-like FFN 512 (2048 x 512, the down
// projection), gpt-oss (2880 x 2880; not for the k-quants, whose 256-element blocks do not
// divide 2880).
struct ExpertShape {
  int64_t rows, cols;
};
constexpr ExpertShape kExpertShapes[] = {{768, 2048}, {1536, 4096}, {2048, 512}, {2880, 2880}};
constexpr DType kExpertTypes[] = {DType::kQ8_0, DType::kQ6_K,   DType::kQ5_K,   DType::kQ4_K,
                                  DType::kQ4_0, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};
// range(3): how the experts are read.
enum ExpertMode : int64_t {
  kStream = 0,      // one MatVec per expert over ~64 MiB of experts (each read once, from DRAM)
  kStreamActQ = 1,  // the same, with the activations quantized from floats before each MatVec
  kHot = 2,         // one expert again and again (from the caches: the kernel's compute limit)
};

void BM_Expert(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const ExpertShape shape = kExpertShapes[state.range(1)];
  const auto mode = static_cast<ExpertMode>(state.range(3));
  const Matrix& m = GetMatrix(type, shape.cols, /*only=*/true);
  const int64_t experts = m.rows / shape.rows;
  const size_t expert_bytes = static_cast<size_t>(shape.rows) * m.row_bytes;
  SetIsa(state, 2);
  std::vector<float> out(static_cast<size_t>(shape.rows));
  std::vector<float> x(static_cast<size_t>(shape.cols));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> act(m.activations);
  const DType act_type = Traits(type).vec_dot_type;
  for (auto _ : state) {
    for (int64_t e = 0; e < experts; ++e) {
      if (mode == kStreamActQ) QuantizeActivations(act_type, x.data(), act.data(), shape.cols);
      const uint8_t* w = m.weights.data() + (mode == kHot ? 0 : e * expert_bytes);
      MatVec(type, w, m.row_bytes, shape.rows, act.data(), shape.cols, out.data());
      benchmark::DoNotOptimize(out.data());
    }
    benchmark::ClobberMemory();
  }
  ForceScalarKernels(false);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * experts *
                          static_cast<int64_t>(expert_bytes));
  state.counters["expert_bytes"] = static_cast<double>(expert_bytes);
  state.SetLabel(std::string(DTypeName(type)) + IsaLabel(state, 2));
}

// The per-call activation quantization (QuantizeActivations) at expert widths: range(0) the
// activation type (Q8_0 or Q8_K), range(1) the width, range(2) the kernel set as in kIsaArg.
void BM_QuantizeActivations(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int64_t n = state.range(1);
  SetIsa(state, 2);
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> out(RowBytes(type, n));
  for (auto _ : state) {
    QuantizeActivations(type, x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  ForceScalarKernels(false);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.SetLabel(std::string(DTypeName(type)) + IsaLabel(state, 2));
}

void BM_Quantize(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  constexpr int64_t kElems = int64_t{1} << 20;
  std::vector<float> x(kElems);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& v : x) v = normal(rng);
  std::vector<uint8_t> out(RowBytes(type, kElems));
  for (auto _ : state) {
    for (int64_t r = 0; r < kElems; r += kCols) {
      QuantizeRow(type, x.data() + r, out.data() + RowBytes(type, r), kCols);
    }
    benchmark::DoNotOptimize(out.data());
  }
  // Reported per weight byte produced, like the other columns.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * out.size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kElems);
}

void TypeArgs(benchmark::internal::Benchmark* b) {
  for (DType t : kTypes) {
    for (int isa : {0, 1}) b->Args({static_cast<int64_t>(t), isa});
  }
}

// VecDot also with the AVX2 set when the best set is above it.
void VecDotArgs(benchmark::internal::Benchmark* b) {
  const bool above_avx2 = SupportedIsas().size() > 2;
  for (DType t : kTypes) {
    for (int isa : {0, 1, 2}) {
      if (isa != 2 || above_avx2) b->Args({static_cast<int64_t>(t), isa});
    }
  }
}

// Every type and shape, with the AVX2 set and (where the CPU has more) the best set.
void ExpertArgs(benchmark::internal::Benchmark* b) {
  const bool above_avx2 = SupportedIsas().size() > 2;
  for (DType t : kExpertTypes) {
    for (int64_t s = 0; s < static_cast<int64_t>(std::size(kExpertShapes)); ++s) {
      if (kExpertShapes[s].cols % Traits(t).block_elems != 0) continue;
      for (int isa : {2, 0}) {
        if (isa == 0 && !above_avx2) continue;
        for (int64_t mode : {kStream, kStreamActQ, kHot})
          b->Args({static_cast<int64_t>(t), s, isa, mode});
      }
    }
  }
}

void QuantizeArgs(benchmark::internal::Benchmark* b) {
  for (DType t : kTypes) {
    if (HasQuantizer(t)) b->Args({static_cast<int64_t>(t)});
  }
}

BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Dequantize)->Apply(TypeArgs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VecDot)->Apply(VecDotArgs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Quantize)->Apply(QuantizeArgs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Expert)->Apply(ExpertArgs)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_QuantizeActivations)
    ->ArgsProduct({{static_cast<int64_t>(DType::kQ8_0), static_cast<int64_t>(DType::kQ8_K)},
                   {512, 2048, 4096},
                   {1, 2}})
    ->Unit(benchmark::kNanosecond);

// Collects bytes_per_second per benchmark run while printing as usual.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end()) rates_[run.benchmark_name()] = it->second.value / 1e9;
      it = run.counters.find("items_per_second");
      if (it != run.counters.end()) items_[run.benchmark_name()] = it->second.value / 1e6;
      it = run.counters.find("expert_bytes");
      if (it != run.counters.end() && rates_.count(run.benchmark_name())) {
        us_[run.benchmark_name()] = it->second.value / (rates_[run.benchmark_name()] * 1e3);
      }
    }
  }

  void PrintTable() const {
    auto rate = [&](const std::string& name, const std::map<std::string, double>& from) {
      auto it = from.find(name);
      if (it == from.end()) return std::string("-");
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2f", it->second);
      return std::string(buf);
    };
    auto ratio = [&](const std::string& name, double base) -> std::string {
      auto it = rates_.find(name);
      if (it == rates_.end() || base <= 0) return "-";
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2fx", it->second / base);
      return buf;
    };
    const auto memcpy_it = rates_.find("BM_Memcpy");
    const double memcpy_rate = memcpy_it == rates_.end() ? 0 : memcpy_it->second;
    std::printf(
        "\nWeight bytes per second (GB/s), single thread, %s kernels vs scalar reference;"
        " memcpy of 64 MiB: %s GB/s\n\n",
        std::string(ActiveIsa()).c_str(), rate("BM_Memcpy", rates_).c_str());
    std::printf(
        "| type | bits/weight | dequantize simd | dequantize scalar | vec_dot simd | vec_dot avx2 "
        "| "
        "vec_dot scalar | vec_dot simd / memcpy | quantize (ref), Melem/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (DType t : kTypes) {
      const std::string id = std::to_string(static_cast<uint32_t>(t));
      const double bits = 8.0 * Traits(t).block_bytes / Traits(t).block_elems;
      std::printf("| %s | %.4g | %s | %s | %s | %s | %s | %s | %s |\n",
                  std::string(DTypeName(t)).c_str(), bits,
                  rate("BM_Dequantize/" + id + "/0", rates_).c_str(),
                  rate("BM_Dequantize/" + id + "/1", rates_).c_str(),
                  rate("BM_VecDot/" + id + "/0", rates_).c_str(),
                  rate("BM_VecDot/" + id + "/2", rates_).c_str(),
                  rate("BM_VecDot/" + id + "/1", rates_).c_str(),
                  ratio("BM_VecDot/" + id + "/0", memcpy_rate).c_str(),
                  rate("BM_Quantize/" + id, items_).c_str());
    }
  }

  // Only when BM_Expert ran: GB/s per type and expert shape, AVX2 against the best set.
  void PrintExpertTable() const {
    if (std::none_of(rates_.begin(), rates_.end(),
                     [](const auto& kv) { return kv.first.rfind("BM_Expert/", 0) == 0; })) {
      return;
    }
    const auto memcpy_it = rates_.find("BM_Memcpy");
    const double memcpy_rate = memcpy_it == rates_.end() ? 0 : memcpy_it->second;
    auto cell = [&](const std::string& name, bool with_fraction) {
      auto it = rates_.find(name);
      if (it == rates_.end()) return std::string("-");
      char buf[64];
      if (with_fraction && memcpy_rate > 0) {
        std::snprintf(buf, sizeof(buf), "%.2f (%.2f)", it->second, it->second / memcpy_rate);
      } else {
        std::snprintf(buf, sizeof(buf), "%.2f", it->second);
      }
      return std::string(buf);
    };
    auto us = [&](const std::string& name) {
      auto it = us_.find(name);
      if (it == us_.end()) return std::string("-");
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.1f", it->second);
      return std::string(buf);
    };
    std::printf(
        "\nExpert matrices, GB/s of weights (fraction of memcpy's %.2f GB/s): stream = one MatVec "
        "per "
        "expert over 64 MiB of experts; +actq = activations quantized before each; hot = one "
        "expert "
        "again and again (cache-resident)\n\n",
        memcpy_rate);
    std::printf(
        "| type | rows x cols | avx2 stream | %s stream | avx2 +actq | %s +actq | us/expert %s "
        "stream | "
        "avx2 hot | %s hot |\n|---|---|---|---|---|---|---|---|---|\n",
        std::string(ActiveIsa()).c_str(), std::string(ActiveIsa()).c_str(),
        std::string(ActiveIsa()).c_str(), std::string(ActiveIsa()).c_str());
    for (DType t : kExpertTypes) {
      for (size_t s = 0; s < std::size(kExpertShapes); ++s) {
        const std::string base =
            "BM_Expert/" + std::to_string(static_cast<uint32_t>(t)) + "/" + std::to_string(s) + "/";
        if (rates_.find(base + "2/0") == rates_.end()) continue;
        std::printf("| %s | %lld x %lld | %s | %s | %s | %s | %s | %s | %s |\n",
                    std::string(DTypeName(t)).c_str(),
                    static_cast<long long>(kExpertShapes[s].rows),
                    static_cast<long long>(kExpertShapes[s].cols), cell(base + "2/0", true).c_str(),
                    cell(base + "0/0", true).c_str(), cell(base + "2/1", false).c_str(),
                    cell(base + "0/1", false).c_str(), us(base + "0/0").c_str(),
                    cell(base + "2/2", false).c_str(), cell(base + "0/2", false).c_str());
      }
    }
  }

 private:
  std::map<std::string, double> us_;     // microseconds per expert
  std::map<std::string, double> rates_;  // GB/s
  std::map<std::string, double> items_;  // M items/s
};

}  // namespace
}  // namespace colibri::quant

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  colibri::quant::TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintTable();
  reporter.PrintExpertTable();
  benchmark::Shutdown();
  return 0;
}
