// Synthetic Mixtral-shaped models with random weights (valid GGML blocks), written straight
// into a colibri container: fixtures for tests and multi-GB models for benchmarks. Same options
// and seed, same bytes. A config with kv_lora_rank > 0 gets DeepSeek's latent attention tensors
// (matrices whose width is not a whole number of blocks of `dtype` are stored f32). With
// config.nextn_layers > 0, the NextN / MTP layers too, as extra tensors named as the importers
// name them (nextn_import.h; latent attention's kv_b whole, the experts stacked; a MoE layer).
//
// Trained MoE models route with locality: the residual stream changes little from one layer to
// the next (so the next layer's router, applied early, predicts its choice), and tokens share a
// common direction (so some experts are popular and consecutive tokens reuse experts). Two knobs
// give random models that shape: `residual_scale` shrinks what attention and experts add to the
// stream, `embedding_shared` mixes one shared direction into every token embedding.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "colibri/model/model_config.h"
#include "colibri/quant/dtype.h"

namespace colibri::model {

struct SyntheticModelOptions {
  std::string name = "synthetic";
  ModelConfig config;                       // see DefaultSyntheticConfig(); dense layers, shared
                                            // experts and the router bias as the config says
  quant::DType dtype = quant::DType::kF32;  // matrices (norms and routers stay f32)
  uint64_t seed = 1;
  float residual_scale = 1.0f;    // scale of attn_output and expert down projections
  float embedding_shared = 0.0f;  // 0..1: weight of the shared direction in embeddings
  float router_scale = 2.0f;      // router logits ~ N(0, router_scale^2) per expert
  bool split_experts = false;
  bool overwrite = true;
  // A container whose tokenizer (files and manifest entry) is copied in, so servers can run the
  // model on text; its vocabulary must fit config.vocab_size. Empty: no tokenizer.
  std::filesystem::path tokenizer_from;
};

// hidden 32, expert ffn 64, 2 layers, 4 experts top-2, vocab 64: a test fixture.
ModelConfig DefaultSyntheticConfig();

absl::Status WriteSyntheticModel(const std::filesystem::path& dir,
                                 const SyntheticModelOptions& options);

}  // namespace colibri::model
