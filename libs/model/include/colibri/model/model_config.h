// The architecture hyper-parameters of a MoE model, independent of where they were read from
// (Hugging Face config.json, GGUF metadata, or a colibri manifest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/model/rope.h"
#include "nlohmann/json.hpp"

namespace colibri::model {

enum class Architecture { kMixtral, kQwen2Moe, kOlmoe, kQwen3Moe, kGlm4Moe, kDeepseek2, kGptOss };

// How RoPE pairs the dimensions of a head: Hugging Face checkpoints rotate (i, i + D/2)
// ("half-split"); GGUF files of the llama family have q/k rows permuted so that the pairs are
// adjacent (2i, 2i+1) ("interleaved").
enum class RopeStyle { kHalfSplit, kInterleaved };

// Where q/k RMSNorm applies (before RoPE): none, over all heads together (OLMoE), or per head
// with a [head_dim] weight (Qwen3-MoE).
enum class QkNorm { kNone, kFull, kPerHead };

// How the router turns its logits into expert scores: a softmax over the layer's experts, or
// an independent sigmoid per expert (DeepSeek-V3, GLM-4.5).
enum class RouterScoring { kSoftmax, kSigmoid };

// How a group scores in group-limited routing: by its best expert (DeepSeek-V2
// "group_limited_greedy") or by the sum of its two best (DeepSeek-V3 "noaux_tc", llama.cpp).
enum class GroupScoring { kMax, kTopTwoSum };

struct ModelConfig {
  Architecture architecture = Architecture::kMixtral;
  int64_t hidden_size = 0;  // d_model
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t expert_ffn = 0;  // d_ff of one routed expert
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t shared_expert_ffn = 0;  // 0: no shared expert; else its d_ff (all shared experts fused)
  bool shared_expert_gated = false;  // Qwen2-MoE: scaled by sigmoid(ffn_gate_inp_shexp . h)
  int64_t vocab_size = 0;
  int64_t context_length = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 1e6;
  RopeStyle rope_style = RopeStyle::kHalfSplit;
  int64_t rope_dims = 0;  // rotated dims per head (partial rotary); 0: all of head_dim
  RopeScaling rope_scaling;
  double attention_scale = 0;  // softmax scale of q·k; 0: 1/sqrt(head_dim)
  QkNorm qk_norm = QkNorm::kNone;
  bool qkv_bias = false;
  // Routing. Scores come from `router_scoring`; with `router_bias` a per-expert bias
  // (blk.N.ffn_exp_probs_b) is added to them to choose the experts but not to weight them. With
  // n_expert_groups > 1 the experts form equal groups and only the `topk_groups` best groups
  // (by `group_scoring` of the biased scores) are eligible. The k chosen scores are optionally
  // renormalised to sum to 1, then multiplied by `routed_scaling_factor`.
  RouterScoring router_scoring = RouterScoring::kSoftmax;
  bool router_bias = false;
  int64_t n_expert_groups = 1;
  int64_t topk_groups = 1;
  GroupScoring group_scoring = GroupScoring::kTopTwoSum;
  bool norm_topk_prob = true;  // renormalise the k routing weights to sum to 1
  double routed_scaling_factor = 1.0;
  // Layers with a dense SwiGLU MLP of `dense_ffn` instead of experts (ascending; DeepSeek's
  // first_k_dense_replace, Qwen-MoE's mlp_only_layers / decoder_sparse_step). Their weights
  // (blk.N.ffn_gate/ffn_up/ffn_down) are dense tensors; they have no router and no expert blocks.
  std::vector<int64_t> dense_layers;
  int64_t dense_ffn = 0;

  // Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) when kv_lora_rank > 0. q comes from
  // attn_q_a -> RMSNorm attn_q_a_norm -> attn_q_b (q_lora_rank > 0) or attn_q (V2-Lite); each q/k
  // head has qk_nope_head_dim + qk_rope_head_dim (= head_dim) dimensions, RoPE on the last
  // qk_rope_head_dim. attn_kv_a_mqa gives the latent (kv_lora_rank, RMSNorm attn_kv_a_norm) and
  // one RoPE key shared by all heads; per head h, attn_k_b rows [h*kv_lora_rank, +kv_lora_rank)
  // map a nope query into latent space ([kv_lora_rank, qk_nope_head_dim]) and attn_v_b rows
  // [h*v_head_dim, +v_head_dim) map the attended latent to the head's value ([v_head_dim,
  // kv_lora_rank]). The KV cache holds the latent and the RoPE key: kv_lora_rank +
  // qk_rope_head_dim floats per token and layer.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool mla() const { return kv_lora_rank > 0; }

  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  // NextN / multi-token-prediction layers after the n_layers the model runs (GLM-4.5: 1): kept
  // as extra tensors "nextn.<i>.*" (manifest.h), never run by the engine.
  int64_t nextn_layers = 0;

  bool IsMoeLayer(int64_t layer) const;
  int64_t n_moe_layers() const { return n_layers - static_cast<int64_t>(dense_layers.size()); }
  // The position of MoE layer `layer` among the MoE layers (its expert blocks' index base).
  int64_t MoeLayerRank(int64_t layer) const;

  // gpt-oss. Sliding-window attention: layer l attends to the last `sliding_window` positions
  // (its own included) when sliding_layers[l] is true; empty sliding_layers: no sliding layer.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  bool attn_sinks = false;        // a learned logit per head in each softmax denominator
  bool attn_output_bias = false;  // o_proj has a bias
  // router_bias (above): gpt-oss adds it to the logits, which also changes the weights.
  bool softmax_after_topk = false;  // top-k of the logits first, softmax over the k selected
  bool expert_bias = false;         // gate/up/down biases per expert (parts of the expert block)
  // > 0: the clamped SwiGLU of gpt-oss, (clamp(up, ±limit) + 1) · g · σ(1.702 g) with
  // g = min(gate, limit); 0: silu(gate) · up.
  double swiglu_limit = 0;

  bool IsSliding(int64_t layer) const {
    return sliding_window > 0 && layer >= 0 &&
           layer < static_cast<int64_t>(sliding_layers.size()) &&
           sliding_layers[static_cast<size_t>(layer)];
  }

  // Checks every field for consistency; errors name the field.
  absl::Status Validate() const;
  static constexpr int64_t kMaxExpertBlocks = int64_t{1} << 20;

  int64_t rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim; }
  double softmax_scale() const;
};

// "mixtral", "qwen2_moe", "olmoe", "qwen3_moe", "glm4_moe", "deepseek2", "gpt_oss"
std::string_view ArchitectureName(Architecture a);
absl::StatusOr<Architecture> ParseArchitecture(std::string_view name);

// Reads a Hugging Face config.json (its real keys per family). Unknown model types and
// unsupported options (e.g. Mixtral's sliding window, dense layers mixed into a MoE stack) are
// refused with a message naming them.
absl::StatusOr<ModelConfig> ConfigFromHuggingFace(const nlohmann::json& hf);

// Manifest form (colibri's own keys).
nlohmann::json ConfigToJson(const ModelConfig& c);
absl::StatusOr<ModelConfig> ConfigFromJson(const nlohmann::json& j);

}  // namespace colibri::model
