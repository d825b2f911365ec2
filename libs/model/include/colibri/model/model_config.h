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

enum class Architecture { kMixtral, kQwen2Moe, kOlmoe, kQwen3Moe, kGptOss };

// How RoPE pairs the dimensions of a head: Hugging Face checkpoints rotate (i, i + D/2)
// ("half-split"); GGUF files of the llama family have q/k rows permuted so that the pairs are
// adjacent (2i, 2i+1) ("interleaved").
enum class RopeStyle { kHalfSplit, kInterleaved };

// Where q/k RMSNorm applies (before RoPE): none, over all heads together (OLMoE), or per head
// with a [head_dim] weight (Qwen3-MoE).
enum class QkNorm { kNone, kFull, kPerHead };

struct ModelConfig {
  Architecture architecture = Architecture::kMixtral;
  int64_t hidden_size = 0;         // d_model
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t expert_ffn = 0;          // d_ff of one routed expert
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t shared_expert_ffn = 0;   // 0: no shared expert (Qwen2-MoE has one, with a sigmoid gate)
  int64_t vocab_size = 0;
  int64_t context_length = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 1e6;
  RopeStyle rope_style = RopeStyle::kHalfSplit;
  int64_t rope_dims = 0;           // rotated dims per head (partial rotary); 0: all of head_dim
  RopeScaling rope_scaling;
  double attention_scale = 0;      // softmax scale of q·k; 0: 1/sqrt(head_dim)
  QkNorm qk_norm = QkNorm::kNone;
  bool qkv_bias = false;
  bool norm_topk_prob = true;      // renormalise the k routing weights to sum to 1
  bool tie_word_embeddings = false;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // gpt-oss. Sliding-window attention: layer l attends to the last `sliding_window` positions
  // (its own included) when sliding_layers[l] is true; empty sliding_layers: no sliding layer.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  bool attn_sinks = false;          // a learned logit per head in each softmax denominator
  bool attn_output_bias = false;    // o_proj has a bias
  bool router_bias = false;         // router logits + bias
  bool softmax_after_topk = false;  // top-k of the logits first, softmax over the k selected
  bool expert_bias = false;         // gate/up/down biases per expert (parts of the expert block)
  // > 0: the clamped SwiGLU of gpt-oss, (clamp(up, ±limit) + 1) · g · σ(1.702 g) with
  // g = min(gate, limit); 0: silu(gate) · up.
  double swiglu_limit = 0;

  bool IsSliding(int64_t layer) const {
    return sliding_window > 0 && layer >= 0 && layer < static_cast<int64_t>(sliding_layers.size()) &&
           sliding_layers[static_cast<size_t>(layer)];
  }

  // Checks every field for consistency; errors name the field.
  absl::Status Validate() const;

  int64_t rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim; }
  double softmax_scale() const;
};

std::string_view ArchitectureName(Architecture a);  // "mixtral", "qwen2_moe", "olmoe", "qwen3_moe", "gpt_oss"
absl::StatusOr<Architecture> ParseArchitecture(std::string_view name);

// Reads a Hugging Face config.json (its real keys per family). Unknown model types and
// unsupported options (e.g. Mixtral's sliding window, dense layers mixed into a MoE stack) are
// refused with a message naming them.
absl::StatusOr<ModelConfig> ConfigFromHuggingFace(const nlohmann::json& hf);

// Manifest form (colibri's own keys).
nlohmann::json ConfigToJson(const ModelConfig& c);
absl::StatusOr<ModelConfig> ConfigFromJson(const nlohmann::json& j);

}  // namespace colibri::model
