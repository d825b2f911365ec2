"""Checks for the GLM-4.5 numpy reference (glm4moe_ref.py) against the peer oracle.

Run from the repository root:
    /usr/bin/python3 -m unittest tests/reference/test_glm4moe_ref.py

Reads ../shared/oracle/glm4moe (or $COLIBRI_ORACLE_DIR/glm4moe); skipped with a message when absent.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import glm4moe_ref  # noqa: E402

ORACLE = os.path.join(os.environ.get("COLIBRI_ORACLE_DIR") or os.path.join(REPO, "..", "shared", "oracle"),
                      "glm4moe")
HAVE_ORACLE = os.path.isfile(os.path.join(ORACLE, "README.md"))
NO_ORACLE = f"GLM-4.5 oracle not found at {ORACLE} (set COLIBRI_ORACLE_DIR)"
STEM = "glm4moe-micro-f32"
HF_DIR = os.path.join(ORACLE, STEM)
GGUF = os.path.join(ORACLE, f"{STEM}.gguf")
PROMPTS = ("p1", "p16", "p64")

# GGUF name of each NextN tensor of the Hugging Face checkpoint (layer 4 of the micro model).
NEXTN_GGUF = {"eh_proj": "nextn.eh_proj", "enorm": "nextn.enorm", "hnorm": "nextn.hnorm",
              "embed_tokens": "nextn.embed_tokens", "shared_head.norm": "nextn.shared_head_norm",
              "shared_head.head": "nextn.shared_head_head", "input_layernorm": "attn_norm",
              "post_attention_layernorm": "post_attention_norm", "self_attn.o_proj": "attn_output",
              "mlp.gate": "ffn_gate_inp"}


def case(p):
    with open(os.path.join(ORACLE, f"{STEM}.{p}.json")) as f:
        j = json.load(f)
    return j, np.load(os.path.join(ORACLE, j["logits_file"])).astype(np.float64)


@unittest.skipUnless(HAVE_ORACLE, NO_ORACLE)
class Glm4MoeOracleTests(unittest.TestCase):
    def check(self, model):
        for p in PROMPTS:
            j, ref = case(p)
            logits, _, _ = glm4moe_ref.run(model, j["prompt_ids"] + j["greedy_ids"], 0)
            _, greedy, margins = glm4moe_ref.run(model, j["prompt_ids"], len(j["greedy_ids"]))
            self.assertEqual(greedy, j["greedy_ids"], p)
            np.testing.assert_allclose(margins, j["greedy_top1_minus_top2"], atol=1e-5)
            # The oracle is float64 stored as float32: within a float32 rounding of every value.
            self.assertLessEqual(float(np.abs(logits - ref).max()), 2e-6, p)

    def test_huggingface_checkpoint(self):
        model = glm4moe_ref.load_model(HF_DIR)
        self.assertEqual((model.spec.rotary_dim, model.spec.first_dense, model.spec.n_group), (16, 1, 4))
        self.check(model)

    def test_gguf(self):
        model = glm4moe_ref.load_model(GGUF)
        self.assertEqual((model.spec.n_layers, model.spec.rotary_dim, model.spec.topk_group), (4, 16, 2))
        self.check(model)

    def test_full_rotary_is_wrong(self):
        """Rotating all head dims instead of the first half must not match: the partial rotary is
        what the oracle computes."""
        model = glm4moe_ref.load_model(HF_DIR)
        model.spec.rotary_dim = model.spec.head_dim
        model.inv_freq = model.spec.rope_theta ** (-np.arange(0, 32, 2, dtype=np.float64) / 32)
        j, ref = case("p16")
        logits, _, _ = glm4moe_ref.run(model, j["prompt_ids"] + j["greedy_ids"], 0)
        self.assertGreater(float(np.abs(logits - ref).max()), 0.05)

    def test_group_limit_changes_routing(self):
        """With every group kept the choice differs for some tokens: the group limit is exercised."""
        model = glm4moe_ref.load_model(HF_DIR)
        j, _ = case("p64")
        x = model.embed[np.asarray(j["prompt_ids"])]
        L = model.layers[1]
        limited, _ = model.route(L, model._rms(x, L["ffn_norm"]))
        model.spec.topk_group = model.spec.n_group
        free, _ = model.route(L, model._rms(x, L["ffn_norm"]))
        self.assertTrue((np.sort(limited, 1) != np.sort(free, 1)).any())

    def test_nextn_layer_same_in_both_files(self):
        hf, gg = glm4moe_ref.load_model(HF_DIR), glm4moe_ref.load_model(GGUF)
        self.assertEqual(len(hf.layers), 4)
        self.assertTrue(hf.nextn and gg.nextn)
        for hf_name, gguf_name in NEXTN_GGUF.items():
            a = hf.nextn[f"model.layers.4.{hf_name}.weight"]
            b = gg.nextn[f"blk.4.{gguf_name}.weight"]
            np.testing.assert_array_equal(a, b, hf_name)

    def test_mtp_logits_are_causal_and_read_both_inputs(self):
        """Row j of the MTP layer depends on tokens[: j + 2] only; the embedding and the hidden
        state both enter (swapping enorm and hnorm, or the halves of eh_proj, changes it)."""
        model = glm4moe_ref.load_model(HF_DIR)
        j, _ = case("p16")
        tokens = j["prompt_ids"]
        full = model.mtp_logits(tokens)
        self.assertEqual(full.shape, (len(tokens) - 1, model.spec.vocab))
        np.testing.assert_allclose(model.mtp_logits(tokens[:6]), full[:5], rtol=0, atol=1e-12)
        p = "model.layers.4."
        w = model.nextn[p + "eh_proj.weight"]
        model.nextn[p + "eh_proj.weight"] = np.concatenate([w[:, 64:], w[:, :64]], axis=1)
        self.assertGreater(float(np.abs(model.mtp_logits(tokens) - full).max()), 0.05)

    def test_cli(self):
        j, ref = case("p16")
        with tempfile.TemporaryDirectory() as tmp:
            npy, js, nx = (os.path.join(tmp, f) for f in ("l.npy", "r.json", "n.json"))
            subprocess.run([sys.executable, os.path.join(HERE, "glm4moe_ref.py"), "--model", GGUF,
                            "--tokens", ",".join(map(str, j["prompt_ids"])), "--greedy", "32",
                            "--logits-out", npy, "--json-out", js, "--nextn-out", nx], check=True)
            logits = np.load(npy)
            with open(js) as f:
                out = json.load(f)
            with open(nx) as f:
                nextn = json.load(f)
        self.assertEqual(logits.shape, ref.shape)
        self.assertLessEqual(float(np.abs(logits - ref).max()), 2e-6)
        self.assertEqual(out["greedy_ids"], j["greedy_ids"])
        self.assertEqual(nextn["blk.4.nextn.eh_proj.weight"], [64, 128])

    def test_wrong_family_refused(self):
        with self.assertRaisesRegex(ValueError, "not glm4moe"):
            glm4moe_ref.load_model(os.path.join(ORACLE, "..", "olmoe-micro-f32.gguf"))


if __name__ == "__main__":
    unittest.main()
