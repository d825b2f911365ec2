#include "colibri/model/synthetic_model.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/model/container.h"
#include "colibri/quant/quantize.h"

namespace colibri::model {
namespace {

using quant::DType;

std::span<const uint8_t> Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

// Rows of `type` that decode to N(0, (scale^2)/cols) values. Large matrices draw their rows from
// a pool of 64 quantized rows, so building a multi-GB model does not wait on the k-quant search.
std::vector<uint8_t> RandomRows(DType type, int64_t rows, int64_t cols, float scale,
                                std::mt19937_64& rng) {
  const size_t row_bytes = quant::RowBytes(type, cols);
  std::normal_distribution<float> nd(0.0f, scale / std::sqrt(static_cast<float>(cols)));
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  constexpr int64_t kPool = 64;
  if (rows * cols <= (1 << 20)) {
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& x : row) x = nd(rng);
      quant::QuantizeRow(type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes, cols);
    }
    return out;
  }
  std::vector<uint8_t> pool(row_bytes * kPool);
  for (int64_t r = 0; r < kPool; ++r) {
    for (auto& x : row) x = nd(rng);
    quant::QuantizeRow(type, row.data(), pool.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + static_cast<size_t>(r) * row_bytes,
                pool.data() + (rng() % kPool) * row_bytes, row_bytes);
  }
  return out;
}

// Latent attention's tensors (model_config.h): q through a LoRA (or one attn_q), the latent
// down projection with its RMSNorm, the per-head key / value up projections and the output.
// Matrices whose width is not a whole number of `o.dtype` blocks (the up projections' 8..128
// wide heads) are stored f32.
// Where a writer puts a tensor: ContainerWriter::AddDense, or AddExtra for the NextN layer.
using AddTensor = std::function<absl::Status(const std::string&, DType, std::vector<int64_t>,
                                             std::span<const uint8_t>)>;

absl::Status WriteLatentAttention(const AddTensor& add, const std::string& b, const ModelConfig& c,
                                  const SyntheticModelOptions& o, std::mt19937_64& rng,
                                  bool whole_kv_b) {
  const int64_t H = c.hidden_size, NH = c.n_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim,
                V = c.v_head_dim, qd = NH * c.head_dim;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
    const DType t = cols % quant::Traits(o.dtype).block_elems == 0 ? o.dtype : DType::kF32;
    auto bytes = RandomRows(t, rows, cols, scale, rng);
    return add(name, t, {rows, cols}, bytes);
  };
  auto ones = [&](const std::string& name, int64_t n) {
    const std::vector<float> v(static_cast<size_t>(n), 1.0f);
    return add(name, DType::kF32, {n}, Bytes(v));
  };
  if (c.q_lora_rank > 0) {
    RETURN_IF_ERROR(matrix(b + "attn_q_a", c.q_lora_rank, H, 1.0f));
    RETURN_IF_ERROR(ones(b + "attn_q_a_norm", c.q_lora_rank));
    RETURN_IF_ERROR(matrix(b + "attn_q_b", qd, c.q_lora_rank, 1.0f));
  } else {
    RETURN_IF_ERROR(matrix(b + "attn_q", qd, H, 1.0f));
  }
  RETURN_IF_ERROR(matrix(b + "attn_kv_a_mqa", L + R, H, 1.0f));
  RETURN_IF_ERROR(ones(b + "attn_kv_a_norm", L));
  if (whole_kv_b) {
    // Hugging Face's kv_b_proj, as the NextN import keeps it: per head nope key rows, v rows.
    RETURN_IF_ERROR(matrix(b + "attn_kv_b", NH * (c.qk_nope_head_dim + V), L, 1.0f));
  } else {
    RETURN_IF_ERROR(matrix(b + "attn_k_b", NH * L, c.qk_nope_head_dim, 1.0f));
    RETURN_IF_ERROR(matrix(b + "attn_v_b", NH * V, L, 1.0f));
  }
  return matrix(b + "attn_output", H, NH * V, o.residual_scale);
}

// The NextN / MTP layer `index` as the importers keep it (nextn_import.h): extra tensors
// "nextn.<index>.<suffix>" with the stacked experts; its own shared head, the target's
// embedding (no embed_tokens, as some GLM-4.5 conversions).
absl::Status WriteNextnLayer(ContainerWriter& w, int64_t index, const SyntheticModelOptions& o,
                             std::mt19937_64& rng) {
  const ModelConfig& c = o.config;
  const int64_t H = c.hidden_size, qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  const std::string b = absl::StrCat("nextn.", index, ".");
  const AddTensor add = [&](const std::string& name, DType t, std::vector<int64_t> shape,
                            std::span<const uint8_t> bytes) {
    return w.AddExtra(name, t, std::move(shape), bytes);
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
    auto bytes = RandomRows(o.dtype, rows, cols, scale, rng);
    return add(b + name, o.dtype, {rows, cols}, bytes);
  };
  // Norm weights near 1 (not exactly: a swapped enorm / hnorm must change the result).
  auto norm = [&](const std::string& name, int64_t n) {
    std::normal_distribution<float> nd(1.0f, 0.2f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng);
    return add(b + name, DType::kF32, {n}, Bytes(v));
  };
  RETURN_IF_ERROR(matrix("eh_proj", H, 2 * H, 1.0f));
  RETURN_IF_ERROR(norm("enorm", H));
  RETURN_IF_ERROR(norm("hnorm", H));
  RETURN_IF_ERROR(norm("shared_head_norm", H));
  RETURN_IF_ERROR(matrix("shared_head_head", c.vocab_size, H, 3.0f));
  RETURN_IF_ERROR(norm("attn_norm", H));
  RETURN_IF_ERROR(norm("ffn_norm", H));
  if (c.mla()) {
    RETURN_IF_ERROR(WriteLatentAttention(add, b, c, o, rng, /*whole_kv_b=*/true));
  } else {
    RETURN_IF_ERROR(matrix("attn_q", qd, H, 1.0f));
    RETURN_IF_ERROR(matrix("attn_k", kvd, H, 1.0f));
    RETURN_IF_ERROR(matrix("attn_v", kvd, H, 1.0f));
    RETURN_IF_ERROR(matrix("attn_output", H, qd, o.residual_scale));
  }
  if (c.shared_expert_ffn > 0) {
    RETURN_IF_ERROR(matrix("ffn_gate_shexp", c.shared_expert_ffn, H, 1.0f));
    RETURN_IF_ERROR(matrix("ffn_up_shexp", c.shared_expert_ffn, H, 1.0f));
    RETURN_IF_ERROR(matrix("ffn_down_shexp", H, c.shared_expert_ffn, o.residual_scale));
  }
  if (c.router_bias) {
    std::normal_distribution<float> nd(0.0f, 0.1f);
    std::vector<float> bias(static_cast<size_t>(c.n_experts));
    for (auto& x : bias) x = nd(rng);
    RETURN_IF_ERROR(add(b + "ffn_exp_probs_b", DType::kF32, {c.n_experts}, Bytes(bias)));
  }
  {
    std::normal_distribution<float> nd(0.0f, o.router_scale / std::sqrt(static_cast<float>(H)));
    std::vector<float> router(static_cast<size_t>(c.n_experts * H));
    for (auto& x : router) x = nd(rng);
    RETURN_IF_ERROR(add(b + "ffn_gate_inp", DType::kF32, {c.n_experts, H}, Bytes(router)));
  }
  for (const char* part : {"gate", "up", "down"}) {
    const bool down = std::string(part) == "down";
    const int64_t rows = down ? H : c.expert_ffn, cols = down ? c.expert_ffn : H;
    auto bytes = RandomRows(o.dtype, c.n_experts * rows, cols, down ? o.residual_scale : 1.0f, rng);
    RETURN_IF_ERROR(
        add(absl::StrCat(b, "ffn_", part, "_exps"), o.dtype, {c.n_experts, rows, cols}, bytes));
  }
  return absl::OkStatus();
}

}  // namespace

ModelConfig DefaultSyntheticConfig() {
  ModelConfig c;
  c.hidden_size = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.expert_ffn = 64;
  c.n_experts = 4;
  c.top_k = 2;
  c.vocab_size = 64;
  c.context_length = 512;
  c.eos_token_ids = {};
  return c;
}

absl::Status WriteSyntheticModel(const std::filesystem::path& dir, const SyntheticModelOptions& o) {
  const ModelConfig& c = o.config;
  RETURN_IF_ERROR(c.Validate());
  std::mt19937_64 rng(o.seed);
  ContainerWriter::Options wo;
  wo.split_experts = o.split_experts;
  wo.overwrite = o.overwrite;
  ASSIGN_OR_RETURN(auto w, ContainerWriter::Create(dir, o.name, c, wo));
  const int64_t H = c.hidden_size, qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  auto dense = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
    auto b = RandomRows(o.dtype, rows, cols, scale, rng);
    return w->AddDense(name, o.dtype, {rows, cols}, b);
  };
  auto f32 = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    return w->AddDense(name, DType::kF32, std::move(shape), Bytes(v));
  };
  // Embeddings: a shared unit-variance direction mixed into each token's own.
  {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> shared(static_cast<size_t>(H));
    for (auto& x : shared) x = nd(rng);
    std::vector<float> embd(static_cast<size_t>(c.vocab_size * H));
    const float a = o.embedding_shared, b = std::sqrt(std::max(0.0f, 1.0f - a * a));
    for (int64_t t = 0; t < c.vocab_size; ++t) {
      for (int64_t i = 0; i < H; ++i)
        embd[static_cast<size_t>(t * H + i)] = a * shared[i] + b * nd(rng);
    }
    std::vector<uint8_t> q(quant::RowBytes(o.dtype, H) * static_cast<size_t>(c.vocab_size));
    for (int64_t t = 0; t < c.vocab_size; ++t) {
      quant::QuantizeRow(o.dtype, embd.data() + t * H,
                         q.data() + static_cast<size_t>(t) * quant::RowBytes(o.dtype, H), H);
    }
    RETURN_IF_ERROR(w->AddDense("token_embd", o.dtype, {c.vocab_size, H}, q));
  }
  RETURN_IF_ERROR(dense("output", c.vocab_size, H, 3.0f));
  const std::vector<float> ones(static_cast<size_t>(std::max(H, qd)), 1.0f);
  RETURN_IF_ERROR(f32("output_norm", {H}, std::vector<float>(ones.begin(), ones.begin() + H)));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = absl::StrCat("blk.", l, ".");
    RETURN_IF_ERROR(f32(b + "attn_norm", {H}, std::vector<float>(ones.begin(), ones.begin() + H)));
    RETURN_IF_ERROR(f32(b + "ffn_norm", {H}, std::vector<float>(ones.begin(), ones.begin() + H)));
    if (c.mla()) {
      const AddTensor add = [&](const std::string& name, DType t, std::vector<int64_t> shape,
                                std::span<const uint8_t> bytes) {
        return w->AddDense(name, t, std::move(shape), bytes);
      };
      RETURN_IF_ERROR(WriteLatentAttention(add, b, c, o, rng, /*whole_kv_b=*/false));
    } else {
      RETURN_IF_ERROR(dense(b + "attn_q", qd, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "attn_k", kvd, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "attn_v", kvd, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "attn_output", H, qd, o.residual_scale));
    }
    if (!c.IsMoeLayer(l)) {
      RETURN_IF_ERROR(dense(b + "ffn_gate", c.dense_ffn, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "ffn_up", c.dense_ffn, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "ffn_down", H, c.dense_ffn, o.residual_scale));
      continue;
    }
    if (c.shared_expert_ffn > 0) {
      RETURN_IF_ERROR(dense(b + "ffn_gate_shexp", c.shared_expert_ffn, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "ffn_up_shexp", c.shared_expert_ffn, H, 1.0f));
      RETURN_IF_ERROR(dense(b + "ffn_down_shexp", H, c.shared_expert_ffn, o.residual_scale));
      if (c.shared_expert_gated) {
        RETURN_IF_ERROR(f32(b + "ffn_gate_inp_shexp", {1, H},
                            std::vector<float>(static_cast<size_t>(H), 0.0f)));
      }
    }
    if (c.router_bias) {
      std::normal_distribution<float> nd(0.0f, 0.1f);
      std::vector<float> bias(static_cast<size_t>(c.n_experts));
      for (auto& x : bias) x = nd(rng);
      RETURN_IF_ERROR(f32(b + "ffn_exp_probs_b", {c.n_experts}, bias));
    }
    {
      std::normal_distribution<float> nd(0.0f, o.router_scale / std::sqrt(static_cast<float>(H)));
      std::vector<float> router(static_cast<size_t>(c.n_experts * H));
      for (auto& x : router) x = nd(rng);
      RETURN_IF_ERROR(f32(b + "ffn_gate_inp", {c.n_experts, H}, router));
    }
    for (int64_t e = 0; e < c.n_experts; ++e) {
      auto g = RandomRows(o.dtype, c.expert_ffn, H, 1.0f, rng);
      auto u = RandomRows(o.dtype, c.expert_ffn, H, 1.0f, rng);
      auto d = RandomRows(o.dtype, H, c.expert_ffn, o.residual_scale, rng);
      RETURN_IF_ERROR(w->AddExpert(l, e,
                                   {{"gate", o.dtype, {c.expert_ffn, H}, g},
                                    {"up", o.dtype, {c.expert_ffn, H}, u},
                                    {"down", o.dtype, {H, c.expert_ffn}, d}}));
    }
  }
  for (int64_t i = 0; i < c.nextn_layers; ++i) RETURN_IF_ERROR(WriteNextnLayer(*w, i, o, rng));
  if (!o.tokenizer_from.empty()) {
    ASSIGN_OR_RETURN(auto donor, Container::Open(o.tokenizer_from));
    const nlohmann::json& t = donor->manifest().tokenizer;
    if (auto files = t.find("files"); files != t.end()) {
      for (const auto& f : *files) {
        const std::string name = f.get<std::string>();
        RETURN_IF_ERROR(w->CopyFile(donor->dir() / name, name));
      }
    }
    w->manifest().tokenizer = t;
  }
  return w->Finish();
}

}  // namespace colibri::model
