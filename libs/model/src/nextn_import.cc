#include "nextn_import.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "colibri/model/gguf_reader.h"
#include "colibri/model/safetensors.h"
#include "convert_util.h"

namespace colibri::model {
namespace {

// (Hugging Face name below the layer, GGUF name below the block, our suffix).
struct NextnName {
  std::string_view hf, gguf, ours;
};

constexpr NextnName kNames[] = {
    {"eh_proj.weight", "nextn.eh_proj.weight", "eh_proj"},
    {"enorm.weight", "nextn.enorm.weight", "enorm"},
    {"hnorm.weight", "nextn.hnorm.weight", "hnorm"},
    {"embed_tokens.weight", "nextn.embed_tokens.weight", "embed_tokens"},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight", "shared_head_norm"},
    {"shared_head.head.weight", "nextn.shared_head_head.weight", "shared_head_head"},
    {"input_layernorm.weight", "attn_norm.weight", "attn_norm"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", "ffn_norm"},
    {"self_attn.q_proj.weight", "attn_q.weight", "attn_q"},
    {"self_attn.k_proj.weight", "attn_k.weight", "attn_k"},
    {"self_attn.v_proj.weight", "attn_v.weight", "attn_v"},
    {"self_attn.o_proj.weight", "attn_output.weight", "attn_output"},
    {"self_attn.q_proj.bias", "attn_q.bias", "attn_q_bias"},
    {"self_attn.k_proj.bias", "attn_k.bias", "attn_k_bias"},
    {"self_attn.v_proj.bias", "attn_v.bias", "attn_v_bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", "attn_q_norm"},
    // DeepSeek-V3 / Kimi K2 latent attention (kv_b kept whole; newer GGUFs split it in two)
    {"self_attn.q_a_proj.weight", "attn_q_a.weight", "attn_q_a"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight", "attn_q_a_norm"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight", "attn_q_b"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight", "attn_kv_a_mqa"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight", "attn_kv_a_norm"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight", "attn_kv_b"},
    {"", "attn_k_b.weight", "attn_k_b"},
    {"", "attn_v_b.weight", "attn_v_b"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", "attn_k_norm"},
    {"mlp.gate.weight", "ffn_gate_inp.weight", "ffn_gate_inp"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias", "ffn_exp_probs_b"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight", "ffn_gate_shexp"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight", "ffn_up_shexp"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight", "ffn_down_shexp"},
    {"mlp.gate_proj.weight", "ffn_gate.weight", "ffn_gate"},
    {"mlp.up_proj.weight", "ffn_up.weight", "ffn_up"},
    {"mlp.down_proj.weight", "ffn_down.weight", "ffn_down"},
    {"", "ffn_gate_exps.weight", "ffn_gate_exps"},
    {"", "ffn_up_exps.weight", "ffn_up_exps"},
    {"", "ffn_down_exps.weight", "ffn_down_exps"},
    {"", "ffn_norm.weight", "ffn_norm"},  // GGUF writers that name it as in other families
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

TensorKind RoleOf(std::string_view suffix) {
  static constexpr std::pair<std::string_view, TensorKind> kKinds[] = {
      {"ffn_gate_inp", TensorKind::kRouter},
      {"embed_tokens", TensorKind::kEmbedding},
      {"shared_head_head", TensorKind::kOutput},
      {"attn_q", TensorKind::kAttnQ},
      {"attn_k", TensorKind::kAttnK},
      {"attn_v", TensorKind::kAttnV},
      {"attn_output", TensorKind::kAttnOutput},
      {"eh_proj", TensorKind::kAttnOutput},
      {"attn_q_a", TensorKind::kAttnQ},
      {"attn_q_b", TensorKind::kAttnQ},
      {"attn_kv_a_mqa", TensorKind::kAttnK},
      {"attn_kv_b", TensorKind::kAttnV},
      {"attn_k_b", TensorKind::kAttnK},
      {"attn_v_b", TensorKind::kAttnV},
      {"ffn_gate_exps", TensorKind::kExpertGate},
      {"ffn_up_exps", TensorKind::kExpertUp},
      {"ffn_down_exps", TensorKind::kExpertDown},
      {"ffn_gate_shexp", TensorKind::kSharedGate},
      {"ffn_up_shexp", TensorKind::kSharedUp},
      {"ffn_down_shexp", TensorKind::kSharedDown},
      {"ffn_gate", TensorKind::kDenseGate},
      {"ffn_up", TensorKind::kDenseUp},
      {"ffn_down", TensorKind::kDenseDown},
  };
  for (const auto& [name, kind] : kKinds) {
    if (suffix == name) return kind;
  }
  return TensorKind::kVector;  // norms, biases, the selection bias: F32
}

}  // namespace

std::string NextnSuffixFromHuggingFace(std::string_view name) {
  for (const NextnName& n : kNames) {
    if (!n.hf.empty() && n.hf == name) return std::string(n.ours);
  }
  return "";
}

std::string NextnSuffixFromGguf(std::string_view name) {
  for (const NextnName& n : kNames) {
    if (n.gguf == name) return std::string(n.ours);
  }
  return "";
}

namespace {

quant::DType NextnType(const QuantPlan& plan, int64_t layer, std::string_view suffix,
                       const std::vector<int64_t>& shape, quant::DType source) {
  const TensorKind kind =
      shape.size() == 1 || EndsWith(suffix, "_bias") ? TensorKind::kVector : RoleOf(suffix);
  return plan.TypeFor({kind, layer, shape.back()}, source);
}

std::string NextnName(int64_t index, std::string_view suffix) {
  return absl::StrCat("nextn.", index, ".", std::string(suffix));
}

// "mlp.experts.<e>.<part>_proj.weight" -> (e, "gate" | "up" | "down").
bool ParseHfExpert(std::string_view name, int64_t* expert, std::string* part) {
  constexpr std::string_view kPrefix = "mlp.experts.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  int64_t e = 0;
  for (char c : name.substr(0, dot)) {
    if (c < '0' || c > '9' || e > (int64_t{1} << 24)) return false;
    e = e * 10 + (c - '0');
  }
  const std::string_view rest = name.substr(dot + 1);
  for (const char* p : {"gate", "up", "down"}) {
    if (rest == absl::StrCat(p, "_proj.weight")) {
      *expert = e;
      *part = p;
      return true;
    }
  }
  return false;
}

}  // namespace

absl::Status AddNextnTensor(TensorSink& sink, const QuantPlan& plan, int64_t index, int64_t layer,
                            const std::string& suffix, quant::DType source,
                            std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NextN tensor '", NextnName(index, suffix), "' has no shape"));
  }
  const quant::DType dt = NextnType(plan, layer, suffix, shape, source);
  const int64_t cols = shape.back();
  return sink.Extra(NextnName(index, suffix), dt, std::move(shape),
                    [=] { return ConvertRows(source, bytes, cols, dt); });
}

absl::Status ImportNextnFromHuggingFace(const SafetensorsCheckpoint& ckpt,
                                        const ModelConfig& config, const QuantPlan& plan,
                                        ContainerWriter& writer) {
  WriterSink sink(writer);
  const std::vector<std::string> names = ckpt.Names();
  for (int64_t i = 0; i < config.nextn_layers; ++i) {
    const int64_t layer = config.n_layers + i;
    const std::string prefix = absl::StrCat("model.layers.", layer, ".");
    // Experts by part, stacked in id order into one [n_experts, rows, cols] tensor each.
    std::map<std::string, std::map<int64_t, const SafetensorsTensor*>> experts;
    for (const std::string& full : names) {
      if (full.rfind(prefix, 0) != 0) continue;
      const std::string_view name = std::string_view(full).substr(prefix.size());
      const SafetensorsTensor* t = ckpt.Find(full);
      if (IsBlockScaleName(name)) continue;  // FP8 block scales: applied with their weight
      int64_t e = 0;
      std::string part;
      if (ParseHfExpert(name, &e, &part)) {
        experts[part][e] = t;
        continue;
      }
      const std::string suffix = NextnSuffixFromHuggingFace(name);
      if (suffix.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", full,
                         "' of the NextN layer is not one colibri "
                         "knows (it keeps eh_proj, enorm, hnorm, shared_head.*, "
                         "embed_tokens and the layer's attention and MoE tensors)"));
      }
      ASSIGN_OR_RETURN(std::vector<float> v, CheckpointFloats(ckpt, full, *t));
      std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(v.data()),
                                     v.size() * sizeof(float));
      RETURN_IF_ERROR(
          AddNextnTensor(sink, plan, i, layer, suffix, quant::DType::kF32, t->shape, bytes));
    }
    for (const auto& [part, by_id] : experts) {
      const SafetensorsTensor* first = by_id.begin()->second;
      if (static_cast<int64_t>(by_id.size()) != config.n_experts ||
          by_id.rbegin()->first != config.n_experts - 1 || first->shape.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("NextN layer ", layer, ": ", by_id.size(), " '", part,
                         "' expert tensors, the config has ", config.n_experts));
      }
      const std::string suffix = absl::StrCat("ffn_", part, "_exps");
      const std::vector<int64_t> shape = {config.n_experts, first->shape[0], first->shape[1]};
      const quant::DType dt = NextnType(plan, layer, suffix, shape, quant::DType::kF32);
      // Rows are encoded independently: expert by expert, never the whole stack in float.
      std::vector<uint8_t> stacked;
      for (const auto& [e, t] : by_id) {
        if (t->shape != first->shape) {
          return absl::FailedPreconditionError(absl::StrCat("NextN layer ", layer, " expert ", e,
                                                            " '", part,
                                                            "' has another shape than expert 0"));
        }
        ASSIGN_OR_RETURN(
            std::vector<float> v,
            CheckpointFloats(
                ckpt, absl::StrCat(prefix, "mlp.experts.", e, ".", part, "_proj.weight"), *t));
        const std::vector<uint8_t> rows = EncodeRows(v.data(), t->shape[0], t->shape[1], dt);
        stacked.insert(stacked.end(), rows.begin(), rows.end());
      }
      RETURN_IF_ERROR(writer.AddExtra(NextnName(i, suffix), dt, shape, stacked));
    }
  }
  return absl::OkStatus();
}

absl::Status ImportNextnFromGguf(const GgufFile& file, const ModelConfig& config,
                                 const QuantPlan& plan, TensorSink& sink) {
  for (int64_t i = 0; i < config.nextn_layers; ++i) {
    const int64_t layer = config.n_layers + i;
    const std::string prefix = absl::StrCat("blk.", layer, ".");
    for (const GgufTensorInfo& t : file.tensors()) {
      if (t.name.rfind(prefix, 0) != 0) continue;
      const std::string suffix =
          NextnSuffixFromGguf(std::string_view(t.name).substr(prefix.size()));
      if (suffix.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("gguf: tensor '", t.name,
                                                       "' of the NextN block is not one "
                                                       "colibri knows"));
      }
      if (t.dims.empty())
        return absl::InvalidArgumentError(absl::StrCat("gguf: tensor '", t.name, "' is a scalar"));
      std::vector<int64_t> shape(t.dims.rbegin(),
                                 t.dims.rend());  // GGUF lists the fastest dim first
      RETURN_IF_ERROR(AddNextnTensor(sink, plan, i, layer, suffix, t.type, std::move(shape),
                                     file.TensorData(t)));
    }
  }
  return absl::OkStatus();
}

}  // namespace colibri::model
