// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2), in the absorbed form for prefill and
// decode alike: the KV cache holds, per token and layer, the normalised latent c (kv_lora_rank)
// followed by the RoPE'd shared key k_pe (qk_rope_head_dim). Per head h,
//   score(t) = (q_nope_h · k_nope_h(t) + q_pe_h · k_pe(t)) * scale
//            = ((W_kb_h^T q_nope_h) · c(t) + q_pe_h · k_pe(t)) * scale      (W_kb_h: attn_k_b rows of h)
//   out_h    = W_vb_h · sum_t p(t) c(t)                                      (W_vb_h: attn_v_b rows of h)
// so attention is multi-query over rows [c, k_pe] with per-head queries [W_kb_h^T q_nope_h, q_pe_h],
// and the value up-projection runs once on the attended latent. The latent rows double as the
// values (the k_pe part of the attended row is ignored).
#include <cmath>

#include "colibri/core/status.h"
#include "colibri/engine/model.h"
#include "model_workspace.h"

namespace colibri::engine {

void Model::MlaAttention(int64_t layer, const LayerWeights& lw, std::span<const Run> runs,
                         int64_t n) {
  const auto& c = config_;
  Workspace& w = *ws_;
  backend::Backend& be = *backend_;
  const int64_t H = c.n_heads, N = c.qk_nope_head_dim, R = c.qk_rope_head_dim, L = c.kv_lora_rank,
                V = c.v_head_dim, Q = N + R, D = L + R;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* h = w.h->f32();
  float* q = w.q->f32();  // [n, H * Q]
  if (c.q_lora_rank > 0) {
    be.MatMul(lw.q_a, h, n, w.mla_qlat->f32());
    be.RmsNorm(w.mla_qlat->f32(), lw.q_a_norm, n, c.q_lora_rank, eps, w.mla_qlat->f32());
    be.MatMul(lw.q, w.mla_qlat->f32(), n, q);
  } else {
    be.MatMul(lw.q, h, n, q);
  }
  // The latent and the shared RoPE key: kv_a [n, L + R] -> c [n, L] (normalised), k_pe RoPE'd in
  // place; q_pe RoPE'd in place at offset N of each q head.
  float* kv_a = w.mla_kva->f32();
  be.MatMul(lw.kv_a, h, n, kv_a);
  be.CopyStrided(w.mla_c->f32(), L, kv_a, D, n, L);
  be.RmsNorm(w.mla_c->f32(), lw.kv_a_norm, n, L, eps, w.mla_c->f32());
  be.Rope(kv_a, n, 1, D, w.positions.data(), RopeAt(L));
  be.Rope(q, n, H, Q, w.positions.data(), RopeAt(N));
  // Absorbed queries [n, H, D]: W_kb_h^T q_nope_h, then q_pe_h.
  float* qry = w.mla_qry->f32();
  for (int64_t hd = 0; hd < H; ++hd) {
    be.CopyStrided(w.mla_a->f32(), N, q + hd * Q, H * Q, n, N);
    be.MatMul(lw.k_b[static_cast<size_t>(hd)], w.mla_a->f32(), n, w.mla_b->f32());
    be.CopyStrided(qry + hd * D, H * D, w.mla_b->f32(), L, n, L);
  }
  be.CopyStrided(qry + L, D, q + N, Q, n * H, R);
  float* lat = w.mla_out->f32();  // [n, H, D]: attended latent rows
  for (const Run& r : runs) {
    const int64_t m = r.end - r.begin;
    float* cache = r.cache->k_[static_cast<size_t>(layer)]->f32();
    float* row0 = cache + static_cast<int64_t>(w.positions[static_cast<size_t>(r.begin)]) * D;
    be.CopyStrided(row0, D, w.mla_c->f32() + r.begin * L, L, m, L);
    be.CopyStrided(row0 + L, D, kv_a + r.begin * D + L, D, m, R);
    backend::AttentionArgs a;
    a.q = qry + r.begin * H * D;
    a.k_cache = cache;
    a.v_cache = cache;
    a.positions = w.positions.data() + r.begin;
    a.n = m;
    a.n_heads = H;
    a.n_kv_heads = 1;
    a.head_dim = D;
    a.scale = static_cast<float>(c.softmax_scale());
    a.out = lat + r.begin * H * D;
    be.Attention(a);
  }
  // Value up-projection per head into attn [n, H * V].
  float* attn = w.attn->f32();
  for (int64_t hd = 0; hd < H; ++hd) {
    be.CopyStrided(w.mla_a->f32(), L, lat + hd * D, H * D, n, L);
    be.MatMul(lw.v_b[static_cast<size_t>(hd)], w.mla_a->f32(), n, w.mla_b->f32());
    be.CopyStrided(attn + hd * V, H * V, w.mla_b->f32(), V, n, V);
  }
}

}  // namespace colibri::engine
