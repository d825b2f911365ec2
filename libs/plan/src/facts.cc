#include "colibri/plan/facts.h"

#include <algorithm>

#include "colibri/engine/engine.h"

namespace colibri::plan {

ModelFacts ModelFactsOf(const model::Manifest& m) {
  ModelFacts f;
  f.name = m.name;
  f.n_layers = m.config.n_layers;
  f.n_experts = m.config.n_experts;
  f.top_k = m.config.top_k;
  f.context_length = m.config.context_length;
  f.dense_bytes = m.dense_size;
  f.expert_bytes = m.PaddedExpertBytes();
  for (const auto& b : m.experts)
    f.expert_block_bytes = std::max(f.expert_block_bytes, b.padded_size);
  f.kv_bytes_per_token = engine::KvBytesPerToken(m.config);
  const int64_t chunk = engine::EngineOptions().prefill_chunk;
  f.kv_ring_bytes = engine::KvRingBytes(m.config, chunk);
  // f32 rows: the residual stream and its normed copy, q/k/v/o and attention's output (~8
  // hidden-wide rows), the routed experts' gate/up/act rows (3 x top_k x expert FFN), the
  // shared experts' (3 x their FFN), and logits for up to 16 sequences.
  const int64_t ffn = std::max<int64_t>(m.config.expert_ffn, 1);
  const int64_t rows = 8 * m.config.hidden_size + 3 * m.config.top_k * ffn +
                       3 * std::max<int64_t>(m.config.shared_expert_ffn, 0);
  f.scratch_bytes = static_cast<uint64_t>(chunk * rows * 4 + 16 * m.config.vocab_size * 4);
  return f;
}

}  // namespace colibri::plan
