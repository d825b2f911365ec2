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
  f.kv_ring_bytes = engine::KvRingBytes(m.config, engine::EngineOptions().prefill_chunk);
  return f;
}

}  // namespace colibri::plan
