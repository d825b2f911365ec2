#!/usr/bin/python3
"""Generate a tiny random-weight Mixture-of-Experts checkpoint in Hugging Face layout.

usage: gen_tiny_model.py --out DIR [--family mixtral|qwen2_moe|olmoe|qwen3_moe]
           [--preset micro|tiny|demo] [--seed 0] [--dtype f32|f16|bf16] [--shards N]
           [--hidden H --layers L --heads NH --kv-heads NKV --head-dim D --ffn F
            --experts E --top-k K --vocab V --shared-ffn S]

Writes config.json, generation_config.json, model.safetensors (or N shards plus
model.safetensors.index.json), tokenizer.json and tokenizer_config.json, all with
the family's real Hugging Face names and keys.  The output is a pure function of
the arguments: the same seed gives byte-identical files.

Weights come from numpy's PCG64(seed), drawn in model order in float64 and then
rounded to the requested dtype.  Scales keep activations O(1): linear weights
N(0, 1/fan_in) (std 1/sqrt(fan_in)), embeddings N(0, 1), norm weights
1 + 0.1 N(0, 1), biases 0.1 N(0, 1); lm_head has std 3/sqrt(hidden) so that
logits are O(1-10) with clear greedy margins.
"""

import argparse
import json
import os
import re
import struct
import sys
from collections import Counter

import numpy as np

PRESETS = {
    "micro": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, experts=8, top_k=2, vocab=512),
    "tiny": dict(hidden=128, layers=4, heads=4, kv_heads=2, ffn=256, experts=8, top_k=2, vocab=512),
    "demo": dict(hidden=256, layers=4, heads=8, kv_heads=4, ffn=512, experts=8, top_k=2, vocab=512),
}
FAMILIES = ("mixtral", "qwen2_moe", "olmoe", "qwen3_moe")
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
SAFETENSORS_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}

# lm_head is LM_HEAD_GAIN times a plain linear layer, so logits have std ~3 and
# the median top1 - top2 greedy margin is ~0.6 instead of ~0.2.
LM_HEAD_GAIN = 3.0

SPM_SPACE = "\u2581"   # SentencePiece's "▁", which stands for a space
N_SPECIAL = 3          # <unk>, <s>, </s>
N_BYTES = 256          # <0x00>..<0xFF> at ids 3..258

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)

# Training text for the toy BPE vocabulary.
CORPUS = (
    "The river runs past the old mill and under the stone bridge, where the children of the "
    "village meet each morning before school. In the spring the water is high and fast; in the "
    "summer it is low, warm and slow, and the boys can walk across it on the flat rocks. An old "
    "man who lives by the bridge says that the river was here long before the village, and that "
    "it will be here long after the last house has fallen. He has seen 87 summers, and he "
    "remembers the year 1947, when the water rose over the road and into the church. People "
    "laughed at him then, but they do not laugh now. What is a river, he asks, if not a story "
    "that tells itself again and again? Some of the children believe him; others think that he "
    "is only a little strange. Still, they all listen when he speaks, because his stories are "
    "good and his voice is kind. Yesterday he told them about the great fish that lived under "
    "the mill for thirty years, and about the winter when the whole river turned to ice and the "
    "people of the town could skate from one side of the valley to the other. Was that true? "
    "Nobody knows. But the next morning, when the light came through the trees and the water "
    "was bright and clear, every child looked down from the bridge for a long time, hoping to "
    "see something move in the deep green water below. Time passes, the seasons turn, and the "
    "river goes on: quiet, patient, and older than any of us. "
    "On market days the town square fills with people from the farms in the hills. They bring "
    "bread, cheese, apples and honey, and they sell them from wooden tables under bright "
    "umbrellas. The baker's daughter counts the coins, the farmer's son carries the heavy "
    "boxes, and the old woman who sells flowers knows the name of every child in the square. "
    "By noon the sun is hot and the music starts: a violin, a drum, and sometimes a small "
    "guitar. Dogs sleep in the shade, birds wait for crumbs, and the church bell rings the "
    "hours as it has done for three hundred years. When the evening comes, the tables are "
    "packed away, the lamps are lit, and families walk slowly home along the river, talking "
    "about the prices, the weather, the news from the city, and the small things that make a "
    "life. Nobody is in a hurry. Tomorrow there will be work to do, fields to plough, letters to "
    "write and questions to answer; but tonight there is only the quiet road, the warm air, and "
    "the sound of the water moving in the dark."
)


# ----------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------

def resolve_dims(family, preset, overrides):
    """Preset dims with explicit overrides; derived sizes follow the family's
    convention unless given explicitly."""
    if any(isinstance(v, int) and v < 1 for v in overrides.values()):
        raise ValueError("dimension overrides must be positive")
    d = dict(PRESETS[preset])
    d.update({k: v for k, v in overrides.items() if v is not None and k in d})
    if overrides.get("kv_heads") is None and family == "olmoe":
        d["kv_heads"] = d["heads"]                       # OLMoE has no GQA
    d["head_dim"] = overrides.get("head_dim") or (
        # Like Qwen3-30B-A3B, heads * head_dim != hidden (micro: 4 * 32 = 128 vs 64).
        2 * d["hidden"] // d["heads"] if family == "qwen3_moe" else d["hidden"] // d["heads"])
    d["shared_ffn"] = overrides.get("shared_ffn") or (2 * d["ffn"] if family == "qwen2_moe" else 0)
    # Qwen-MoE dense layers (the Hugging Face rule): listed in mlp_only_layers, or (l + 1) not a
    # multiple of decoder_sparse_step. Their MLP has intermediate_size.
    d["sparse_step"] = overrides.get("decoder_sparse_step") or 1
    d["mlp_only_layers"] = sorted(set(overrides.get("mlp_only_layers") or []))
    d["dense_layers"] = [i for i in range(d["layers"])
                         if i in d["mlp_only_layers"] or (i + 1) % d["sparse_step"]]
    d["dense_ffn"] = d["shared_ffn"] if family == "qwen2_moe" else 2 * d["ffn"]
    if d["dense_layers"] and family not in ("qwen2_moe", "qwen3_moe"):
        raise ValueError("--decoder-sparse-step / --mlp-only-layers only apply to qwen2_moe and qwen3_moe")
    if any(not 0 <= i < d["layers"] for i in d["mlp_only_layers"]):
        raise ValueError("--mlp-only-layers holds a layer outside the model")

    if d["heads"] % d["kv_heads"]:
        raise ValueError("--heads must be a multiple of --kv-heads")
    if d["head_dim"] % 2:
        raise ValueError("--head-dim must be even (RoPE)")
    if family in ("qwen2_moe", "olmoe") and d["head_dim"] * d["heads"] != d["hidden"]:
        raise ValueError(f"{family} configs have no head_dim: need heads * head_dim == hidden")
    if family != "qwen2_moe" and overrides.get("shared_ffn"):
        raise ValueError("--shared-ffn only applies to qwen2_moe")
    if not 1 <= d["top_k"] <= d["experts"]:
        raise ValueError("need 1 <= --top-k <= --experts")
    if d["vocab"] < N_SPECIAL + N_BYTES:
        raise ValueError(f"--vocab must be at least {N_SPECIAL + N_BYTES} (specials + byte tokens)")
    return d


def make_config(family, d, dtype):
    """config.json contents with the family's Hugging Face keys."""
    common = {
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": d["hidden"],
        "initializer_range": 0.02,
        "max_position_embeddings": 4096,
        "num_attention_heads": d["heads"],
        "num_experts_per_tok": d["top_k"],
        "num_hidden_layers": d["layers"],
        "num_key_value_heads": d["kv_heads"],
        "output_router_logits": False,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPES[dtype],
        "transformers_version": "4.51.0",
        "use_cache": True,
        "vocab_size": d["vocab"],
    }
    if family == "mixtral":
        cfg = {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "intermediate_size": d["ffn"],
            "num_local_experts": d["experts"],
            "rms_norm_eps": 1e-5,
            "router_aux_loss_coef": 0.02,
            "sliding_window": None,
        }
        if d["head_dim"] * d["heads"] != d["hidden"]:
            cfg["head_dim"] = d["head_dim"]
    elif family == "qwen2_moe":
        cfg = {
            "architectures": ["Qwen2MoeForCausalLM"],
            "model_type": "qwen2_moe",
            "decoder_sparse_step": d["sparse_step"],
            "intermediate_size": d["shared_ffn"],     # dense-MLP size, as in Qwen1.5-MoE
            "max_window_layers": d["layers"],
            "mlp_only_layers": d["mlp_only_layers"],
            "moe_intermediate_size": d["ffn"],
            "norm_topk_prob": False,
            "num_experts": d["experts"],
            "rms_norm_eps": 1e-6,
            "router_aux_loss_coef": 0.001,
            "shared_expert_intermediate_size": d["shared_ffn"],
            "sliding_window": None,
            "use_sliding_window": False,
        }
    elif family == "olmoe":
        cfg = {
            "architectures": ["OlmoeForCausalLM"],
            "model_type": "olmoe",
            "attention_bias": False,
            "clip_qkv": None,
            "intermediate_size": d["ffn"],            # OLMoE's expert size
            "norm_topk_prob": False,
            "num_experts": d["experts"],
            "pad_token_id": 0,
            "rms_norm_eps": 1e-5,
            "rope_scaling": None,
            "router_aux_loss_coef": 0.01,
        }
    else:
        cfg = {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "attention_bias": False,
            "decoder_sparse_step": d["sparse_step"],
            "head_dim": d["head_dim"],
            "intermediate_size": d["dense_ffn"],      # dense-MLP size (the dense layers)
            "max_window_layers": d["layers"],
            "mlp_only_layers": d["mlp_only_layers"],
            "moe_intermediate_size": d["ffn"],
            "norm_topk_prob": True,
            "num_experts": d["experts"],
            "rms_norm_eps": 1e-6,
            "rope_scaling": None,
            "router_aux_loss_coef": 0.001,
            "sliding_window": None,
            "use_sliding_window": False,
        }
    cfg.update(common)
    return dict(sorted(cfg.items()))


# ----------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------

def tensor_list(family, d):
    """[(name, shape, kind)] in model order; kind is embed | linear | lm_head | norm | bias."""
    H, D, F, E = d["hidden"], d["head_dim"], d["ffn"], d["experts"]
    QD, KD = d["heads"] * D, d["kv_heads"] * D
    out = [("model.embed_tokens.weight", (d["vocab"], H), "embed")]
    for i in range(d["layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", (H,), "norm"))
        for proj, rows in (("q", QD), ("k", KD), ("v", KD)):
            out.append((f"{p}self_attn.{proj}_proj.weight", (rows, H), "linear"))
            if family == "qwen2_moe":
                out.append((f"{p}self_attn.{proj}_proj.bias", (rows,), "bias"))
        out.append((p + "self_attn.o_proj.weight", (H, QD), "linear"))
        if family == "olmoe":              # one norm over all heads together
            out.append((p + "self_attn.q_norm.weight", (QD,), "norm"))
            out.append((p + "self_attn.k_norm.weight", (KD,), "norm"))
        elif family == "qwen3_moe":        # one norm shared by every head
            out.append((p + "self_attn.q_norm.weight", (D,), "norm"))
            out.append((p + "self_attn.k_norm.weight", (D,), "norm"))
        out.append((p + "post_attention_layernorm.weight", (H,), "norm"))
        if i in d["dense_layers"]:
            DF = d["dense_ffn"]
            out.append((p + "mlp.gate_proj.weight", (DF, H), "linear"))
            out.append((p + "mlp.up_proj.weight", (DF, H), "linear"))
            out.append((p + "mlp.down_proj.weight", (H, DF), "linear"))
            continue
        if family == "mixtral":
            moe, names = "block_sparse_moe", ("w1", "w3", "w2")   # gate, up, down
        else:
            moe, names = "mlp", ("gate_proj", "up_proj", "down_proj")
        out.append((f"{p}{moe}.gate.weight", (E, H), "linear"))
        for j in range(E):
            out.append((f"{p}{moe}.experts.{j}.{names[0]}.weight", (F, H), "linear"))
            out.append((f"{p}{moe}.experts.{j}.{names[1]}.weight", (F, H), "linear"))
            out.append((f"{p}{moe}.experts.{j}.{names[2]}.weight", (H, F), "linear"))
        if family == "qwen2_moe":
            S = d["shared_ffn"]
            out.append((p + "mlp.shared_expert.gate_proj.weight", (S, H), "linear"))
            out.append((p + "mlp.shared_expert.up_proj.weight", (S, H), "linear"))
            out.append((p + "mlp.shared_expert.down_proj.weight", (H, S), "linear"))
            out.append((p + "mlp.shared_expert_gate.weight", (1, H), "linear"))
    out.append(("model.norm.weight", (H,), "norm"))
    out.append(("lm_head.weight", (d["vocab"], H), "lm_head"))
    return out


def draw_weights(tensors, seed):
    """Float64 arrays drawn from one PCG64 stream, in the order given."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    for name, shape, kind in tensors:
        z = rng.standard_normal(shape)
        if kind == "linear":
            out[name] = z / np.sqrt(shape[-1])
        elif kind == "lm_head":
            out[name] = LM_HEAD_GAIN * z / np.sqrt(shape[-1])
        elif kind == "norm":
            out[name] = 1.0 + 0.1 * z
        elif kind == "bias":
            out[name] = 0.1 * z
        else:
            out[name] = z
    return out


def encode(a, dtype):
    """Little-endian bytes of float64 array `a` in the target dtype."""
    f32 = a.astype("<f4")
    if dtype == "f32":
        return f32.tobytes()
    if dtype == "f16":
        return a.astype("<f2").tobytes()
    # bf16: round-to-nearest-even on the float32 bit pattern (weights are finite).
    u = f32.view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def write_safetensors(path, items, dtype):
    """items: [(name, array)]; tensors are stored in name order, as the
    reference implementation does, with the header padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name, a in sorted(items):
        blob = encode(a, dtype)
        header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header = {"__metadata__": {"format": "pt"}, **header}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-(8 + len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for blob in blobs:
            f.write(blob)
    return offset


def shard_plan(tensors, dtype, n_shards):
    """Split the model-ordered tensor list into n contiguous, byte-balanced runs."""
    itemsize = 4 if dtype == "f32" else 2
    sizes = [int(np.prod(shape)) * itemsize for _, shape, _ in tensors]
    total = sum(sizes)
    plan, start = [[] for _ in range(n_shards)], 0
    for (name, _, _), size in zip(tensors, sizes):
        # The shard holding this tensor's midpoint.
        plan[min(n_shards - 1, (2 * start + size) * n_shards // (2 * total))].append(name)
        start += size
    if any(not names for names in plan):
        raise ValueError(f"cannot split this model into {n_shards} non-empty shards")
    return plan


def write_weights(out_dir, tensors, weights, dtype, n_shards):
    for fn in os.listdir(out_dir):          # leftovers of an earlier run with other --shards
        if re.fullmatch(r"model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?", fn):
            os.remove(os.path.join(out_dir, fn))
    if n_shards == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), list(weights.items()), dtype)
        return
    weight_map, total = {}, 0
    for k, names in enumerate(shard_plan(tensors, dtype, n_shards)):
        fn = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        total += write_safetensors(os.path.join(out_dir, fn), [(n, weights[n]) for n in names], dtype)
        weight_map.update({n: fn for n in names})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(os.path.join(out_dir, "model.safetensors.index.json"), index)


# ----------------------------------------------------------------------------
# Tokenizer (Llama-2 / Mistral style SentencePiece BPE with byte fallback)
# ----------------------------------------------------------------------------

def train_bpe(text, n_pieces):
    """Deterministic BPE on `text`: returns (alphabet, merges) with at most
    n_pieces new vocabulary entries in total.

    As SentencePiece does for Llama, each whitespace-separated word gets a
    leading "▁" and is cut into runs of letters, single digits and single other
    characters, so pieces never mix letters with digits or punctuation.  The
    alphabet (single characters) comes first, most frequent first; each merge
    then joins the most frequent adjacent pair (ties: the smaller pair in string
    order), stopping once no pair occurs twice."""
    words = Counter()
    for w in text.split():
        words.update(re.findall(f"{SPM_SPACE}?(?:[A-Za-z]+|[^A-Za-z{SPM_SPACE}])", SPM_SPACE + w))
    chars = Counter()
    for w, c in words.items():
        for ch in w:
            chars[ch] += c
    alphabet = sorted(chars, key=lambda ch: (-chars[ch], ch))[:n_pieces]
    known = set(alphabet)       # characters left out fall back to byte tokens
    segs = {w: list(w) for w in words}
    merges = []
    while len(alphabet) + len(merges) < n_pieces:
        pairs = Counter()
        for w, s in segs.items():
            for a, b in zip(s, s[1:]):
                if a in known and b in known:
                    pairs[a, b] += words[w]
        best = min(pairs, key=lambda p: (-pairs[p], p), default=None)
        if best is None or pairs[best] < 2:
            break
        a, b = best
        merges.append(best)
        known.add(a + b)
        for s in segs.values():
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i:i + 2] = [a + b]
                i += 1
    return alphabet, merges


def make_tokenizer(vocab_size):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(N_BYTES):
        vocab[f"<0x{b:02X}>"] = N_SPECIAL + b
    alphabet, merges = train_bpe(CORPUS, vocab_size - len(vocab))
    for piece in alphabet + [a + b for a, b in merges]:
        vocab[piece] = len(vocab)
    # A vocabulary larger than the corpus supports is padded with pieces that
    # BPE can never produce (no merge builds them).
    while len(vocab) < vocab_size:
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)

    special = lambda i, s: {"id": i, "content": s, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPM_SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE},
        ]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }
    tokenizer_config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    return tokenizer, tokenizer_config


# ----------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def generate(out_dir, family="mixtral", preset="micro", seed=0, dtype="f32", shards=1, config_set=(),
             **overrides):
    """Write the checkpoint; returns the resolved dims.  `config_set`: (key, value) pairs written
    into config.json over the family's defaults (e.g. a rope_scaling object)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
    if shards < 1:
        raise ValueError("--shards must be >= 1")
    d = resolve_dims(family, preset, overrides)
    tensors = tensor_list(family, d)
    weights = draw_weights(tensors, seed)
    os.makedirs(out_dir, exist_ok=True)
    write_weights(out_dir, tensors, weights, dtype, shards)
    cfg = make_config(family, d, dtype)
    cfg.update(dict(config_set))
    write_json(os.path.join(out_dir, "config.json"), dict(sorted(cfg.items())))
    write_json(os.path.join(out_dir, "generation_config.json"), {
        "bos_token_id": 1, "eos_token_id": 2, "do_sample": False, "transformers_version": "4.51.0"})
    tokenizer, tokenizer_config = make_tokenizer(d["vocab"])
    write_json(os.path.join(out_dir, "tokenizer.json"), tokenizer)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config)
    return d


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--family", choices=FAMILIES, default="mixtral")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="micro")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=1)
    for flag in ("hidden", "layers", "heads", "kv-heads", "head-dim", "ffn", "experts",
                 "top-k", "vocab", "shared-ffn", "decoder-sparse-step"):
        ap.add_argument("--" + flag, type=int, help="override the preset")
    ap.add_argument("--mlp-only-layers", type=lambda s: [int(x) for x in s.split(",") if x],
                    help="qwen2_moe/qwen3_moe: comma-separated dense layers")
    ap.add_argument("--config-set", action="append", default=[], metavar="KEY=JSON",
                    help="write KEY with the JSON value into config.json (repeatable)")
    a = vars(ap.parse_args(argv))
    pairs = []
    for item in a.pop("config_set"):
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"gen_tiny_model: error: --config-set wants KEY=JSON, not {item!r}", file=sys.stderr)
            return 2
        try:
            pairs.append((key, json.loads(value)))
        except json.JSONDecodeError as e:
            print(f"gen_tiny_model: error: --config-set {key}: {e}", file=sys.stderr)
            return 2
    a["config_set"] = pairs
    try:
        d = generate(a.pop("out"), a.pop("family"), a.pop("preset"), a.pop("seed"),
                     a.pop("dtype"), a.pop("shards"), a.pop("config_set"), **a)
    except ValueError as e:
        print(f"gen_tiny_model: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
