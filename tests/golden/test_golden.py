"""Golden tests: the engine against the independent numpy reference and the peer oracle.

For every family (tiny models with the real Hugging Face layout and tensor names, generated from a
fixed seed) and prompts of 1, 16 and 64 tokens: last-position and every teacher-forced logit row
match the reference (F32: max |diff| <= 1e-4 * max |logit|) and 32 greedy tokens are identical.
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib  # noqa: E402

P1 = [1]
P16 = [1, 275, 290, 300, 13, 350, 400, 268, 281, 450, 511, 32, 100, 269, 300, 301]
P64 = [1] + [int(x) for x in np.random.default_rng(64).integers(3, 512, size=63)]
PROMPTS = {'p1': P1, 'p16': P16, 'p64': P64}
GREEDY = 32


class GoldenBase(unittest.TestCase):
    family = 'mixtral'
    dtype = 'f32'
    quantize = 'f32'
    convert_extra = ()
    gen_extra = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir(f'colibri-golden-{cls.family}-')
        cls.hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), cls.family, 'micro', cls.dtype,
                                   extra=cls.gen_extra)
        cls.model = testlib.convert(cls.hf, os.path.join(cls.dir, 'model dir é'), cls.quantize,
                                    cls.convert_extra)

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def check_prompt(self, name, tokens, rel_tol=1e-4):
        ref_logits, ref_ids, margins = testlib.reference(self.hf, tokens, GREEDY, None)
        out = os.path.join(self.dir, f'{name}.npy')
        ids = testlib.cli_run(self.model, tokens, GREEDY, out)
        ours = np.load(out)
        self.assertEqual(ours.shape, (len(tokens) + GREEDY, 512))
        # Greedy ids identical; a divergence is only excusable at a reference near-tie.
        for step, (a, b) in enumerate(zip(ids, ref_ids)):
            if a != b:
                self.assertLess(margins[step], 1e-3, f'{name}: greedy step {step}: ours {a}, reference {b} '
                                f'(reference margin {margins[step]:.4g})')
                break
        else:
            self.assertEqual(ids, ref_ids)
        n = len(tokens) + GREEDY if ids == ref_ids else len(tokens)
        diff = np.abs(ours[:n] - ref_logits[:n]).max()
        scale = np.abs(ref_logits[:n]).max()
        self.assertLessEqual(diff, rel_tol * scale, f'{name}: max |dlogit| {diff:.3g} vs max |logit| {scale:.3g}')
        return diff / scale

    def test_prompts(self):
        for name, tokens in PROMPTS.items():
            with self.subTest(prompt=name):
                self.check_prompt(name, tokens)


class GoldenMixtral(GoldenBase):
    family = 'mixtral'


class GoldenMixtralBf16Sharded(GoldenBase):
    """BF16 source, sharded checkpoint, split expert files: same numbers as the reference on BF16."""
    family = 'mixtral'
    dtype = 'bf16'
    gen_extra = ('--shards', '3')
    convert_extra = ('--split-experts',)


class GoldenQwen2Moe(GoldenBase):
    family = 'qwen2_moe'


class GoldenOlmoe(GoldenBase):
    family = 'olmoe'


class GoldenQwen3Moe(GoldenBase):
    family = 'qwen3_moe'


class GoldenQwen3MoeDenseLayers(GoldenBase):
    """decoder_sparse_step 2: layers 0 and 2 are dense MLPs (resident), 1 and 3 MoE."""
    family = 'qwen3_moe'
    gen_extra = ('--layers', '4', '--decoder-sparse-step', '2')


class GoldenQwen2MoeMlpOnlyLayers(GoldenBase):
    """mlp_only_layers [0]: a dense first layer before a gated-shared-expert MoE layer."""
    family = 'qwen2_moe'
    gen_extra = ('--mlp-only-layers', '0')


class GoldenQwen3MoeYarn(GoldenBase):
    """YaRN context extension as the config defines it (an original context of 32 positions, so the
    64-token prompt and its greedy run reach 3x beyond it): the same numbers as the reference."""
    family = 'qwen3_moe'
    gen_extra = ('--config-set', 'rope_scaling={"rope_type": "yarn", "factor": 4.0, '
                 '"original_max_position_embeddings": 32, "beta_fast": 8, "beta_slow": 1}')


class GoldenQuantized(GoldenBase):
    """Q8_0 and F16 weights: close to the F32 reference, same greedy start."""
    quantize = 'q8_0'

    def test_prompts(self):
        for quant, tol in (('q8_0', 0.05), ('f16', 0.01)):
            model = testlib.convert(self.hf, os.path.join(self.dir, quant), quant)
            ref_logits, ref_ids, _ = testlib.reference(self.hf, P16, 0, None)
            out = os.path.join(self.dir, f'{quant}.npy')
            testlib.cli_run(model, P16, 0, out)
            ours = np.load(out)
            diff = np.abs(ours - ref_logits).max() / np.abs(ref_logits).max()
            with self.subTest(quant=quant):
                self.assertLess(diff, tol)
                self.assertTrue((ours.argmax(1) == ref_logits.argmax(1)).mean() >= 0.9)


class IQuantMixedGguf(unittest.TestCase):
    """A Mixtral-shaped GGUF whose matrices mix IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and
    IQ3_S, written by our GGUF writer: imported with --quantize keep it runs, and its logits match
    the same model expanded to F32 on import (dequantized blocks, float activations) within the
    Q8_K activation rounding the i-quant dot products use."""

    def test_mixed_iquant_file_keeps_its_types_and_runs(self):
        import iquant_mix
        work = testlib.tempdir('colibri-iquant-mix-')
        self.addCleanup(testlib.rmtree, work)
        path = os.path.join(work, 'iquant-mix.gguf')
        iquant_mix.write(path)
        V = iquant_mix.VOCAB
        kept = testlib.convert(path, os.path.join(work, 'keep'), 'keep')
        expanded = testlib.convert(path, os.path.join(work, 'f32'), 'f32')
        with open(os.path.join(kept, 'manifest.json')) as f:
            manifest = f.read()
        for name in iquant_mix.NAMES:
            self.assertIn(f'"{name}"', manifest)
        seq = iquant_mix.SEQUENCE
        ours, ref = os.path.join(work, 'keep.npy'), os.path.join(work, 'f32.npy')
        testlib.cli_run(kept, seq, 0, ours)
        testlib.cli_run(expanded, seq, 0, ref)
        ours, ref = np.load(ours), np.load(ref)
        self.assertEqual(ours.shape, (len(seq), V))
        self.assertTrue(np.isfinite(ours).all())
        self.assertGreater(np.abs(ref).max(), 0.1)  # a model that computes something
        # The Q8_K activation rounding alone moves this random model's rows by 2-5% of the largest
        # logit (measured: median 3.5%; the same file requantized to q8_0 vs F32: 2.5%). Exact
        # decoding and dot products are the quant unit tests' job.
        self.assertLess(np.median(np.abs(ours - ref).max(1)), 0.05 * np.abs(ref).max())
        self.assertGreaterEqual((ours.argmax(1) == ref.argmax(1)).mean(), 0.85)
        self.assertEqual(len(testlib.cli_run(kept, P16, 8)), 8)


FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_blocks(w):
    """[..., n] float -> (blocks [..., n/32, 16] u8, scales [..., n/32] u8) as the released gpt-oss
    checkpoints store them: code 2j in the low nibble of byte j, code 2j+1 in the high nibble."""
    x = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = np.abs(x).max(-1)
    e = np.clip(np.ceil(np.log2(np.maximum(amax, 1e-30) / 6.0)), -127, 127).astype(np.int64)
    scaled = x / np.exp2(e)[..., None]
    codes = np.abs(scaled[..., None] - FP4_VALUES).argmin(-1).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.astype(np.uint8), (e + 127).astype(np.uint8)


def write_gptoss_mxfp4_checkpoint(src, dst):
    """The oracle's F32 gpt-oss checkpoint rewritten as released: MXFP4 experts, BF16 elsewhere."""
    import shutil
    os.makedirs(dst, exist_ok=True)
    for f in ('config.json', 'tokenizer.json', 'tokenizer_config.json'):
        shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(src, 'model.safetensors'), 'rb') as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], 'little')
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == '__metadata__':
            continue
        a = np.frombuffer(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]], dtype=np.float32)
        a = a.reshape(v['shape'])
        if k.endswith('experts.gate_up_proj') or k.endswith('experts.down_proj'):
            blocks, scales = mxfp4_blocks(np.ascontiguousarray(a.transpose(0, 2, 1)))  # [E, out, in]
            out[k + '_blocks'], out[k + '_scales'] = ('U8', blocks), ('U8', scales)
        else:
            bits = a.view(np.uint32)
            bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
            out[k] = ('BF16', bf16)
    head, blob = {}, b''
    for k, (dt, a) in out.items():
        b = np.ascontiguousarray(a).tobytes()
        head[k] = {'dtype': dt, 'shape': list(a.shape), 'data_offsets': [len(blob), len(blob) + len(b)]}
        blob += b
    h = json.dumps(head).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(os.path.join(dst, 'model.safetensors'), 'wb') as f:
        f.write(len(h).to_bytes(8, 'little') + h + blob)
    with open(os.path.join(dst, 'config.json')) as f:
        cfg = json.load(f)
    cfg['torch_dtype'] = 'bfloat16'
    with open(os.path.join(dst, 'config.json'), 'w') as f:
        json.dump(cfg, f)


ORACLE_MODELS = ['mixtral-micro-f32', 'qwen2moe-micro-f32', 'olmoe-micro-f32', 'mixtral-tiny-q8_0',
                 'mixtral-tiny-q4_k_m']


@unittest.skipUnless(os.path.isdir(testlib.ORACLE), f'peer oracle not found at {testlib.ORACLE}')
class Oracle(unittest.TestCase):
    """Every oracle file through colibri-convert and colibri-cli, judged by check_engine.py:
    teacher-forced logits on the oracle's sequence and our own free-running greedy tokens."""

    def setUp(self):
        self.dir = testlib.tempdir('colibri-oracle-')

    def tearDown(self):
        testlib.rmtree(self.dir)

    def check(self, model, json_dir, name, quantized=False):
        """quantized: judge with check_engine.py's quantized rules (a re-quantized import of an F32
        oracle model), through a copy of the oracle json whose model name has no '-f32'."""
        results = {}
        for p in ('p1', 'p16', 'p64'):
            oj = os.path.join(json_dir, f'{name}.{p}.json')
            with open(oj) as f:
                j = json.load(f)
            if quantized:
                j['model'] = j['model'].replace('-f32', '-requantized')
                j['logits_file'] = os.path.join(json_dir, j['logits_file'])
                oj = os.path.join(self.dir, f'{name}.{p}.quantized.json')
                with open(oj, 'w') as f:
                    json.dump(j, f)
            logits = os.path.join(self.dir, f'{name}.{p}.npy')
            testlib.cli_run(model, j['prompt_ids'] + j['greedy_ids'], 0, logits)
            greedy = testlib.cli_run(model, j['prompt_ids'], len(j['greedy_ids']))
            r = subprocess.run([testlib.PY, os.path.join(testlib.ORACLE, 'check_engine.py'), oj,
                                '--logits', logits, '--greedy', ','.join(map(str, greedy))],
                               capture_output=True, text=True)
            with self.subTest(model=name, prompt=p):
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            results[p] = r.stdout.strip()
        print(f'\n{name}: {results}')

    def test_iquant_gguf_files_kept_as_they_are(self):
        """llama.cpp's i-quant files (../shared/oracle/iquants): IQ4_XS, IQ2_XXS and a mixed
        "dynamic quant" file, blocks kept bit for bit."""
        iq = os.path.join(testlib.ORACLE, 'iquants')
        for name in ('mixtral-tiny-iq4_xs', 'mixtral-tiny-iq2_xxs', 'qwen2moe-tiny-iq2_xxs-mix'):
            model = testlib.convert(os.path.join(iq, f'{name}.gguf'), os.path.join(self.dir, name), 'keep')
            self.check(model, iq, name)

    def test_qwen3moe_huggingface(self):
        model = testlib.convert(os.path.join(testlib.ORACLE, 'qwen3moe', 'qwen3moe-micro-f32'),
                                os.path.join(self.dir, 'qwen3moe'), 'f32')
        self.check(model, os.path.join(testlib.ORACLE, 'qwen3moe'), 'qwen3moe-micro-f32')

    def test_gptoss_huggingface(self):
        """gpt-oss (sinks, sliding layers, YaRN truncate false, clamped SwiGLU, biases) from its HF
        checkpoint with fused gate_up_proj experts."""
        d = os.path.join(testlib.ORACLE, 'gptoss')
        model = testlib.convert(os.path.join(d, 'gptoss-micro-f32'), os.path.join(self.dir, 'gptoss-hf'), 'f32')
        self.check(model, d, 'gptoss-micro-f32')

    def test_gptoss_huggingface_mxfp4_blocks(self):
        """gpt-oss as released: experts as MXFP4 *_blocks / *_scales, the rest BF16. Made from the
        oracle's F32 checkpoint; imported with keep (blocks kept as MXFP4, rows repacked to GGML's
        nibble order); judged against the float64 reference reading the same blocks."""
        src = os.path.join(testlib.ORACLE, 'gptoss', 'gptoss-micro-f32')
        hf = os.path.join(self.dir, 'gptoss-mxfp4-hf')
        write_gptoss_mxfp4_checkpoint(src, hf)
        model = testlib.convert(hf, os.path.join(self.dir, 'gptoss-mxfp4'), 'keep')
        with open(os.path.join(model, 'manifest.json')) as f:
            manifest = json.load(f)
        self.assertEqual({p['dtype'] for b in manifest['experts']['blocks'] for p in b['parts'] if p['name'] == 'gate'},
                         {'mxfp4'})
        self.assertEqual({t['dtype'] for t in manifest['dense']['tensors'] if t['name'].endswith('attn_q')}, {'bf16'})
        # Dequantized to F32 on import, the blocks must give the reference's numbers (a wrong
        # nibble order or scale would be far off); kept as MXFP4, activations are quantized as
        # GGML does (Q8_0 for MXFP4, BF16 for BF16): the oracle's quantized thresholds.
        exact = testlib.convert(hf, os.path.join(self.dir, 'gptoss-mxfp4-f32'), 'f32')
        for name, tokens in PROMPTS.items():
            with self.subTest(prompt=name):
                ref_logits, ref_ids, margins = testlib.reference(hf, tokens, GREEDY, None)
                out = os.path.join(self.dir, f'{name}.npy')
                testlib.cli_run(exact, tokens + ref_ids, 0, out)
                self.assertLess(np.abs(np.load(out) - ref_logits).max(), 1e-3)
                testlib.cli_run(model, tokens + ref_ids, 0, out)
                ours = np.load(out)
                # The GGUF twin's error against its reference is 0.29 (issue 36 item 5 saw 0.47
                # here); this path measures 0.26 / 0.31 / 0.26 for p1 / p16 / p64 (Xeon, AVX-512).
                self.assertLessEqual(np.median(np.abs(ours - ref_logits).max(1)), 0.35)
                self.assertGreaterEqual((ours.argmax(1) == ref_logits.argmax(1)).mean(), 0.85)

    def test_gptoss_mxfp4_gguf_kept(self):
        """The gpt-oss GGUF with MXFP4 experts, imported with keep: experts stay MXFP4."""
        d = os.path.join(testlib.ORACLE, 'gptoss')
        model = testlib.convert(os.path.join(d, 'gptoss-micro-mxfp4.gguf'), os.path.join(self.dir, 'gptoss'), 'keep')
        with open(os.path.join(model, 'manifest.json')) as f:
            manifest = json.load(f)
        types = {p['dtype'] for b in manifest['experts']['blocks'] for p in b['parts'] if not p['name'].endswith('_bias')}
        self.assertEqual(types, {'mxfp4'})
        self.check(model, d, 'gptoss-micro-mxfp4')

    def test_gptoss_placement_never_changes_tokens(self):
        """Split expert files and a cache far smaller than the experts: the same greedy tokens."""
        d = os.path.join(testlib.ORACLE, 'gptoss')
        j = json.load(open(os.path.join(d, 'gptoss-micro-mxfp4.p64.json')))
        whole = testlib.convert(os.path.join(d, 'gptoss-micro-mxfp4.gguf'), os.path.join(self.dir, 'a'), 'keep')
        split = testlib.convert(os.path.join(d, 'gptoss-micro-mxfp4.gguf'), os.path.join(self.dir, 'b'), 'keep',
                                ('--split-experts',))
        base = testlib.cli_run(whole, j['prompt_ids'], 32)
        self.assertEqual(len(base), 32)
        self.assertEqual(testlib.cli_run(split, j['prompt_ids'], 32, extra=('--expert-cache-size', '16K')), base)

    def test_gguf_files_kept_as_they_are(self):
        for name in ORACLE_MODELS:
            model = testlib.convert(os.path.join(testlib.ORACLE, f'{name}.gguf'), os.path.join(self.dir, name), 'keep')
            self.check(model, testlib.ORACLE, name)

    def test_qwen3moe_as_gguf(self):
        """The Qwen3-MoE oracle checkpoint written as a qwen3moe GGUF (llama.cpp's key and tensor
        names, stacked experts) imports and passes the same oracle checks."""
        import gguf_write
        hf = os.path.join(testlib.ORACLE, 'qwen3moe', 'qwen3moe-micro-f32')
        with open(os.path.join(hf, 'config.json')) as f:
            cfg = json.load(f)
        with open(os.path.join(hf, 'model.safetensors'), 'rb') as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], 'little')
        header = json.loads(raw[8:8 + n])
        w = {k: np.frombuffer(raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]], dtype=np.float32)
             .reshape(v['shape']) for k, v in header.items() if k != '__metadata__'}
        a = 'qwen3moe'
        meta = {'general.architecture': a, f'{a}.block_count': cfg['num_hidden_layers'],
                f'{a}.context_length': cfg['max_position_embeddings'], f'{a}.embedding_length': cfg['hidden_size'],
                f'{a}.feed_forward_length': cfg['intermediate_size'],
                f'{a}.expert_feed_forward_length': cfg['moe_intermediate_size'],
                f'{a}.attention.head_count': cfg['num_attention_heads'],
                f'{a}.attention.head_count_kv': cfg['num_key_value_heads'],
                f'{a}.attention.key_length': cfg['head_dim'], f'{a}.attention.value_length': cfg['head_dim'],
                f'{a}.rope.freq_base': float(cfg['rope_theta']),
                f'{a}.attention.layer_norm_rms_epsilon': float(cfg['rms_norm_eps']),
                f'{a}.expert_count': cfg['num_experts'], f'{a}.expert_used_count': cfg['num_experts_per_tok'],
                'tokenizer.ggml.bos_token_id': cfg['bos_token_id'], 'tokenizer.ggml.eos_token_id': cfg['eos_token_id']}
        t = {'token_embd.weight': w['model.embed_tokens.weight'], 'output_norm.weight': w['model.norm.weight'],
             'output.weight': w['lm_head.weight']}
        for i in range(cfg['num_hidden_layers']):
            p, b = f'model.layers.{i}.', f'blk.{i}.'
            for hf_name, g in (('input_layernorm', 'attn_norm'), ('self_attn.q_proj', 'attn_q'),
                               ('self_attn.k_proj', 'attn_k'), ('self_attn.v_proj', 'attn_v'),
                               ('self_attn.o_proj', 'attn_output'), ('self_attn.q_norm', 'attn_q_norm'),
                               ('self_attn.k_norm', 'attn_k_norm'), ('post_attention_layernorm', 'ffn_norm'),
                               ('mlp.gate', 'ffn_gate_inp')):
                t[f'{b}{g}.weight'] = w[f'{p}{hf_name}.weight']
            for proj, g in (('gate_proj', 'ffn_gate_exps'), ('up_proj', 'ffn_up_exps'), ('down_proj', 'ffn_down_exps')):
                t[f'{b}{g}.weight'] = np.stack([w[f'{p}mlp.experts.{e}.{proj}.weight'] for e in range(cfg['num_experts'])])
        path = os.path.join(self.dir, 'qwen3moe.gguf')
        gguf_write.write_gguf(path, meta, t)
        model = testlib.convert(path, os.path.join(self.dir, 'qwen3moe-gguf'), 'keep')
        self.check(model, os.path.join(testlib.ORACLE, 'qwen3moe'), 'qwen3moe-micro-f32')

    def check_quantized(self, model, json_dir, name, preset):
        """check_engine.py with its quantized rules: the F32 oracle's files judged as a `preset` model."""
        for p in ('p1', 'p16', 'p64'):
            with open(os.path.join(json_dir, f'{name}.{p}.json')) as f:
                j = json.load(f)
            j['model'] = name.replace('-f32', f'-{preset}')
            j['logits_file'] = os.path.join(json_dir, j['logits_file'])
            oj = os.path.join(self.dir, f'{name}-{preset}.{p}.json')
            with open(oj, 'w') as f:
                json.dump(j, f)
            logits = os.path.join(self.dir, f'{name}-{preset}.{p}.npy')
            testlib.cli_run(model, j['prompt_ids'] + j['greedy_ids'], 0, logits)
            greedy = testlib.cli_run(model, j['prompt_ids'], len(j['greedy_ids']))
            r = subprocess.run([testlib.PY, os.path.join(testlib.ORACLE, 'check_engine.py'), oj, '--logits', logits,
                                '--greedy', ','.join(map(str, greedy))], capture_output=True, text=True)
            with self.subTest(model=name, preset=preset, prompt=p):
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            print(f'\n{name} {preset} {p}: {r.stdout.strip()}')

    def read_extra(self, model):
        """(manifest, the extra tensors' entries by name, an F32 extra tensor by name); asserts
        that no NextN tensor is among the dense ones."""
        with open(os.path.join(model, 'manifest.json')) as f:
            m = json.load(f)
        self.assertFalse([t['name'] for t in m['dense']['tensors'] if t['name'].startswith('nextn.')])
        extra = {t['name']: t for t in m['extra']['tensors']}
        with open(os.path.join(model, m['extra']['file']), 'rb') as f:
            raw = f.read()

        def tensor(name):
            t = extra[name]
            self.assertEqual(t['dtype'], 'f32', name)
            return np.frombuffer(raw[t['offset']:t['offset'] + t['size']], dtype='<f4').reshape(t['shape'])
        return m, extra, tensor

    def check_nextn_kept(self, model, reference):
        """The NextN/MTP layer is in extra.bin with the checkpoint's values, not among the dense tensors."""
        _, extra, tensor = self.read_extra(model)

        L = f'model.layers.{len(reference.layers)}.'
        np.testing.assert_array_equal(tensor('nextn.0.eh_proj'), reference.nextn[L + 'eh_proj.weight'])
        np.testing.assert_array_equal(tensor('nextn.0.shared_head_head'), reference.nextn[L + 'shared_head.head.weight'])
        up = np.stack([reference.nextn[f'{L}mlp.experts.{e}.up_proj.weight'] for e in range(reference.spec.n_experts)])
        np.testing.assert_array_equal(tensor('nextn.0.ffn_up_exps'), up)
        np.testing.assert_array_equal(tensor('nextn.0.attn_q_bias'), reference.nextn[L + 'self_attn.q_proj.bias'])
        self.assertEqual(len(extra), len(reference.nextn) - 3 * reference.spec.n_experts + 3)  # experts stacked

    def test_glm4moe_huggingface_and_gguf(self):
        """GLM-4.5 (../shared/oracle/glm4moe): the same model as a Hugging Face checkpoint and as a
        glm4moe GGUF passes at F32 and stored as f16; both keep the NextN layer."""
        import glm4moe_ref
        d = os.path.join(testlib.ORACLE, 'glm4moe')
        name = 'glm4moe-micro-f32'
        hf = os.path.join(d, name)
        reference = glm4moe_ref.load_model(hf)
        for label, src, preset in (('hf', hf, 'f32'), ('gguf', os.path.join(d, f'{name}.gguf'), 'keep')):
            model = testlib.convert(src, os.path.join(self.dir, label), preset)
            self.check(model, d, name)
            self.check_nextn_kept(model, reference)
            # f16 storage, judged by check_engine's quantized rules. q8_0 fails them on this tiny
            # random model (its router gaps go down to 0.004: KL 0.03-0.12, median row max 0.35-0.42).
            f16 = testlib.convert(src, os.path.join(self.dir, f'{label}-f16'), 'f16')
            self.check_quantized(f16, d, name, 'f16')

    def test_glm4moe_placement_never_changes_tokens(self):
        """Where the experts live (one file or one per expert, a cache of a few blocks or of all,
        lookahead prefetch and reader threads, pinned experts) never changes a token; logits move
        only by the order experts are summed in (blocks are applied as they arrive)."""
        d = os.path.join(testlib.ORACLE, 'glm4moe')
        name = 'glm4moe-micro-f32'
        j = json.load(open(os.path.join(d, f'{name}.p64.json')))
        pins = os.path.join(self.dir, 'pins.json')
        with open(pins, 'w') as f:
            json.dump([[1, 0], [2, 5], [3, 15]], f)
        one = testlib.convert(os.path.join(d, name), os.path.join(self.dir, 'one'), 'f32')
        split = testlib.convert(os.path.join(d, name), os.path.join(self.dir, 'split'), 'f32', ('--split-experts',))
        runs = {}
        for label, model, extra in (
                ('default', one, ()),
                ('tiny cache', one, ('--expert-cache-size', '64K', '--cache-policy', 'lru')),
                ('prefetch', one, ('--prefetch-layers', '2', '--io-threads', '2')),
                ('pinned', one, ('--pinned-experts', pins, '--expert-cache-size', '256K')),
                ('split files', split, ('--expert-cache-size', '128K'))):
            out = os.path.join(self.dir, f'{label}.npy')
            ids = testlib.cli_run(model, j['prompt_ids'], 32, out, extra)
            runs[label] = (ids, np.load(out))
        ids, logits = runs['default']
        self.assertEqual(ids, j['greedy_ids'])
        for label, (other_ids, other_logits) in runs.items():
            with self.subTest(placement=label):
                self.assertEqual(other_ids, ids)
                np.testing.assert_allclose(other_logits, logits, rtol=0, atol=2e-5)

    def test_gguf_requantized_stays_close(self):
        """F32 GGUF re-quantized on import (q8_0): top-1 agreement with llama.cpp's F32 logits."""
        name = 'mixtral-micro-f32'
        model = testlib.convert(os.path.join(testlib.ORACLE, f'{name}.gguf'), os.path.join(self.dir, 'q8'), 'q8_0')
        j = json.load(open(os.path.join(testlib.ORACLE, f'{name}.p16.json')))
        out = os.path.join(self.dir, 'q8.npy')
        testlib.cli_run(model, j['prompt_ids'] + j['greedy_ids'], 0, out)
        ours, ref = np.load(out), np.load(os.path.join(testlib.ORACLE, j['logits_file']))
        self.assertGreaterEqual((ours.argmax(1) == ref.argmax(1)).mean(), 0.9)
        # A routing flip moves single rows a lot; the typical row stays close.
        self.assertLess(np.median(np.abs(ours - ref).max(1)), 0.05 * np.abs(ref).max())


DEEPSEEK = os.path.join(testlib.ORACLE, 'deepseek2')


def kl_rows(ref, ours):
    """KL(ref || ours) of each row's softmax, as check_engine.py computes it."""
    def log_softmax(x):
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    lr, lo = log_softmax(np.asarray(ref, dtype=np.float64)), log_softmax(np.asarray(ours, dtype=np.float64))
    return (np.exp(lr) * (lr - lo)).sum(axis=1)


@unittest.skipUnless(os.path.isdir(DEEPSEEK), f'DeepSeek oracle not found at {DEEPSEEK}')
class OracleDeepseek(Oracle):
    """The deepseek2 oracle cases (MLA with the latent KV cache, YaRN, sigmoid routing with the
    selection bias, groups, shared expert, a dense first layer) through every import path:
    the GGUF in both attention layouts and as a Hugging Face checkpoint, the grouped Hugging
    Face checkpoint and the same as a GGUF; F32 and re-quantized (q8_0, q4_k_m)."""

    def paths(self):
        import deepseek_convert as dc
        split = os.path.join(self.dir, 'split.gguf')
        dc.gguf_to_split_kv_b(os.path.join(DEEPSEEK, 'deepseek-micro-f32.gguf'), split)
        as_hf = os.path.join(self.dir, 'as-hf')
        dc.gguf_to_hf(os.path.join(DEEPSEEK, 'deepseek-micro-f32.gguf'), as_hf)
        grouped_gguf = os.path.join(self.dir, 'grouped.gguf')
        dc.hf_to_gguf(os.path.join(DEEPSEEK, 'deepseek-grouped-micro-f32'), grouped_gguf)
        return [('deepseek-micro-f32', os.path.join(DEEPSEEK, 'deepseek-micro-f32.gguf')),
                ('deepseek-micro-f32', split), ('deepseek-micro-f32', as_hf),
                ('deepseek-grouped-micro-f32', os.path.join(DEEPSEEK, 'deepseek-grouped-micro-f32')),
                ('deepseek-grouped-micro-f32', grouped_gguf)]

    def test_every_import_path_f32(self):
        for i, (name, src) in enumerate(self.paths()):
            model = testlib.convert(src, os.path.join(self.dir, f'm{i}'), 'f32')
            self.check(model, DEEPSEEK, name)

    def quantized_vs_reference(self, model, src, name, p, dtype):
        """The engine's teacher-forced logits of `model` (src imported as `dtype`) against the F32
        oracle and against the float64 reference on the same stored weights (quantized_ref.py):
        (KL per row vs the oracle, rows whose expert choice the rounding flips in the reference,
        per-row max |ours - reference|, ours, the oracle's logits)."""
        import moe_ref
        import quantized_ref
        with open(os.path.join(DEEPSEEK, f'{name}.{p}.json')) as f:
            j = json.load(f)
        seq = j['prompt_ids'] + j['greedy_ids']
        out = os.path.join(self.dir, f'{name}.{p}.{dtype}.npy')
        testlib.cli_run(model, seq, 0, out)
        ours, ref = np.load(out).astype(np.float64), np.load(os.path.join(DEEPSEEK, j['logits_file']))
        f32 = moe_ref.load_model(src)
        f32_routes = quantized_ref.record_routes(f32)
        f32.forward(seq, f32.new_cache())
        rounded = quantized_ref.quantize_model(moe_ref.load_model(src), dtype=dtype)
        rounded_routes = quantized_ref.record_routes(rounded)
        rounded_logits = rounded.forward(seq, rounded.new_cache())
        flipped = np.zeros(len(seq), dtype=bool)
        for a, b in zip(f32_routes, rounded_routes):
            flipped |= (a != b).any(axis=1)
        self.assertGreaterEqual((ours.argmax(1) == rounded_logits.argmax(1)).mean(), 0.95)
        return kl_rows(ref, ours), flipped, np.abs(ours - rounded_logits).max(axis=1), ours, ref

    def test_quantized(self):
        """Re-quantized on import, judged by check_engine.py's quantized rules (median row max
        |dlogit| <= 0.4, top-1 >= 0.85, mean KL <= 0.03). f16 passes them on every prompt but
        one (deepseek-micro p1: one row whose expert choice f16 rounding flips, the float64
        reference on the f16 weights flips it too). q8_0 cannot pass them on these tiny random
        models: the float64 reference itself, run on the q8_0 weights with GGML's activation
        rounding (tests/reference/quantized_ref.py), has mean KL 0.08-0.29. The KL comes from
        the rows whose expert choice flips (F32 choice gaps down to 4e-4, group gaps to 5e-4):
        ~90% of it; the other rows stay under 0.03. So beyond the rule, this asserts that the
        engine computes the rounded model (top-1 against the reference on the same weights; the
        logits only as close as float32 rounding-boundary flips allow, which these models
        amplify) and that the rule's misses are those flips (docs/ARCHITECTURE.md, "Quantized
        imports of the deepseek2 oracle models")."""
        for name, src in (('deepseek-micro-f32', os.path.join(DEEPSEEK, 'deepseek-micro-f32.gguf')),
                          ('deepseek-grouped-micro-f32', os.path.join(DEEPSEEK, 'deepseek-grouped-micro-f32'))):
            f16 = testlib.convert(src, os.path.join(self.dir, f'{name}-f16'), 'f16')
            if name == 'deepseek-grouped-micro-f32':
                self.check_quantized(f16, DEEPSEEK, name, 'f16')
            q8 = testlib.convert(src, os.path.join(self.dir, f'{name}-q8_0'), 'q8_0')
            for dtype, model, prompts in (('f16', f16, ('p1', 'p16', 'p64')), ('q8_0', q8, ('p16', 'p64'))):
                for p in prompts:
                    with self.subTest(model=name, dtype=dtype, prompt=p):
                        kl, flipped, diff, ours, ref = self.quantized_vs_reference(model, src, name, p, dtype)
                        self.assertGreaterEqual((ours.argmax(1) == ref.argmax(1)).mean(), 0.85)
                        self.assertLess(np.median(np.abs(ours - ref).max(1)), 0.6)
                        self.assertLess(diff[0], 1e-4)
                        self.assertLess(np.median(diff), 0.02 if dtype == 'f16' else 0.2)
                        if dtype == 'f16' and not flipped.any():
                            self.assertLessEqual(kl.mean(), 0.03)
                        else:
                            self.assertGreater(flipped.sum(), 0)
                            self.assertGreater(kl[flipped].sum() / kl.sum(), 0.8)
                            self.assertLessEqual(kl[~flipped].mean(), 0.03)
                    print(f'\n{name} {dtype} {p}: mean KL {kl.mean():.4f}, {flipped.sum()}/{len(kl)} rows with a '
                          f'routing flip carry {kl[flipped].sum() / kl.sum():.0%}, the others {kl[~flipped].mean():.4f}; '
                          f'vs the rounded reference median row max {np.median(diff):.2e}')

    def test_fp8_huggingface(self):
        """DeepSeek-V3 / R1 / Kimi K2 as published: the layers' linear weights FP8 e4m3 with
        128x128 `weight_scale_inv` block scales (q_b_proj 160 rows and kv_b_proj 176 rows end in a
        partial block, every 32..80-wide matrix is one partial column block). Imported at f32, the
        weights are bit for bit the numpy dequantization (tests/reference/moe_ref.py) written as
        an F32 checkpoint, and the logits match the float64 reference reading the FP8 file."""
        import deepseek_convert as dc
        import moe_ref
        src = os.path.join(DEEPSEEK, 'deepseek-grouped-micro-f32')
        fp8 = os.path.join(self.dir, 'fp8-hf')
        dc.hf_to_fp8(src, fp8)
        dequantized = os.path.join(self.dir, 'dequantized-hf')
        dc.write_f32_hf(fp8, dequantized, moe_ref.read_hf_tensors(fp8))
        ours = testlib.convert(fp8, os.path.join(self.dir, 'fp8'), 'f32')
        numpy_model = testlib.convert(dequantized, os.path.join(self.dir, 'dequantized'), 'f32')
        for f in ('dense.bin', 'experts.bin'):
            with open(os.path.join(ours, f), 'rb') as a, open(os.path.join(numpy_model, f), 'rb') as b:
                self.assertTrue(a.read() == b.read(), f'{f} differs from the numpy dequantization')
        for name in ('p16', 'p64'):
            tokens = PROMPTS[name]
            with self.subTest(prompt=name):
                ref_logits, ref_ids, _ = testlib.reference(fp8, tokens, GREEDY, None)
                out = os.path.join(self.dir, f'fp8.{name}.npy')
                ids = testlib.cli_run(ours, tokens, GREEDY, out)
                self.assertEqual(ids, ref_ids)
                got = np.load(out)
                self.assertLessEqual(np.abs(got - ref_logits).max(), 1e-4 * np.abs(ref_logits).max())

    def test_mtp_layer_kept_in_extra(self):
        """DeepSeek-V3's MTP layer (model.layers.<num_hidden_layers>: a whole MoE layer with
        eh_proj, enorm, hnorm, embed_tokens, shared_head) from the F32 checkpoint, its FP8 form
        and a GGUF with nextn blocks: in extra.bin with the checkpoint's values (FP8: the numpy
        dequantization), never among the dense tensors, and the model's outputs unchanged."""
        import deepseek_convert as dc
        import moe_ref
        name = 'deepseek-grouped-micro-f32'
        hf = os.path.join(self.dir, 'mtp-hf')
        dc.with_mtp_layer(os.path.join(DEEPSEEK, name), hf)
        fp8 = os.path.join(self.dir, 'mtp-fp8')
        dc.hf_to_fp8(hf, fp8)
        gguf = os.path.join(self.dir, 'mtp.gguf')
        dc.hf_to_gguf(hf, gguf)
        L, E = 'model.layers.3.', 32
        for label, src, values in (('hf', hf, moe_ref.read_hf_tensors(hf)), ('fp8', fp8, moe_ref.read_hf_tensors(fp8)),
                                   ('gguf', gguf, moe_ref.read_hf_tensors(hf))):
            with self.subTest(source=label):
                model = testlib.convert(src, os.path.join(self.dir, f'converted-{label}'), 'f32')
                m, extra, tensor = self.read_extra(model)
                self.assertFalse([b for b in m['experts']['blocks'] if b['layer'] >= 3])
                self.assertEqual(m['config']['n_layers'], 3)
                for ours, theirs in (('eh_proj', 'eh_proj'), ('enorm', 'enorm'), ('embed_tokens', 'embed_tokens'),
                                     ('shared_head_head', 'shared_head.head'), ('attn_q_a', 'self_attn.q_a_proj'),
                                     ('attn_kv_a_mqa', 'self_attn.kv_a_proj_with_mqa'),
                                     ('attn_kv_b', 'self_attn.kv_b_proj'), ('ffn_gate_inp', 'mlp.gate'),
                                     ('ffn_down_shexp', 'mlp.shared_experts.down_proj')):
                    np.testing.assert_array_equal(tensor(f'nextn.0.{ours}'), values[f'{L}{theirs}.weight'].astype(np.float32),
                                                  err_msg=ours)
                np.testing.assert_array_equal(tensor('nextn.0.ffn_exp_probs_b'),
                                              values[L + 'mlp.gate.e_score_correction_bias'].astype(np.float32))
                up = np.stack([values[f'{L}mlp.experts.{e}.up_proj.weight'] for e in range(E)]).astype(np.float32)
                np.testing.assert_array_equal(tensor('nextn.0.ffn_up_exps'), up)
                # 6 MTP tensors, 7 of attention, 2 norms, router + bias, 3 shared, 3 stacked expert parts
                self.assertEqual(len(extra), 6 + 7 + 2 + 2 + 3 + 3, sorted(extra))
                if label != 'fp8':
                    self.check(model, DEEPSEEK, name)

    def test_fp8_bad_block_scales(self):
        """A block-scale tensor of the wrong shape, or none, fails the import naming the tensor."""
        import deepseek_convert as dc
        src = os.path.join(DEEPSEEK, 'deepseek-grouped-micro-f32')
        w = 'model.layers.1.self_attn.q_b_proj.weight'
        for label, shape, message in (('wrong shape', (1, 1), f"'{w}_scale_inv' must be [2, 1]"),
                                      ('transposed', (1, 2), f"'{w}_scale_inv' must be [2, 1]"),
                                      ('missing', None, f"'{w}' has no '{w}_scale_inv' block scales")):
            with self.subTest(case=label):
                bad = os.path.join(self.dir, f'bad-{label}')
                dc.hf_to_fp8(src, bad, scale_shape={w: shape} if shape else None, omit_scale=() if shape else (w,))
                p = testlib.run([testlib.binary('colibri-convert'), '--input', bad, '--output',
                                 os.path.join(self.dir, f'out-{label}'), '--quantize', 'f32'], check=False)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(message, p.stderr + p.stdout)
                self.assertFalse(os.path.exists(os.path.join(self.dir, f'out-{label}', 'manifest.json')))

    # The Oracle tests of the other families are not repeated here.
    test_iquant_gguf_files_kept_as_they_are = None
    test_qwen3moe_huggingface = None
    test_gguf_files_kept_as_they_are = None
    test_qwen3moe_as_gguf = None
    test_gguf_requantized_stays_close = None


if __name__ == '__main__':
    unittest.main()


@unittest.skipUnless(os.path.isdir(testlib.ORACLE), f'peer oracle not found at {testlib.ORACLE}')
class GgufInPlace(unittest.TestCase):
    """Every oracle GGUF served where it lies (no conversion): it passes the oracle's checks, and its
    greedy tokens are the converted container's (placement never changes a token). Each file is
    linked into a temporary directory, where its sidecar (recorded checksums) goes."""
    check = Oracle.check

    FILES = ([(testlib.ORACLE, n) for n in ORACLE_MODELS] +
             [(os.path.join(testlib.ORACLE, 'iquants'), n)
              for n in ('mixtral-tiny-iq4_xs', 'mixtral-tiny-iq2_xxs', 'qwen2moe-tiny-iq2_xxs-mix')] +
             [(os.path.join(testlib.ORACLE, 'gptoss'), 'gptoss-micro-mxfp4'),
              (os.path.join(testlib.ORACLE, 'glm4moe'), 'glm4moe-micro-f32'),
              (DEEPSEEK, 'deepseek-micro-f32')])

    def setUp(self):
        self.dir = testlib.tempdir('colibri-in-place-')

    def tearDown(self):
        testlib.rmtree(self.dir)

    def link(self, d, name):
        sub = os.path.join(self.dir, name)
        os.makedirs(sub, exist_ok=True)
        path = os.path.join(sub, f'{name}.gguf')
        os.symlink(os.path.join(d, f'{name}.gguf'), path)
        return path

    def test_every_oracle_gguf_in_place(self):
        for d, name in self.FILES:
            with self.subTest(model=name):
                gguf = self.link(d, name)
                self.check(gguf, d, name)
                j = json.load(open(os.path.join(d, f'{name}.p64.json')))
                converted = testlib.convert(gguf, os.path.join(self.dir, f'{name}-converted'), 'keep')
                want = testlib.cli_run(converted, j['prompt_ids'], 24)
                # The file, its directory, and a cache far smaller than the experts: the same tokens.
                self.assertEqual(testlib.cli_run(gguf, j['prompt_ids'], 24), want)
                blocks = json.load(open(os.path.join(converted, 'manifest.json')))['experts']['blocks']
                # About three blocks (in place a block also holds its ranges' alignment slack).
                small = 3 * (max(b['padded_size'] for b in blocks) + 6 * 4096)
                self.assertEqual(testlib.cli_run(os.path.dirname(gguf), j['prompt_ids'], 24,
                                                 extra=('--expert-cache-size', str(small))), want)
                if name.startswith('glm4moe'):  # its NextN layer drafts from the file too
                    self.assertEqual(testlib.cli_run(gguf, j['prompt_ids'], 24,
                                                     extra=('--speculative', 'mtp')), want)
                sidecar = os.path.join(os.path.dirname(gguf), f'{name}.colibri', 'checksums.json')
                recorded = json.load(open(sidecar))
                self.assertEqual(recorded['format'], 'colibri-gguf-checksums')
                self.assertGreater(len(recorded['experts']), 0)

    def test_split_gguf_in_place(self):
        """A model split in three parts as gguf-split writes it: served from its first part, any
        other part or its directory, with the single file's tokens; a missing part is named."""
        import gguf_write
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'reference'))
        from gguf_np import GGUFFile
        src = os.path.join(testlib.ORACLE, 'mixtral-micro-f32.gguf')
        g = GGUFFile(src)
        meta = {k: v for k, v in g.metadata.items() if isinstance(v, (bool, int, float, str))}
        names = list(g.tensors)
        chunks = [names[i::3] for i in range(3)]
        split = os.path.join(self.dir, 'split')
        os.makedirs(split)
        for i, chunk in enumerate(chunks):
            m = dict(meta) if i == 0 else {'general.architecture': meta['general.architecture']}
            m.update({'split.no': i, 'split.count': 3, 'split.tensors.count': len(names)})
            gguf_write.write_gguf(os.path.join(split, f'micro-{i + 1:05d}-of-00003.gguf'), m,
                                  {n: g.tensor(n) for n in chunk})
        whole = os.path.join(self.dir, 'whole.gguf')
        gguf_write.write_gguf(whole, meta, {n: g.tensor(n) for n in names})
        j = json.load(open(os.path.join(testlib.ORACLE, 'mixtral-micro-f32.p64.json')))
        want = testlib.cli_run(whole, j['prompt_ids'], 24)
        self.assertEqual(len(want), 24)
        for path in ('micro-00001-of-00003.gguf', 'micro-00003-of-00003.gguf', ''):
            with self.subTest(path=path):
                self.assertEqual(testlib.cli_run(os.path.join(split, path), j['prompt_ids'], 24), want)
        os.remove(os.path.join(split, 'micro-00002-of-00003.gguf'))
        r = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', split, '--prompt-tokens', '1,2',
                         '--max-tokens', '2'], check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('1 of 3 parts missing (micro-00002-of-00003.gguf)', r.stdout + r.stderr)

    def test_truncated_and_changed_files_are_named(self):
        """A download cut short is refused at start naming the missing bytes; a block whose bytes
        change after they were recorded is a DataLoss error, never served."""
        src = os.path.join(testlib.ORACLE, 'mixtral-tiny-q8_0.gguf')
        path = os.path.join(self.dir, 'tiny.gguf')
        with open(src, 'rb') as f:
            data = f.read()
        with open(path, 'wb') as f:
            f.write(data[:len(data) - 50000])
        cmd = [testlib.binary('colibri-cli'), 'run', '--model', path, '--prompt-tokens', '1,2,3',
               '--max-tokens', '4', '--temperature', '0', '--ignore-eos']
        r = testlib.run(cmd, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('is truncated', r.stderr + r.stdout)
        self.assertIn('50000 bytes missing', r.stderr + r.stdout)
        with open(path, 'wb') as f:
            f.write(data)
        testlib.run(cmd)  # records every block it reads
        doctor = testlib.run([testlib.binary('colibri-cli'), 'doctor', '--model', path, '--deep'],
                             check=False)
        self.assertIn('GGUF served in place', doctor.stdout + doctor.stderr)
        self.assertIn('checksums recorded and consistent', doctor.stdout + doctor.stderr)
        # Flip bytes in the last expert tensor's data, keeping the size and the time.
        st = os.stat(path)
        with open(path, 'r+b') as f:
            f.seek(len(data) - 4096)
            chunk = bytearray(f.read(64))
            f.seek(len(data) - 4096)
            f.write(bytes(b ^ 0xff for b in chunk))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        doctor = testlib.run([testlib.binary('colibri-cli'), 'doctor', '--model', path, '--deep'],
                             check=False)
        self.assertNotEqual(doctor.returncode, 0)
        self.assertIn('fail their check', doctor.stdout + doctor.stderr)
