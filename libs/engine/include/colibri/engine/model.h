// The transformer: dense weights resident on a Backend, experts from an ExpertSource, and a
// batched forward pass over tokens of one or more sequences (each with its own KV cache).
//
// Per layer: RMSNorm -> q/k/v (bias, q/k-norm per family) -> RoPE -> KV store -> causal
// attention (gpt-oss: sliding window on some layers, sinks) -> output projection (+ bias) ->
// residual; RMSNorm -> a dense SwiGLU MLP (dense layers), or router (routing.h: softmax or
// sigmoid scores, selection bias, group-limited top-k, optional renormalisation, scaling; gpt-oss:
// bias, top-k, softmax over the k) -> each unique routed expert of the batch fetched once and
// applied to the rows that chose it (SwiGLU; gpt-oss: biases and the clamped SwiGLU) -> + shared
// expert (Qwen2-MoE: sigmoid-gated) -> residual.
// The routing of each layer is reported to the expert source (Hint: every expert's probability)
// and, with ModelOptions::trace, written one line per token and layer. With prefetch_layers > 0,
// the experts of the next layers are predicted and prefetched while a layer runs (lookahead.h);
// that never changes results.
// An MTP model (LoadMtp: the NextN / multi-token-prediction layer DeepSeek-V3 and GLM-4.5
// checkpoints carry, as a one-layer model) takes, instead of the token embedding, the input
// eh_proj([enorm(embed(token)); hnorm(prev)]) where prev is a hidden state of the target model
// (HiddenIo::prev), and its head is shared_head.norm + shared_head.head.
// Thread safety: one Forward at a time (the caller serialises); the expert source is shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"
#include "colibri/engine/kv_store.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/expert_source/routing_trace.h"
#include "colibri/model/container.h"

namespace colibri::engine {

// KV cache of one sequence: per layer, K and V rows [capacity, n_kv_heads * head_dim] (F32) in
// backend memory, grown by doubling up to the context length. With latent attention one buffer
// per layer holds rows [capacity, kv_lora_rank + qk_rope_head_dim] (latent, RoPE key) and there
// is no V.
// A sliding-window layer keeps a
// ring of window - 1 + (rows of the largest batch) rows instead (position j in row j % ring):
// its memory is bounded by the window whatever the context.
class KvCache {
 public:
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }
  int64_t ring_rows() const { return ring_; }  // 0: no sliding layer
  uint64_t bytes() const;
  // Forgets positions >= n (the next token is written at position n) and returns the positions
  // kept: min(n, n_past()), or 0 when a sliding layer's ring no longer holds the window that
  // position n attends to (the whole history is then recomputed).
  int64_t Truncate(int64_t n);
  // Layer `layer`'s rows in backend memory: K and V, or (latent attention) the latent rows and
  // a null V. Empty before the first token.
  struct LayerBuffers {
    float* k = nullptr;
    float* v = nullptr;
  };
  LayerBuffers Buffers(int64_t layer) const;

 private:
  friend class Model;
  bool Sliding(size_t layer) const { return layer < sliding_.size() && sliding_[layer]; }
  int64_t n_past_ = 0;
  int64_t capacity_ = 0;  // rows of each full-attention layer
  int64_t kv_dim_ = 0;
  int64_t window_ = 0;   // sliding layers' window (0: none)
  int64_t ring_ = 0;     // rows of each sliding layer's ring
  int64_t ring_lo_ = 0;  // every ring holds positions [ring_lo_, n_past_)
  std::vector<bool> sliding_;
  std::vector<std::unique_ptr<backend::Buffer>> k_, v_;  // per layer
};

// One token of a batch.
struct BatchItem {
  KvCache* cache = nullptr;
  int32_t token = 0;
  int32_t position = 0;  // must equal cache->n_past() + (earlier items of the same cache)
  bool want_logits = false;
};

struct ForwardStats {
  int64_t experts_applied = 0;     // unique (layer, expert) blocks applied
  int64_t expert_rows = 0;         // token-expert pairs computed
  double expert_wait_seconds = 0;  // blocked waiting for expert blocks (not computing)
  // The routing of every row: per MoE layer in order, batch size * top_k expert ids.
  std::vector<int32_t> routed;
};

// Hidden states into and out of a forward pass (speculative decoding's MTP drafter).
struct HiddenIo {
  // Host rows [n, hidden]: the target model's hidden state for each batch item. Required by, and
  // only read by, an MTP model.
  const float* prev = nullptr;
  // When set, gets every item's last-layer output before the final norm appended: [n, hidden].
  std::vector<float>* out = nullptr;
};

struct ModelOptions {
  // Lookahead prefetch: while layer L runs, predict and prefetch the experts of layers
  // L+1..L+prefetch_layers (see lookahead.h). 0: off. Never changes results.
  int prefetch_layers = 0;
  // Predicted experts whose predicted gate weight is below this are not prefetched (a wrong
  // prefetch costs a whole block of disk time; low-weight predictions are wrong most often).
  // The weight is compared without routed_scaling_factor, so with renormalised routing it is
  // the expert's share of the token's routed weight (0..1) for any scaling.
  float prefetch_min_weight = 0.0f;
  // When set, one line per token and layer with the chosen experts and gate probabilities.
  expert_source::RoutingTraceWriter* trace = nullptr;
};

// Totals since Load; read from any thread.
struct ModelCounters {
  std::atomic<uint64_t> forward_passes{0};
  std::atomic<uint64_t> rows{0};            // tokens forwarded (prompt and generated)
  std::atomic<uint64_t> expert_wait_ns{0};  // blocked on expert blocks
  std::atomic<uint64_t> experts_applied{0};
  // Lookahead: experts predicted (and prefetched), how many of those the router then picked,
  // and how many experts the router picked at layers that can be predicted (layer > 0, and not
  // skipped as all resident: see prefetch_layers_resident).
  std::atomic<uint64_t> prefetch_predicted{0};
  std::atomic<uint64_t> prefetch_predicted_routed{0};
  std::atomic<uint64_t> prefetch_routed{0};
  // Predictions of a layer skipped because the expert source held its every expert (nothing to
  // read).
  std::atomic<uint64_t> prefetch_layers_resident{0};
};

class Lookahead;
struct Routing;

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const model::Container& container,
                                                     backend::Backend* backend,
                                                     expert_source::ExpertSource* experts,
                                                     const ModelOptions& options = {});
  ~Model();

  // A second model for self-speculative drafting: this model's dense weights (shared, not
  // copied: this model must outlive it) over another expert source whose blocks
  // `experts_manifest` describes (ResidentExperts' low-bit copy of this model's experts).
  // FailedPrecondition when that manifest's experts do not fit this model's config.
  absl::StatusOr<std::unique_ptr<Model>> NewDrafter(const model::Manifest& experts_manifest,
                                                    expert_source::ExpertSource* experts) const;

  // The model's MTP / NextN layer `index` (kept in extra.bin at import) as a one-layer model on
  // this model's backend: its attention with its own KV cache, its FFN (a MoE layer's experts
  // held in host RAM by the returned model), its shared head; the embedding and output of this
  // model where the layer has none. This model must outlive it. FailedPrecondition when the
  // model has no such layer; the container's errors (NotFound, DataLoss) as they are.
  absl::StatusOr<std::unique_ptr<Model>> LoadMtp(const model::Container& container,
                                                 int index = 0) const;
  bool is_mtp() const { return eh_proj_.data != nullptr; }

  const model::ModelConfig& config() const { return config_; }
  const model::Manifest& manifest() const { return manifest_; }
  uint64_t dense_bytes() const { return dense_size_; }
  const ModelCounters& counters() const { return counters_; }
  int prefetch_layers() const { return options_.prefetch_layers; }

  std::unique_ptr<KvCache> NewCache() const;
  // Grows `cache` to hold `positions` tokens now (Forward grows it by doubling otherwise).
  absl::Status ReserveKv(KvCache* cache, int64_t positions) {
    return EnsureCapacity(cache, positions, 1);
  }

  // Copies positions [0, tokens.size()) of `cache` out of backend memory into a snapshot with
  // rows in `dtype` (kF32: exact; kQ8_0: 8-bit). tokens.size() <= cache.n_past().
  absl::StatusOr<KvSnapshot> SnapshotKv(const KvCache& cache, std::vector<int32_t> tokens,
                                        std::string session_id, quant::DType dtype) const;
  // A new cache holding the snapshot's positions (n_past = its token count).
  absl::StatusOr<std::unique_ptr<KvCache>> RestoreKv(const KvSnapshot& snapshot);

  // Runs the batch; appends to `logits` one row of vocab_size floats per item with
  // want_logits, in batch order. Items of one cache must be contiguous and in position order.
  // `hidden`: see HiddenIo (an MTP model without hidden->prev is InvalidArgument).
  absl::Status Forward(std::span<const BatchItem> batch, std::vector<float>* logits,
                       ForwardStats* stats = nullptr, const HiddenIo* hidden = nullptr);

 private:
  struct LayerWeights {
    const float* attn_norm = nullptr;
    backend::WeightRef q, k, v, o;
    const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;
    const float *q_norm = nullptr, *k_norm = nullptr;
    const float* o_bias = nullptr;
    const float* sinks = nullptr;  // [n_heads]
    const float* ffn_norm = nullptr;
    bool moe = true;
    backend::WeightRef router;  // [n_experts, hidden]
    // f32 [n_experts], host memory (Route reads it): selection only, or gpt-oss's logit bias.
    const float* router_bias = nullptr;
    backend::WeightRef shexp_gate, shexp_up, shexp_down, shexp_router;
    backend::WeightRef ffn_gate, ffn_up,
        ffn_down;  // dense layers: [dense_ffn, hidden] x2, [hidden, dense_ffn]
    // Latent attention (q is attn_q_b, or attn_q without q LoRA; o is attn_output):
    backend::WeightRef q_a;               // [q_lora_rank, hidden]
    const float* q_a_norm = nullptr;      // f32 [q_lora_rank]
    backend::WeightRef kv_a;              // [kv_lora_rank + qk_rope_head_dim, hidden]
    const float* kv_a_norm = nullptr;     // f32 [kv_lora_rank]
    std::vector<backend::WeightRef> k_b;  // per head [kv_lora_rank, qk_nope_head_dim]
    std::vector<backend::WeightRef> v_b;  // per head [v_head_dim, kv_lora_rank]
  };
  struct Workspace;
  // Items [begin, end) of a batch that share one KV cache.
  struct Run {
    KvCache* cache;
    int64_t begin, end;
  };

  Model() = default;
  // Everything after the manifest and dense weights are in place: the weights by name (with
  // `base`, an MTP model's fallback for token_embd and output), the workspace, the lookahead.
  static absl::Status LoadWeights(Model* m, const Model* base);
  // The MTP input rows eh_proj([enorm(embed(tokens)); hnorm(prev)]) into the workspace's x.
  void MtpInput(const int32_t* tokens, const float* prev, int64_t n);
  // Room for `positions` positions, fed `batch_rows` at a time (the rings' size).
  absl::Status EnsureCapacity(KvCache* cache, int64_t positions, int64_t batch_rows);
  absl::Status GrowRings(KvCache* cache, int64_t rows);
  // Positions [0, n) of a sliding layer's ring as rows [n, kv_dim]; those it no longer holds as zeros.
  void DownloadRing(const KvCache& cache, backend::Buffer& ring, int64_t n, float* dst) const;
  absl::Status EnsureWorkspace(int64_t n);
  absl::Status MoE(int layer, int64_t n, ForwardStats* stats);
  // Latent attention of `layer` on the workspace's h into its attn [n, n_heads * v_head_dim]
  // (mla_attention.cc); writes the runs' latent rows into their caches.
  void MlaAttention(int64_t layer, const LayerWeights& lw, std::span<const Run> runs, int64_t n);
  // The model's RoPE (rotary_dims() dims, its frequency table) at `offset` within each head.
  backend::RopeParams RopeAt(int64_t offset) const;
  // SwiGLU down(silu(gate h) * up h) of w.h into `out` (the workspace's h: [n, hidden]).
  void SwiGlu(const backend::WeightRef& gate, const backend::WeightRef& up,
              const backend::WeightRef& down, int64_t ffn, int64_t n, float* out);
  // Tells the expert source what the router decided (hints) and writes the trace lines.
  void ReportRouting(int layer, const Routing& routing);

  model::ModelConfig config_;
  model::RopeTable rope_;  // the config's RoPE frequencies, built once at load
  model::Manifest manifest_;
  backend::Backend* backend_ = nullptr;
  expert_source::ExpertSource* experts_ = nullptr;
  model::Container::DenseWeights dense_;
  uint64_t dense_size_ = 0;
  std::vector<std::unique_ptr<backend::Buffer>> weight_storage_;  // non-zero-copy backends
  backend::WeightRef token_embd_, output_;
  const float* output_norm_ = nullptr;
  // MTP models only: eh_proj [hidden, 2 * hidden], enorm and hnorm f32 [hidden], and the
  // experts of the layer (held in RAM, owned).
  backend::WeightRef eh_proj_;
  const float *enorm_ = nullptr, *hnorm_ = nullptr;
  std::unique_ptr<expert_source::ExpertSource> owned_experts_;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<Workspace> ws_;
  ModelOptions options_;
  ModelCounters counters_;
  std::unique_ptr<Lookahead> lookahead_;
  int64_t trace_step_ = 0;
  // This model's tag in a host backend's pass measures (Backend::BeginPass): a target and the
  // drafters sharing its backend are measured apart.
  static uint32_t NewPassTag();
  const uint32_t pass_tag_ = NewPassTag();
};

}  // namespace colibri::engine
