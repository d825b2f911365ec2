#!/usr/bin/python3
"""Independent float64 numpy reference of Hugging Face GptOssForCausalLM (gpt-oss).

Loads a Hugging Face checkpoint directory (config.json + safetensors: F32/F16/BF16 weights,
experts either as fused float `gate_up_proj` / `down_proj` or as released in MXFP4
`*_blocks` / `*_scales`) or a GGUF file with architecture `gpt-oss` (F32/F16/BF16 tensors,
MXFP4 experts).  Used by moe_ref.py for the `gpt_oss` family; runs on its own too:

  gptoss_ref.py --model DIR_OR_GGUF --tokens 1,2,3 [--greedy N] [--logits-out F.npy]

Equations (transformers 4.55 modeling_gpt_oss.py):
  RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w
  YaRN RoPE, half-split pairs (i, i + D/2):
    inv_freq_extra_i = base^(-2i/D), inv_freq_inter_i = inv_freq_extra_i / factor
    low, high = correction dims of beta_fast, beta_slow over original_max_position_embeddings
                (floor/ceil only when rope_scaling.truncate is true; gpt-oss sets false),
                clipped to [0, D-1]
    ramp_i = clip((i - low) / (high - low), 0, 1); extra_weight_i = 1 - ramp_i
    inv_freq_i = inv_freq_inter_i * ramp_i + inv_freq_extra_i * extra_weight_i
    cos/sin scaled by attention_factor = 0.1 ln(factor) + 1
  attention: q/k/v/o with bias; GQA; scores q k^T / sqrt(D); causal, and on sliding layers only
    keys with q_pos - k_pos < sliding_window; a per-head sink logit joins the softmax
    denominator (softmax over [scores, sink], sink column dropped)
  router: logits = W h + b; top-k of the logits (ties -> lowest id); weights = softmax over the k
  expert: gate_up = W_gu h + b_gu, gate = gate_up[0::2], up = gate_up[1::2] (interleaved);
    gate = min(gate, limit); up = clip(up, -limit, limit);
    out = W_d ((up + 1) * gate * sigmoid(1.702 gate)) + b_d
  layer: x += attn(norm(x)); x += moe(norm(x)); logits = lm_head(norm(x))
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

ALPHA = 1.702
# FP4 (E2M1) code -> value; MXFP4 block value = FP4[code] * 2^(scale - 127).
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


class Spec:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def yarn_inv_freq(head_dim, base, scaling):
    """(inv_freq [D/2], attention_factor) for a rope_scaling dict of type yarn (or None)."""
    idx = np.arange(0, head_dim, 2, dtype=np.float64)
    extra = base ** (-idx / head_dim)
    if not scaling:
        return extra, 1.0
    factor = float(scaling["factor"])
    orig = float(scaling["original_max_position_embeddings"])
    beta_fast = float(scaling.get("beta_fast") or 32.0)
    beta_slow = float(scaling.get("beta_slow") or 1.0)
    attn = scaling.get("attention_factor")
    if attn is None:
        attn = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    def correction_dim(rotations):
        return head_dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extra_weight = 1 - ramp
    inter = extra / factor
    return inter * (1 - extra_weight) + extra * extra_weight, float(attn)


class Model:
    """layers: dicts with attn_norm, wq/bq, wk/bk, wv/bv, wo/bo, sinks, ffn_norm, router/router_b,
    gate/up [E, F, H], gate_b/up_b [E, F], down [E, H, F], down_b [E, H] (HF [out, in] layout)."""

    def __init__(self, spec, embed, layers, final_norm, lm_head):
        self.spec, self.embed, self.layers = spec, embed, layers
        self.final_norm, self.lm_head = final_norm, lm_head
        self.inv_freq, self.attn_factor = yarn_inv_freq(spec.head_dim, spec.rope_theta, spec.rope_scaling)

    def new_cache(self):
        return [([], []) for _ in self.layers]

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.spec.eps) * w

    def _rope(self, x, pos):
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]
        cos = (np.cos(ang) * self.attn_factor)[:, None, :]
        sin = (np.sin(ang) * self.attn_factor)[:, None, :]
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def _attention(self, li, L, h, pos, cache):
        s = self.spec
        n, d = h.shape[0], s.head_dim
        q = (h @ L["wq"].T + L["bq"]).reshape(n, s.n_heads, d)
        k = (h @ L["wk"].T + L["bk"]).reshape(n, s.n_kv_heads, d)
        v = (h @ L["wv"].T + L["bv"]).reshape(n, s.n_kv_heads, d)
        q, k = self._rope(q, pos), self._rope(k, pos)
        cache[0].append(k)
        cache[1].append(v)
        K, V = np.concatenate(cache[0]), np.concatenate(cache[1])
        group = s.n_heads // s.n_kv_heads
        qg = q.reshape(n, s.n_kv_heads, group, d)
        scores = np.einsum("nhgd,thd->hgnt", qg, K) / math.sqrt(d)     # [NKV, group, n, T]
        kp = np.arange(K.shape[0])[None, :]
        allowed = kp <= pos[:, None]
        if s.sliding[li]:
            allowed &= pos[:, None] - kp < s.sliding_window
        scores = np.where(allowed, scores, -np.inf)
        sink = L["sinks"].reshape(s.n_kv_heads, group, 1, 1)
        m = np.maximum(scores.max(axis=-1, keepdims=True), sink)
        p = np.exp(scores - m)
        z = p.sum(axis=-1, keepdims=True) + np.exp(sink - m)
        o = np.einsum("hgnt,thd->nhgd", p / z, V).reshape(n, s.n_heads * d)
        return o @ L["wo"].T + L["bo"]

    def _moe(self, L, h):
        s = self.spec
        logits = h @ L["router"].T + L["router_b"]
        top = np.argsort(-logits, axis=-1, kind="stable")[:, :s.top_k]
        tv = np.take_along_axis(logits, top, axis=-1)
        w = np.exp(tv - tv.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            x = h[rows]
            gate = np.minimum(x @ L["gate"][e].T + L["gate_b"][e], s.limit)
            up = np.clip(x @ L["up"][e].T + L["up_b"][e], -s.limit, s.limit)
            with np.errstate(over="ignore"):
                glu = gate / (1.0 + np.exp(-ALPHA * gate))
            y = ((up + 1) * glu) @ L["down"][e].T + L["down_b"][e]
            out[rows] += w[rows, slot][:, None] * y
        return out

    def forward(self, tokens, cache):
        start = sum(b.shape[0] for b in cache[0][0])
        pos = np.arange(start, start + len(tokens))
        x = self.embed[np.asarray(tokens, dtype=np.int64)]
        for li, (L, c) in enumerate(zip(self.layers, cache)):
            x = x + self._attention(li, L, self._rms(x, L["attn_norm"]), pos, c)
            x = x + self._moe(L, self._rms(x, L["ffn_norm"]))
        return self._rms(x, self.final_norm) @ self.lm_head.T


# ----------------------------------------------------------------------------
# Hugging Face checkpoints
# ----------------------------------------------------------------------------

def read_raw_safetensors(model_dir):
    """{name: (dtype, shape, bytes)} over model.safetensors or a sharded index."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with open(os.path.join(model_dir, fn), "rb") as f:
            buf = f.read()
        (hlen,) = struct.unpack("<Q", buf[:8])
        header = json.loads(buf[8:8 + hlen])
        for name, info in header.items():
            if name != "__metadata__":
                b, e = info["data_offsets"]
                out[name] = (info["dtype"], info["shape"], buf[8 + hlen + b:8 + hlen + e])
    return out


def to_float(dtype, shape, raw):
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2")
    elif dtype == "BF16":
        a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(f"unsupported float dtype {dtype}")
    return a.astype(np.float64).reshape(shape)


def mxfp4_hf(blocks, scales):
    """HF blocks [..., nb, 16] u8 (code 2j low nibble, 2j+1 high of byte j) and scales [..., nb] u8
    -> float64 [..., nb * 32]."""
    lo, hi = FP4_VALUES[blocks & 0x0F], FP4_VALUES[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    vals = vals * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


def load_hf(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "gpt_oss":
        raise ValueError(f"{model_dir}: model_type {cfg.get('model_type')!r} is not gpt_oss")
    n_layers = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention"
                                       for i in range(n_layers)]
    spec = Spec(hidden=cfg["hidden_size"], n_layers=n_layers, n_heads=cfg["num_attention_heads"],
                n_kv_heads=cfg["num_key_value_heads"], head_dim=cfg["head_dim"], vocab=cfg["vocab_size"],
                n_experts=cfg["num_local_experts"], top_k=cfg["num_experts_per_tok"],
                eps=float(cfg["rms_norm_eps"]), rope_theta=float(cfg["rope_theta"]),
                rope_scaling=cfg.get("rope_scaling"), sliding_window=cfg.get("sliding_window") or 0,
                sliding=[t == "sliding_attention" for t in types], limit=float(cfg.get("swiglu_limit", 7.0)))
    raw = read_raw_safetensors(model_dir)
    t = lambda name: to_float(*raw[name])
    F = cfg["intermediate_size"]
    layers = []
    for i in range(n_layers):
        p = f"model.layers.{i}."
        L = {"attn_norm": t(p + "input_layernorm.weight"), "ffn_norm": t(p + "post_attention_layernorm.weight"),
             "sinks": t(p + "self_attn.sinks"), "router": t(p + "mlp.router.weight"),
             "router_b": t(p + "mlp.router.bias")}
        for x, key in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o")):
            L["w" + key] = t(f"{p}self_attn.{x}_proj.weight")
            L["b" + key] = t(f"{p}self_attn.{x}_proj.bias")
        x = p + "mlp.experts."
        if x + "gate_up_proj_blocks" in raw:
            u8 = lambda n: np.frombuffer(raw[n][2], dtype=np.uint8).reshape(raw[n][1])
            gu = mxfp4_hf(u8(x + "gate_up_proj_blocks"), u8(x + "gate_up_proj_scales"))   # [E, 2F, H]
            down = mxfp4_hf(u8(x + "down_proj_blocks"), u8(x + "down_proj_scales"))       # [E, H, F]
            L["gate"], L["up"] = gu[:, 0::2, :], gu[:, 1::2, :]
        else:
            gu = t(x + "gate_up_proj")                                                  # [E, H, 2F]
            L["gate"] = gu[:, :, 0::2].transpose(0, 2, 1)
            L["up"] = gu[:, :, 1::2].transpose(0, 2, 1)
            down = t(x + "down_proj").transpose(0, 2, 1)                                 # [E, F, H] -> [E, H, F]
        gub = t(x + "gate_up_proj_bias")
        L["gate_b"], L["up_b"] = gub[:, 0::2], gub[:, 1::2]
        L["down"], L["down_b"] = down, t(x + "down_proj_bias")
        assert L["gate"].shape == (spec.n_experts, F, spec.hidden), L["gate"].shape
        layers.append(L)
    embed = t("model.embed_tokens.weight")
    lm_head = t("lm_head.weight") if "lm_head.weight" in raw else embed
    return Model(spec, embed, layers, t("model.norm.weight"), lm_head)


# ----------------------------------------------------------------------------
# GGUF (llama.cpp `gpt-oss`)
# ----------------------------------------------------------------------------

GGML_MXFP4 = 39


def mxfp4_ggml(raw, shape):
    """GGML block_mxfp4 rows {e8m0 scale, 16 bytes: code j low nibble, code j+16 high} -> float64."""
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 17)
    codes = np.concatenate([b[:, 1:] & 0x0F, b[:, 1:] >> 4], axis=1)          # [blocks, 32]
    vals = FP4_VALUES[codes] * np.exp2(b[:, :1].astype(np.float64) - 127)
    return vals.reshape(shape)


def load_gguf(path):
    from gguf_np import GGUFFile

    g = GGUFFile(path)
    a = g.metadata["general.architecture"]
    if a != "gpt-oss":
        raise ValueError(f"{path}: architecture {a!r} is not gpt-oss")
    m = lambda k, d=None: g.metadata.get(f"{a}.{k}", d)
    n_layers = m("block_count")
    scaling = None
    if m("rope.scaling.type") == "yarn":
        scaling = {"factor": m("rope.scaling.factor"),
                   "original_max_position_embeddings": m("rope.scaling.original_context_length"),
                   "beta_fast": m("rope.scaling.yarn_beta_fast", 32.0),
                   "beta_slow": m("rope.scaling.yarn_beta_slow", 1.0), "truncate": False}
    spec = Spec(hidden=m("embedding_length"), n_layers=n_layers, n_heads=m("attention.head_count"),
                n_kv_heads=m("attention.head_count_kv"), head_dim=m("attention.key_length"),
                vocab=g.tensors["token_embd.weight"][1][0], n_experts=m("expert_count"),
                top_k=m("expert_used_count"), eps=float(m("attention.layer_norm_rms_epsilon")),
                rope_theta=float(m("rope.freq_base")), rope_scaling=scaling,
                sliding_window=m("attention.sliding_window", 0), sliding=[i % 2 == 0 for i in range(n_layers)],
                limit=float(m("swiglu_limit", 7.0)))

    def t(name):
        ttype, shape = g.tensors[name][0], g.tensors[name][1]
        if ttype == GGML_MXFP4:
            return mxfp4_ggml(g.raw(name, int(np.prod(shape)) // 32 * 17), shape)
        return g.tensor(name).astype(np.float64)

    names = {"attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "bq": "attn_q.bias",
             "wk": "attn_k.weight", "bk": "attn_k.bias", "wv": "attn_v.weight", "bv": "attn_v.bias",
             "wo": "attn_output.weight", "bo": "attn_output.bias", "sinks": "attn_sinks.weight",
             "ffn_norm": "post_attention_norm.weight", "router": "ffn_gate_inp.weight",
             "router_b": "ffn_gate_inp.bias", "gate": "ffn_gate_exps.weight", "up": "ffn_up_exps.weight",
             "down": "ffn_down_exps.weight", "gate_b": "ffn_gate_exps.bias", "up_b": "ffn_up_exps.bias",
             "down_b": "ffn_down_exps.bias"}
    layers = [{k: t(f"blk.{i}.{v}") for k, v in names.items()} for i in range(n_layers)]
    embed = t("token_embd.weight")
    lm_head = t("output.weight") if g.has("output.weight") else embed
    return Model(spec, embed, layers, t("output_norm.weight"), lm_head)


def load_model(path):
    return load_hf(path) if os.path.isdir(path) else load_gguf(path)


def main(argv=None):
    from moe_ref import run

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--logits-out")
    a = ap.parse_args(argv)
    try:
        model = load_model(a.model)
        prompt = [int(x) for x in a.tokens.split(",") if x.strip()]
        logits, greedy, margins = run(model, prompt, a.greedy)
    except (ValueError, KeyError, OSError) as e:
        print(f"gptoss_ref: error: {e}", file=sys.stderr)
        return 2
    if a.logits_out:
        np.save(a.logits_out, logits.astype(np.float32))
    print(json.dumps({"prompt_ids": prompt, "greedy_ids": greedy, "greedy_top1_minus_top2": margins}))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
