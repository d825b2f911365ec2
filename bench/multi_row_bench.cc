// The multi-row matmul kernels (quant::MatVecMulti) against one MatVec per token, as the CPU
// backend runs prefill, verify passes and batched decode: a weight tile of 64 rows stays in L2
// while a chunk's tokens are dotted with it. One thread, expert-shaped matrices resident in
// RAM; prints a markdown table of tokens x weights per second (GMAC/s) and the speed-up.
//
//   multi_row_bench [--tokens 64] [--repeat 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "colibri/quant/dtype.h"
#include "colibri/quant/quantize.h"
#include "colibri/quant/vec_dot.h"

namespace {

using colibri::quant::DType;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t rows, cols;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"multi-row matmul kernels vs one matvec per token"};
  int64_t tokens = 64;
  int repeat = 3;
  app.add_option("--tokens", tokens, "tokens in the chunk");
  app.add_option("--repeat", repeat, "runs per case (the best is kept)");
  CLI11_PARSE(app, argc, argv);
  const Shape shapes[] = {{"Mixtral expert gate/up (14336 x 4096)", 14336, 4096},
                          {"Qwen3-30B-A3B expert gate/up (768 x 2048)", 768, 2048},
                          {"Qwen3-30B-A3B expert down (2048 x 768)", 2048, 768}};
  std::printf("kernels: %s\n\n", std::string(colibri::quant::ActiveIsa()).c_str());
  std::printf(
      "| type | matrix | tokens | per-token MatVec (GMAC/s) | MatVecMulti (GMAC/s) | speed-up |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0, DType::kQ4_0,
                  DType::kIQ4_XS, DType::kMXFP4, DType::kQ2_K, DType::kQ3_K}) {
    for (const Shape& s : shapes) {
      const size_t row_bytes = colibri::quant::RowBytes(t, s.cols);
      std::vector<uint8_t> w(row_bytes * static_cast<size_t>(s.rows));
      std::mt19937 rng(1);
      std::normal_distribution<float> nd(0, 0.02f);
      std::vector<float> r(static_cast<size_t>(s.cols));
      for (int64_t i = 0; i < s.rows; ++i) {
        for (float& x : r) x = nd(rng);
        colibri::quant::QuantizeRow(t, r.data(), w.data() + row_bytes * static_cast<size_t>(i),
                                    s.cols);
      }
      const DType at = colibri::quant::Traits(t).vec_dot_type;
      const size_t act_bytes = colibri::quant::RowBytes(at, s.cols);
      std::vector<uint8_t> acts(act_bytes * static_cast<size_t>(tokens));
      for (int64_t k = 0; k < tokens; ++k) {
        for (float& x : r) x = nd(rng) * 50;
        colibri::quant::QuantizeActivations(
            at, r.data(), acts.data() + act_bytes * static_cast<size_t>(k), s.cols);
      }
      constexpr int64_t kTile = 64, kAct = 8;
      std::vector<float> out(static_cast<size_t>(tokens * kTile));
      auto run = [&](bool multi) {
        double best = 1e30;
        for (int rep = 0; rep < repeat; ++rep) {
          const auto a = Clock::now();
          for (int64_t r0 = 0; r0 < s.rows; r0 += kTile) {
            const int64_t n_rows = std::min(kTile, s.rows - r0);
            const uint8_t* wt = w.data() + static_cast<size_t>(r0) * row_bytes;
            if (!multi) {
              for (int64_t k = 0; k < tokens; ++k)
                colibri::quant::MatVec(t, wt, row_bytes, n_rows,
                                       acts.data() + act_bytes * static_cast<size_t>(k), s.cols,
                                       out.data() + k * kTile);
              continue;
            }
            for (int64_t k0 = 0; k0 < tokens; k0 += kAct) {
              const int64_t c = std::min(kAct, tokens - k0);
              const void* ap[kAct];
              float* op[kAct];
              for (int64_t j = 0; j < c; ++j) {
                ap[j] = acts.data() + act_bytes * static_cast<size_t>(k0 + j);
                op[j] = out.data() + (k0 + j) * kTile;
              }
              colibri::quant::MatVecMulti(t, wt, row_bytes, n_rows, {ap, static_cast<size_t>(c)},
                                          s.cols, {op, static_cast<size_t>(c)});
            }
          }
          best = std::min(best, std::chrono::duration<double>(Clock::now() - a).count());
        }
        return static_cast<double>(s.rows) * static_cast<double>(s.cols) *
               static_cast<double>(tokens) / best / 1e9;
      };
      const double single = run(false), multi = run(true);
      std::printf("| %s | %s | %lld | %.1f | %.1f | %.2fx |\n",
                  std::string(colibri::quant::DTypeName(t)).c_str(), s.name,
                  static_cast<long long>(tokens), single, multi, multi / single);
      std::fflush(stdout);
    }
  }
  return 0;
}
