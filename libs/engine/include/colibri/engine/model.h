// The transformer: dense weights resident on a Backend, experts from an ExpertSource, and a
// batched forward pass over tokens of one or more sequences (each with its own KV cache).
//
// Per layer: RMSNorm -> q/k/v (bias, q/k-norm per family) -> RoPE -> KV store -> causal
// attention -> output projection -> residual; RMSNorm -> router (softmax over experts, top-k,
// optional renormalisation) -> each unique routed expert of the batch fetched once and applied
// to the rows that chose it (SwiGLU) -> (Qwen2-MoE: + sigmoid-gated shared expert) -> residual.
// Thread safety: one Forward at a time (the caller serialises); the expert source is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "colibri/backend/backend.h"
#include "colibri/expert_source/expert_source.h"
#include "colibri/model/container.h"

namespace colibri::engine {

// KV cache of one sequence: per layer, K and V rows [capacity, n_kv_heads * head_dim] (F32) in
// backend memory, grown by doubling up to the context length.
class KvCache {
 public:
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }
  uint64_t bytes() const;
  // Forgets positions >= n (the next token is written at position n).
  void Truncate(int64_t n) { n_past_ = std::min(n_past_, n); }

 private:
  friend class Model;
  int64_t n_past_ = 0;
  int64_t capacity_ = 0;
  int64_t kv_dim_ = 0;
  std::vector<std::unique_ptr<backend::Buffer>> k_, v_;  // per layer
};

// One token of a batch.
struct BatchItem {
  KvCache* cache = nullptr;
  int32_t token = 0;
  int32_t position = 0;      // must equal cache->n_past() + (earlier items of the same cache)
  bool want_logits = false;
};

struct ForwardStats {
  int64_t experts_applied = 0;    // unique (layer, expert) blocks applied
  int64_t expert_rows = 0;        // token-expert pairs computed
};

class Model {
 public:
  static absl::StatusOr<std::unique_ptr<Model>> Load(const model::Container& container, backend::Backend* backend,
                                                     expert_source::ExpertSource* experts);
  ~Model();

  const model::ModelConfig& config() const { return config_; }
  const model::Manifest& manifest() const { return manifest_; }
  uint64_t dense_bytes() const { return dense_size_; }

  std::unique_ptr<KvCache> NewCache() const;
  // Grows `cache` to hold `positions` tokens now (Forward grows it by doubling otherwise).
  absl::Status ReserveKv(KvCache* cache, int64_t positions) { return EnsureCapacity(cache, positions); }

  // Runs the batch; appends to `logits` one row of vocab_size floats per item with
  // want_logits, in batch order. Items of one cache must be contiguous and in position order.
  absl::Status Forward(std::span<const BatchItem> batch, std::vector<float>* logits, ForwardStats* stats = nullptr);

 private:
  struct LayerWeights {
    const float* attn_norm = nullptr;
    backend::WeightRef q, k, v, o;
    const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;
    const float *q_norm = nullptr, *k_norm = nullptr;
    const float* ffn_norm = nullptr;
    backend::WeightRef router;  // [n_experts, hidden]
    backend::WeightRef shexp_gate, shexp_up, shexp_down, shexp_router;
  };
  struct Workspace;

  Model() = default;
  absl::Status EnsureCapacity(KvCache* cache, int64_t positions);
  absl::Status EnsureWorkspace(int64_t n);
  absl::Status MoE(int layer, int64_t n, ForwardStats* stats);

  model::ModelConfig config_;
  model::Manifest manifest_;
  backend::Backend* backend_ = nullptr;
  expert_source::ExpertSource* experts_ = nullptr;
  model::Container::DenseWeights dense_;
  uint64_t dense_size_ = 0;
  std::vector<std::unique_ptr<backend::Buffer>> weight_storage_;  // non-zero-copy backends
  backend::WeightRef token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace colibri::engine
