#include "colibri/model/model_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"

namespace colibri::model {
namespace {

using nlohmann::json;

// Typed lookups over untrusted JSON: never throw, always name the key.
absl::StatusOr<int64_t> GetInt(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end())
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing key '", key, "'"));
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": key '", key, "' must be an integer"));
  }
  return it->get<int64_t>();
}

int64_t GetIntOr(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number_integer()) ? it->get<int64_t>() : fallback;
}

double GetDoubleOr(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : fallback;
}

bool GetBoolOr(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : fallback;
}

// An optional string: `fallback` when absent, an error naming the key when of another JSON type
// (json::value() would throw).
absl::StatusOr<std::string> GetStringOr(const json& j, const char* key, const std::string& fallback,
                                        const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": key '", key, "' must be a string"));
  }
  return it->get<std::string>();
}

std::vector<int64_t> GetIdList(const json& j, const char* key) {
  std::vector<int64_t> ids;
  auto it = j.find(key);
  if (it == j.end()) return ids;
  if (it->is_number_integer()) ids.push_back(it->get<int64_t>());
  if (it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
    }
  }
  return ids;
}

// GLM-4.5 / 4.5-Air / 4.6 (Glm4MoeForCausalLM): GQA with q/k/v bias and optional per-head
// q/k norm, partial rotary (read with the common keys; 0.5 when absent), experts of moe_intermediate_size and
// the NextN layers after num_hidden_layers.
absl::Status Glm4MoeFromHuggingFace(const json& hf, const std::string& where, ModelConfig* c) {
  c->architecture = Architecture::kGlm4Moe;
  ASSIGN_OR_RETURN(c->n_experts, GetInt(hf, "n_routed_experts", where));
  ASSIGN_OR_RETURN(c->expert_ffn, GetInt(hf, "moe_intermediate_size", where));
  c->qkv_bias = GetBoolOr(hf, "attention_bias", false);
  c->qk_norm = GetBoolOr(hf, "use_qk_norm", false) ? QkNorm::kPerHead : QkNorm::kNone;
  c->norm_topk_prob = GetBoolOr(hf, "norm_topk_prob", true);
  c->nextn_layers = GetIntOr(hf, "num_nextn_predict_layers", 0);
  // Routing: sigmoid scores, e_score_correction_bias to choose, group limit (groups scored by
  // their two best), routed scaling; an ungated shared expert of n_shared_experts x the expert
  // size; the first first_k_dense_replace layers are dense MLPs of intermediate_size.
  c->router_scoring = RouterScoring::kSigmoid;
  c->router_bias = true;
  c->n_expert_groups = GetIntOr(hf, "n_group", 1);
  c->topk_groups = GetIntOr(hf, "topk_group", 1);
  c->group_scoring = GroupScoring::kTopTwoSum;
  c->routed_scaling_factor = GetDoubleOr(hf, "routed_scaling_factor", 1.0);
  c->shared_expert_ffn = GetIntOr(hf, "n_shared_experts", 0) * c->expert_ffn;
  c->shared_expert_gated = false;
  ASSIGN_OR_RETURN(int64_t n_layers, GetInt(hf, "num_hidden_layers", where));
  const int64_t dense = GetIntOr(hf, "first_k_dense_replace", 0);
  if (dense < 0 || dense >= n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": first_k_dense_replace ", dense, " with ", n_layers, " layers"));
  }
  for (int64_t l = 0; l < dense; ++l) c->dense_layers.push_back(l);
  if (dense > 0) {
    ASSIGN_OR_RETURN(c->dense_ffn, GetInt(hf, "intermediate_size", where));
  }
  return absl::OkStatus();
}

// Qwen-MoE: layer l is dense when listed in mlp_only_layers or when (l + 1) is not a multiple
// of decoder_sparse_step (the Hugging Face modelling code's rule); dense layers use
// intermediate_size.
absl::Status QwenDenseLayers(const json& hf, const std::string& where, ModelConfig* c) {
  ASSIGN_OR_RETURN(int64_t n_layers, GetInt(hf, "num_hidden_layers", where));
  const int64_t step = GetIntOr(hf, "decoder_sparse_step", 1);
  if (step < 1)
    return absl::InvalidArgumentError(absl::StrCat(where, ": decoder_sparse_step must be >= 1"));
  std::vector<int64_t> only;
  if (auto it = hf.find("mlp_only_layers"); it != hf.end() && !it->is_null()) {
    if (!it->is_array())
      return absl::InvalidArgumentError(absl::StrCat(where, ": mlp_only_layers must be a list"));
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_layers) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": mlp_only_layers holds ", v.dump(),
                                                       ", not a layer index below ", n_layers));
      }
      only.push_back(v.get<int64_t>());
    }
  }
  for (int64_t l = 0; l < n_layers; ++l) {
    if (std::find(only.begin(), only.end(), l) != only.end() || (l + 1) % step != 0)
      c->dense_layers.push_back(l);
  }
  if (!c->dense_layers.empty()) {
    ASSIGN_OR_RETURN(c->dense_ffn, GetInt(hf, "intermediate_size", where));
  }
  return absl::OkStatus();
}

// DeepseekV2/V3ForCausalLM (and Kimi K2, the same architecture): latent attention, dense
// leading layers, shared experts, softmax or sigmoid routing with groups.
absl::Status DeepseekFromHuggingFace(const json& hf, const std::string& where, ModelConfig* c) {
  c->architecture = Architecture::kDeepseek2;
  c->rope_style = RopeStyle::kInterleaved;  // the modelling code de-interleaves q_pe/k_pe pairs
  ASSIGN_OR_RETURN(c->n_experts, GetInt(hf, "n_routed_experts", where));
  ASSIGN_OR_RETURN(c->expert_ffn, GetInt(hf, "moe_intermediate_size", where));
  ASSIGN_OR_RETURN(c->kv_lora_rank, GetInt(hf, "kv_lora_rank", where));
  ASSIGN_OR_RETURN(c->qk_nope_head_dim, GetInt(hf, "qk_nope_head_dim", where));
  ASSIGN_OR_RETURN(c->qk_rope_head_dim, GetInt(hf, "qk_rope_head_dim", where));
  ASSIGN_OR_RETURN(c->v_head_dim, GetInt(hf, "v_head_dim", where));
  c->q_lora_rank = GetIntOr(hf, "q_lora_rank", 0);  // null in V2-Lite: q projected directly
  c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
  c->rope_dims = c->qk_rope_head_dim;  // RoPE on the rope part only
  c->shared_expert_ffn = GetIntOr(hf, "n_shared_experts", 0) * c->expert_ffn;
  c->nextn_layers =
      GetIntOr(hf, "num_nextn_predict_layers", 0);  // V3 / R1: the MTP layer, kept in extra.bin
  ASSIGN_OR_RETURN(int64_t n_layers, GetInt(hf, "num_hidden_layers", where));
  const int64_t first_dense = GetIntOr(hf, "first_k_dense_replace", 0);
  const int64_t freq = GetIntOr(hf, "moe_layer_freq", 1);
  if (first_dense < 0 || freq < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": first_k_dense_replace must be >= 0 and moe_layer_freq >= 1"));
  }
  for (int64_t l = 0; l < n_layers; ++l) {
    if (l < first_dense || l % freq != 0) c->dense_layers.push_back(l);
  }
  if (!c->dense_layers.empty()) {
    ASSIGN_OR_RETURN(c->dense_ffn, GetInt(hf, "intermediate_size", where));
  }
  ASSIGN_OR_RETURN(std::string scoring, GetStringOr(hf, "scoring_func", "softmax", where));
  if (scoring == "sigmoid")
    c->router_scoring = RouterScoring::kSigmoid;
  else if (scoring == "softmax")
    c->router_scoring = RouterScoring::kSoftmax;
  else
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": scoring_func '", scoring, "' is not supported"));
  ASSIGN_OR_RETURN(std::string method, GetStringOr(hf, "topk_method", "greedy", where));
  if (method == "noaux_tc") {
    c->router_bias = true;  // e_score_correction_bias
    c->group_scoring = GroupScoring::kTopTwoSum;
  } else if (method == "group_limited_greedy") {
    c->group_scoring = GroupScoring::kMax;
  } else if (method != "greedy") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": topk_method '", method, "' is not supported"));
  }
  if (method != "greedy") {
    c->n_expert_groups = GetIntOr(hf, "n_group", 1);
    c->topk_groups = GetIntOr(hf, "topk_group", c->n_expert_groups);
  }
  c->norm_topk_prob = GetBoolOr(hf, "norm_topk_prob", false);
  c->routed_scaling_factor = GetDoubleOr(hf, "routed_scaling_factor", 1.0);
  return absl::OkStatus();
}

// gpt-oss: every layer MoE with biases everywhere, sinks, and sliding layers named by
// `layer_types` (alternating sliding / full in the released checkpoints).
absl::Status GptOssFromHuggingFace(const json& hf, const std::string& where, ModelConfig* c) {
  c->qkv_bias = GetBoolOr(hf, "attention_bias", true);
  c->attn_output_bias = c->qkv_bias;
  c->attn_sinks = true;
  c->router_bias = true;
  c->softmax_after_topk = true;
  c->norm_topk_prob = false;  // the k softmax weights already sum to 1
  c->expert_bias = true;
  c->swiglu_limit = GetDoubleOr(hf, "swiglu_limit", 7.0);
  ASSIGN_OR_RETURN(int64_t n_layers, GetInt(hf, "num_hidden_layers", where));
  c->sliding_window = GetIntOr(hf, "sliding_window", 0);
  auto types = hf.find("layer_types");
  c->sliding_layers.assign(static_cast<size_t>(std::max<int64_t>(n_layers, 0)), false);
  if (types != hf.end() && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != n_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": layer_types must list one type per layer"));
    }
    for (size_t l = 0; l < types->size(); ++l) {
      const json& t = (*types)[l];
      if (t == "sliding_attention") {
        c->sliding_layers[l] = true;
      } else if (t != "full_attention") {
        return absl::InvalidArgumentError(absl::StrCat(where, ": layer_types[", l,
                                                       "] is not 'sliding_attention' "
                                                       "or 'full_attention'"));
      }
    }
  } else {
    for (size_t l = 0; l < c->sliding_layers.size(); l += 2) c->sliding_layers[l] = true;
  }
  if (c->sliding_window <= 0) c->sliding_layers.clear();
  return absl::OkStatus();
}

}  // namespace

std::string_view ArchitectureName(Architecture a) {
  switch (a) {
    case Architecture::kMixtral: return "mixtral";
    case Architecture::kQwen2Moe: return "qwen2_moe";
    case Architecture::kOlmoe: return "olmoe";
    case Architecture::kQwen3Moe: return "qwen3_moe";
    case Architecture::kGlm4Moe: return "glm4_moe";
    case Architecture::kDeepseek2: return "deepseek2";
    case Architecture::kGptOss: return "gpt_oss";
  }
  return "unknown";
}

absl::StatusOr<Architecture> ParseArchitecture(std::string_view name) {
  for (Architecture a : {Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kOlmoe,
                         Architecture::kQwen3Moe, Architecture::kGlm4Moe, Architecture::kDeepseek2,
                         Architecture::kGptOss}) {
    if (ArchitectureName(a) == name) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported architecture '", std::string(name),
      "' (supported: mixtral, qwen2_moe, olmoe, qwen3_moe, glm4_moe, deepseek2, gpt_oss)"));
}

bool ModelConfig::IsMoeLayer(int64_t layer) const {
  return layer >= 0 && layer < n_layers &&
         !std::binary_search(dense_layers.begin(), dense_layers.end(), layer);
}

int64_t ModelConfig::MoeLayerRank(int64_t layer) const {
  return layer -
         (std::lower_bound(dense_layers.begin(), dense_layers.end(), layer) - dense_layers.begin());
}

absl::Status ModelConfig::Validate() const {
  auto positive = [](int64_t v, const char* name) -> absl::Status {
    if (v <= 0 || v > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: ", name, " = ", v, " is out of range"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  RETURN_IF_ERROR(positive(n_layers, "n_layers"));
  RETURN_IF_ERROR(positive(n_heads, "n_heads"));
  RETURN_IF_ERROR(positive(n_kv_heads, "n_kv_heads"));
  RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  RETURN_IF_ERROR(positive(expert_ffn, "expert_ffn"));
  RETURN_IF_ERROR(positive(n_experts, "n_experts"));
  RETURN_IF_ERROR(positive(top_k, "top_k"));
  RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  RETURN_IF_ERROR(positive(context_length, "context_length"));
  // Every expert has a block record: bound their count before anything sizes tables by it
  // (the largest models today have ~25k).
  if (n_layers * n_experts > kMaxExpertBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: n_layers (", n_layers, ") x n_experts (", n_experts,
                     ") expert blocks is out of range (at most ", kMaxExpertBlocks, ")"));
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_heads (", n_heads,
                                                   ") is not a multiple of n_kv_heads (",
                                                   n_kv_heads, ")"));
  }
  if (head_dim % 2 != 0)
    return absl::InvalidArgumentError("model config: head_dim must be even for RoPE");
  if (top_k > n_experts) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: top_k (", top_k, ") > n_experts (", n_experts, ")"));
  }
  if (shared_expert_ffn < 0)
    return absl::InvalidArgumentError("model config: shared_expert_ffn < 0");
  if (nextn_layers < 0 || nextn_layers > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: nextn_layers = ", nextn_layers, " is out of range"));
  }
  if (shared_expert_gated && shared_expert_ffn == 0) {
    return absl::InvalidArgumentError("model config: shared_expert_gated without a shared expert");
  }
  if (n_expert_groups < 1 || n_experts % n_expert_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_expert_groups (",
                                                   n_expert_groups, ") must divide n_experts (",
                                                   n_experts, ")"));
  }
  if (topk_groups < 1 || topk_groups > n_expert_groups) {
    return absl::InvalidArgumentError(absl::StrCat("model config: topk_groups (", topk_groups,
                                                   ") must be within 1..n_expert_groups (",
                                                   n_expert_groups, ")"));
  }
  const int64_t per_group = n_experts / n_expert_groups;
  if (top_k > topk_groups * per_group) {
    return absl::InvalidArgumentError(absl::StrCat("model config: top_k (", top_k,
                                                   ") exceeds the experts of ", topk_groups,
                                                   " groups of ", per_group));
  }
  if (n_expert_groups > 1 && group_scoring == GroupScoring::kTopTwoSum && per_group < 2) {
    return absl::InvalidArgumentError(
        "model config: groups scored by their two best experts need >= 2 experts each");
  }
  if (!(routed_scaling_factor > 0) || !std::isfinite(routed_scaling_factor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: routed_scaling_factor = ", routed_scaling_factor, " must be positive"));
  }
  for (size_t i = 0; i < dense_layers.size(); ++i) {
    if (dense_layers[i] < 0 || dense_layers[i] >= n_layers ||
        (i > 0 && dense_layers[i] <= dense_layers[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: dense_layers must be ascending layer indices below ",
                       n_layers, " (entry ", i, " is ", dense_layers[i], ")"));
    }
  }
  if (!dense_layers.empty() && (dense_ffn <= 0 || dense_ffn > (int64_t{1} << 24))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: dense_ffn = ", dense_ffn, " is out of range (the config has dense layers)"));
  }
  if (n_moe_layers() < 1)
    return absl::InvalidArgumentError("model config: every layer is dense (no MoE layer)");
  if (mla()) {
    if (q_lora_rank < 0 || kv_lora_rank > (int64_t{1} << 16) || qk_nope_head_dim <= 0 ||
        qk_rope_head_dim <= 0 || qk_rope_head_dim % 2 != 0 || v_head_dim <= 0 ||
        (kv_lora_rank + qk_rope_head_dim) % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model config: latent attention needs positive qk_nope_head_dim, v_head_dim and an even "
          "qk_rope_head_dim and kv_lora_rank + qk_rope_head_dim (got q_lora_rank ",
          q_lora_rank, ", kv_lora_rank ", kv_lora_rank, ", qk_nope_head_dim ", qk_nope_head_dim,
          ", qk_rope_head_dim ", qk_rope_head_dim, ", v_head_dim ", v_head_dim, ")"));
    }
    if (head_dim != qk_nope_head_dim + qk_rope_head_dim || n_kv_heads != n_heads ||
        rotary_dims() != qk_rope_head_dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: latent attention needs head_dim (", head_dim,
                       ") = qk_nope_head_dim + qk_rope_head_dim, n_kv_heads = n_heads and "
                       "rope_dims = qk_rope_head_dim"));
    }
  }
  if (!(rms_norm_eps > 0) || !(rope_theta > 0)) {
    return absl::InvalidArgumentError("model config: rms_norm_eps and rope_theta must be positive");
  }
  if (rope_dims < 0 || rope_dims > head_dim || rope_dims % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: rope_dims (", rope_dims,
                                                   ") must be even and at most head_dim (",
                                                   head_dim, ")"));
  }
  if (!(attention_scale >= 0) || !std::isfinite(attention_scale)) {
    return absl::InvalidArgumentError("model config: attention_scale must be a finite number >= 0");
  }
  if (auto st = ValidateRopeScaling(rope_scaling); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model config: ", st.message()));
  }
  if (sliding_window < 0) return absl::InvalidArgumentError("model config: sliding_window < 0");
  if (!sliding_layers.empty() && static_cast<int64_t>(sliding_layers.size()) != n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("model config: sliding_layers has ",
                                                   sliding_layers.size(), " entries for ", n_layers,
                                                   " layers"));
  }
  if (!(swiglu_limit >= 0)) return absl::InvalidArgumentError("model config: swiglu_limit < 0");
  return absl::OkStatus();
}

double ModelConfig::softmax_scale() const {
  return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

absl::StatusOr<RopeScaling> RopeScalingFromHuggingFace(const json& rs, int64_t max_position,
                                                       const std::string& where) {
  RopeScaling s;
  if (rs.is_null()) return s;
  if (!rs.is_object())
    return absl::InvalidArgumentError(absl::StrCat(where, ": rope_scaling must be an object"));
  // Newer configs name it rope_type, older ones type.
  ASSIGN_OR_RETURN(std::string type, GetStringOr(rs, "rope_type", "", where));
  if (type.empty()) {
    ASSIGN_OR_RETURN(type, GetStringOr(rs, "type", "default", where));
  }
  if (type == "default") return s;
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "yarn") {
    s.type = RopeScaling::Type::kYarn;
    s.original_context = GetIntOr(rs, "original_max_position_embeddings", max_position);
    s.beta_fast = GetDoubleOr(rs, "beta_fast", 32.0);
    s.beta_slow = GetDoubleOr(rs, "beta_slow", 1.0);
    s.mscale = GetDoubleOr(rs, "mscale", 0.0);
    s.mscale_all_dim = GetDoubleOr(rs, "mscale_all_dim", 0.0);
    s.attention_factor = GetDoubleOr(rs, "attention_factor", 0.0);
    s.truncate = GetBoolOr(rs, "truncate", true);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(where, ": rope_scaling type '", type,
                                                   "' is not supported (supported: linear, yarn)"));
  }
  auto factor = rs.find("factor");
  if (factor == rs.end() || !factor->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": rope_scaling '", type, "' needs a numeric 'factor'"));
  }
  s.factor = factor->get<double>();
  if (auto st = ValidateRopeScaling(s); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", st.message()));
  return s;
}

// The manifest keeps rope_scaling in its Hugging Face form, with every field written out.
json RopeScalingToJson(const RopeScaling& s) {
  switch (s.type) {
    case RopeScaling::Type::kNone: return json{{"rope_type", "default"}};
    case RopeScaling::Type::kLinear: return json{{"rope_type", "linear"}, {"factor", s.factor}};
    case RopeScaling::Type::kYarn: break;
  }
  return json{{"rope_type", "yarn"},
              {"factor", s.factor},
              {"original_max_position_embeddings", s.original_context},
              {"beta_fast", s.beta_fast},
              {"beta_slow", s.beta_slow},
              {"mscale", s.mscale},
              {"mscale_all_dim", s.mscale_all_dim},
              {"attention_factor", s.attention_factor},
              {"truncate", s.truncate}};
}

absl::StatusOr<RopeScaling> RopeScalingFromJson(const json& j, const std::string& where) {
  return RopeScalingFromHuggingFace(j, /*max_position=*/0, where);
}

absl::StatusOr<ModelConfig> ConfigFromHuggingFace(const json& hf) {
  if (!hf.is_object()) return absl::InvalidArgumentError("config.json: not a JSON object");
  ASSIGN_OR_RETURN(std::string model_type, GetStringOr(hf, "model_type", "", "config.json"));
  ModelConfig c;
  const std::string where = absl::StrCat("config.json (model_type '", model_type, "')");
  if (model_type == "mixtral") {
    c.architecture = Architecture::kMixtral;
    ASSIGN_OR_RETURN(c.n_experts, GetInt(hf, "num_local_experts", where));
    ASSIGN_OR_RETURN(c.expert_ffn, GetInt(hf, "intermediate_size", where));
    c.norm_topk_prob = true;
    if (hf.contains("sliding_window") && !hf["sliding_window"].is_null()) {
      int64_t sw = GetIntOr(hf, "sliding_window", 0);
      int64_t ctx = GetIntOr(hf, "max_position_embeddings", 4096);
      if (sw > 0 && sw < ctx) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": sliding_window ", sw, " < context is not supported"));
      }
    }
  } else if (model_type == "qwen2_moe" || model_type == "qwen3_moe" || model_type == "olmoe") {
    c.architecture = model_type == "qwen2_moe"   ? Architecture::kQwen2Moe
                     : model_type == "qwen3_moe" ? Architecture::kQwen3Moe
                                                 : Architecture::kOlmoe;
    ASSIGN_OR_RETURN(c.n_experts, GetInt(hf, "num_experts", where));
    if (c.architecture == Architecture::kOlmoe) {
      ASSIGN_OR_RETURN(c.expert_ffn, GetInt(hf, "intermediate_size", where));
      c.qk_norm = QkNorm::kFull;
      if (hf.contains("clip_qkv") && !hf["clip_qkv"].is_null()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": clip_qkv is not supported"));
      }
    } else {
      ASSIGN_OR_RETURN(c.expert_ffn, GetInt(hf, "moe_intermediate_size", where));
    }
    c.norm_topk_prob = GetBoolOr(hf, "norm_topk_prob", c.architecture == Architecture::kQwen3Moe);
    if (c.architecture == Architecture::kQwen2Moe) {
      c.qkv_bias = true;
      ASSIGN_OR_RETURN(c.shared_expert_ffn, GetInt(hf, "shared_expert_intermediate_size", where));
    }
    if (c.architecture == Architecture::kQwen3Moe) {
      c.qk_norm = QkNorm::kPerHead;
      c.qkv_bias = GetBoolOr(hf, "attention_bias", false);
    }
    if (c.architecture == Architecture::kQwen2Moe) c.shared_expert_gated = true;
    if (c.architecture != Architecture::kOlmoe) {
      RETURN_IF_ERROR(QwenDenseLayers(hf, where, &c));
      if (GetBoolOr(hf, "use_sliding_window", false)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": use_sliding_window is not supported"));
      }
    }
  } else if (model_type == "deepseek_v3" || model_type == "deepseek_v2" ||
             model_type == "kimi_k2") {
    RETURN_IF_ERROR(DeepseekFromHuggingFace(hf, where, &c));
  } else if (model_type == "glm4_moe") {
    RETURN_IF_ERROR(Glm4MoeFromHuggingFace(hf, where, &c));
  } else if (model_type == "gpt_oss") {
    c.architecture = Architecture::kGptOss;
    ASSIGN_OR_RETURN(c.n_experts, GetInt(hf, "num_local_experts", where));
    ASSIGN_OR_RETURN(c.expert_ffn, GetInt(hf, "intermediate_size", where));
    RETURN_IF_ERROR(GptOssFromHuggingFace(hf, where, &c));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: unsupported model_type '", model_type,
                     "' (supported: mixtral, qwen2_moe, olmoe, qwen3_moe, glm4_moe, deepseek_v2, "
                     "deepseek_v3, kimi_k2, gpt_oss)"));
  }
  ASSIGN_OR_RETURN(c.hidden_size, GetInt(hf, "hidden_size", where));
  ASSIGN_OR_RETURN(c.n_layers, GetInt(hf, "num_hidden_layers", where));
  ASSIGN_OR_RETURN(c.n_heads, GetInt(hf, "num_attention_heads", where));
  c.n_kv_heads = GetIntOr(hf, "num_key_value_heads", c.n_heads);
  ASSIGN_OR_RETURN(c.top_k, GetInt(hf, "num_experts_per_tok", where));
  ASSIGN_OR_RETURN(c.vocab_size, GetInt(hf, "vocab_size", where));
  if (!c.mla())
    c.head_dim = GetIntOr(hf, "head_dim", c.n_heads > 0 ? c.hidden_size / c.n_heads : 0);
  c.context_length = GetIntOr(hf, "max_position_embeddings", 4096);
  c.rms_norm_eps = GetDoubleOr(hf, "rms_norm_eps", 1e-5);
  c.rope_theta = GetDoubleOr(hf, "rope_theta", 1e4);
  c.tie_word_embeddings = GetBoolOr(hf, "tie_word_embeddings", false);
  if (auto it = hf.find("rope_scaling"); it != hf.end()) {
    ASSIGN_OR_RETURN(c.rope_scaling, RopeScalingFromHuggingFace(*it, c.context_length, where));
    // DeepSeek: the softmax scale gains YaRN's mscale(factor, mscale_all_dim) squared.
    if (c.mla() && c.rope_scaling.type == RopeScaling::Type::kYarn &&
        c.rope_scaling.mscale_all_dim > 0) {
      const double m = YarnMscale(c.rope_scaling.factor, c.rope_scaling.mscale_all_dim);
      c.attention_scale = m * m / std::sqrt(static_cast<double>(c.head_dim));
    }
  }
  // Glm4MoeConfig's default partial_rotary_factor is 0.5.
  if (c.architecture == Architecture::kGlm4Moe && !hf.contains("partial_rotary_factor"))
    c.rope_dims = c.head_dim / 2;
  if (auto it = hf.find("partial_rotary_factor"); it != hf.end() && it->is_number()) {
    const double f = it->get<double>();
    if (!(f > 0 && f <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": partial_rotary_factor must be in (0, 1]"));
    }
    c.rope_dims = static_cast<int64_t>(static_cast<double>(c.head_dim) * f);
    if (c.rope_dims == c.head_dim) c.rope_dims = 0;
  }
  if (!c.mla()) c.rope_style = RopeStyle::kHalfSplit;  // DeepSeek keeps its interleaved pairs
  c.bos_token_id = GetIntOr(hf, "bos_token_id", -1);
  c.eos_token_ids = GetIdList(hf, "eos_token_id");
  RETURN_IF_ERROR(c.Validate());
  return c;
}

json ConfigToJson(const ModelConfig& c) {
  return json{
      {"architecture", std::string(ArchitectureName(c.architecture))},
      {"hidden_size", c.hidden_size},
      {"n_layers", c.n_layers},
      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},
      {"head_dim", c.head_dim},
      {"expert_ffn", c.expert_ffn},
      {"n_experts", c.n_experts},
      {"top_k", c.top_k},
      {"shared_expert_ffn", c.shared_expert_ffn},
      {"vocab_size", c.vocab_size},
      {"context_length", c.context_length},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_style", c.rope_style == RopeStyle::kHalfSplit ? "half_split" : "interleaved"},
      {"rope_dims", c.rope_dims},
      {"rope_scaling", RopeScalingToJson(c.rope_scaling)},
      {"attention_scale", c.attention_scale},
      {"qk_norm", c.qk_norm == QkNorm::kNone   ? "none"
                  : c.qk_norm == QkNorm::kFull ? "full"
                                               : "per_head"},
      {"qkv_bias", c.qkv_bias},
      {"norm_topk_prob", c.norm_topk_prob},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_ids", c.eos_token_ids},
      {"nextn_layers", c.nextn_layers},
      {"shared_expert_gated", c.shared_expert_gated},
      {"router_scoring", c.router_scoring == RouterScoring::kSoftmax ? "softmax" : "sigmoid"},
      {"router_bias", c.router_bias},
      {"n_expert_groups", c.n_expert_groups},
      {"topk_groups", c.topk_groups},
      {"group_scoring", c.group_scoring == GroupScoring::kMax ? "max" : "top2_sum"},
      {"routed_scaling_factor", c.routed_scaling_factor},
      {"dense_layers", c.dense_layers},
      {"dense_ffn", c.dense_ffn},
      {"q_lora_rank", c.q_lora_rank},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope_head_dim},
      {"qk_rope_head_dim", c.qk_rope_head_dim},
      {"v_head_dim", c.v_head_dim},
      {"sliding_window", c.sliding_window},
      {"sliding_layers", c.sliding_layers},
      {"attn_sinks", c.attn_sinks},
      {"attn_output_bias", c.attn_output_bias},
      {"softmax_after_topk", c.softmax_after_topk},
      {"expert_bias", c.expert_bias},
      {"swiglu_limit", c.swiglu_limit},
  };
}

absl::StatusOr<ModelConfig> ConfigFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("manifest config: not an object");
  const std::string where = "manifest config";
  ModelConfig c;
  ASSIGN_OR_RETURN(std::string architecture, GetStringOr(j, "architecture", "", where));
  ASSIGN_OR_RETURN(c.architecture, ParseArchitecture(architecture));
  ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", where));
  ASSIGN_OR_RETURN(c.n_layers, GetInt(j, "n_layers", where));
  ASSIGN_OR_RETURN(c.n_heads, GetInt(j, "n_heads", where));
  ASSIGN_OR_RETURN(c.n_kv_heads, GetInt(j, "n_kv_heads", where));
  ASSIGN_OR_RETURN(c.head_dim, GetInt(j, "head_dim", where));
  ASSIGN_OR_RETURN(c.expert_ffn, GetInt(j, "expert_ffn", where));
  ASSIGN_OR_RETURN(c.n_experts, GetInt(j, "n_experts", where));
  ASSIGN_OR_RETURN(c.top_k, GetInt(j, "top_k", where));
  c.shared_expert_ffn = GetIntOr(j, "shared_expert_ffn", 0);
  ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", where));
  c.context_length = GetIntOr(j, "context_length", 4096);
  c.rms_norm_eps = GetDoubleOr(j, "rms_norm_eps", 1e-5);
  c.rope_theta = GetDoubleOr(j, "rope_theta", 1e4);
  ASSIGN_OR_RETURN(std::string rope, GetStringOr(j, "rope_style", "half_split", where));
  if (rope != "half_split" && rope != "interleaved") {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown rope_style '", rope, "'"));
  }
  c.rope_style = rope == "half_split" ? RopeStyle::kHalfSplit : RopeStyle::kInterleaved;
  c.rope_dims = GetIntOr(j, "rope_dims", 0);
  if (auto it = j.find("rope_scaling"); it != j.end()) {
    ASSIGN_OR_RETURN(c.rope_scaling, RopeScalingFromJson(*it, where));
  }
  c.attention_scale = GetDoubleOr(j, "attention_scale", 0.0);
  ASSIGN_OR_RETURN(std::string qk, GetStringOr(j, "qk_norm", "none", where));
  if (qk == "none")
    c.qk_norm = QkNorm::kNone;
  else if (qk == "full")
    c.qk_norm = QkNorm::kFull;
  else if (qk == "per_head")
    c.qk_norm = QkNorm::kPerHead;
  else
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown qk_norm '", qk, "'"));
  c.qkv_bias = GetBoolOr(j, "qkv_bias", false);
  c.norm_topk_prob = GetBoolOr(j, "norm_topk_prob", true);
  c.tie_word_embeddings = GetBoolOr(j, "tie_word_embeddings", false);
  c.bos_token_id = GetIntOr(j, "bos_token_id", -1);
  c.eos_token_ids = GetIdList(j, "eos_token_ids");
  c.nextn_layers = GetIntOr(j, "nextn_layers", 0);
  // Manifests written before these keys existed: Qwen2-MoE's shared expert was always gated.
  c.shared_expert_gated =
      GetBoolOr(j, "shared_expert_gated",
                c.architecture == Architecture::kQwen2Moe && c.shared_expert_ffn > 0);
  ASSIGN_OR_RETURN(std::string scoring, GetStringOr(j, "router_scoring", "softmax", where));
  if (scoring == "softmax")
    c.router_scoring = RouterScoring::kSoftmax;
  else if (scoring == "sigmoid")
    c.router_scoring = RouterScoring::kSigmoid;
  else
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unknown router_scoring '", scoring, "'"));
  c.router_bias = GetBoolOr(j, "router_bias", false);
  c.n_expert_groups = GetIntOr(j, "n_expert_groups", 1);
  c.topk_groups = GetIntOr(j, "topk_groups", 1);
  ASSIGN_OR_RETURN(std::string group, GetStringOr(j, "group_scoring", "top2_sum", where));
  if (group == "max")
    c.group_scoring = GroupScoring::kMax;
  else if (group == "top2_sum")
    c.group_scoring = GroupScoring::kTopTwoSum;
  else
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown group_scoring '", group, "'"));
  c.routed_scaling_factor = GetDoubleOr(j, "routed_scaling_factor", 1.0);
  if (auto it = j.find("dense_layers"); it != j.end()) {
    if (!it->is_array())
      return absl::InvalidArgumentError(absl::StrCat(where, ": dense_layers must be a list"));
    for (const auto& v : *it) {
      if (!v.is_number_integer())
        return absl::InvalidArgumentError(absl::StrCat(where, ": dense_layers holds ", v.dump()));
      c.dense_layers.push_back(v.get<int64_t>());
    }
  }
  c.dense_ffn = GetIntOr(j, "dense_ffn", 0);
  c.q_lora_rank = GetIntOr(j, "q_lora_rank", 0);
  c.kv_lora_rank = GetIntOr(j, "kv_lora_rank", 0);
  c.qk_nope_head_dim = GetIntOr(j, "qk_nope_head_dim", 0);
  c.qk_rope_head_dim = GetIntOr(j, "qk_rope_head_dim", 0);
  c.v_head_dim = GetIntOr(j, "v_head_dim", 0);
  c.sliding_window = GetIntOr(j, "sliding_window", 0);
  if (auto it = j.find("sliding_layers"); it != j.end()) {
    if (!it->is_array())
      return absl::InvalidArgumentError(absl::StrCat(where, ": sliding_layers must be an array"));
    for (const auto& v : *it) {
      if (!v.is_boolean())
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": sliding_layers must hold booleans"));
      c.sliding_layers.push_back(v.get<bool>());
    }
  }
  c.attn_sinks = GetBoolOr(j, "attn_sinks", false);
  c.attn_output_bias = GetBoolOr(j, "attn_output_bias", false);
  c.softmax_after_topk = GetBoolOr(j, "softmax_after_topk", false);
  c.expert_bias = GetBoolOr(j, "expert_bias", false);
  c.swiglu_limit = GetDoubleOr(j, "swiglu_limit", 0);
  RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace colibri::model
