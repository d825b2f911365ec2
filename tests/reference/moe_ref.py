#!/usr/bin/python3
"""Independent float64 numpy reference forward pass for MoE decoder LLMs.

Families: mixtral, qwen2_moe, olmoe, qwen3_moe, and gpt_oss (its own module, gptoss_ref.py,
with the same Model interface).  Loads a Hugging Face checkpoint
directory (config.json + model.safetensors or a sharded index; F32/F16/BF16), or
an F32/F16/BF16 GGUF file in llama.cpp layout (archs llama-with-experts,
qwen2moe, olmoe).

CLI:
  moe_ref.py --model HF_DIR_OR_GGUF --tokens 1,2,3 [--greedy N]
             [--logits-out FILE.npy] [--json-out FILE.json] [--rope-style auto|half|interleaved]

It feeds the prompt as one batch (KV cache), then makes N greedy steps
(argmax, ties -> lowest id) and writes float32 logits [len(tokens)+N, V] where
row i holds the logits after feeding seq[i] at position i, seq = tokens + greedy.

Equations (what each family computes):
  RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w
  RoPE: theta_i = pos * base^(-2i/D), i < D/2; pairs (i, i + D/2) for Hugging Face
        weights ("half"), pairs (2i, 2i+1) for GGUF llama weights ("interleaved":
        llama.cpp's converter permutes the q/k rows of Llama/Mixtral).
        rope_scaling "linear": base^(-2i/D) / factor; "yarn": pair i keeps its frequency
        when it turns more than beta_fast times over the original context, is divided by
        factor when fewer than beta_slow times, linear blend between (the range rounded
        outwards unless truncate is false); cos and sin times 0.1 ln(factor) + 1 (or
        mscale(mscale)/mscale(mscale_all_dim), or attention_factor).
  attention: GQA, causal softmax(q k^T / sqrt(D)) v
  router: softmax over all experts, top-k (ties -> lowest index), optional
          renormalisation of the k weights (norm_topk_prob)
  expert(x) = down(silu(gate x) * up x)
  qwen2_moe: q/k/v bias, plus sigmoid(shared_expert_gate x) * shared_expert(x)
  olmoe:     RMSNorm over the whole q and the whole k (all heads) before RoPE
  qwen3_moe: RMSNorm over each head of q and k (weight [D]) before RoPE
"""

import argparse
import json
import os
import struct
import sys
from dataclasses import dataclass

import numpy as np

# ----------------------------------------------------------------------------
# Model description
# ----------------------------------------------------------------------------

# Hugging Face architecture name -> family (= model_type).
HF_ARCHITECTURES = {
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "OlmoeForCausalLM": "olmoe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}


@dataclass
class Spec:
    family: str
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    n_experts: int
    top_k: int
    norm_topk_prob: bool
    eps: float
    rope_theta: float
    rope_style: str          # "half" (Hugging Face) or "interleaved" (GGUF llama)
    qk_norm: str | None      # None, "whole" (olmoe) or "per_head" (qwen3_moe)
    # Routing options (family-independent; defaults = softmax top-k as above):
    scoring: str = "softmax"         # "softmax" or "sigmoid" expert scores
    n_group: int = 1                 # group-limited routing: experts in n_group equal groups,
    topk_group: int = 1              #   only the topk_group best groups eligible
    group_score: str = "top2_sum"    # a group's score: "top2_sum" or "max" of its choice values
    routed_scaling: float = 1.0      # chosen weights (after optional renormalisation) times this
    rope_scaling: dict | None = None   # Hugging Face rope_scaling object
    max_position: int = 4096           # max_position_embeddings (YaRN's default original context)


# Every layer is a dict with these keys (arrays in Hugging Face [out, in] layout):
#   attn_norm [H], wq [NH*D, H], wk/wv [NKV*D, H], wo [H, NH*D],
#   ffn_norm [H], router [E, H], gate/up [E, F, H], down [E, H, F]
# and optionally
#   bq [NH*D], bk/bv [NKV*D]                         (qwen2_moe)
#   q_norm [NH*D or D], k_norm [NKV*D or D]           (olmoe / qwen3_moe)
#   sh_gate/sh_up [Fs, H], sh_down [H, Fs], sh_gate_inp [H]   (qwen2_moe; no sh_gate_inp:
#                                                     an ungated shared expert, DeepSeek)
#   router_bias [E]     selection-only bias added to the scores (DeepSeek-V3 e_score_correction_bias)
# A dense layer has mlp_gate/mlp_up [F, H], mlp_down [H, F] instead of router and experts.


def rope_frequencies(base, dim, scaling, max_position):
    """Per-pair inverse frequencies and the cos/sin factor for `dim` rotated dims."""
    exponent = np.arange(0, dim, 2, dtype=np.float64) / dim
    inv = base ** -exponent
    if not scaling:
        return inv, 1.0
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv, 1.0
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor, 1.0
    if kind != "yarn":
        raise ValueError(f"rope_scaling {kind!r} is not supported")
    orig = scaling.get("original_max_position_embeddings") or max_position

    def turns_dim(turns):   # the dim whose wavelength fits `turns` times into orig
        return dim * np.log(orig / (turns * 2 * np.pi)) / (2 * np.log(base))

    lo, hi = turns_dim(scaling.get("beta_fast") or 32), turns_dim(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        lo, hi = np.floor(lo), np.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if hi == lo:
        hi = hi + 0.001
    blend = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)   # 0: keep, 1: interpolate
    inv = inv * (1 - blend) + inv / factor * blend

    def mag(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * np.log(scale) + 1.0

    if scaling.get("attention_factor"):
        return inv, float(scaling["attention_factor"])
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return inv, mag(factor, scaling["mscale"]) / mag(factor, scaling["mscale_all_dim"])
    return inv, mag(factor)


class Model:
    def __init__(self, spec, embed, layers, final_norm, lm_head):
        self.spec = spec
        self.embed = embed
        self.layers = layers
        self.final_norm = final_norm
        self.lm_head = lm_head
        d = spec.head_dim
        if d % 2:
            raise ValueError("head_dim must be even for RoPE")
        self.inv_freq, self.rope_mscale = rope_frequencies(spec.rope_theta, d, spec.rope_scaling,
                                                           spec.max_position)

    def new_cache(self):
        """Per-layer K and V caches, each a list of [n, NKV, D] blocks."""
        return [([], []) for _ in self.layers]

    # -- building blocks ---------------------------------------------------
    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.spec.eps) * w

    def _rope(self, x, pos):
        """x: [n, heads, D]; pos: [n]."""
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]   # [n, D/2]
        cos = np.cos(ang)[:, None, :] * self.rope_mscale
        sin = np.sin(ang)[:, None, :] * self.rope_mscale
        out = np.empty_like(x)
        if self.spec.rope_style == "half":
            h = x.shape[-1] // 2
            x1, x2 = x[..., :h], x[..., h:]
            out[..., :h] = x1 * cos - x2 * sin
            out[..., h:] = x2 * cos + x1 * sin
        else:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            out[..., 0::2] = x1 * cos - x2 * sin
            out[..., 1::2] = x2 * cos + x1 * sin
        return out

    def _attention(self, L, h, pos, cache):
        s = self.spec
        n, d = h.shape[0], s.head_dim
        q = h @ L["wq"].T
        k = h @ L["wk"].T
        v = h @ L["wv"].T
        if "bq" in L:
            q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
        if s.qk_norm == "whole":
            q, k = self._rms(q, L["q_norm"]), self._rms(k, L["k_norm"])
        q = q.reshape(n, s.n_heads, d)
        k = k.reshape(n, s.n_kv_heads, d)
        v = v.reshape(n, s.n_kv_heads, d)
        if s.qk_norm == "per_head":
            q, k = self._rms(q, L["q_norm"]), self._rms(k, L["k_norm"])
        q, k = self._rope(q, pos), self._rope(k, pos)

        cache[0].append(k)
        cache[1].append(v)
        K = np.concatenate(cache[0])                  # [T, NKV, D]
        V = np.concatenate(cache[1])
        T = K.shape[0]
        group = s.n_heads // s.n_kv_heads
        # Query head i uses kv head i // group: index queries as (kv head h, member g).
        qg = q.reshape(n, s.n_kv_heads, group, d)
        scores = np.einsum("nhgd,thd->hgnt", qg, K) / np.sqrt(d)   # [NKV, group, n, T]
        key_pos = np.arange(T)
        scores = np.where(key_pos[None, :] <= pos[:, None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        o = np.einsum("hgnt,thd->nhgd", p, V).reshape(n, s.n_heads * d)
        return o @ L["wo"].T

    @staticmethod
    def _sigmoid(x):
        with np.errstate(over="ignore"):           # exp(-x) -> inf gives exactly 0, correct
            return 1.0 / (1.0 + np.exp(-x))

    def _silu(self, x):
        return x * self._sigmoid(x)

    def route(self, L, h):
        """(top [n, k] expert ids, w [n, k] weights) of one MoE layer's router."""
        s = self.spec
        logits = h @ L["router"].T                                   # [n, E]
        if s.scoring == "sigmoid":
            p = self._sigmoid(logits)
        else:
            p = np.exp(logits - logits.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
        choice = p + L["router_bias"] if "router_bias" in L else p.copy()
        if s.n_group > 1 and s.topk_group < s.n_group:
            n = h.shape[0]
            grouped = choice.reshape(n, s.n_group, -1)
            if s.group_score == "max":
                gscore = grouped.max(axis=-1)
            else:
                gscore = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)
            keep = np.argsort(-gscore, axis=-1, kind="stable")[:, :s.topk_group]
            mask = np.zeros((n, s.n_group), dtype=bool)
            np.put_along_axis(mask, keep, True, axis=-1)
            choice = np.where(np.repeat(mask, s.n_experts // s.n_group, axis=-1), choice, -np.inf)
        # Stable sort: equal values keep ascending expert order.
        top = np.argsort(-choice, axis=-1, kind="stable")[:, :s.top_k]   # [n, k]
        w = np.take_along_axis(p, top, axis=-1)
        if s.norm_topk_prob:
            w /= w.sum(axis=-1, keepdims=True)
        return top, w * s.routed_scaling

    def _mlp(self, x, gate, up, down):
        return (self._silu(x @ gate.T) * (x @ up.T)) @ down.T

    def _moe(self, L, h):
        if "mlp_gate" in L:                                          # a dense layer
            return self._mlp(h, L["mlp_gate"], L["mlp_up"], L["mlp_down"])
        top, w = self.route(L, h)

        out = np.zeros_like(h)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            x = h[rows]
            y = (self._silu(x @ L["gate"][e].T) * (x @ L["up"][e].T)) @ L["down"][e].T
            out[rows] += w[rows, slot][:, None] * y
        if "sh_gate" in L:
            y = self._mlp(h, L["sh_gate"], L["sh_up"], L["sh_down"])
            out += self._sigmoid(h @ L["sh_gate_inp"])[:, None] * y if "sh_gate_inp" in L else y
        return out

    # -- forward -----------------------------------------------------------
    def forward(self, tokens, cache):
        """Feed `tokens` after whatever `cache` holds; return float64 logits [n, V]."""
        start = sum(block.shape[0] for block in cache[0][0])     # tokens already cached
        pos = np.arange(start, start + len(tokens))
        x = self.embed[np.asarray(tokens, dtype=np.int64)]
        for L, c in zip(self.layers, cache):
            x = x + self._attention(L, self._rms(x, L["attn_norm"]), pos, c)
            x = x + self._moe(L, self._rms(x, L["ffn_norm"]))
        return self._rms(x, self.final_norm) @ self.lm_head.T


def run(model, prompt, n_greedy):
    """Prompt as one batch, then n_greedy greedy steps.

    Returns (logits float64 [len(prompt)+n_greedy, V], greedy_ids, margins) where
    margins[t] is top1 - top2 of the logits that chose greedy_ids[t]."""
    if not prompt:
        raise ValueError("empty prompt")
    cache = model.new_cache()
    rows = [model.forward(list(prompt), cache)]
    greedy, margins = [], []
    for _ in range(n_greedy):
        last = rows[-1][-1]
        tok = int(np.argmax(last))                  # first maximum = lowest id on ties
        top2 = np.sort(last)[-2:]
        greedy.append(tok)
        margins.append(float(top2[1] - top2[0]))
        rows.append(model.forward([tok], cache))
    return np.concatenate(rows), greedy, margins


# ----------------------------------------------------------------------------
# Hugging Face checkpoints
# ----------------------------------------------------------------------------

def fp8_e4m3_values():
    """The 256 values of FP8 e4m3 ("e4m3fn": bias 7, no infinities, 0x7f / 0xff NaN), by code."""
    code = np.arange(256)
    sign = np.where(code & 0x80, -1.0, 1.0)
    exp, man = (code >> 3) & 0xF, code & 0x7
    mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    mag[(exp == 0xF) & (man == 0x7)] = np.nan
    return sign * mag


FP8_BLOCK = 128


def apply_block_scales(tensors):
    """DeepSeek-V3 / Kimi K2 FP8 checkpoints: each 128x128 block of `W` (an F8_E4M3 matrix) is
    multiplied by its entry of `W_scale_inv` [ceil(rows/128), ceil(cols/128)]; the scales go."""
    for name in [n for n in tensors if n.endswith("_scale_inv")]:
        scale = tensors.pop(name)
        w = tensors[name[:-len("_scale_inv")]]
        rows, cols = w.shape
        want = (-(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK))
        if scale.shape != want:
            raise ValueError(f"{name}: shape {scale.shape}, the weight {w.shape} needs {want}")
        full = np.repeat(np.repeat(scale, FP8_BLOCK, 0), FP8_BLOCK, 1)[:rows, :cols]
        tensors[name[:-len("_scale_inv")]] = w * full
    return tensors


def read_safetensors(path):
    """Return {name: float64 array} for an F32/F16/BF16/F8_E4M3 safetensors file (FP8 values as
    stored: read_hf_tensors applies their block scales)."""
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = buf[base + begin:base + end]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F8_E4M3":
            a = fp8_e4m3_values()[np.frombuffer(raw, dtype=np.uint8)]
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


def read_hf_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(model_dir, fn)))
    return apply_block_scales(tensors)


def hf_family(cfg):
    mt = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    for a in archs:
        if a in HF_ARCHITECTURES:
            return HF_ARCHITECTURES[a]
    if mt in HF_ARCHITECTURES.values():
        return mt
    raise ValueError(f"unsupported model: model_type={mt!r}, architectures={archs!r}; "
                     f"supported: {sorted(HF_ARCHITECTURES)}")


def load_hf(model_dir, rope_style="half"):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    fam = hf_family(cfg)
    if cfg.get("clip_qkv") is not None:
        raise ValueError("olmoe clip_qkv is not supported")
    if cfg.get("use_sliding_window") or (fam == "mixtral" and cfg.get("sliding_window")):
        raise ValueError("sliding-window attention is not supported")

    H, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    spec = Spec(
        family=fam,
        hidden=H,
        n_layers=cfg["num_hidden_layers"],
        n_heads=NH,
        n_kv_heads=cfg.get("num_key_value_heads", NH),
        head_dim=cfg.get("head_dim") or H // NH,
        vocab=cfg["vocab_size"],
        n_experts=cfg["num_local_experts"] if fam == "mixtral" else cfg["num_experts"],
        top_k=cfg["num_experts_per_tok"],
        # Mixtral always renormalises; the others follow their config flag.
        norm_topk_prob=True if fam == "mixtral" else bool(cfg.get("norm_topk_prob", False)),
        eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        rope_style=rope_style,
        qk_norm={"olmoe": "whole", "qwen3_moe": "per_head"}.get(fam),
        rope_scaling=cfg.get("rope_scaling"),
        max_position=cfg.get("max_position_embeddings", 4096),
    )
    t = read_hf_tensors(model_dir)

    moe = "block_sparse_moe" if fam == "mixtral" else "mlp"
    gate, up, down = ("w1", "w3", "w2") if fam == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    # Qwen-MoE dense layers: in mlp_only_layers, or (i + 1) not a multiple of decoder_sparse_step.
    step = cfg.get("decoder_sparse_step") or 1
    dense = {i for i in range(spec.n_layers) if i in (cfg.get("mlp_only_layers") or []) or (i + 1) % step}
    layers = []
    for i in range(spec.n_layers):
        p = f"model.layers.{i}."

        def experts(w):     # stacked [E, out, in], like GGUF's *_exps tensors
            return np.stack([t[f"{p}{moe}.experts.{j}.{w}.weight"] for j in range(spec.n_experts)])

        L = {
            "attn_norm": t[p + "input_layernorm.weight"],
            "wq": t[p + "self_attn.q_proj.weight"],
            "wk": t[p + "self_attn.k_proj.weight"],
            "wv": t[p + "self_attn.v_proj.weight"],
            "wo": t[p + "self_attn.o_proj.weight"],
            "ffn_norm": t[p + "post_attention_layernorm.weight"],
        }
        if fam == "qwen2_moe":
            for x in "qkv":
                L["b" + x] = t[f"{p}self_attn.{x}_proj.bias"]
        if spec.qk_norm:
            L["q_norm"] = t[p + "self_attn.q_norm.weight"]
            L["k_norm"] = t[p + "self_attn.k_norm.weight"]
        if i in dense:
            for w in ("gate", "up", "down"):
                L["mlp_" + w] = t[f"{p}mlp.{w}_proj.weight"]
            layers.append(L)
            continue
        L.update({"router": t[f"{p}{moe}.gate.weight"], "gate": experts(gate), "up": experts(up),
                  "down": experts(down)})
        if fam == "qwen2_moe":
            L["sh_gate"] = t[p + "mlp.shared_expert.gate_proj.weight"]
            L["sh_up"] = t[p + "mlp.shared_expert.up_proj.weight"]
            L["sh_down"] = t[p + "mlp.shared_expert.down_proj.weight"]
            L["sh_gate_inp"] = t[p + "mlp.shared_expert_gate.weight"].reshape(-1)
        layers.append(L)
    embed = t["model.embed_tokens.weight"]
    lm_head = embed if cfg.get("tie_word_embeddings") else t["lm_head.weight"]
    return Model(spec, embed, layers, t["model.norm.weight"], lm_head)


# ----------------------------------------------------------------------------
# GGUF files (llama.cpp layout)
# ----------------------------------------------------------------------------

# GGUF arch -> (family, rope style, renormalise top-k).  llama.cpp ropes llama
# in "normal" (interleaved) mode because its converter permutes q/k rows; it
# uses NEOX (half-split) mode for qwen2moe and olmoe, whose rows are unpermuted.
GGUF_ARCHS = {
    "llama": ("mixtral", "interleaved", True),
    "qwen2moe": ("qwen2_moe", "half", False),
    "olmoe": ("olmoe", "half", False),
}


def load_gguf(path, rope_style=None):
    from gguf_np import GGUFFile   # sibling module; only needed for GGUF input

    g = GGUFFile(path)
    arch = g.metadata["general.architecture"]
    if arch not in GGUF_ARCHS:
        raise ValueError(f"{path}: unsupported GGUF architecture {arch!r}; supported: {sorted(GGUF_ARCHS)}")
    fam, default_rope, norm_topk = GGUF_ARCHS[arch]
    m = lambda k: g.metadata[f"{arch}.{k}"]
    if f"{arch}.expert_count" not in g.metadata:
        raise ValueError(f"{path}: not a mixture-of-experts model")
    H, NH = m("embedding_length"), m("attention.head_count")
    D = H // NH
    if m("rope.dimension_count") != D:
        raise ValueError(f"{path}: partial RoPE is not supported")
    spec = Spec(
        family=fam, hidden=H, n_layers=m("block_count"), n_heads=NH,
        n_kv_heads=m("attention.head_count_kv"), head_dim=D,
        vocab=g.tensors["token_embd.weight"][1][0],
        n_experts=m("expert_count"), top_k=m("expert_used_count"),
        norm_topk_prob=norm_topk, eps=float(m("attention.layer_norm_rms_epsilon")),
        rope_theta=float(m("rope.freq_base")), rope_style=rope_style or default_rope,
        qk_norm="whole" if fam == "olmoe" else None,
    )
    t = lambda name: g.tensor(name).astype(np.float64)
    names = {   # our key -> GGUF tensor suffix
        "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
        "wv": "attn_v.weight", "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
        "router": "ffn_gate_inp.weight", "gate": "ffn_gate_exps.weight",
        "up": "ffn_up_exps.weight", "down": "ffn_down_exps.weight",
        "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
        "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
        "sh_gate": "ffn_gate_shexp.weight", "sh_up": "ffn_up_shexp.weight",
        "sh_down": "ffn_down_shexp.weight", "sh_gate_inp": "ffn_gate_inp_shexp.weight",
    }
    layers = []
    for i in range(spec.n_layers):
        L = {k: t(f"blk.{i}.{v}") for k, v in names.items() if g.has(f"blk.{i}.{v}")}
        if "gate" not in L:
            raise ValueError(f"{path}: layer {i} has no stacked expert tensors (ffn_gate_exps)")
        if "sh_gate_inp" in L:
            L["sh_gate_inp"] = L["sh_gate_inp"].reshape(-1)
        layers.append(L)
    embed = t("token_embd.weight")
    lm_head = t("output.weight") if g.has("output.weight") else embed
    return Model(spec, embed, layers, t("output_norm.weight"), lm_head)


def is_gpt_oss(path):
    if os.path.isdir(path):
        with open(os.path.join(path, "config.json")) as f:
            return json.load(f).get("model_type") == "gpt_oss"
    from gguf_np import GGUFFile
    return GGUFFile(path).metadata.get("general.architecture") == "gpt-oss"


DEEPSEEK_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")


def load_model(path, rope_style=None):
    """HF checkpoint directory or .gguf file.  rope_style None = the format's default.
    DeepSeek-V2/V3 and Kimi K2 (latent attention) load through deepseek_ref.py."""
    if is_gpt_oss(path):
        import gptoss_ref   # sibling module
        return gptoss_ref.load_model(path)
    if os.path.isdir(path):
        with open(os.path.join(path, "config.json")) as f:
            if json.load(f).get("model_type") in DEEPSEEK_MODEL_TYPES:
                import deepseek_ref
                return deepseek_ref.load_hf(path)
        return load_hf(path, rope_style or "half")
    from gguf_np import GGUFFile
    g = GGUFFile(path)
    if g.metadata.get("general.architecture") == "deepseek2":
        import deepseek_ref
        return deepseek_ref.load_gguf(g, path)
    return load_gguf(path, rope_style)


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint dir or .gguf file")
    ap.add_argument("--tokens", required=True, help="prompt token ids, comma separated")
    ap.add_argument("--greedy", type=int, default=0, help="number of greedy steps after the prompt")
    ap.add_argument("--logits-out", help="write float32 [len(tokens)+N, V] logits (.npy)")
    ap.add_argument("--json-out", help="write prompt_ids / greedy_ids / greedy_top1_minus_top2")
    ap.add_argument("--rope-style", choices=["auto", "half", "interleaved"], default="auto",
                    help="auto: half-split for HF checkpoints, per-arch for GGUF")
    a = ap.parse_args(argv)

    try:
        model = load_model(a.model, None if a.rope_style == "auto" else a.rope_style)
        prompt = [int(x) for x in a.tokens.split(",") if x.strip()]
        if any(not 0 <= x < model.spec.vocab for x in prompt):
            raise ValueError(f"token id out of range [0, {model.spec.vocab})")
        logits, greedy, margins = run(model, prompt, a.greedy)
    except (ValueError, KeyError, OSError) as e:
        print(f"moe_ref: error: {e}", file=sys.stderr)
        return 2

    write_results(a, prompt, logits, greedy, margins)
    return 0


def write_results(a, prompt, logits, greedy, margins):
    """The CLI's outputs: --logits-out .npy, --json-out (stdout when neither is given)."""
    if a.logits_out:
        np.save(a.logits_out, logits.astype(np.float32))
    result = {"prompt_ids": prompt, "greedy_ids": greedy, "greedy_top1_minus_top2": margins}
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f, indent=1)
    if not a.logits_out and not a.json_out:
        print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
