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
    RETURN_IF_ERROR(Matrix("model.embed_tokens.weight", "token_embd", {config_.vocab_size, config_.hidden_size},
                           TensorKind::kEmbedding));
    RETURN_IF_ERROR(Vector("model.norm.weight", "output_norm", config_.hidden_size));
    if (ckpt_.Find("lm_head.weight") != nullptr) {
      RETURN_IF_ERROR(Matrix("lm_head.weight", "output", {config_.vocab_size, config_.hidden_size}, TensorKind::kOutput));
    } else if (config_.tie_word_embeddings) {
      RETURN_IF_ERROR(Matrix("model.embed_tokens.weight", "output", {config_.vocab_size, config_.hidden_size},
                             TensorKind::kOutput));
    } else {
      return absl::NotFoundError("checkpoint has no lm_head.weight and tie_word_embeddings is false");
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

  absl::StatusOr<std::vector<float>> Load(const std::string& hf_name, const std::vector<int64_t>& shape) {
    ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_.Get(hf_name));
    read_bytes_ += t->data.size();
    if (t->shape != shape) {
      std::string want, got;
      for (auto d : shape) absl::StrAppend(&want, want.empty() ? "" : ",", d);
      for (auto d : t->shape) absl::StrAppend(&got, got.empty() ? "" : ",", d);
      return absl::FailedPreconditionError(absl::StrCat("tensor '", hf_name, "' has shape [", got,
                                                        "], config.json implies [", want, "]"));
    }
    ASSIGN_OR_RETURN(std::vector<float> v, TensorToFloat32(*t));
    if (t->dtype == StDType::kF8E4M3) RETURN_IF_ERROR(ApplyBlockScales(hf_name, shape, &v));
    return v;
  }

  // DeepSeek-V3 / R1 / Kimi K2 FP8 weights: each 128x128 block of `name` is multiplied by its
  // entry of `name`_scale_inv [ceil(rows / 128), ceil(cols / 128)] (F32).
  absl::Status ApplyBlockScales(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* v) {
    constexpr int64_t kBlock = 128;
    if (shape.size() != 2) return absl::FailedPreconditionError(absl::StrCat("FP8 tensor '", name, "' is not a matrix"));
    const int64_t rows = shape[0], cols = shape[1];
    const int64_t br = (rows + kBlock - 1) / kBlock, bc = (cols + kBlock - 1) / kBlock;
    const SafetensorsTensor* s = ckpt_.Find(name + "_scale_inv");
    if (s == nullptr) {
      return absl::NotFoundError(absl::StrCat("FP8 tensor '", name, "' has no '", name, "_scale_inv' block scales"));
    }
    if (s->shape != std::vector<int64_t>{br, bc}) {
      return absl::FailedPreconditionError(absl::StrCat("'", name, "_scale_inv' must be [", br, ", ", bc, "]"));
    }
    ASSIGN_OR_RETURN(std::vector<float> scale, TensorToFloat32(*s));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) (*v)[static_cast<size_t>(r * cols + c)] *= scale[static_cast<size_t>((r / kBlock) * bc + c / kBlock)];
    }
    return absl::OkStatus();
  }

  absl::Status Matrix(const std::string& hf_name, const std::string& name, std::vector<int64_t> shape,
                      TensorKind kind, int64_t layer = -1) {
    ASSIGN_OR_RETURN(std::vector<float> v, Load(hf_name, shape));
    const quant::DType dt = plan_.TypeFor({kind, layer, shape[1]}, quant::DType::kF32);
    auto bytes = EncodeRows(v.data(), shape[0], shape[1], dt);
    return writer_.AddDense(name, dt, shape, bytes);
  }

  absl::Status F32(const std::string& hf_name, const std::string& name, std::vector<int64_t> shape) {
    ASSIGN_OR_RETURN(std::vector<float> v, Load(hf_name, shape));
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float));
    return writer_.AddDense(name, quant::DType::kF32, shape, bytes);
  }

  absl::Status Vector(const std::string& hf_name, const std::string& name, int64_t n) {
    return F32(hf_name, name, {n});
  }

  // A resident SwiGLU MLP: <hf>{gate,up,down}_proj.weight -> <b>ffn_{gate,up,down}<suffix>.
  absl::Status Mlp(const std::string& hf, const std::string& b, const std::string& suffix, int64_t ffn,
                   std::array<TensorKind, 3> kinds, int64_t l) {
    const int64_t h = config_.hidden_size;
    RETURN_IF_ERROR(Matrix(hf + "gate_proj.weight", b + "ffn_gate" + suffix, {ffn, h}, kinds[0], l));
    RETURN_IF_ERROR(Matrix(hf + "up_proj.weight", b + "ffn_up" + suffix, {ffn, h}, kinds[1], l));
    return Matrix(hf + "down_proj.weight", b + "ffn_down" + suffix, {h, ffn}, kinds[2], l);
  }

  // DeepSeek latent attention; kv_b_proj is split into the per-head attn_k_b / attn_v_b.
  absl::Status LatentAttention(int64_t l) {
    const auto& c = config_;
    const std::string p = absl::StrCat("model.layers.", l, ".self_attn.");
    const std::string b = absl::StrCat("blk.", l, ".");
    const int64_t H = c.hidden_size, NH = c.n_heads, Q = c.head_dim, L = c.kv_lora_rank, R = c.qk_rope_head_dim,
                  N = c.qk_nope_head_dim, V = c.v_head_dim;
    if (c.q_lora_rank > 0) {
      RETURN_IF_ERROR(Matrix(p + "q_a_proj.weight", b + "attn_q_a", {c.q_lora_rank, H}, TensorKind::kAttnQ, l));
      RETURN_IF_ERROR(Vector(p + "q_a_layernorm.weight", b + "attn_q_a_norm", c.q_lora_rank));
      RETURN_IF_ERROR(Matrix(p + "q_b_proj.weight", b + "attn_q_b", {NH * Q, c.q_lora_rank}, TensorKind::kAttnQ, l));
    } else {
      RETURN_IF_ERROR(Matrix(p + "q_proj.weight", b + "attn_q", {NH * Q, H}, TensorKind::kAttnQ, l));
    }
    RETURN_IF_ERROR(Matrix(p + "kv_a_proj_with_mqa.weight", b + "attn_kv_a_mqa", {L + R, H}, TensorKind::kAttnK, l));
    RETURN_IF_ERROR(Vector(p + "kv_a_layernorm.weight", b + "attn_kv_a_norm", L));
    RETURN_IF_ERROR(Matrix(p + "o_proj.weight", b + "attn_output", {H, NH * V}, TensorKind::kAttnOutput, l));
    ASSIGN_OR_RETURN(std::vector<float> kv_b, Load(p + "kv_b_proj.weight", {NH * (N + V), L}));
    const SplitKvB split = SplitKvBProjection(kv_b.data(), NH, N, V, L);
    const quant::DType dk = plan_.TypeFor({TensorKind::kAttnK, l, N}, quant::DType::kF32);
    const quant::DType dv = plan_.TypeFor({TensorKind::kAttnV, l, L}, quant::DType::kF32);
    RETURN_IF_ERROR(writer_.AddDense(b + "attn_k_b", dk, {NH * L, N}, EncodeRows(split.k_b.data(), NH * L, N, dk)));
    return writer_.AddDense(b + "attn_v_b", dv, {NH * V, L}, EncodeRows(split.v_b.data(), NH * V, L, dv));
  }

  absl::Status Layer(int64_t l) {
    const auto& c = config_;
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string b = absl::StrCat("blk.", l, ".");
    const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    RETURN_IF_ERROR(Vector(p + "input_layernorm.weight", b + "attn_norm", c.hidden_size));
    if (c.mla()) {
      RETURN_IF_ERROR(LatentAttention(l));
    } else {
      RETURN_IF_ERROR(Matrix(p + "self_attn.q_proj.weight", b + "attn_q", {q_dim, c.hidden_size}, TensorKind::kAttnQ, l));
      RETURN_IF_ERROR(Matrix(p + "self_attn.k_proj.weight", b + "attn_k", {kv_dim, c.hidden_size}, TensorKind::kAttnK, l));
      RETURN_IF_ERROR(Matrix(p + "self_attn.v_proj.weight", b + "attn_v", {kv_dim, c.hidden_size}, TensorKind::kAttnV, l));
      RETURN_IF_ERROR(Matrix(p + "self_attn.o_proj.weight", b + "attn_output", {c.hidden_size, q_dim}, TensorKind::kAttnOutput, l));
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
      return Mlp(p + "mlp.", b, "", c.dense_ffn, {TensorKind::kDenseGate, TensorKind::kDenseUp, TensorKind::kDenseDown},
                 l);
    }
    const HfNames names = NamesFor(c.architecture);
    // Routers stay F32: they decide which experts are read, and are small.
    RETURN_IF_ERROR(F32(absl::StrCat(p, names.prefix_moe, ".gate.weight"), b + "ffn_gate_inp",
                        {c.n_experts, c.hidden_size}));
    if (c.router_bias) {
      RETURN_IF_ERROR(Vector(absl::StrCat(p, names.prefix_moe, ".gate.e_score_correction_bias"), b + "ffn_exp_probs_b",
                             c.n_experts));
    }
    if (c.shared_expert_ffn > 0) {
      // Qwen2-MoE: one gated "shared_expert"; DeepSeek / GLM: "shared_experts" (fused), no gate.
      const std::string shared = c.shared_expert_gated ? "mlp.shared_expert." : "mlp.shared_experts.";
      RETURN_IF_ERROR(Mlp(p + shared, b, "_shexp", c.shared_expert_ffn,
                          {TensorKind::kSharedGate, TensorKind::kSharedUp, TensorKind::kSharedDown}, l));
      if (c.shared_expert_gated) {
        RETURN_IF_ERROR(F32(p + "mlp.shared_expert_gate.weight", b + "ffn_gate_inp_shexp", {1, c.hidden_size}));
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
      RETURN_IF_ERROR(writer_.AddExpert(l, e,
                                        {{"gate", dt_g, {f, h}, gb}, {"up", dt_u, {f, h}, ub}, {"down", dt_d, {h, f}, db}}));
    }
    return absl::OkStatus();
  }

  const SafetensorsCheckpoint& ckpt_;
  const ModelConfig& config_;
  const QuantPlan& plan_;
  const ConvertOptions& options_;
  ContainerWriter& writer_;
  uint64_t read_bytes_ = 0;  // tensor bytes read so far (progress)
};

}  // namespace

absl::Status ConvertHuggingFace(const fs::path& input, const fs::path& output, const ConvertOptions& options) {
  ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(input / "config.json"));
  nlohmann::json hf = nlohmann::json::parse(config_text, nullptr, false);
  if (hf.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("'", (input / "config.json").string(), "' is not valid JSON"));
  }
  ASSIGN_OR_RETURN(ModelConfig config, ConfigFromHuggingFace(hf));
  ASSIGN_OR_RETURN(QuantPlan plan, QuantPlan::Parse(options.quantize, config));
  if (plan.keep()) {
    return absl::InvalidArgumentError("--quantize keep applies to GGUF input; choose a format for safetensors");
  }
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
