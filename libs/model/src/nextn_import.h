// The NextN / multi-token-prediction layers GLM-4.5 checkpoints carry after their last layer
// (Hugging Face model.layers.<num_hidden_layers + i>.*, GGUF blk.<n_layer + i>.* with nextn.*
// tensors): both importers keep them as extra tensors (manifest.h: Manifest::extra) named
// "nextn.<i>.<suffix>", with the suffixes the main layers use (attn_q, attn_q_bias, ffn_norm,
// ffn_gate_inp, ffn_exp_probs_b, ffn_up_exps [n_experts, ffn, hidden], ffn_up_shexp, ...) plus
// eh_proj, enorm, hnorm, embed_tokens, shared_head_norm and shared_head_head. Shapes are
// outermost first; matrices get the quant plan's type for their role, vectors and routers F32.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "colibri/model/container.h"
#include "colibri/model/quant_plan.h"
#include "tensor_sink.h"

namespace colibri::model {

class GgufFile;
class SafetensorsCheckpoint;

// Every tensor of the config's NextN layers, from either source. A tensor of those layers that
// is not a known NextN tensor, or an incomplete expert set, is InvalidArgument naming it; a
// checkpoint without the layers (some conversions drop them) keeps none and is not an error.
absl::Status ImportNextnFromHuggingFace(const SafetensorsCheckpoint& ckpt,
                                        const ModelConfig& config, const QuantPlan& plan,
                                        ContainerWriter& writer);
absl::Status ImportNextnFromGguf(const GgufFile& file, const ModelConfig& config,
                                 const QuantPlan& plan, TensorSink& sink);

// Our suffix for a Hugging Face name below "model.layers.<L>." (experts excluded: the caller
// stacks "mlp.experts.<e>.<x>_proj.weight" into ffn_<x>_exps); "" when not a known NextN tensor.
std::string NextnSuffixFromHuggingFace(std::string_view name);
// Our suffix for a GGUF name below "blk.<L>." ("nextn.eh_proj.weight", "attn_q.bias",
// "ffn_up_exps.weight", ...); "" when not a known NextN tensor.
std::string NextnSuffixFromGguf(std::string_view name);

// Adds "nextn.<index>.<suffix>" holding `bytes` (rows of `source`, shape outermost first),
// re-encoded to the plan's type for the suffix's role (`layer` is the checkpoint's layer index).
// `bytes` must stay valid until the sink has used it (a GGUF's mapping, or the caller's buffer
// when the sink writes at once).
absl::Status AddNextnTensor(TensorSink& sink, const QuantPlan& plan, int64_t index, int64_t layer,
                            const std::string& suffix, quant::DType source,
                            std::vector<int64_t> shape, std::span<const uint8_t> bytes);

}  // namespace colibri::model
