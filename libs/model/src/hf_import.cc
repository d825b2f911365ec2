// Hugging Face checkpoint -> colibri container.
#include <array>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "colibri/core/file_util.h"
#include "colibri/core/status.h"
#include "colibri/model/container.h"
#include "colibri/model/convert.h"
#include "colibri/model/model_config.h"
#include "colibri/model/quant_plan.h"
#include "colibri/model/safetensors.h"
#include "convert_util.h"
#include "nextn_import.h"
#include "nlohmann/json.hpp"

namespace colibri::model {
namespace {

namespace fs = std::filesystem;

// Per-family Hugging Face tensor names.
struct HfNames {
  std::string prefix_moe;  // "block_sparse_moe" or "mlp"
  std::string gate, up, down;
  std::string Expert(int64_t l, int64_t e, const std::string& which) const {
    return absl::StrCat("model.layers.", l, ".", prefix_moe, ".experts.", e, ".", which, ".weight");
  }
};

HfNames NamesFor(Architecture a) {
  if (a == Architecture::kMixtral) return {"block_sparse_moe", "w1", "w3", "w2"};
  return {"mlp", "gate_proj", "up_proj", "down_proj"};
}

class HfConverter {
 public:
  HfConverter(const SafetensorsCheckpoint& ckpt, const ModelConfig& config, const QuantPlan& plan,
              const ConvertOptions& options, ContainerWriter& writer)
      : ckpt_(ckpt), config_(config), plan_(plan), options_(options), writer_(writer) {}

  absl::Status Run() {
    RETURN_IF_ERROR(Matrix("model.embed_tokens.weight", "token_embd",
                           {config_.vocab_size, config_.hidden_size}, TensorKind::kEmbedding));
    RETURN_IF_ERROR(Vector("model.norm.weight", "output_norm", config_.hidden_size));
    if (ckpt_.Find("lm_head.weight") != nullptr) {
      RETURN_IF_ERROR(Matrix("lm_head.weight", "output", {config_.vocab_size, config_.hidden_size},
                             TensorKind::kOutput));
    } else if (config_.tie_word_embeddings) {
      RETURN_IF_ERROR(Matrix("model.embed_tokens.weight", "output",
                             {config_.vocab_size, config_.hidden_size}, TensorKind::kOutput));
    } else {
      return absl::NotFoundError(
          "checkpoint has no lm_head.weight and tie_word_embeddings is false");
    }
    Progress("embeddings");
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      RETURN_IF_ERROR(Layer(l));
      Progress(absl::StrCat("layer ", l));
    }
    return ImportNextnFromHuggingFace(ckpt_, config_, plan_, writer_);
  }

  uint64_t total_bytes_ = 0;  // of the *.safetensors files (progress)

 private:
  void Progress(const std::string& what) {
    if (options_.progress) options_.progress(read_bytes_, total_bytes_, what);
  }

  absl::StatusOr<std::vector<float>> Load(const std::string& hf_name,
                                          const std::vector<int64_t>& shape) {
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_.Get(hf_name));
    read_bytes_ += t->data.size();
    if (t->shape != shape) {
      std::string want, got;
      for (auto d : shape) absl::StrAppend(&want, want.empty() ? "" : ",", d);
      for (auto d : t->shape) absl::StrAppend(&got, got.empty() ? "" : ",", d);
      return absl::FailedPreconditionError(absl::StrCat("tensor '", hf_name, "' has shape [", got,
                                                        "], config.json implies [", want, "]"));
    }
    return CheckpointFloats(ckpt_, hf_name, *t);
  }

  absl::Status Matrix(const std::string& hf_name, const std::string& name,
                      std::vector<int64_t> shape, TensorKind kind, int64_t layer = -1) {
    ASSIGN_OR_RETURN(std::vector<float> v, Load(hf_name, shape));
    const quant::DType dt = plan_.TypeFor({kind, layer, shape[1]}, SourceType(hf_name));
    auto bytes = EncodeRows(v.data(), shape[0], shape[1], dt);
    return writer_.AddDense(name, dt, shape, bytes);
  }

  absl::Status F32(const std::string& hf_name, const std::string& name,
                   std::vector<int64_t> shape) {
    ASSIGN_OR_RETURN(std::vector<float> v, Load(hf_name, shape));
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(v.data()),
                                   v.size() * sizeof(float));
    return writer_.AddDense(name, quant::DType::kF32, shape, bytes);
  }

  absl::Status Vector(const std::string& hf_name, const std::string& name, int64_t n) {
    return F32(hf_name, name, {n});
  }

  // A resident SwiGLU MLP: <hf>{gate,up,down}_proj.weight -> <b>ffn_{gate,up,down}<suffix>.
  absl::Status Mlp(const std::string& hf, const std::string& b, const std::string& suffix,
                   int64_t ffn, std::array<TensorKind, 3> kinds, int64_t l) {
    const int64_t h = config_.hidden_size;
    RETURN_IF_ERROR(
        Matrix(hf + "gate_proj.weight", b + "ffn_gate" + suffix, {ffn, h}, kinds[0], l));
    RETURN_IF_ERROR(Matrix(hf + "up_proj.weight", b + "ffn_up" + suffix, {ffn, h}, kinds[1], l));
    return Matrix(hf + "down_proj.weight", b + "ffn_down" + suffix, {h, ffn}, kinds[2], l);
  }

  // DeepSeek latent attention; kv_b_proj is split into the per-head attn_k_b / attn_v_b.
  absl::Status LatentAttention(int64_t l) {
    const auto& c = config_;
    const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
    const std::string b = absl::StrCat("blk.", l, ".");
    const int64_t H = c.hidden_size, NH = c.n_heads, Q = c.head_dim, L = c.kv_lora_rank,
                  R = c.qk_rope_head_dim, N = c.qk_nope_head_dim, V = c.v_head_dim;
    if (c.q_lora_rank > 0) {
      RETURN_IF_ERROR(
          Matrix(p + "q_a_proj.weight", b + "attn_q_a", {c.q_lora_rank, H}, TensorKind::kAttnQ, l));
      RETURN_IF_ERROR(Vector(p + "q_a_layernorm.weight", b + "attn_q_a_norm", c.q_lora_rank));
      RETURN_IF_ERROR(Matrix(p + "q_b_proj.weight", b + "attn_q_b", {NH * Q, c.q_lora_rank},
                             TensorKind::kAttnQ, l));
    } else {
      RETURN_IF_ERROR(
          Matrix(p + "q_proj.weight", b + "attn_q", {NH * Q, H}, TensorKind::kAttnQ, l));
    }
    RETURN_IF_ERROR(Matrix(p + "kv_a_proj_with_mqa.weight", b + "attn_kv_a_mqa", {L + R, H},
                           TensorKind::kAttnK, l));
    RETURN_IF_ERROR(Vector(p + "kv_a_layernorm.weight", b + "attn_kv_a_norm", L));
    RETURN_IF_ERROR(
        Matrix(p + "o_proj.weight", b + "attn_output", {H, NH * V}, TensorKind::kAttnOutput, l));
    ASSIGN_OR_RETURN(std::vector<float> kv_b, Load(p + "kv_b_proj.weight", {NH * (N + V), L}));
    const SplitKvB split = SplitKvBProjection(kv_b.data(), NH, N, V, L);
    const quant::DType dk = plan_.TypeFor({TensorKind::kAttnK, l, N}, quant::DType::kF32);
    const quant::DType dv = plan_.TypeFor({TensorKind::kAttnV, l, L}, quant::DType::kF32);
    RETURN_IF_ERROR(writer_.AddDense(b + "attn_k_b", dk, {NH * L, N},
                                     EncodeRows(split.k_b.data(), NH * L, N, dk)));
    return writer_.AddDense(b + "attn_v_b", dv, {NH * V, L},
                            EncodeRows(split.v_b.data(), NH * V, L, dv));
  }

  // The checkpoint's float type (what `--quantize keep` stores).
  quant::DType SourceType(const std::string& hf_name) const {
    const SafetensorsTensor* t = ckpt_.Find(hf_name);
    if (t != nullptr && t->dtype == StDType::kBF16) return quant::DType::kBF16;
    if (t != nullptr && t->dtype == StDType::kF16) return quant::DType::kF16;
    return quant::DType::kF32;
  }

  absl::Status Layer(int64_t l) {
    if (config_.architecture == Architecture::kGptOss) return GptOssLayer(l);
    const auto& c = config_;
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string b = absl::StrCat("blk.", l, ".");
    const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    RETURN_IF_ERROR(Vector(p + "input_layernorm.weight", b + "attn_norm", c.hidden_size));
    if (c.mla()) {
      RETURN_IF_ERROR(LatentAttention(l));
    } else {
      RETURN_IF_ERROR(Matrix(p + "self_attn.q_proj.weight", b + "attn_q", {q_dim, c.hidden_size},
                             TensorKind::kAttnQ, l));
      RETURN_IF_ERROR(Matrix(p + "self_attn.k_proj.weight", b + "attn_k", {kv_dim, c.hidden_size},
                             TensorKind::kAttnK, l));
      RETURN_IF_ERROR(Matrix(p + "self_attn.v_proj.weight", b + "attn_v", {kv_dim, c.hidden_size},
                             TensorKind::kAttnV, l));
      RETURN_IF_ERROR(Matrix(p + "self_attn.o_proj.weight", b + "attn_output",
                             {c.hidden_size, q_dim}, TensorKind::kAttnOutput, l));
      if (c.qkv_bias) {
        RETURN_IF_ERROR(Vector(p + "self_attn.q_proj.bias", b + "attn_q_bias", q_dim));
        RETURN_IF_ERROR(Vector(p + "self_attn.k_proj.bias", b + "attn_k_bias", kv_dim));
        RETURN_IF_ERROR(Vector(p + "self_attn.v_proj.bias", b + "attn_v_bias", kv_dim));
      }
      if (c.qk_norm == QkNorm::kFull) {
        RETURN_IF_ERROR(Vector(p + "self_attn.q_norm.weight", b + "attn_q_norm", q_dim));
        RETURN_IF_ERROR(Vector(p + "self_attn.k_norm.weight", b + "attn_k_norm", kv_dim));
      } else if (c.qk_norm == QkNorm::kPerHead) {
        RETURN_IF_ERROR(Vector(p + "self_attn.q_norm.weight", b + "attn_q_norm", c.head_dim));
        RETURN_IF_ERROR(Vector(p + "self_attn.k_norm.weight", b + "attn_k_norm", c.head_dim));
      }
    }
    RETURN_IF_ERROR(Vector(p + "post_attention_layernorm.weight", b + "ffn_norm", c.hidden_size));
    if (!c.IsMoeLayer(l)) {
      return Mlp(p + "mlp.", b, "", c.dense_ffn,
                 {TensorKind::kDenseGate, TensorKind::kDenseUp, TensorKind::kDenseDown}, l);
    }
    const HfNames names = NamesFor(c.architecture);
    // Routers stay F32: they decide which experts are read, and are small.
    RETURN_IF_ERROR(F32(absl::StrCat(p, names.prefix_moe, ".gate.weight"), b + "ffn_gate_inp",
                        {c.n_experts, c.hidden_size}));
    if (c.router_bias) {
      RETURN_IF_ERROR(Vector(absl::StrCat(p, names.prefix_moe, ".gate.e_score_correction_bias"),
                             b + "ffn_exp_probs_b", c.n_experts));
    }
    if (c.shared_expert_ffn > 0) {
      // Qwen2-MoE: one gated "shared_expert"; DeepSeek / GLM: "shared_experts" (fused), no gate.
      const std::string shared =
          c.shared_expert_gated ? "mlp.shared_expert." : "mlp.shared_experts.";
      RETURN_IF_ERROR(Mlp(p + shared, b, "_shexp", c.shared_expert_ffn,
                          {TensorKind::kSharedGate, TensorKind::kSharedUp, TensorKind::kSharedDown},
                          l));
      if (c.shared_expert_gated) {
        RETURN_IF_ERROR(
            F32(p + "mlp.shared_expert_gate.weight", b + "ffn_gate_inp_shexp", {1, c.hidden_size}));
      }
    }
    for (int64_t e = 0; e < c.n_experts; ++e) {
      const int64_t f = c.expert_ffn, h = c.hidden_size;
      ASSIGN_OR_RETURN(auto gate, Load(names.Expert(l, e, names.gate), {f, h}));
      ASSIGN_OR_RETURN(auto up, Load(names.Expert(l, e, names.up), {f, h}));
      ASSIGN_OR_RETURN(auto down, Load(names.Expert(l, e, names.down), {h, f}));
      const quant::DType dt_g = plan_.TypeFor({TensorKind::kExpertGate, l, h}, quant::DType::kF32);
      const quant::DType dt_u = plan_.TypeFor({TensorKind::kExpertUp, l, h}, quant::DType::kF32);
      const quant::DType dt_d = plan_.TypeFor({TensorKind::kExpertDown, l, f}, quant::DType::kF32);
      auto gb = EncodeRows(gate.data(), f, h, dt_g), ub = EncodeRows(up.data(), f, h, dt_u);
      auto db = EncodeRows(down.data(), h, f, dt_d);
      RETURN_IF_ERROR(writer_.AddExpert(
          l, e,
          {{"gate", dt_g, {f, h}, gb}, {"up", dt_u, {f, h}, ub}, {"down", dt_d, {h, f}, db}}));
    }
    return absl::OkStatus();
  }

  // gpt-oss: biases on q/k/v/o, per-head sinks, a router with bias, and the experts of a layer
  // stacked in fused tensors: gate_up_proj [E, hidden, 2F] (x · W, gate and up interleaved along
  // the last axis: gate = [..., 0::2], up = [..., 1::2]) and down_proj [E, F, hidden], or as
  // released, the same weights in MXFP4 as *_blocks [E, out, in/32, 16] + *_scales [E, out, in/32]
  // (already [out, in]; kept as GGML MXFP4 blocks unless --quantize picks another type).
  absl::Status GptOssLayer(int64_t l) {
    const auto& c = config_;
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string b = absl::StrCat("blk.", l, ".");
    const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    const int64_t H = c.hidden_size, F = c.expert_ffn, E = c.n_experts;
    RETURN_IF_ERROR(Vector(p + "input_layernorm.weight", b + "attn_norm", H));
    RETURN_IF_ERROR(
        Matrix(p + "self_attn.q_proj.weight", b + "attn_q", {q_dim, H}, TensorKind::kAttnQ, l));
    RETURN_IF_ERROR(
        Matrix(p + "self_attn.k_proj.weight", b + "attn_k", {kv_dim, H}, TensorKind::kAttnK, l));
    RETURN_IF_ERROR(
        Matrix(p + "self_attn.v_proj.weight", b + "attn_v", {kv_dim, H}, TensorKind::kAttnV, l));
    RETURN_IF_ERROR(Matrix(p + "self_attn.o_proj.weight", b + "attn_output", {H, q_dim},
                           TensorKind::kAttnOutput, l));
    if (c.qkv_bias) {
      RETURN_IF_ERROR(Vector(p + "self_attn.q_proj.bias", b + "attn_q_bias", q_dim));
      RETURN_IF_ERROR(Vector(p + "self_attn.k_proj.bias", b + "attn_k_bias", kv_dim));
      RETURN_IF_ERROR(Vector(p + "self_attn.v_proj.bias", b + "attn_v_bias", kv_dim));
    }
    if (c.attn_output_bias)
      RETURN_IF_ERROR(Vector(p + "self_attn.o_proj.bias", b + "attn_output_bias", H));
    RETURN_IF_ERROR(Vector(p + "self_attn.sinks", b + "attn_sinks", c.n_heads));
    RETURN_IF_ERROR(Vector(p + "post_attention_layernorm.weight", b + "ffn_norm", H));
    RETURN_IF_ERROR(F32(p + "mlp.router.weight", b + "ffn_gate_inp", {E, H}));
    RETURN_IF_ERROR(Vector(p + "mlp.router.bias", b + "ffn_gate_inp_bias", E));

    const std::string x = p + "mlp.experts.";
    ASSIGN_OR_RETURN(std::vector<float> gate_up_bias, Load(x + "gate_up_proj_bias", {E, 2 * F}));
    ASSIGN_OR_RETURN(std::vector<float> down_bias, Load(x + "down_proj_bias", {E, H}));
    const bool mxfp4 = ckpt_.Find(x + "gate_up_proj_blocks") != nullptr;
    std::vector<float> gate_up, down;
    const SafetensorsTensor *gu_blocks = nullptr, *gu_scales = nullptr, *d_blocks = nullptr,
                            *d_scales = nullptr;
    if (mxfp4) {
      ASSIGN_OR_RETURN(gu_blocks, Mxfp4Part(x + "gate_up_proj_blocks", {E, 2 * F, H / 32, 16}, H));
      ASSIGN_OR_RETURN(gu_scales, Mxfp4Part(x + "gate_up_proj_scales", {E, 2 * F, H / 32}, H));
      ASSIGN_OR_RETURN(d_blocks, Mxfp4Part(x + "down_proj_blocks", {E, H, F / 32, 16}, F));
      ASSIGN_OR_RETURN(d_scales, Mxfp4Part(x + "down_proj_scales", {E, H, F / 32}, F));
    } else {
      ASSIGN_OR_RETURN(gate_up, Load(x + "gate_up_proj", {E, H, 2 * F}));
      ASSIGN_OR_RETURN(down, Load(x + "down_proj", {E, F, H}));
    }
    const quant::DType src = mxfp4 ? quant::DType::kMXFP4 : SourceType(x + "gate_up_proj");
    const quant::DType dt_g = plan_.TypeFor({TensorKind::kExpertGate, l, H}, src);
    const quant::DType dt_u = plan_.TypeFor({TensorKind::kExpertUp, l, H}, src);
    const quant::DType dt_d = plan_.TypeFor({TensorKind::kExpertDown, l, F}, src);
    std::vector<float> g(static_cast<size_t>(F * H)), u(static_cast<size_t>(F * H)),
        d(static_cast<size_t>(H * F));
    for (int64_t e = 0; e < E; ++e) {
      std::vector<uint8_t> gb, ub, db;
      if (mxfp4) {
        // Row r of gate_up is gate row r/2 (r even) or up row r/2 (r odd).
        const std::vector<uint8_t> gu = Mxfp4Rows(*gu_blocks, *gu_scales, e, 2 * F, H);
        const size_t row = quant::RowBytes(quant::DType::kMXFP4, H);
        std::vector<uint8_t> gm(row * static_cast<size_t>(F)), um(row * static_cast<size_t>(F));
        for (int64_t r = 0; r < F; ++r) {
          std::memcpy(gm.data() + static_cast<size_t>(r) * row,
                      gu.data() + static_cast<size_t>(2 * r) * row, row);
          std::memcpy(um.data() + static_cast<size_t>(r) * row,
                      gu.data() + static_cast<size_t>(2 * r + 1) * row, row);
        }
        gb = ConvertRows(quant::DType::kMXFP4, gm, H, dt_g);
        ub = ConvertRows(quant::DType::kMXFP4, um, H, dt_u);
        db = ConvertRows(quant::DType::kMXFP4, Mxfp4Rows(*d_blocks, *d_scales, e, H, F), F, dt_d);
      } else {
        const float* gu = gate_up.data() + e * H * 2 * F;  // [H, 2F]
        const float* dn = down.data() + e * F * H;         // [F, H]
        for (int64_t r = 0; r < F; ++r) {
          for (int64_t i = 0; i < H; ++i) {
            g[static_cast<size_t>(r * H + i)] = gu[i * 2 * F + 2 * r];
            u[static_cast<size_t>(r * H + i)] = gu[i * 2 * F + 2 * r + 1];
          }
        }
        for (int64_t r = 0; r < H; ++r) {
          for (int64_t i = 0; i < F; ++i) d[static_cast<size_t>(r * F + i)] = dn[i * H + r];
        }
        gb = EncodeRows(g.data(), F, H, dt_g);
        ub = EncodeRows(u.data(), F, H, dt_u);
        db = EncodeRows(d.data(), H, F, dt_d);
      }
      std::vector<float> gbias(static_cast<size_t>(F)), ubias(static_cast<size_t>(F));
      for (int64_t r = 0; r < F; ++r) {
        gbias[static_cast<size_t>(r)] = gate_up_bias[static_cast<size_t>(e * 2 * F + 2 * r)];
        ubias[static_cast<size_t>(r)] = gate_up_bias[static_cast<size_t>(e * 2 * F + 2 * r + 1)];
      }
      auto bytes_of = [](const float* v, int64_t n) {
        return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v),
                                        static_cast<size_t>(n) * sizeof(float));
      };
      RETURN_IF_ERROR(writer_.AddExpert(
          l, e,
          {{"gate", dt_g, {F, H}, gb},
           {"up", dt_u, {F, H}, ub},
           {"down", dt_d, {H, F}, db},
           {"gate_bias", quant::DType::kF32, {1, F}, bytes_of(gbias.data(), F)},
           {"up_bias", quant::DType::kF32, {1, F}, bytes_of(ubias.data(), F)},
           {"down_bias", quant::DType::kF32, {1, H}, bytes_of(down_bias.data() + e * H, H)}}));
    }
    return absl::OkStatus();
  }

  // A U8 *_blocks / *_scales tensor of the shape the config implies.
  absl::StatusOr<const SafetensorsTensor*> Mxfp4Part(const std::string& hf_name,
                                                     const std::vector<int64_t>& shape,
                                                     int64_t cols) {
    if (cols % 32 != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", hf_name, "': MXFP4 rows of ", cols,
                       " values are not a whole number of 32-value blocks"));
    }
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_.Get(hf_name));
    if (t->dtype != StDType::kU8 || t->shape != shape) {
      return absl::FailedPreconditionError(absl::StrCat("tensor '", hf_name,
                                                        "' must be U8 of the shape config.json "
                                                        "implies (",
                                                        shape.size(), " dims), is ",
                                                        t->dtype_name));
    }
    return t;
  }

  // Expert e's `rows` x `cols` weights as GGML MXFP4 rows. A checkpoint block holds 32 FP4 codes
  // two per byte in order (code 2j low nibble, 2j+1 high nibble of byte j) with a separate E8M0
  // scale byte; a GGML block is {scale byte, 16 bytes} with code j in the low nibble and code
  // j + 16 in the high nibble of byte j. Code and scale values are the same in both.
  static std::vector<uint8_t> Mxfp4Rows(const SafetensorsTensor& blocks,
                                        const SafetensorsTensor& scales, int64_t e, int64_t rows,
                                        int64_t cols) {
    const int64_t nb = cols / 32;
    std::vector<uint8_t> out(static_cast<size_t>(rows * nb) * 17);
    const uint8_t* bl = blocks.data.data() + static_cast<size_t>(e * rows * nb) * 16;
    const uint8_t* sc = scales.data.data() + static_cast<size_t>(e * rows * nb);
    for (int64_t i = 0; i < rows * nb; ++i) {
      uint8_t* dst = out.data() + static_cast<size_t>(i) * 17;
      const uint8_t* src = bl + static_cast<size_t>(i) * 16;
      dst[0] = sc[i];
      std::memset(dst + 1, 0, 16);
      for (int j = 0; j < 32; ++j) {
        const uint8_t code = (src[j / 2] >> (4 * (j % 2))) & 0x0F;
        dst[1 + j % 16] |= static_cast<uint8_t>(code << (4 * (j / 16)));
      }
    }
    return out;
  }

  const SafetensorsCheckpoint& ckpt_;
  const ModelConfig& config_;
  const QuantPlan& plan_;
  const ConvertOptions& options_;
  ContainerWriter& writer_;
  uint64_t read_bytes_ = 0;  // tensor bytes read so far (progress)
};

}  // namespace

absl::Status ConvertHuggingFace(const fs::path& input, const fs::path& output,
                                const ConvertOptions& options) {
  ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(input / "config.json"));
  nlohmann::json hf = nlohmann::json::parse(config_text, nullptr, false);
  if (hf.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", (input / "config.json").string(), "' is not valid JSON"));
  }
  ASSIGN_OR_RETURN(ModelConfig config, ConfigFromHuggingFace(hf));
  // `keep` stores each tensor in its checkpoint type (F32/F16/BF16; MXFP4 expert blocks stay MXFP4).
  ASSIGN_OR_RETURN(QuantPlan plan, QuantPlan::Parse(options.quantize, config));
  ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::Open(input));
  std::string name = options.name.empty() ? output.filename().string() : options.name;
  ASSIGN_OR_RETURN(auto writer, ContainerWriter::Create(output, name, config,
                                                        {.split_experts = options.split_experts,
                                                         .overwrite = options.overwrite}));
  HfConverter converter(*ckpt, config, plan, options, *writer);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(input, ec)) {
    if (e.path().extension() == ".safetensors") converter.total_bytes_ += e.file_size(ec);
  }
  RETURN_IF_ERROR(converter.Run());
  nlohmann::json files = nlohmann::json::array();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    if (fs::exists(input / f)) {
      RETURN_IF_ERROR(writer->CopyFile(input / f, f));
      files.push_back(f);
    }
  }
  writer->manifest().tokenizer = {{"files", files}};
  writer->manifest().source = {{"format", "huggingface"},
                               {"path", fs::absolute(input).string()},
                               {"quantize", options.quantize}};
  return writer->Finish();
}

}  // namespace colibri::model
