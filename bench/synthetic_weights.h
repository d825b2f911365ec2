// Synthetic Mixtral-shaped models for the benchmarks, written straight into a colibri container:
// weights are random but valid GGML blocks, and building a multi-GB model takes seconds.
// (Small test fixtures with routing locality are colibri::model::WriteSyntheticModel.)
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "colibri/model/model_config.h"
#include "colibri/quant/dtype.h"

namespace colibri::bench {

// Rows of `type` that decode to N(0, 1/cols) values, as trained weights are scaled: a pool of
// 64 rows is quantized once per shape and rows are drawn from it, so building a multi-GB model
// does not wait on the k-quant search.
std::vector<uint8_t> RandomRows(quant::DType type, int64_t rows, int64_t cols,
                                std::mt19937_64& rng);

// Defaults: Mixtral 8x7B.
struct MixtralShape {
  int64_t layers = 32;
  int64_t hidden = 4096;
  int64_t ffn = 14336;  // per expert
  int64_t vocab = 32000;
  int64_t experts = 8;
  int64_t top_k = 2;
  int64_t heads = 32;
  int64_t kv_heads = 8;
};

// The model config of `shape`: head_dim hidden / heads, context 4096, eos token 2.
model::ModelConfig MixtralConfig(const MixtralShape& shape);

// Writes a model of `config` into `dir` (replacing it): expert matrices in `expert_type`, the
// embedding and attention in `dense_type`, the output projection in `output_type` and the routers
// in f32; norms all ones. Rows come from `rng`.
absl::Status WriteRandomModel(const std::string& dir, const std::string& name,
                              const model::ModelConfig& config, quant::DType expert_type,
                              quant::DType dense_type, quant::DType output_type,
                              std::mt19937_64& rng);

}  // namespace colibri::bench
