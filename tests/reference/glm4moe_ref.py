#!/usr/bin/python3
"""Independent float64 numpy reference of Hugging Face `Glm4MoeForCausalLM` (GLM-4.5 / 4.5-Air / 4.6).

Loads a Hugging Face checkpoint directory (config.json `model_type: glm4_moe`, F32/F16/BF16
safetensors) or an F32/F16/BF16 GGUF file of architecture `glm4moe` (llama.cpp's names).

CLI:
  glm4moe_ref.py --model HF_DIR_OR_GGUF --tokens 1,2,3 [--greedy N] [--logits-out FILE.npy]
                 [--json-out FILE.json] [--nextn-out FILE.json]

Same conventions as moe_ref.py: the prompt as one batch (KV cache), N greedy steps (ties ->
lowest id), float32 logits [len(tokens)+N, V], row i after feeding seq[i] at position i.

Equations (config names in brackets):
  RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w
  attention: q/k/v = W h + b [attention_bias]; per-head RMSNorm of q and k with [head_dim]
    weights [use_qk_norm]; partial RoPE: only the first R = head_dim * partial_rotary_factor
    dims of each head rotate, half-split pairs (i, i + R/2) over those R dims,
    theta_i = pos * rope_theta^(-2i/R); the other head_dim - R dims pass through; GQA causal
    softmax(q k^T / sqrt(head_dim)) v; o_proj without bias.
  layers l < first_k_dense_replace: dense MLP down(silu(gate h) * up h) of intermediate_size.
  other layers, MoE:
    s = sigmoid(router h) (router logits in float64 here); c = s + e_score_correction_bias;
    n_group groups of E/n_group experts, group score = sum of the group's top-2 c;
    keep the topk_group best groups (ties -> lowest group); experts of other groups get
    c = 0 (Hugging Face masked_fill 0.0); top-k of c (ties -> lowest id);
    weights = s of the chosen experts (no bias), divided by their sum (+1e-20) when
    norm_topk_prob, times routed_scaling_factor;
    out = sum_k w_k expert_k(h) + shared(h), the shared expert an ungated MLP of
    moe_intermediate_size * n_shared_experts.
  The checkpoint's NextN/MTP layer (model.layers.<num_hidden_layers>.*, GGUF blk.<n_layer>.*
  with nextn.* tensors) is not part of the forward pass; it is loaded and listed
  (--nextn-out) so tests can compare what an importer kept, and Model.mtp_logits runs it
  (Hugging Face checkpoints): eh_proj [enorm(embed(t_{j+1})); hnorm(h_j)] -> one decoder block
  at position j -> shared_head.norm -> shared_head.head, predicting t_{j+2}
  (--mtp-logits-out: float32 [len(tokens) - 1, V]).
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_np  # noqa: E402
import moe_ref  # noqa: E402
from moe_ref import read_hf_tensors, run, write_results  # noqa: E402,F401  (run: same driver)


@dataclass
class Spec:
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rotary_dim: int
    vocab: int
    n_experts: int
    top_k: int
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    routed_scaling: float
    first_dense: int
    eps: float
    rope_theta: float
    qk_norm: str | None      # None or "per_head" (use_qk_norm)


# Layer dicts (Hugging Face [out, in] layout): attn_norm, wq, wk, wv, wo, [bq, bk, bv],
# [q_norm, k_norm] (per head, [D]), ffn_norm, and either the dense mlp_gate/mlp_up/mlp_down or
# router [E, H], bias [E], gate/up [E, F, H], down [E, H, F], sh_gate/sh_up [Fs, H], sh_down [H, Fs].

class Model(moe_ref.Model):
    """moe_ref's attention (GQA, bias, per-head q/k norm) with partial RoPE, dense layers and
    GLM's router."""

    def __init__(self, spec, embed, layers, final_norm, lm_head, nextn):
        self.spec = spec
        self.embed = embed
        self.layers = layers
        self.final_norm = final_norm
        self.lm_head = lm_head
        self.nextn = nextn          # {name: array} of the MTP layer, not used by forward()
        r = spec.rotary_dim
        if r % 2 or not 0 < r <= spec.head_dim:
            raise ValueError(f"rotary dims {r} must be even and in (0, head_dim]")
        self.inv_freq = spec.rope_theta ** (-np.arange(0, r, 2, dtype=np.float64) / r)

    def _rope(self, x, pos):
        """x: [n, heads, D]; rotates the first R dims half-split, passes the rest."""
        r = self.spec.rotary_dim
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]   # [n, R/2]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        out = x.copy()
        h = r // 2
        x1, x2 = x[..., :h], x[..., h:r]
        out[..., :h] = x1 * cos - x2 * sin
        out[..., h:r] = x2 * cos + x1 * sin
        return out

    def _mlp(self, x, gate, up, down):
        return (self._silu(x @ gate.T) * (x @ up.T)) @ down.T

    def route(self, L, h):
        """(top [n, k] expert ids, weights [n, k]) of one MoE layer."""
        s = self.spec
        scores = self._sigmoid(h @ L["router"].T)                     # [n, E]
        choice = scores + L["bias"]
        n, E = choice.shape
        per = E // s.n_group
        grouped = choice.reshape(n, s.n_group, per)
        group_score = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)   # [n, G]
        keep = np.argsort(-group_score, axis=-1, kind="stable")[:, :s.topk_group]
        mask = np.zeros((n, s.n_group), dtype=bool)
        np.put_along_axis(mask, keep, True, axis=-1)
        masked = np.where(np.repeat(mask, per, axis=-1), choice, 0.0)
        top = np.argsort(-masked, axis=-1, kind="stable")[:, :s.top_k]
        w = np.take_along_axis(scores, top, axis=-1)
        if s.norm_topk_prob:
            w = w / (w.sum(axis=-1, keepdims=True) + 1e-20)
        return top, w * s.routed_scaling

    def _moe(self, L, h):
        top, w = self.route(L, h)
        out = np.zeros_like(h)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            out[rows] += w[rows, slot][:, None] * self._mlp(h[rows], L["gate"][e], L["up"][e], L["down"][e])
        return out + self._mlp(h, L["sh_gate"], L["sh_up"], L["sh_down"])

    def _block(self, L, x, pos, cache, dense):
        x = x + self._attention(L, self._rms(x, L["attn_norm"]), pos, cache)
        h = self._rms(x, L["ffn_norm"])
        if dense:
            return x + self._mlp(h, L["mlp_gate"], L["mlp_up"], L["mlp_down"])
        return x + self._moe(L, h)

    def hidden(self, tokens, cache):
        """The last layer's output before the final norm, [n, hidden]."""
        start = sum(block.shape[0] for block in cache[0][0])
        pos = np.arange(start, start + len(tokens))
        x = self.embed[np.asarray(tokens, dtype=np.int64)]
        for i, (L, c) in enumerate(zip(self.layers, cache)):
            x = self._block(L, x, pos, c, i < self.spec.first_dense)
        return x

    def forward(self, tokens, cache):
        return self._rms(self.hidden(tokens, cache), self.final_norm) @ self.lm_head.T

    def mtp_logits(self, tokens):
        """The NextN/MTP layer's logits [len(tokens) - 1, V] (Hugging Face names only).

        Row j: h_j = the target's hidden state at position j (tokens fed as one batch), the
        layer's input eh_proj [enorm(embed(tokens[j+1])); hnorm(h_j)] (embedding first, as the
        checkpoints' eh_proj columns are ordered), one decoder block (its own attention over rows
        0..j at positions j, its MoE), then shared_head.norm and shared_head.head; the layer's
        own embed_tokens / shared_head.head, else the target's. It predicts tokens[j+2]."""
        s = self.spec
        p = f"model.layers.{s.n_layers}."
        t = {k[len(p):]: v for k, v in self.nextn.items()}
        if "eh_proj.weight" not in t:
            raise ValueError("the model has no NextN layer")
        L = {"attn_norm": t["input_layernorm.weight"], "ffn_norm": t["post_attention_layernorm.weight"],
             "wq": t["self_attn.q_proj.weight"], "wk": t["self_attn.k_proj.weight"],
             "wv": t["self_attn.v_proj.weight"], "wo": t["self_attn.o_proj.weight"],
             "router": t["mlp.gate.weight"], "bias": t["mlp.gate.e_score_correction_bias"]}
        if "self_attn.q_proj.bias" in t:
            for x in "qkv":
                L["b" + x] = t[f"self_attn.{x}_proj.bias"]
        if s.qk_norm:
            L["q_norm"], L["k_norm"] = t["self_attn.q_norm.weight"], t["self_attn.k_norm.weight"]
        for x in ("gate", "up", "down"):
            L[x] = np.stack([t[f"mlp.experts.{e}.{x}_proj.weight"] for e in range(s.n_experts)])
            L["sh_" + x] = t[f"mlp.shared_experts.{x}_proj.weight"]
        embed = t.get("embed_tokens.weight", self.embed)
        head = t.get("shared_head.head.weight", self.lm_head)
        h = self.hidden(list(tokens[:-1]), self.new_cache())
        e = embed[np.asarray(tokens[1:], dtype=np.int64)]
        x = np.concatenate([self._rms(e, t["enorm.weight"]), self._rms(h, t["hnorm.weight"])], axis=-1)
        x = x @ t["eh_proj.weight"].T
        x = self._block(L, x, np.arange(len(tokens) - 1), ([], []), dense=False)
        return self._rms(x, t["shared_head.norm.weight"]) @ head.T


# ----------------------------------------------------------------------------
# Hugging Face checkpoints
# ----------------------------------------------------------------------------

def load_hf(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "glm4_moe":
        raise ValueError(f"{model_dir}: model_type {cfg.get('model_type')!r} is not glm4_moe")
    t = read_hf_tensors(model_dir)
    nh = cfg["num_attention_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // nh
    n_layers = cfg["num_hidden_layers"]
    spec = Spec(hidden=cfg["hidden_size"], n_layers=n_layers, n_heads=nh,
                n_kv_heads=cfg.get("num_key_value_heads", nh), head_dim=d,
                rotary_dim=int(d * cfg.get("partial_rotary_factor", 0.5)), vocab=cfg["vocab_size"],
                n_experts=cfg["n_routed_experts"], top_k=cfg["num_experts_per_tok"],
                n_group=cfg.get("n_group", 1), topk_group=cfg.get("topk_group", 1),
                norm_topk_prob=cfg.get("norm_topk_prob", True),
                routed_scaling=float(cfg.get("routed_scaling_factor", 1.0)),
                first_dense=cfg.get("first_k_dense_replace", 0), eps=cfg["rms_norm_eps"],
                rope_theta=float(cfg.get("rope_theta", 1e4)), qk_norm="per_head" if cfg.get("use_qk_norm", False) else None)
    if cfg.get("rope_scaling"):
        raise ValueError("rope_scaling is not part of this reference")
    layers = []
    for i in range(n_layers):
        p = f"model.layers.{i}."
        L = {"attn_norm": t[p + "input_layernorm.weight"], "ffn_norm": t[p + "post_attention_layernorm.weight"],
             "wq": t[p + "self_attn.q_proj.weight"], "wk": t[p + "self_attn.k_proj.weight"],
             "wv": t[p + "self_attn.v_proj.weight"], "wo": t[p + "self_attn.o_proj.weight"]}
        if cfg.get("attention_bias", False):
            for x in "qkv":
                L["b" + x] = t[f"{p}self_attn.{x}_proj.bias"]
        if spec.qk_norm:
            L["q_norm"], L["k_norm"] = t[p + "self_attn.q_norm.weight"], t[p + "self_attn.k_norm.weight"]
        if i < spec.first_dense:
            for x in ("gate", "up", "down"):
                L["mlp_" + x] = t[f"{p}mlp.{x}_proj.weight"]
        else:
            L["router"], L["bias"] = t[p + "mlp.gate.weight"], t[p + "mlp.gate.e_score_correction_bias"]
            for x in ("gate", "up", "down"):
                L[x] = np.stack([t[f"{p}mlp.experts.{e}.{x}_proj.weight"] for e in range(spec.n_experts)])
                L["sh_" + x] = t[f"{p}mlp.shared_experts.{x}_proj.weight"]
        layers.append(L)
    lm_head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    nextn = {k: v for k, v in t.items() if k.startswith(f"model.layers.{n_layers}.")}
    return Model(spec, t["model.embed_tokens.weight"], layers, t["model.norm.weight"], lm_head, nextn)


# ----------------------------------------------------------------------------
# GGUF (llama.cpp glm4moe names)
# ----------------------------------------------------------------------------

def load_gguf(path):
    g = gguf_np.GGUFFile(path)
    md = g.metadata
    if md.get("general.architecture") != "glm4moe":
        raise ValueError(f"{path}: architecture {md.get('general.architecture')!r} is not glm4moe")

    def k(key, default=None):
        v = md.get(f"glm4moe.{key}", default)
        if v is None:
            raise ValueError(f"{path}: missing glm4moe.{key}")
        return v

    def t(name):
        return g.tensor(name).astype(np.float64)

    nh, nextn = k("attention.head_count"), k("nextn_predict_layers", 0)
    n_layers = k("block_count") - nextn
    d = k("attention.key_length", k("embedding_length") // nh)
    if k("expert_gating_func", 2) != 2:
        raise ValueError("glm4moe: expert_gating_func must be 2 (sigmoid)")
    spec = Spec(hidden=k("embedding_length"), n_layers=n_layers, n_heads=nh,
                n_kv_heads=k("attention.head_count_kv", nh), head_dim=d, rotary_dim=k("rope.dimension_count", d // 2),
                vocab=g.tensors["token_embd.weight"][1][0], n_experts=k("expert_count"), top_k=k("expert_used_count"),
                n_group=k("expert_group_count", 1), topk_group=k("expert_group_used_count", 1),
                norm_topk_prob=bool(k("expert_weights_norm", True)), routed_scaling=float(k("expert_weights_scale", 1.0)),
                first_dense=k("leading_dense_block_count", 0), eps=float(k("attention.layer_norm_rms_epsilon")),
                rope_theta=float(k("rope.freq_base", 1e4)), qk_norm="per_head" if "blk.0.attn_q_norm.weight" in g.tensors else None)
    layers = []
    for i in range(n_layers):
        b = f"blk.{i}."
        L = {"attn_norm": t(b + "attn_norm.weight"), "ffn_norm": t(b + "post_attention_norm.weight"),
             "wq": t(b + "attn_q.weight"), "wk": t(b + "attn_k.weight"), "wv": t(b + "attn_v.weight"),
             "wo": t(b + "attn_output.weight")}
        if b + "attn_q.bias" in g.tensors:
            for x in "qkv":
                L["b" + x] = t(f"{b}attn_{x}.bias")
        if spec.qk_norm:
            L["q_norm"], L["k_norm"] = t(b + "attn_q_norm.weight"), t(b + "attn_k_norm.weight")
        if i < spec.first_dense:
            for x in ("gate", "up", "down"):
                L["mlp_" + x] = t(f"{b}ffn_{x}.weight")
        else:
            L["router"], L["bias"] = t(b + "ffn_gate_inp.weight"), t(b + "exp_probs_b.bias")
            for x in ("gate", "up", "down"):
                L[x] = t(f"{b}ffn_{x}_exps.weight")
                L["sh_" + x] = t(f"{b}ffn_{x}_shexp.weight")
        layers.append(L)
    out = "output.weight" if "output.weight" in g.tensors else "token_embd.weight"
    extra = {name: t(name) for name in g.tensors if any(name.startswith(f"blk.{j}.") for j in range(n_layers, n_layers + nextn))}
    return Model(spec, t("token_embd.weight"), layers, t("output_norm.weight"), t(out), extra)


def load_model(path):
    return load_hf(path) if os.path.isdir(path) else load_gguf(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint dir or .gguf file")
    ap.add_argument("--tokens", required=True, help="prompt token ids, comma separated")
    ap.add_argument("--greedy", type=int, default=0, help="number of greedy steps after the prompt")
    ap.add_argument("--logits-out", help="write float32 [len(tokens)+N, V] logits (.npy)")
    ap.add_argument("--json-out", help="write prompt_ids / greedy_ids / greedy_top1_minus_top2")
    ap.add_argument("--nextn-out", help="write the NextN layer's tensor names and shapes (.json)")
    ap.add_argument("--mtp-logits-out", help="write the NextN layer's float32 [len(tokens)-1, V] logits (.npy)")
    a = ap.parse_args(argv)
    try:
        model = load_model(a.model)
        prompt = [int(x) for x in a.tokens.split(",") if x.strip()]
        if any(not 0 <= x < model.spec.vocab for x in prompt):
            raise ValueError(f"token id out of range [0, {model.spec.vocab})")
        logits, greedy, margins = run(model, prompt, a.greedy)
    except (ValueError, KeyError, OSError) as e:
        print(f"glm4moe_ref: error: {e}", file=sys.stderr)
        return 2
    if a.mtp_logits_out:
        np.save(a.mtp_logits_out, model.mtp_logits(prompt).astype(np.float32))
    if a.nextn_out:
        with open(a.nextn_out, "w") as f:
            json.dump({k: list(v.shape) for k, v in sorted(model.nextn.items())}, f, indent=1)
    write_results(a, prompt, logits, greedy, margins)
    return 0


if __name__ == "__main__":
    sys.exit(main())
