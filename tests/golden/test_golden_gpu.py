"""Golden models on the GPU: `colibri-cli run --backend cuda` against the CPU backend and the
numpy reference, for every family (micro preset, F32 and Q8_0), with experts imported per use and
through a VRAM tier smaller than the experts (with lookahead prefetch).

Greedy ids must equal the CPU's (a divergence only at a reference near-tie) and the F32 logits
stay within 1e-4 x max |logit| of the reference, as on the CPU. Skips, printing "no CUDA device"
or "no CUDA backend", when the build or the machine has none.
"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iquant_mix  # noqa: E402
import testlib  # noqa: E402

P16 = [1, 275, 290, 300, 13, 350, 400, 268, 281, 450, 511, 32, 100, 269, 300, 301]
P40 = [1] + [int(x) for x in np.random.default_rng(40).integers(3, 512, size=39)]
GREEDY = 24


def gpu_probe(model):
    """None when `--backend cuda` runs, else the reason it cannot."""
    p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', model, '--prompt-tokens', '1',
                     '--max-tokens', '1', '--temperature', '0', '--backend', 'cuda'], check=False)
    if p.returncode == 0:
        return None
    if 'no CUDA backend' in p.stderr:
        return 'no CUDA backend in this build'
    if 'no device' in p.stderr or 'CUDA devices found' in p.stderr:
        return 'no CUDA device'
    raise AssertionError(f'colibri-cli run --backend cuda failed: {p.stderr}')


class GoldenGpu(unittest.TestCase):
    families = ('mixtral', 'qwen2_moe', 'olmoe', 'qwen3_moe')

    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-golden-gpu-')
        cls.hf, cls.models = {}, {}
        for family in cls.families:
            cls.hf[family] = testlib.gen_model(os.path.join(cls.dir, f'hf-{family}'), family, 'micro', 'f32')
            for quant in ('f32', 'q8_0'):
                cls.models[family, quant] = testlib.convert(cls.hf[family],
                                                            os.path.join(cls.dir, f'{family}-{quant}'), quant)
        cls.skip_reason = gpu_probe(cls.models['mixtral', 'f32'])

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def setUp(self):
        if self.skip_reason:
            self.skipTest(self.skip_reason)

    def run_cli(self, model, tokens, name, extra):
        out = os.path.join(self.dir, f'{name}.npy')
        ids = testlib.cli_run(model, tokens, GREEDY, out, extra)
        return ids, np.load(out)

    def check(self, family, quant, tokens, extra, name):
        model = self.models[family, quant]
        cpu_ids, cpu_logits = self.run_cli(model, tokens, f'{name}-cpu', ())
        gpu_ids, gpu_logits = self.run_cli(model, tokens, f'{name}-gpu', ('--backend', 'cuda', *extra))
        ref_logits, ref_ids, margins = testlib.reference(self.hf[family], tokens, GREEDY, None)
        n = len(tokens)
        for step, (a, b) in enumerate(zip(gpu_ids, cpu_ids)):
            if a != b:
                self.assertLess(margins[step], 1e-3, f'{name}: greedy step {step}: gpu {a}, cpu {b}')
                n = len(tokens) + step
                break
        if quant == 'f32':
            diff = np.abs(gpu_logits[:n] - ref_logits[:n]).max()
            scale = np.abs(ref_logits[:n]).max()
            self.assertLessEqual(diff, 1e-4 * scale, f'{name}: max |dlogit| {diff:.3g} vs reference')
        else:
            diff = np.abs(gpu_logits[:n] - cpu_logits[:n]).max()
            scale = np.abs(cpu_logits[:n]).max()
            self.assertLessEqual(diff, 3e-2 * scale, f'{name}: max |dlogit| {diff:.3g} vs the CPU')

    def test_families_import_per_use(self):
        for family in self.families:
            for quant in ('f32', 'q8_0'):
                for pname, tokens in (('p16', P16), ('p40', P40)):
                    with self.subTest(family=family, quant=quant, prompt=pname):
                        self.check(family, quant, tokens, (), f'{family}-{quant}-{pname}')

    def test_vram_tier_smaller_than_the_experts(self):
        for family in self.families:
            with self.subTest(family=family):
                # Micro experts are ~100 KiB: a 400 KiB tier holds a few of 16.
                self.check(family, 'f32', P16, ('--vram-budget', '400K', '--prefetch-layers', '1'),
                           f'{family}-vram')


class GoldenGpuIQuants(unittest.TestCase):
    """The mixed i-quant GGUF (iquant_mix.py) kept as it is, on the GPU against the CPU backend:
    teacher-forced logits (the prefill GEMM on dequantized F16 weights, then the decode matvecs)
    and greedy ids."""

    def test_mixed_iquant_file_matches_the_cpu(self):
        work = testlib.tempdir('colibri-gpu-iquant-')
        self.addCleanup(testlib.rmtree, work)
        model = testlib.convert(iquant_mix.write(os.path.join(work, 'mix.gguf')), os.path.join(work, 'keep'),
                                'keep')
        reason = gpu_probe(model)
        if reason:
            self.skipTest(reason)
        seq = iquant_mix.SEQUENCE
        logits = {}
        for backend in ('cpu', 'cuda'):
            out = os.path.join(work, f'{backend}.npy')
            testlib.cli_run(model, seq, 0, out, ('--backend', backend))
            logits[backend] = np.load(out)
        scale = np.abs(logits['cpu']).max()
        self.assertLessEqual(np.abs(logits['cuda'] - logits['cpu']).max(), 3e-2 * scale)
        # Decode only (one token at a time): the matvec kernels against the CPU's dot products.
        cpu_ids = testlib.cli_run(model, seq[:1], 12)
        gpu_ids = testlib.cli_run(model, seq[:1], 12, None, ('--backend', 'cuda'))
        self.assertEqual(gpu_ids[:4], cpu_ids[:4])


if __name__ == '__main__':
    unittest.main()
