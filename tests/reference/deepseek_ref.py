"""Float64 numpy reference of the DeepSeek-V2/V3 (and Kimi K2) architecture.

Used by moe_ref.py (load_model dispatches here for `deepseek_v2` / `deepseek_v3` / `kimi_k2`
Hugging Face checkpoints and `deepseek2` GGUF files). Written from the Hugging Face
DeepseekV3ForCausalLM equations, in the decompressed form (keys and values rebuilt from the
latent for every step) so that it is independent of the engine's absorbed form:

  q        = q_b(RMSNorm(q_a h)) (or q_proj h without q LoRA), per head [q_nope | q_pe]
  kv_a     = kv_a_proj_with_mqa h = [c | k_pe];  c = RMSNorm(c);  [k_nope | v] per head = kv_b c
  RoPE     = interleaved pairs (2i, 2i+1) on q_pe and the shared k_pe, YaRN frequencies and
             cos/sin scale when rope_scaling is yarn
  scores   = (q_nope . k_nope + q_pe . k_pe) * softmax_scale, causal; out = o_proj(softmax . v)
  softmax_scale = 1/sqrt(nope + rope) * mscale^2, mscale = 0.1 * mscale_all_dim * ln(factor) + 1
  MoE      = moe_ref.Model.route (softmax or sigmoid, selection bias, groups, norm, scaling)
             + the ungated shared experts; the first_k_dense_replace layers are dense MLPs.

GGUF: both llama.cpp layouts (one attn_kv_b, or attn_k_b / attn_v_b, rebuilt into kv_b here);
files without group keys route over all experts.
"""

import json
import math
import os

import numpy as np

import moe_ref


def yarn(dim, base, factor, original, beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=0.0):
    """(inv_freq [dim/2], cos/sin scale) of YaRN as the DeepSeek modelling code defines it."""
    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extra = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    inter = extra / factor
    keep_extra = 1.0 - ramp
    inv_freq = inter * (1 - keep_extra) + extra * keep_extra

    def get_mscale(m):
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    return inv_freq, get_mscale(mscale) / get_mscale(mscale_all_dim)


class DeepseekModel(moe_ref.Model):
    """moe_ref.Model with latent attention. `mla` holds q_lora, kv_lora, nope, rope, v,
    inv_freq (of the RoPE part), rope_mscale (cos/sin scale) and softmax_scale."""

    def __init__(self, spec, mla, embed, layers, final_norm, lm_head):
        self.mla = mla
        super().__init__(spec, embed, layers, final_norm, lm_head)

    def new_cache(self):
        return [([], []) for _ in self.layers]       # per layer: latent c, k_pe blocks

    def _rope_pe(self, x, pos):
        """Interleaved-pair RoPE on x [n, heads, rope]."""
        ang = pos[:, None].astype(np.float64) * self.mla["inv_freq"][None, :]
        cos = (np.cos(ang) * self.mla["rope_mscale"])[:, None, :]
        sin = (np.sin(ang) * self.mla["rope_mscale"])[:, None, :]
        out = np.empty_like(x)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x2 * cos + x1 * sin
        return out

    def _attention(self, L, h, pos, cache):
        s, m = self.spec, self.mla
        n, NH, N, R, V, KL = h.shape[0], s.n_heads, m["nope"], m["rope"], m["v"], m["kv_lora"]
        if "wq_a" in L:
            q = self._rms(h @ L["wq_a"].T, L["q_a_norm"]) @ L["wq_b"].T
        else:
            q = h @ L["wq"].T
        q = q.reshape(n, NH, N + R)
        q_nope, q_pe = q[..., :N], self._rope_pe(q[..., N:], pos)
        kv_a = h @ L["wkv_a"].T
        cache[0].append(self._rms(kv_a[:, :KL], L["kv_a_norm"]))
        cache[1].append(self._rope_pe(kv_a[:, None, KL:], pos)[:, 0, :])
        c = np.concatenate(cache[0])                   # [T, KL]
        k_pe = np.concatenate(cache[1])                # [T, R]
        kv = (c @ L["wkv_b"].T).reshape(-1, NH, N + V)
        k_nope, v = kv[..., :N], kv[..., N:]
        scores = (np.einsum("nhd,thd->hnt", q_nope, k_nope) + np.einsum("nhd,td->hnt", q_pe, k_pe)) * m["softmax_scale"]
        key_pos = np.arange(c.shape[0])
        scores = np.where(key_pos[None, :] <= pos[:, None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        o = np.einsum("hnt,thd->nhd", p, v).reshape(n, NH * V)
        return o @ L["wo"].T


def _mla_params(nope, rope, v, q_lora, kv_lora, theta, scaling, scale_all_dim_key="mscale_all_dim"):
    """inv_freq, cos/sin scale and the softmax scale for the RoPE part."""
    inv_freq = theta ** (-np.arange(0, rope, 2, dtype=np.float64) / rope)
    rope_mscale, softmax_scale = 1.0, 1.0 / math.sqrt(nope + rope)
    if scaling:
        kind = scaling.get("type") or scaling.get("rope_type")
        if kind != "yarn":
            raise ValueError(f"rope_scaling type {kind!r} is not supported")
        factor = float(scaling["factor"])
        all_dim = float(scaling.get(scale_all_dim_key) or 0.0)
        inv_freq, rope_mscale = yarn(rope, theta, factor, float(scaling["original_max_position_embeddings"]),
                                     float(scaling.get("beta_fast", 32)), float(scaling.get("beta_slow", 1)),
                                     float(scaling.get("mscale", 1.0)), all_dim)
        if all_dim:
            ms = 0.1 * all_dim * math.log(factor) + 1.0 if factor > 1 else 1.0
            softmax_scale *= ms * ms
    return {"nope": nope, "rope": rope, "v": v, "q_lora": q_lora, "kv_lora": kv_lora, "inv_freq": inv_freq,
            "rope_mscale": rope_mscale, "softmax_scale": softmax_scale}


def load_hf(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    t = moe_ref.read_hf_tensors(model_dir)
    H, NH, E = cfg["hidden_size"], cfg["num_attention_heads"], cfg["n_routed_experts"]
    method = cfg.get("topk_method", "greedy")
    grouped = method in ("noaux_tc", "group_limited_greedy")
    spec = moe_ref.Spec(
        family="deepseek2", hidden=H, n_layers=cfg["num_hidden_layers"], n_heads=NH, n_kv_heads=NH,
        head_dim=cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"], vocab=cfg["vocab_size"], n_experts=E,
        top_k=cfg["num_experts_per_tok"], norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
        eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(cfg.get("rope_theta", 10000.0)),
        rope_style="interleaved", qk_norm=None, scoring=cfg.get("scoring_func", "softmax"),
        n_group=cfg.get("n_group", 1) if grouped else 1, topk_group=cfg.get("topk_group", 1) if grouped else 1,
        group_score="max" if method == "group_limited_greedy" else "top2_sum",
        routed_scaling=float(cfg.get("routed_scaling_factor", 1.0)))
    mla = _mla_params(cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg.get("q_lora_rank"),
                      cfg["kv_lora_rank"], spec.rope_theta, cfg.get("rope_scaling"))
    first_dense, freq = cfg.get("first_k_dense_replace", 0), cfg.get("moe_layer_freq", 1)
    layers = []
    for i in range(spec.n_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        L = {"attn_norm": t[p + "input_layernorm.weight"], "ffn_norm": t[p + "post_attention_layernorm.weight"],
             "wkv_a": t[a + "kv_a_proj_with_mqa.weight"], "kv_a_norm": t[a + "kv_a_layernorm.weight"],
             "wkv_b": t[a + "kv_b_proj.weight"], "wo": t[a + "o_proj.weight"]}
        if cfg.get("q_lora_rank"):
            L.update(wq_a=t[a + "q_a_proj.weight"], q_a_norm=t[a + "q_a_layernorm.weight"], wq_b=t[a + "q_b_proj.weight"])
        else:
            L["wq"] = t[a + "q_proj.weight"]
        if i < first_dense or i % freq:
            for w in ("gate", "up", "down"):
                L["mlp_" + w] = t[f"{p}mlp.{w}_proj.weight"]
        else:
            L["router"] = t[p + "mlp.gate.weight"]
            if method == "noaux_tc":
                L["router_bias"] = t[p + "mlp.gate.e_score_correction_bias"]
            for w in ("gate", "up", "down"):
                L[w] = np.stack([t[f"{p}mlp.experts.{j}.{w}_proj.weight"] for j in range(E)])
            if cfg.get("n_shared_experts"):
                for w in ("gate", "up", "down"):
                    L["sh_" + w] = t[f"{p}mlp.shared_experts.{w}_proj.weight"]
        layers.append(L)
    lm_head = t["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else t["lm_head.weight"]
    return DeepseekModel(spec, mla, t["model.embed_tokens.weight"], layers, t["model.norm.weight"], lm_head)


def load_gguf(g, path):
    """A deepseek2 GGUF (gguf_np.GGUFFile) in either attention layout."""
    m = lambda k, d=None: g.metadata.get(f"deepseek2.{k}", d)
    H, NH = m("embedding_length"), m("attention.head_count")
    rope = m("rope.dimension_count")
    key = m("attention.key_length_mla") or m("attention.key_length")
    v = m("attention.value_length_mla") or m("attention.value_length")
    nope, kv_lora = key - rope, m("attention.kv_lora_rank")
    E, n_group = m("expert_count"), m("expert_group_count", 1)
    gating = m("expert_gating_func", 1)
    spec = moe_ref.Spec(
        family="deepseek2", hidden=H, n_layers=m("block_count"), n_heads=NH, n_kv_heads=NH, head_dim=key,
        vocab=g.tensors["token_embd.weight"][1][0], n_experts=E, top_k=m("expert_used_count"),
        norm_topk_prob=bool(m("expert_weights_norm", False)), eps=float(m("attention.layer_norm_rms_epsilon")),
        rope_theta=float(m("rope.freq_base")), rope_style="interleaved", qk_norm=None,
        scoring="sigmoid" if gating == 2 else "softmax", n_group=n_group,
        topk_group=m("expert_group_used_count", n_group), group_score="top2_sum",
        routed_scaling=float(m("expert_weights_scale", 1.0)) or 1.0)
    scaling = None
    if m("rope.scaling.type") == "yarn":
        # llama.cpp: the attention scale uses mscale = 1 + yarn_log_multiplier * ln(factor), the
        # cos/sin are unscaled (mscale = mscale_all_dim in Hugging Face terms).
        log_mul = float(m("rope.scaling.yarn_log_multiplier", 0.0))
        scaling = {"type": "yarn", "factor": float(m("rope.scaling.factor")),
                   "original_max_position_embeddings": float(m("rope.scaling.original_context_length")),
                   "mscale": log_mul / 0.1, "mscale_all_dim": log_mul / 0.1}
    q_lora = m("attention.q_lora_rank")
    mla = _mla_params(nope, rope, v, q_lora, kv_lora, spec.rope_theta, scaling)
    t = lambda name: g.tensor(name).astype(np.float64)
    dense = m("leading_dense_block_count", 0)
    layers = []
    for i in range(spec.n_layers):
        b = f"blk.{i}."
        L = {"attn_norm": t(b + "attn_norm.weight"), "ffn_norm": t(b + "ffn_norm.weight"),
             "wkv_a": t(b + "attn_kv_a_mqa.weight"), "kv_a_norm": t(b + "attn_kv_a_norm.weight"),
             "wo": t(b + "attn_output.weight")}
        if g.has(b + "attn_kv_b.weight"):
            L["wkv_b"] = t(b + "attn_kv_b.weight")                       # [NH*(nope+v), kv_lora]
        else:
            k_b = t(b + "attn_k_b.weight")                              # [NH, kv_lora, nope]
            v_b = t(b + "attn_v_b.weight")                              # [NH, v, kv_lora]
            L["wkv_b"] = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(NH * (nope + v), kv_lora)
        if q_lora:
            L.update(wq_a=t(b + "attn_q_a.weight"), q_a_norm=t(b + "attn_q_a_norm.weight"), wq_b=t(b + "attn_q_b.weight"))
        else:
            L["wq"] = t(b + "attn_q.weight")
        if i < dense:
            for w in ("gate", "up", "down"):
                L["mlp_" + w] = t(f"{b}ffn_{w}.weight")
        else:
            L["router"] = t(b + "ffn_gate_inp.weight")
            if g.has(b + "exp_probs_b.bias"):
                L["router_bias"] = t(b + "exp_probs_b.bias")
            for w in ("gate", "up", "down"):
                L[w] = t(f"{b}ffn_{w}_exps.weight")
            if g.has(b + "ffn_gate_shexp.weight"):
                for w in ("gate", "up", "down"):
                    L["sh_" + w] = t(f"{b}ffn_{w}_shexp.weight")
        layers.append(L)
    lm_head = t("output.weight") if g.has("output.weight") else t("token_embd.weight")
    return DeepseekModel(spec, mla, t("token_embd.weight"), layers, t("output_norm.weight"), lm_head)
