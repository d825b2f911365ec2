"""Checks for the numpy MoE reference (moe_ref.py) and the tiny-model generator.

Run from the repository root:
    /usr/bin/python3 -m unittest tests/reference/test_reference.py

Oracle tests read the peer oracle (llama.cpp outputs and a Qwen3-MoE HF
checkpoint) from $COLIBRI_ORACLE_DIR or ../shared/oracle next to the repository,
and are skipped with a message when it is absent.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))

import gen_tiny_model as gen  # noqa: E402
import moe_ref  # noqa: E402
from gguf_np import GGUFFile  # noqa: E402

ORACLE = os.environ.get("COLIBRI_ORACLE_DIR") or os.path.join(REPO, "..", "shared", "oracle")
HAVE_ORACLE = os.path.isfile(os.path.join(ORACLE, "README.md"))
NO_ORACLE = f"peer oracle not found at {ORACLE} (set COLIBRI_ORACLE_DIR)"
PROMPTS = ("p1", "p16", "p64")
GGUF_MODELS = ("mixtral-micro-f32", "qwen2moe-micro-f32", "olmoe-micro-f32")
GEN_SCRIPT = os.path.join(REPO, "tools", "gen_tiny_model.py")
REF_SCRIPT = os.path.join(HERE, "moe_ref.py")


def oracle_case(stem, prompt):
    """(oracle json, float64 logits) for e.g. ('mixtral-micro-f32', 'p16')."""
    with open(os.path.join(ORACLE, f"{stem}.{prompt}.json")) as f:
        j = json.load(f)
    return j, np.load(os.path.join(ORACLE, os.path.dirname(stem), j["logits_file"])).astype(np.float64)


def generate(out, *args):
    subprocess.run([sys.executable, GEN_SCRIPT, "--out", out, *args], check=True,
                   stdout=subprocess.DEVNULL)


# -----------------------------------------------------------------------------
# GGUF -> Hugging Face conversion, used to check the HF loading path of every
# family against llama.cpp.
# -----------------------------------------------------------------------------

GGUF_FAMILY = {"llama": "mixtral", "qwen2moe": "qwen2_moe", "olmoe": "olmoe"}


def unpermute_rows(w, n_heads):
    """Undo llama.cpp's convert_hf_to_gguf permute() of Llama q/k rows: within
    each head it turned the half-split order (i, i + D/2) into pairs (2i, 2i+1)."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.reshape(n_heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


# Hugging Face name -> GGUF name; ":j" selects expert j of a stacked tensor.
HF_TO_GGUF = [(re.compile(p), r) for p, r in (
    (r"model\.embed_tokens\.weight", "token_embd.weight"),
    (r"model\.norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"blk.\1.attn_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"blk.\1.attn_\2.\3"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.weight", r"blk.\1.attn_output.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight", r"blk.\1.attn_\2_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"blk.\1.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.gate\.weight", r"blk.\1.ffn_gate_inp.weight"),
    (r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(?:w1|gate_proj)\.weight",
     r"blk.\1.ffn_gate_exps.weight:\2"),
    (r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(?:w3|up_proj)\.weight",
     r"blk.\1.ffn_up_exps.weight:\2"),
    (r"model\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\.(?:w2|down_proj)\.weight",
     r"blk.\1.ffn_down_exps.weight:\2"),
    (r"model\.layers\.(\d+)\.mlp\.shared_expert\.(gate|up|down)_proj\.weight", r"blk.\1.ffn_\2_shexp.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_expert_gate\.weight", r"blk.\1.ffn_gate_inp_shexp.weight"),
)]


def gguf_to_hf(gguf_path, out_dir):
    """Write the GGUF model as an HF checkpoint with the generator's names and
    shapes (gen.tensor_list), un-permuting the Llama q/k rows."""
    g = GGUFFile(gguf_path)
    arch = g.metadata["general.architecture"]
    family = GGUF_FAMILY[arch]
    m = lambda k: g.metadata[f"{arch}.{k}"]
    dims = dict(hidden=m("embedding_length"), layers=m("block_count"),
                heads=m("attention.head_count"), kv_heads=m("attention.head_count_kv"),
                ffn=g.tensor("blk.0.ffn_gate_exps.weight").shape[1], experts=m("expert_count"),
                top_k=m("expert_used_count"), vocab=g.tensor("token_embd.weight").shape[0])
    dims["head_dim"] = dims["hidden"] // dims["heads"]
    dims["shared_ffn"] = m("expert_shared_feed_forward_length") if family == "qwen2_moe" else 0
    # The oracle GGUFs: every layer MoE (gen.tensor_list / make_config read these keys).
    dims.update(dense_layers=[], mlp_only_layers=[], sparse_step=1)

    weights = {}
    for name, shape, _ in gen.tensor_list(family, dims):
        target = next(rx.sub(r, name) for rx, r in HF_TO_GGUF if rx.fullmatch(name))
        target, _, expert = target.partition(":")
        w = g.tensor(target)
        if expert:
            w = w[int(expert)]
        if arch == "llama" and target.endswith(("attn_q.weight", "attn_k.weight")):
            w = unpermute_rows(w, dims["heads"] if "attn_q" in target else dims["kv_heads"])
        w = w.reshape(shape)    # only the qwen2moe shared-expert gate changes: [H] -> [1, H]
        weights[name] = w.astype(np.float64)
    os.makedirs(out_dir, exist_ok=True)
    gen.write_safetensors(os.path.join(out_dir, "model.safetensors"), list(weights.items()), "f32")
    cfg = gen.make_config(family, dims, "f32")
    cfg["rms_norm_eps"] = float(m("attention.layer_norm_rms_epsilon"))
    gen.write_json(os.path.join(out_dir, "config.json"), cfg)


@unittest.skipUnless(HAVE_ORACLE, NO_ORACLE)
class OracleTests(unittest.TestCase):
    def check_f32_oracle(self, model, stem, tol):
        """Greedy ids must match; returns the max |dlogit| over all prompts."""
        worst = 0.0
        for p in PROMPTS:
            j, ref = oracle_case(stem, p)
            logits, greedy, margins = moe_ref.run(model, j["prompt_ids"], len(j["greedy_ids"]))
            self.assertEqual(greedy, j["greedy_ids"], f"{stem}.{p}")
            np.testing.assert_allclose(margins, j["greedy_top1_minus_top2"], atol=max(tol, 1e-5))
            d = float(np.abs(logits - ref).max())
            self.assertLessEqual(d, tol, f"{stem}.{p}")
            worst = max(worst, d)
        return worst

    def test_qwen3moe_hf_checkpoint(self):
        stem = "qwen3moe/qwen3moe-micro-f32"
        model = moe_ref.load_model(os.path.join(ORACLE, stem))
        self.check_f32_oracle(model, stem, tol=1e-5)
        # The oracle is float64 stored as float32: ours must round to within
        # half an ulp of every stored value (in practice: to the same float32).
        for p in PROMPTS:
            j, ref = oracle_case(stem, p)
            logits, _, _ = moe_ref.run(model, j["prompt_ids"], len(j["greedy_ids"]))
            ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
            self.assertLessEqual(float((np.abs(logits - ref) / ulp).max()), 0.5 + 1e-6)

    def test_gptoss_hf_and_mxfp4_gguf(self):
        """gptoss_ref (through moe_ref.load_model) reproduces both gpt-oss oracle cases."""
        for stem, path in (("gptoss/gptoss-micro-f32", "gptoss/gptoss-micro-f32"),
                           ("gptoss/gptoss-micro-mxfp4", "gptoss/gptoss-micro-mxfp4.gguf")):
            with self.subTest(stem):
                model = moe_ref.load_model(os.path.join(ORACLE, path))
                self.check_f32_oracle(model, stem, tol=1e-5)

    def test_gguf_llama_cpp(self):
        for stem in GGUF_MODELS:
            with self.subTest(stem):
                model = moe_ref.load_model(os.path.join(ORACLE, f"{stem}.gguf"))
                self.check_f32_oracle(model, stem, tol=1e-4)

    def test_gguf_as_hf_checkpoint(self):
        """The same weights under Hugging Face names (q/k un-permuted for
        Mixtral, half-split RoPE) must give llama.cpp's logits as well."""
        with tempfile.TemporaryDirectory() as tmp:
            for stem in GGUF_MODELS:
                with self.subTest(stem):
                    hf_dir = os.path.join(tmp, stem)
                    gguf_to_hf(os.path.join(ORACLE, f"{stem}.gguf"), hf_dir)
                    self.check_f32_oracle(moe_ref.load_model(hf_dir), stem, tol=1e-4)

    def test_mixtral_gguf_needs_interleaved_rope(self):
        j, ref = oracle_case("mixtral-micro-f32", "p16")
        model = moe_ref.load_model(os.path.join(ORACLE, "mixtral-micro-f32.gguf"), rope_style="half")
        logits, _, _ = moe_ref.run(model, j["prompt_ids"], len(j["greedy_ids"]))
        self.assertGreater(float(np.abs(logits - ref).max()), 0.1)

    def test_quantized_gguf_refused(self):
        with self.assertRaisesRegex(ValueError, "quantized"):
            moe_ref.load_model(os.path.join(ORACLE, "mixtral-tiny-q8_0.gguf"))

    def test_cli_matches_oracle(self):
        j, ref = oracle_case("olmoe-micro-f32", "p16")
        with tempfile.TemporaryDirectory() as tmp:
            npy, js = os.path.join(tmp, "l.npy"), os.path.join(tmp, "r.json")
            subprocess.run([sys.executable, REF_SCRIPT, "--model", os.path.join(ORACLE, "olmoe-micro-f32.gguf"),
                            "--tokens", ",".join(map(str, j["prompt_ids"])), "--greedy", "32",
                            "--logits-out", npy, "--json-out", js], check=True)
            logits = np.load(npy)
            with open(js) as f:
                out = json.load(f)
        self.assertEqual(logits.dtype, np.float32)
        self.assertEqual(logits.shape, ref.shape)
        self.assertLessEqual(float(np.abs(logits - ref).max()), 1e-4)
        self.assertEqual(out["prompt_ids"], j["prompt_ids"])
        self.assertEqual(out["greedy_ids"], j["greedy_ids"])
        self.assertEqual(len(out["greedy_top1_minus_top2"]), 32)


@unittest.skipUnless(HAVE_ORACLE and os.path.isdir(os.path.join(ORACLE, "deepseek2")), NO_ORACLE)
class DeepseekOracleTests(unittest.TestCase):
    """deepseek_ref.py (latent attention, YaRN, sigmoid + bias + groups routing, shared experts,
    dense first layer) against llama.cpp (GGUF) and the independent float64 reference (grouped HF
    checkpoint), through both GGUF attention layouts and both formats."""

    def check(self, model, stem, tol):
        for p in PROMPTS:
            j, ref = oracle_case(os.path.join("deepseek2", stem), p)
            tf, _, _ = moe_ref.run(model, j["prompt_ids"] + j["greedy_ids"], 0)
            _, greedy, _ = moe_ref.run(model, j["prompt_ids"], len(j["greedy_ids"]))
            with self.subTest(stem=stem, prompt=p):
                self.assertLess(np.abs(tf - ref).max(), tol)
                self.assertEqual(greedy, j["greedy_ids"])

    def test_every_layout(self):
        sys.path.insert(0, os.path.join(REPO, "tests", "golden"))
        import deepseek_convert as dc
        d = os.path.join(ORACLE, "deepseek2")
        gguf, hf = os.path.join(d, "deepseek-micro-f32.gguf"), os.path.join(d, "deepseek-grouped-micro-f32")
        self.check(moe_ref.load_model(gguf), "deepseek-micro-f32", 1e-4)          # llama.cpp float32
        self.check(moe_ref.load_model(hf), "deepseek-grouped-micro-f32", 5e-6)    # float64 stored as float32
        with tempfile.TemporaryDirectory() as tmp:
            dc.gguf_to_split_kv_b(gguf, os.path.join(tmp, "split.gguf"))
            self.check(moe_ref.load_model(os.path.join(tmp, "split.gguf")), "deepseek-micro-f32", 1e-4)
            dc.gguf_to_hf(gguf, os.path.join(tmp, "hf"))
            self.check(moe_ref.load_model(os.path.join(tmp, "hf")), "deepseek-micro-f32", 1e-4)
            dc.hf_to_gguf(hf, os.path.join(tmp, "grouped.gguf"))
            self.check(moe_ref.load_model(os.path.join(tmp, "grouped.gguf")), "deepseek-grouped-micro-f32", 5e-6)


class RoutingTests(unittest.TestCase):
    """Model.route on hand-made logits: every routing option."""

    def model(self, n_experts, top_k, **kw):
        spec = moe_ref.Spec(family="mixtral", hidden=n_experts, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=2,
                            vocab=4, n_experts=n_experts, top_k=top_k, norm_topk_prob=kw.pop("norm", False),
                            eps=1e-6, rope_theta=1e4, rope_style="half", qk_norm=None, **kw)
        return moe_ref.Model(spec, None, [], None, None)

    def route(self, m, logits, bias=None):
        L = {"router": np.eye(len(logits))}
        if bias is not None:
            L["router_bias"] = np.asarray(bias, dtype=np.float64)
        top, w = m.route(L, np.asarray([logits], dtype=np.float64))
        return top[0].tolist(), w[0]

    def test_sigmoid_bias_selects_only(self):
        m = self.model(4, 2, scoring="sigmoid", norm=True, routed_scaling=2.5)
        top, w = self.route(m, [0, 1, -1, 2], bias=[0, 0, 5, -5])
        self.assertEqual(top, [2, 1])
        s = 1 / (1 + np.exp(-np.array([-1.0, 1.0])))
        np.testing.assert_allclose(w, 2.5 * s / s.sum(), rtol=1e-14)

    def test_groups(self):
        logits = [3, -5, 2, 2, 1.5, 1.5, 0, 0]
        self.assertEqual(self.route(self.model(8, 2, scoring="sigmoid"), logits)[0], [0, 2])
        grouped = self.model(8, 2, scoring="sigmoid", n_group=4, topk_group=2)
        self.assertEqual(self.route(grouped, logits)[0], [2, 3])
        by_max = self.model(8, 2, n_group=4, topk_group=2, group_score="max")
        top, w = self.route(by_max, logits)
        self.assertEqual(top, [0, 2])
        np.testing.assert_allclose(w[1], np.exp(2) / np.exp(logits).sum(), rtol=1e-14)


class GeneratorTests(unittest.TestCase):
    PROMPT = [1, 17, 300, 42, 259, 511, 3, 260]

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def files(self, d):
        out = {}
        for fn in sorted(os.listdir(d)):
            with open(os.path.join(d, fn), "rb") as f:
                out[fn] = f.read()
        return out

    def test_same_seed_same_bytes(self):
        for i in range(2):
            generate(os.path.join(self.tmp, f"a{i}"), "--family", "qwen2_moe", "--dtype", "bf16", "--seed", "7")
        generate(os.path.join(self.tmp, "b"), "--family", "qwen2_moe", "--dtype", "bf16", "--seed", "8")
        a0, a1, b = (self.files(os.path.join(self.tmp, x)) for x in ("a0", "a1", "b"))
        self.assertEqual(a0, a1)
        self.assertNotEqual(a0["model.safetensors"], b["model.safetensors"])

    def test_sharded_equals_unsharded(self):
        one, three = os.path.join(self.tmp, "one"), os.path.join(self.tmp, "three")
        generate(one, "--family", "olmoe")
        generate(three, "--family", "olmoe", "--shards", "3")
        with open(os.path.join(three, "model.safetensors.index.json")) as f:
            index = json.load(f)
        shard_files = sorted(set(index["weight_map"].values()))
        self.assertEqual(shard_files, [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)])
        self.assertFalse(os.path.exists(os.path.join(three, "model.safetensors")))
        tensors = moe_ref.read_hf_tensors(three)
        self.assertEqual(set(tensors), set(index["weight_map"]))
        self.assertEqual(index["metadata"]["total_size"], sum(4 * t.size for t in tensors.values()))
        a, _, _ = moe_ref.run(moe_ref.load_model(one), self.PROMPT, 8)
        b, _, _ = moe_ref.run(moe_ref.load_model(three), self.PROMPT, 8)
        np.testing.assert_array_equal(a, b)

    def test_every_family_and_dtype_runs(self):
        cases = [(fam, "f32") for fam in gen.FAMILIES] + [("mixtral", "f16"), ("qwen3_moe", "bf16")]
        ref = {}
        for fam, dtype in cases:
            with self.subTest(family=fam, dtype=dtype):
                d = os.path.join(self.tmp, f"{fam}-{dtype}")
                generate(d, "--family", fam, "--dtype", dtype)
                with open(os.path.join(d, "config.json")) as f:
                    cfg = json.load(f)
                self.assertEqual(cfg["model_type"], fam)
                self.assertEqual(cfg["torch_dtype"], gen.TORCH_DTYPES[dtype])
                model = moe_ref.load_model(d)
                self.assertEqual(model.spec.family, fam)
                logits, greedy, margins = moe_ref.run(model, self.PROMPT, 8)
                self.assertEqual(logits.shape, (len(self.PROMPT) + 8, 512))
                self.assertTrue(np.isfinite(logits).all())
                self.assertTrue(1.0 < logits.std() < 10.0)
                if dtype == "f32":
                    ref[fam] = (logits, self.PROMPT + greedy)
                else:
                    # Rounding the same weights moves logits only a little (fed the
                    # f32 model's sequence: a greedy step may flip on a near-tie).
                    ref_logits, seq = ref[fam]
                    forced, _, _ = moe_ref.run(model, seq, 0)
                    self.assertLess(float(np.abs(forced - ref_logits).max()), 0.5)

    def test_family_shapes(self):
        d = os.path.join(self.tmp, "q3")
        generate(d, "--family", "qwen3_moe")
        t = moe_ref.read_hf_tensors(d)
        self.assertEqual(t["model.layers.0.self_attn.q_proj.weight"].shape, (128, 64))   # 4 heads x 32
        self.assertEqual(t["model.layers.0.self_attn.q_norm.weight"].shape, (32,))
        self.assertEqual(t["model.layers.0.mlp.experts.7.down_proj.weight"].shape, (64, 128))
        d = os.path.join(self.tmp, "q2")
        generate(d, "--family", "qwen2_moe", "--preset", "tiny", "--experts", "4", "--shared-ffn", "96")
        t = moe_ref.read_hf_tensors(d)
        self.assertEqual(t["model.layers.3.mlp.shared_expert.up_proj.weight"].shape, (96, 128))
        self.assertEqual(t["model.layers.0.mlp.shared_expert_gate.weight"].shape, (1, 128))
        self.assertEqual(t["model.layers.0.mlp.gate.weight"].shape, (4, 128))
        self.assertEqual(t["model.layers.0.self_attn.k_proj.bias"].shape, (64,))

    def test_bf16_rounds_to_nearest_even(self):
        x = np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, -2.5])
        got = np.frombuffer(gen.encode(x, "bf16"), dtype="<u2")
        # ties go to the even mantissa (down, then up), above the tie rounds up
        np.testing.assert_array_equal(got, [0x3F80, 0x3F82, 0x3F81, 0xC020])

    def test_fp8_e4m3_values_and_block_scales(self):
        v = moe_ref.fp8_e4m3_values()
        # 1.0, the largest finite 448, the smallest subnormal 2^-9, the smallest normal 2^-6, -1.5
        np.testing.assert_array_equal(v[[0x38, 0x7E, 0x01, 0x08, 0xBC, 0x00]], [1.0, 448.0, 2.0 ** -9, 2.0 ** -6, -1.5, 0.0])
        self.assertTrue(np.isnan(v[0x7F]) and np.isnan(v[0xFF]))
        self.assertEqual(int(np.isnan(v).sum()), 2)
        self.assertTrue(np.all(np.diff(v[:127]) > 0))
        # 130 x 3: two row blocks (the second of 2 rows), one partial column block
        t = {"w": np.ones((130, 3)), "w_scale_inv": np.array([[2.0], [0.5]])}
        moe_ref.apply_block_scales(t)
        self.assertEqual(set(t), {"w"})
        np.testing.assert_array_equal(t["w"][[0, 127, 128, 129], 0], [2.0, 2.0, 0.5, 0.5])
        with self.assertRaisesRegex(ValueError, "needs"):
            moe_ref.apply_block_scales({"w": np.ones((130, 3)), "w_scale_inv": np.ones((1, 1))})

    def test_tokenizer_is_consistent(self):
        generate(self.tmp, "--family", "mixtral")
        with open(os.path.join(self.tmp, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        with open(os.path.join(self.tmp, "tokenizer_config.json")) as f:
            tcfg = json.load(f)
        vocab = tok["model"]["vocab"]
        self.assertEqual(sorted(vocab.values()), list(range(512)))
        self.assertEqual([vocab[s] for s in ("<unk>", "<s>", "</s>", "<0x00>", "<0xFF>")], [0, 1, 2, 3, 258])
        self.assertEqual(vocab["\u2581"], 259)
        for merge in tok["model"]["merges"]:
            a, b = merge.split(" ")
            self.assertLess(max(vocab[a], vocab[b]), vocab[a + b])
        self.assertTrue(tok["model"]["byte_fallback"])
        self.assertEqual(tcfg["bos_token"], "<s>")
        self.assertIn("[INST]", tcfg["chat_template"])

    def test_unknown_family_refused(self):
        generate(self.tmp)
        path = os.path.join(self.tmp, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg.update(model_type="llama", architectures=["LlamaForCausalLM"])
        gen.write_json(path, cfg)
        with self.assertRaisesRegex(ValueError, "unsupported model"):
            moe_ref.load_model(self.tmp)


class QuantizedRefTests(unittest.TestCase):
    """quantized_ref's rounding is GGML's: weight codes round halves away from zero, activation
    codes (GGML's SIMD quantizer) to even; the scale is stored as F16; F16 fallback for rows that
    are not whole 32-blocks."""

    def test_q8_0_rounding(self):
        import quantized_ref
        x = np.zeros(32)
        x[0], x[1], x[2], x[3] = 127.0, 2.5, -2.5, 3.5        # d = 1 exactly
        np.testing.assert_array_equal(quantized_ref.q8_0(x)[:4], [127, 3, -3, 4])
        np.testing.assert_array_equal(quantized_ref.q8_0_activations(x)[:4], [127, 2, -2, 4])
        y = np.full(32, 0.1)                                   # d = 0.1/127 rounded to F16
        d = float(np.float16(np.float32(0.1) / np.float32(127)))
        np.testing.assert_array_equal(quantized_ref.q8_0(y), np.full(32, 127 * d))

    @unittest.skipUnless(HAVE_ORACLE, NO_ORACLE)
    def test_quantize_model_fallback_and_absorbed_form(self):
        import quantized_ref
        path = os.path.join(ORACLE, "deepseek2", "deepseek-micro-f32.gguf")
        L = quantized_ref.quantize_model(moe_ref.load_model(path)).layers[1]
        self.assertEqual(L["wq_b"].kind, "f16")                # 48-wide rows
        self.assertEqual(L["wq_a"].kind, "q8_0")
        self.assertEqual(L["k_b"].kind, "f16")                 # [kv_lora, nope 24]
        self.assertEqual(L["v_b"].kind, "q8_0")                # [v, kv_lora 32]
        self.assertIsInstance(L["router"], np.ndarray)         # routers stay F32
        # The absorbed form on unrounded k_b / v_b computes the decompressed reference's numbers.
        f32 = moe_ref.load_model(path)
        absorbed = quantized_ref.quantize_model(moe_ref.load_model(path), keys=())
        tokens = [1, 275, 290, 300, 13]
        np.testing.assert_allclose(absorbed.forward(tokens, absorbed.new_cache()), f32.forward(tokens, f32.new_cache()),
                                   rtol=0, atol=1e-10)


if __name__ == "__main__":
    unittest.main()
