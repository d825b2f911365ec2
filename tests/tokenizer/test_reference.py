"""Reference tests: colibri's tokenizers and chat templates against the models' own tooling.

- Tokenization (ids, with and without special tokens) and detokenization of the real Qwen3,
  DeepSeek-V3, gpt-oss (o200k) and Mistral/Mixtral (the Llama-2 package) tokenizer files against transformers.js
  (@lenml/tokenizers), on the corpus of corpus.py plus the rendered chat prompts.
- The same vocabularies loaded from GGUF metadata (written here the way llama.cpp's converter
  writes it) must give the same ids; the oracle's toy SentencePiece GGUF must give llama.cpp's ids.
- Chat templates (Qwen3's and DeepSeek-V3's from their tokenizer_config.json; Llama-2-chat,
  Mixtral-Instruct, Mistral-v0.3 tool calling and gpt-oss's harmony format from templates/) against Jinja2 run with
  transformers' settings (hf_chat_template.py), errors included.
- Invalid UTF-8 input is refused with the byte offset, never a crash.

The npm packages are installed at test time into a cache outside the repository (see
npm_reference.py); the test skips with the reason when node, npm or the registry is unavailable,
or when python3-jinja2 is missing. Zero mismatches is the bar.
"""

import json
import os
import shutil
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import corpus  # noqa: E402
import npm_reference as ref  # noqa: E402

TEMPLATE_DIR = os.path.join(ref.HERE, "templates")
ORACLE_DIR = os.environ.get("COLIBRI_ORACLE_DIR", os.path.join(ref.REPO, "..", "shared", "oracle"))
# Templates rendered against each tokenizer: (template name, tokenizer model, template file or None
# for the tokenizer's own).
TEMPLATES = [
    ("qwen3", "qwen3", None),
    ("deepseek_v3", "deepseek_v3", None),
    ("llama2_chat", "llama2", "llama2_chat.jinja"),
    ("mixtral_instruct", "llama2", "mixtral_instruct.jinja"),
    ("mistral_tools", "llama2", "mistral_tools.jinja"),
    ("gpt_oss", "gpt_oss", "gpt_oss.jinja"),  # harmony: gpt-oss's chat_template.jinja
]


def gguf_metadata_file(path, kvs):
    """Writes a GGUF v3 file holding only metadata (no tensors), as llama.cpp's writer lays it out."""
    def string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def value(t, v):
        if t == "string":
            return struct.pack("<I", 8) + string(v)
        if t == "u32":
            return struct.pack("<I", 4) + struct.pack("<I", v)
        if t == "bool":
            return struct.pack("<I", 7) + struct.pack("<?", v)
        if t == "strings":
            return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(string(s) for s in v)
        if t == "i32s":
            return struct.pack("<IIQ", 9, 5, len(v)) + struct.pack("<%di" % len(v), *v)
        if t == "f32s":
            return struct.pack("<IIQ", 9, 6, len(v)) + struct.pack("<%df" % len(v), *v)
        raise ValueError(t)

    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
    for key, t, v in kvs:
        out += string(key) + value(t, v)
    out += b"\0" * ((32 - len(out) % 32) % 32)
    with open(path, "wb") as f:
        f.write(out)


def gguf_from_tokenizer_json(path, model, pre):
    """A "gpt2" GGUF tokenizer converted from a byte-level tokenizer.json + config."""
    with open(os.path.join(ref.model_dir(model), "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    cfg = ref.tokenizer_config(model)
    vocab = tj["model"]["vocab"]
    added = {a["id"]: a for a in tj["added_tokens"]}
    n = max(max(vocab.values()), max(added)) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]
    types = [5] * n  # unused
    for tok, i in vocab.items():
        tokens[i], types[i] = tok, 1
    for i, a in added.items():
        tokens[i], types[i] = a["content"], 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]

    def token_id(key):
        v = cfg.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return tokens.index(v) if v else None

    kvs = [("general.architecture", "string", "test"), ("tokenizer.ggml.model", "string", "gpt2"),
           ("tokenizer.ggml.pre", "string", pre), ("tokenizer.ggml.tokens", "strings", tokens),
           ("tokenizer.ggml.token_type", "i32s", types), ("tokenizer.ggml.merges", "strings", merges),
           ("tokenizer.ggml.add_bos_token", "bool", bool(cfg.get("add_bos_token")))]
    for key, gkey in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")):
        i = token_id(key)
        if i is not None:
            kvs.append(("tokenizer.ggml." + gkey, "u32", i))
    if cfg.get("chat_template"):
        kvs.append(("tokenizer.chat_template", "string", cfg["chat_template"]))
    gguf_metadata_file(path, kvs)


def first_invalid_offset(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return None


class TokenizerReferenceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(ref.CLI):
            raise AssertionError("colibri-cli not built at %s (set COLIBRI_BIN_DIR)" % ref.CLI)
        try:
            ref.ensure_packages()
        except ref.Unavailable as e:
            raise unittest.SkipTest("reference tokenizers unavailable: %s" % e)
        try:
            import jinja2  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("python3-jinja2 is not installed (scripts/install-deps.sh)")
        import hf_chat_template
        cls.hf = hf_chat_template
        cls.tmp = tempfile.mkdtemp(prefix="colibri-tok-ref-")
        cls.prompts = {}  # model -> reference-rendered prompts, added to the tokenization corpus
        cls._ref_cache = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    # ----- helpers
    def template_source(self, model, template_file):
        if template_file is None:
            return ref.tokenizer_config(model)["chat_template"]
        with open(os.path.join(TEMPLATE_DIR, template_file), encoding="utf-8") as f:
            return f.read()

    def reference_prompts(self, name, model, template_file):
        """[(case name, case, prompt or None, error or None)] rendered by Jinja2."""
        source = self.template_source(model, template_file)
        specials = self.hf.special_tokens_map(ref.tokenizer_config(model))
        out = []
        for case_name, case in corpus.conversations():
            try:
                out.append((case_name, case, self.hf.render(source, case, specials), None))
            except self.hf.TemplateRaised as e:
                out.append((case_name, case, None, str(e)))
        return out

    def corpus_for(self, model):
        texts = corpus.texts()
        for name, m, template_file in TEMPLATES:
            if m == model:
                texts += [p for _, _, p, _ in self.reference_prompts(name, m, template_file) if p is not None]
        return texts

    def reference_encode(self, model, texts):
        key = (model, len(texts))
        if key not in self._ref_cache:
            request = {"model": model, "encode": [{"text": t, "add_special": s} for t in texts for s in (False, True)]}
            ids = ref.run_node(request)["encode"]
            self._ref_cache[key] = (ids[0::2], ids[1::2])
        return self._ref_cache[key]

    def our_encode(self, tokenizer, texts, add_special):
        path = ref.write_json(self.tmp, "texts.json", texts)
        args = ["tokenize", "--tokenizer", tokenizer, "--input", path] + ([] if add_special else ["--no-special"])
        rc, out, err = ref.run_cli(args)
        self.assertEqual(rc, 0, err)
        return json.loads(out)

    def compare_ids(self, label, texts, ours, expected):
        mismatches = []
        for text, a, b in zip(texts, ours, expected):
            if a != b:
                mismatches.append("%s: %r\n  ours %s\n  ref  %s" % (label, text[:200], str(a)[:300], str(b)[:300]))
        self.assertEqual(len(ours), len(expected))
        print("%s: %d texts, %d mismatches" % (label, len(texts), len(mismatches)), file=sys.stderr)
        return mismatches

    # ----- tests
    def test_encode_matches_transformers_js(self):
        mismatches = []
        for model in ref.MODEL_PACKAGES:
            texts = self.corpus_for(model)
            ref_plain, ref_special = self.reference_encode(model, texts)
            if model == "deepseek_v3":
                # transformers' LlamaTokenizerFast rebuilds the post-processor from add_bos_token
                # (so Hugging Face adds BOS); transformers.js keeps the file's ByteLevel one.
                ref_special = [[0] + ids for ids in ref_plain]
            ours_plain = self.our_encode(ref.model_dir(model), texts, False)
            ours_special = self.our_encode(ref.model_dir(model), texts, True)
            mismatches += self.compare_ids(model + " (no special)", texts, ours_plain, ref_plain)
            mismatches += self.compare_ids(model + " (special)", texts, ours_special, ref_special)
        self.assertEqual(mismatches, [], "\n".join(mismatches[:20]))

    def test_large_mixed_document_matches_transformers_js(self):
        # The bench's ~1 MB document as one text: long inputs, one SentencePiece "word" of a
        # megabyte, caches warm and cold.
        text = corpus.bench_corpus()
        mismatches = []
        for model in ref.MODEL_PACKAGES:
            expected = ref.run_node({"model": model, "encode": [{"text": text, "add_special": False}]})["encode"]
            ours = self.our_encode(ref.model_dir(model), [text], False)
            mismatches += self.compare_ids(model + " (1 MB document)", ["<1 MB document>"], ours, expected)
        self.assertEqual(mismatches, [], "\n".join(m[:2000] for m in mismatches))

    def test_decode_matches_transformers_js(self):
        mismatches = []
        for model in ref.MODEL_PACKAGES:
            texts = self.corpus_for(model)
            _, ref_special = self.reference_encode(model, texts)
            path = ref.write_json(self.tmp, "ids.json", ref_special)
            for skip in (False, True):
                expected = ref.run_node({"model": model, "decode": [{"ids": ids, "skip_special": skip}
                                                                    for ids in ref_special]})["decode"]
                rc, out, err = ref.run_cli(["detokenize", "--tokenizer", ref.model_dir(model), "--input", path] +
                                           (["--skip-special"] if skip else []))
                self.assertEqual(rc, 0, err)
                ours = json.loads(out)
                bad = ["%s skip=%s: %r\n  ours %r\n  ref  %r" % (model, skip, t[:100], a[:200], b[:200])
                       for t, a, b in zip(texts, ours, expected) if a != b]
                print("%s decode (skip_special=%s): %d sequences, %d mismatches" % (model, skip, len(texts), len(bad)),
                      file=sys.stderr)
                mismatches += bad
        self.assertEqual(mismatches, [], "\n".join(mismatches[:20]))

    def test_invalid_utf8_is_refused_with_offset(self):
        tokenizers = [ref.model_dir(m) for m in ref.MODEL_PACKAGES]
        for tokenizer in tokenizers:
            for data in corpus.invalid_utf8():
                path = os.path.join(self.tmp, "bad.txt")
                with open(path, "wb") as f:
                    f.write(data)
                rc, out, err = ref.run_cli(["tokenize", "--tokenizer", tokenizer, "--text-file", path])
                self.assertEqual(rc, 2, "%r: rc %d, %s" % (data, rc, err))
                self.assertIn("not valid UTF-8 (byte offset %d)" % first_invalid_offset(data), err)
        # Batch input reports the error per text and carries on.
        print("invalid UTF-8: %d inputs x %d tokenizers refused with the byte offset" %
              (len(corpus.invalid_utf8()), len(tokenizers)), file=sys.stderr)

    def test_gguf_gpt2_matches_transformers_js(self):
        mismatches = []
        for model, pre in (("qwen3", "qwen2"), ("deepseek_v3", "deepseek-v3"), ("gpt_oss", "gpt-4o")):
            path = os.path.join(self.tmp, model + ".gguf")
            gguf_from_tokenizer_json(path, model, pre)
            texts = self.corpus_for(model)
            ref_plain, _ = self.reference_encode(model, texts)
            mismatches += self.compare_ids(model + " from GGUF", texts, self.our_encode(path, texts, False), ref_plain)
        self.assertEqual(mismatches, [], "\n".join(mismatches[:20]))

    def test_gguf_llama_matches_llama_cpp(self):
        refs_path = os.path.join(ORACLE_DIR, "tokenizer_refs.json")
        if not os.path.exists(refs_path):
            self.skipTest("oracle files not found in %s" % ORACLE_DIR)
        with open(refs_path, encoding="utf-8") as f:
            refs = json.load(f)
        texts = list(refs)
        gguf = os.path.join(ORACLE_DIR, "mixtral-micro-f32.gguf")
        ours = self.our_encode(gguf, texts, True)
        mismatches = self.compare_ids("oracle GGUF vs llama.cpp", texts, ours, [refs[t] for t in texts])
        # The same toy vocabulary in Hugging Face form (scores vs merges) must agree on the corpus.
        hf_dir = os.path.join(ORACLE_DIR, "qwen3moe", "qwen3moe-micro-f32")
        if os.path.exists(os.path.join(hf_dir, "tokenizer.json")):
            texts = corpus.texts()
            mismatches += self.compare_ids("oracle GGUF vs its tokenizer.json", texts,
                                           self.our_encode(gguf, texts, True), self.our_encode(hf_dir, texts, True))
        self.assertEqual(mismatches, [], "\n".join(mismatches[:20]))

    def test_chat_templates_match_jinja2(self):
        mismatches, total, errors = [], 0, 0
        for name, model, template_file in TEMPLATES:
            expected = self.reference_prompts(name, model, template_file)
            cases = ref.write_json(self.tmp, "cases.json", [case for _, case, _, _ in expected])
            args = ["chat-template", "--tokenizer", ref.model_dir(model), "--messages", cases, "--batch"]
            if template_file is not None:
                args += ["--template", os.path.join(TEMPLATE_DIR, template_file)]
            rc, out, err = ref.run_cli(args)
            self.assertEqual(rc, 0, err)
            ours = json.loads(out)
            for (case_name, _, prompt, error), got in zip(expected, ours):
                total += 1
                label = "%s/%s" % (name, case_name)
                if prompt is not None:
                    if got.get("prompt") != prompt:
                        mismatches.append("%s:\n  ours %r\n  ref  %r" % (label, got, prompt))
                    continue
                errors += 1
                if "error" not in got:
                    mismatches.append("%s: Jinja2 failed (%s) but we rendered %r" % (label, error, got["prompt"]))
                elif error.startswith("TemplateError: ") and error[len("TemplateError: "):] not in got["error"]:
                    mismatches.append("%s: raise_exception message differs:\n  ours %s\n  ref  %s" %
                                      (label, got["error"], error))
        print("chat templates: %d renders (%d expected errors), %d mismatches" % (total, errors, len(mismatches)),
              file=sys.stderr)
        self.assertEqual(mismatches, [], "\n".join(mismatches[:10]))

    def test_gguf_chat_template_matches_jinja2(self):
        path = os.path.join(self.tmp, "qwen3-template.gguf")
        gguf_from_tokenizer_json(path, "qwen3", "qwen2")
        expected = self.reference_prompts("qwen3", "qwen3", None)
        cases = ref.write_json(self.tmp, "cases.json", [case for _, case, _, _ in expected])
        rc, out, err = ref.run_cli(["chat-template", "--tokenizer", path, "--messages", cases, "--batch"])
        self.assertEqual(rc, 0, err)
        for (case_name, _, prompt, error), got in zip(expected, json.loads(out)):
            if prompt is None:
                self.assertIn("error", got, case_name)
            else:
                self.assertEqual(got.get("prompt"), prompt, case_name)


if __name__ == "__main__":
    unittest.main()
