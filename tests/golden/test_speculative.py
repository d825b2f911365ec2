"""Speculative decoding, every family: greedy tokens with each drafter identical to plain decoding.

The golden tests' tiny models (Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE generated from a fixed seed;
gpt-oss with its sliding-window layers, deepseek2 with latent attention and GLM-4.5 with its
NextN/MTP layer from the oracle directory) through colibri-cli run: --speculative off, ngram
(prompt lookup), self (the experts re-quantized to q8_0 in RAM), mtp (the model's MTP layer,
where it has one) and auto, 32 greedy tokens on a repetitive and a random prompt.
The drafters must actually verify drafts (the run's speculative log line), and every token must
be the plain run's. The MTP layer's logits (colibri-cli mtp-logits) are checked against the
float64 reference of tests/reference/glm4moe_ref.py.
"""
import os
import re
import sys
import json
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

REPEAT = [1, 5, 9, 2, 7, 3, 1, 5, 9, 2, 7, 3, 1, 5]
RANDOM = [1] + [int(x) for x in np.random.default_rng(64).integers(3, 500, size=40)]
GREEDY = 32
STATS = re.compile(r'speculative: (\d+) verify passes, (\d+) of (\d+) drafted tokens accepted')


def run(model, tokens, extra=()):
    """Greedy ids and (verify passes, accepted, drafted) of one colibri-cli run."""
    cmd = [testlib.binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens', ','.join(map(str, tokens)),
           '--max-tokens', str(GREEDY), '--temperature', '0', '--ignore-eos', '--threads', '2', *extra]
    p = testlib.run(cmd)
    ids = json.loads(p.stdout.strip().splitlines()[-1])
    m = STATS.search(p.stdout + p.stderr)
    return ids, tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


class SpeculativeBase(unittest.TestCase):
    family = 'mixtral'
    has_mtp = False

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir(f'colibri-speculative-{cls.family}-')
        cls.model = cls.make_model(cls.dir)

    @classmethod
    def make_model(cls, d):
        hf = testlib.gen_model(os.path.join(d, 'hf'), cls.family, 'micro', 'f32')
        return testlib.convert(hf, os.path.join(d, 'model'), 'f32')

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def test_every_drafter_gives_the_plain_tokens(self):
        for name, prompt in (('repeat', REPEAT), ('random', RANDOM)):
            plain, stats = run(self.model, prompt, ('--speculative', 'off'))
            self.assertEqual(len(plain), GREEDY)
            self.assertEqual(stats, (0, 0, 0))
            modes = [('ngram', ()), ('self', ('--draft-experts', 'q8_0')), ('auto', ())]
            if self.has_mtp:
                modes.append(('mtp', ()))
            for mode, extra in modes:
                with self.subTest(prompt=name, mode=mode):
                    ids, (passes, accepted, drafted) = run(self.model, prompt,
                                                           ('--speculative', mode, '--draft-max', '4', *extra))
                    self.assertEqual(ids, plain)
                    print(f'\n{self.family} {name} {mode}: {passes} passes, {accepted}/{drafted} accepted', end='')
                    if mode == 'mtp':
                        # Random weights: the MTP layer rarely agrees, but it drafts every pass.
                        self.assertGreater(passes, 0)
                        self.assertGreater(drafted, 0)
                    if mode == 'self':
                        # An 8-bit copy of f32 experts drafts what the model says nearly always.
                        self.assertGreater(passes, 0)
                        self.assertGreater(accepted, drafted // 2)
                        self.assertLess(passes, GREEDY)


class SpeculativeMixtral(SpeculativeBase):
    family = 'mixtral'


class SpeculativeQwen2Moe(SpeculativeBase):
    family = 'qwen2_moe'


class SpeculativeOlmoe(SpeculativeBase):
    family = 'olmoe'


class SpeculativeQwen3Moe(SpeculativeBase):
    family = 'qwen3_moe'


class SpeculativeOracle(SpeculativeBase):
    """A model of the oracle directory (`source`, relative to it), converted to f32."""
    source = ''

    @classmethod
    def make_model(cls, d):
        src = os.path.join(testlib.ORACLE, cls.source)
        if not os.path.exists(src):
            raise unittest.SkipTest(f'no oracle model at {src} (set COLIBRI_ORACLE_DIR)')
        return testlib.convert(src, os.path.join(d, 'model'), 'f32')


class SpeculativeGptOss(SpeculativeOracle):
    """Sliding window 8 on alternate layers, attention sinks, clamped SwiGLU with biases."""
    family = 'gptoss'
    source = 'gptoss/gptoss-micro-f32'


class SpeculativeDeepseek2(SpeculativeOracle):
    """Latent attention (the latent KV cache rolled back), sigmoid routing, shared experts."""
    family = 'deepseek2'
    source = 'deepseek2/deepseek-micro-f32.gguf'


class SpeculativeGlm4Moe(SpeculativeOracle):
    """Partial RoPE, q/k/v biases, group-limited sigmoid routing, and the NextN/MTP layer."""
    family = 'glm4moe'
    source = 'glm4moe/glm4moe-micro-f32'
    has_mtp = True

    def test_mtp_logits_match_the_reference(self):
        sys.path.insert(0, os.path.join(testlib.REPO, 'tests', 'reference'))
        import glm4moe_ref  # noqa: E402
        ref_model = glm4moe_ref.load_model(os.path.join(testlib.ORACLE, self.source))
        out = os.path.join(self.dir, 'mtp.npy')
        for tokens in (REPEAT, RANDOM):
            testlib.run([testlib.binary('colibri-cli'), 'mtp-logits', '--model', self.model,
                         '--prompt-tokens', ','.join(map(str, tokens)), '--out', out])
            ours = np.load(out).astype(np.float64)
            ref = ref_model.mtp_logits(tokens)
            self.assertEqual(ours.shape, ref.shape)
            # float32 against float64: the oracle rules' logit tolerance, and the same argmax.
            self.assertLess(float(np.abs(ours - ref).max()), 1e-3)
            np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))

    def test_mtp_on_a_model_without_the_layer_is_refused(self):
        other = os.path.join(testlib.ORACLE, 'deepseek2', 'deepseek-micro-f32.gguf')
        if not os.path.exists(other):
            self.skipTest(f'no oracle model at {other}')
        model = testlib.convert(other, os.path.join(self.dir, 'no-mtp'), 'f32')
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens', '1,2,3',
                         '--max-tokens', '2', '--speculative', 'mtp'], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn('no MTP/NextN layer', p.stdout + p.stderr)


def load_tests(loader, tests, pattern):
    """The families' classes only: the two bases hold the tests, each family runs them."""
    suite = unittest.TestSuite()
    for obj in list(globals().values()):
        if isinstance(obj, type) and issubclass(obj, SpeculativeBase) and \
                obj not in (SpeculativeBase, SpeculativeOracle):
            suite.addTests(loader.loadTestsFromTestCase(obj))
    return suite


if __name__ == '__main__':
    unittest.main()
