"""The float64 reference run on the weights a `--quantize q8_0` (or f16) import stores, the way GGML
computes with them: a model of moe_ref / deepseek_ref with each layer's matrices rounded to Q8_0
(F16 where a row is not whole 32-element blocks, as colibri-convert's QuantPlan falls back), the
activations rounded before each such matmul (to Q8_0 blocks for Q8_0 weights, to F16 for F16
weights, as GGML's vec-dot types do), the token embedding rows Q8_0 (looked up, not multiplied),
and routers and vectors left F32. Latent attention is computed in the absorbed form on the
tensors the import stores: `attn_k_b` (each head's key up-projection [kv_lora, nope], its rows
nope wide) applied to the rounded q_nope, `attn_v_b` ([v, kv_lora]) applied to the rounded
attended latent. It separates what quantization does to a model from what an
engine's quantized path does: an engine that is right matches this run, not the F32 one.

Q8_0 (GGML's quantize_row_q8_0): per block of 32, d = max|x| / 127, q = round(x / d) in
[-127, 127], stored d as F16; the value is q * d. The codes are computed in float32 as GGML does.
"""

import numpy as np

Q8_BLOCK = 32


def to_f16(x):
    return np.asarray(x).astype(np.float16).astype(np.float64)


def q8_0(x):
    """x (last dimension a multiple of 32) rounded to Q8_0 blocks and back."""
    x = np.asarray(x, dtype=np.float64)
    b = x.reshape(-1, Q8_BLOCK).astype(np.float32)        # GGML computes the codes in float32
    d = np.abs(b).max(axis=1) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d > 0)
    y = b * inv[:, None]
    q = np.clip(np.sign(y) * np.floor(np.abs(y) + np.float32(0.5)), -127, 127)   # roundf: halves away from 0
    return (q.astype(np.float64) * to_f16(d)[:, None]).reshape(x.shape)


def q8_0_activations(x):
    """x rounded as GGML's activation quantizer (its SIMD quantize_row_q8_0) does: float32
    codes round(x * 127 / max|x|), halves to even, d = max|x| / 127 as F16."""
    x = np.asarray(x, dtype=np.float64)
    b = x.reshape(-1, Q8_BLOCK).astype(np.float32)
    amax = np.abs(b).max(axis=1)
    inv = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax > 0)
    q = np.rint(b * inv[:, None])
    return (q.astype(np.float64) * to_f16(amax / np.float32(127))[:, None]).reshape(x.shape)


class QuantizedMatrix:
    """A weight used as `h @ W.T` (or `W[e]` then `.T`) that rounds h as GGML does before the product."""

    __array_ufunc__ = None          # makes numpy hand `h @ W` to __rmatmul__

    def __init__(self, w, kind):
        self.w, self.kind = w, kind

    @classmethod
    def of(cls, w, dtype="q8_0"):
        w = np.asarray(w, dtype=np.float64)
        if dtype == "q8_0" and w.shape[-1] % Q8_BLOCK == 0:
            return cls(q8_0(w), "q8_0")
        return cls(to_f16(w), "f16")

    @property
    def T(self):
        return self

    @property
    def shape(self):
        return self.w.shape

    def __getitem__(self, i):
        return QuantizedMatrix(self.w[i], self.kind)

    def __rmatmul__(self, h):
        h = q8_0_activations(h) if self.kind == "q8_0" else to_f16(h)
        return h @ self.w.T


# Layer entries that stay F32 in a q8_0 import (routers and vectors).
KEPT = ("router", "router_bias", "sh_gate_inp")


def _absorbed_attention(model):
    """deepseek_ref's latent attention in the absorbed form on each layer's `k_b` / `v_b`."""
    s, m, rms, rope_pe = model.spec, model.mla, model._rms, model._rope_pe

    def attention(L, h, pos, cache):
        n, NH, N, R, KL = h.shape[0], s.n_heads, m["nope"], m["rope"], m["kv_lora"]
        if "wq_a" in L:
            q = rms(h @ L["wq_a"].T, L["q_a_norm"]) @ L["wq_b"].T
        else:
            q = h @ L["wq"].T
        q = q.reshape(n, NH, N + R)
        q_pe = rope_pe(q[..., N:], pos)
        kv_a = h @ L["wkv_a"].T
        cache[0].append(rms(kv_a[:, :KL], L["kv_a_norm"]))
        cache[1].append(rope_pe(kv_a[:, None, KL:], pos)[:, 0, :])
        c, k_pe = np.concatenate(cache[0]), np.concatenate(cache[1])
        key_pos = np.arange(c.shape[0])
        heads = []
        for i in range(NH):
            q_lat = q[:, i, :N] @ L["k_b"][i].T                               # [n, kv_lora]
            scores = (q_lat @ c.T + q_pe[:, i] @ k_pe.T) * m["softmax_scale"]
            scores = np.where(key_pos[None, :] <= pos[:, None], scores, -np.inf)
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            heads.append((p @ c) @ L["v_b"][i].T)                             # [n, v]
        return np.concatenate(heads, axis=1) @ L["wo"].T
    return attention


def quantize_model(model, keys=None, dtype="q8_0"):
    """Rounds `model` (a moe_ref.Model; deepseek_ref's gets the absorbed attention) in place as
    a `--quantize dtype` import (q8_0 or f16) stores it. keys: only these layer entries (and
    "embed" / "lm_head"; "wkv_b" for k_b and v_b), default all matrices."""
    if dtype not in ("q8_0", "f16"):
        raise ValueError(f"dtype {dtype!r}: q8_0 or f16")
    of = lambda w: QuantizedMatrix.of(w, dtype)  # noqa: E731
    mla = getattr(model, "mla", None)
    for L in model.layers:
        for k, w in list(L.items()):
            if k in KEPT or np.ndim(w) < 2 or (keys is not None and k not in keys):
                continue
            if k == "wkv_b" and mla:
                N, KL = mla["nope"], mla["kv_lora"]
                kv_b = np.asarray(w, dtype=np.float64).reshape(model.spec.n_heads, N + mla["v"], KL)
                L["k_b"] = of(kv_b[:, :N].transpose(0, 2, 1))   # [heads, kv_lora, nope]
                L["v_b"] = of(kv_b[:, N:])                      # [heads, v, kv_lora]
            L[k] = of(w)
    if keys is None or "embed" in keys:
        model.embed = q8_0(model.embed) if dtype == "q8_0" else to_f16(model.embed)
    if keys is None or "lm_head" in keys:
        model.lm_head = of(model.lm_head)
    if mla:
        if "k_b" not in model.layers[0]:        # wkv_b left F32: the absorbed form on it as it is
            for L in model.layers:
                N = mla["nope"]
                kv_b = np.asarray(L["wkv_b"]).reshape(model.spec.n_heads, N + mla["v"], mla["kv_lora"])
                L["k_b"], L["v_b"] = kv_b[:, :N].transpose(0, 2, 1), kv_b[:, N:]
        model._attention = _absorbed_attention(model)
    return model


def record_routes(model):
    """Wraps model.route; returns the list that collects each call's sorted expert ids [n, k]."""
    calls, route = [], model.route

    def recorded(L, h):
        top, w = route(L, h)
        calls.append(np.sort(top, axis=1))
        return top, w
    model.route = recorded
    return calls
