#include "synthetic_weights.h"

#include <cmath>
#include <cstring>
#include <span>

#include "colibri/model/container.h"
#include "colibri/quant/quantize.h"

namespace colibri::bench {

using quant::DType;

std::vector<uint8_t> RandomRows(DType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const size_t row_bytes = quant::RowBytes(type, cols);
  constexpr int kPool = 64;
  std::vector<uint8_t> pool(row_bytes * kPool);
  std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int r = 0; r < kPool; ++r) {
    for (auto& x : row) x = nd(rng);
    quant::QuantizeRow(type, row.data(), pool.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + static_cast<size_t>(r) * row_bytes,
                pool.data() + (rng() % kPool) * row_bytes, row_bytes);
  }
  return out;
}

model::ModelConfig MixtralConfig(const MixtralShape& shape) {
  model::ModelConfig c;
  c.hidden_size = shape.hidden;
  c.n_layers = shape.layers;
  c.n_heads = shape.heads;
  c.n_kv_heads = shape.kv_heads;
  c.head_dim = shape.hidden / shape.heads;
  c.expert_ffn = shape.ffn;
  c.n_experts = shape.experts;
  c.top_k = shape.top_k;
  c.vocab_size = shape.vocab;
  c.context_length = 4096;
  c.eos_token_ids = {2};
  return c;
}

absl::Status WriteRandomModel(const std::string& dir, const std::string& name,
                              const model::ModelConfig& config, DType expert_type, DType dense_type,
                              DType output_type, std::mt19937_64& rng) {
  auto w = model::ContainerWriter::Create(dir, name, config, {.overwrite = true});
  if (!w.ok()) return w.status();
  auto& wr = **w;
  auto dense = [&](const std::string& tensor, DType t, int64_t rows, int64_t cols) {
    auto b = RandomRows(t, rows, cols, rng);
    return wr.AddDense(tensor, t, {rows, cols}, b);
  };
  const int64_t hidden = config.hidden_size, ffn = config.expert_ffn;
  const int64_t kv_dim = config.n_kv_heads * config.head_dim;
  std::vector<float> ones(static_cast<size_t>(hidden), 1.0f);
  std::span<const uint8_t> ones_bytes(reinterpret_cast<const uint8_t*>(ones.data()),
                                      ones.size() * 4);
  bool ok = dense("token_embd", dense_type, config.vocab_size, hidden).ok() &&
            dense("output", output_type, config.vocab_size, hidden).ok() &&
            wr.AddDense("output_norm", DType::kF32, {hidden}, ones_bytes).ok();
  for (int64_t l = 0; l < config.n_layers && ok; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    ok = wr.AddDense(b + "attn_norm", DType::kF32, {hidden}, ones_bytes).ok() &&
         wr.AddDense(b + "ffn_norm", DType::kF32, {hidden}, ones_bytes).ok() &&
         dense(b + "attn_q", dense_type, hidden, hidden).ok() &&
         dense(b + "attn_k", dense_type, kv_dim, hidden).ok() &&
         dense(b + "attn_v", dense_type, kv_dim, hidden).ok() &&
         dense(b + "attn_output", dense_type, hidden, hidden).ok() &&
         dense(b + "ffn_gate_inp", DType::kF32, config.n_experts, hidden).ok();
    for (int64_t e = 0; e < config.n_experts && ok; ++e) {
      auto g = RandomRows(expert_type, ffn, hidden, rng),
           u = RandomRows(expert_type, ffn, hidden, rng);
      auto d = RandomRows(expert_type, hidden, ffn, rng);
      ok = wr.AddExpert(l, e,
                        {{"gate", expert_type, {ffn, hidden}, g},
                         {"up", expert_type, {ffn, hidden}, u},
                         {"down", expert_type, {hidden, ffn}, d}})
               .ok();
    }
  }
  if (!ok) return absl::InternalError("cannot write the synthetic model to " + dir);
  return wr.Finish();
}

}  // namespace colibri::bench
