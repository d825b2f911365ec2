"""Integration: the expert cache from the outside. Routing traces and their replay against
Belady, lookahead prefetch and every policy giving the same tokens end to end, the admin
endpoints behind `colibri-cli stats` / `cache clear` on colibri-server and colibri-compute (and the
same numbers on /metrics), pinned experts from a file, routing heat persisted across restarts.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

PROMPT = [1, 275, 290, 300, 13, 350, 400, 268, 281, 450]
BLOCK = 98304      # one expert block of the micro model (f32)
CACHE = '400K'     # four blocks; the model has 16 (2 layers x 8 experts)


metric = testlib.metric


def wait_for(fn, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError('condition not met within %ss' % timeout)



def takes_direct_io(directory):
    """Whether files in `directory` can be opened with O_DIRECT."""
    probe = os.path.join(directory, '.direct_probe')
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True

class ExpertCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-expert-cache-')
        cls.hf = testlib.gen_model(os.path.join(cls.dir, 'hf'), 'mixtral', 'micro', 'f32')
        cls.model = testlib.convert(cls.hf, os.path.join(cls.dir, 'demo'), 'f32')
        cls.services = []

    @classmethod
    def tearDownClass(cls):
        for s in reversed(cls.services):
            s.stop()
        testlib.rmtree(cls.dir)

    def start(self, name, args, flags=('--port-file',)):
        s = testlib.Service(name, args, self.dir, flags)
        self.services.append(s)
        return s

    def cli(self, *args, check=True):
        return testlib.run([testlib.binary('colibri-cli'), *args], check=check)

    def heat(self, name):
        return ['--routing-heat', os.path.join(self.dir, name)]

    def test_trace_has_a_line_per_token_and_layer_and_replays_against_belady(self):
        trace = os.path.join(self.dir, 'trace.jsonl')
        ids = testlib.cli_run(self.model, PROMPT, 24, extra=['--trace-out', trace, '--expert-cache-size', CACHE,
                                                              *self.heat('trace-heat.json')])
        with open(trace) as f:
            lines = [json.loads(line) for line in f]
        header, records = lines[0], lines[1:]
        self.assertEqual(header['format'], 'colibri-routing-trace')
        self.assertEqual((header['n_layers'], header['n_experts'], header['top_k']), (2, 8, 2))
        self.assertEqual(header['block_bytes'], BLOCK)
        self.assertEqual((header['version'], header['lookahead_layers']), (2, 1))
        # Every fed token (the prompt, then all generated but the last) at each layer.
        self.assertEqual(len(records), (len(PROMPT) + len(ids) - 1) * 2)
        n_layers = max(r['layer'] for r in records) + 1
        for r in records:
            self.assertEqual(len(r.get('lookahead', [])), min(1, n_layers - 1 - r['layer']))
            self.assertEqual(len(r['experts']), 2)
            self.assertEqual(len(r['probs']), 8)
            self.assertAlmostEqual(sum(r['weights']), 1.0, places=3)
            self.assertAlmostEqual(sum(r['probs']), 1.0, places=2)
        self.assertEqual([r['pos'] for r in records if r['layer'] == 0],
                         list(range(len(PROMPT) + len(ids) - 1)))

        out = json.loads(self.cli('trace-replay', '--trace', trace, '--cache-size', '4', '--json').stdout)
        self.assertEqual(out['capacity_blocks'], 4)
        self.assertEqual([p['policy'] for p in out['policies']], ['adaptive', 'lru', 'lfu', 'routing'])
        # With lookahead prefetch (the default depth, 1) the engine records its predictions too.
        self.assertEqual(out['prefetch']['layers'], 1)
        self.assertGreater(out['prefetch']['prefetch_reads'], 0)
        for p in out['policies']:
            self.assertLessEqual(p['hit_rate'], out['belady_hit_rate'] + 1e-12)
        self.assertGreater(out['belady_hit_rate'], 0)
        # The same capacity given as a share of the experts and as bytes.
        for size in ('25%', '384K'):
            again = json.loads(self.cli('trace-replay', '--trace', trace, '--cache-size', size, '--policy', 'lru',
                                        '--json').stdout)
            self.assertEqual(again['capacity_blocks'], 4)
            self.assertEqual(again['policies'][0]['hits'], out['policies'][1]['hits'])
        table = self.cli('trace-replay', '--trace', trace, '--cache-size', '4').stdout
        self.assertIn('| belady (offline optimum) |', table)
        bad = self.cli('trace-replay', '--trace', trace, '--cache-size', '4', '--policy', 'arc', check=False)
        self.assertEqual(bad.returncode, 2)
        # A synthetic version 2 trace: lookahead prefetch is replayed too.
        gen = os.path.join(self.dir, 'gen.jsonl')
        self.cli('trace-gen', '--model', 'mixtral-8x7b', '--prompts', '1', '--seed', '3', '--out', gen)
        syn = json.loads(self.cli('trace-replay', '--trace', gen, '--cache-size', '25%', '--prefetch-layers', '1',
                                  '--json').stdout)
        self.assertEqual(syn['prefetch']['layers'], 1)
        self.assertGreater(syn['prefetch']['prefetch_reads'], 0)
        self.assertGreaterEqual(syn['prefetch']['coverage'], syn['belady_hit_rate'])
        self.assertEqual(syn['prefetch']['wasted_bytes'], syn['prefetch']['prefetch_wasted'] * 176160768)
        deep = self.cli('trace-replay', '--trace', gen, '--cache-size', '25%', '--prefetch-layers', '3', check=False)
        self.assertEqual(deep.returncode, 2)

    def test_prefetch_and_policies_never_change_tokens_or_logits(self):
        import numpy as np
        ref_logits = os.path.join(self.dir, 'ref.npy')
        ref = testlib.cli_run(self.model, PROMPT, 16, ref_logits,
                              extra=['--prefetch-layers', '0', '--cache-policy', 'lru', *self.heat('h0.json')])
        expected = np.load(ref_logits)
        for i, (policy, prefetch, cache) in enumerate([('lru', '1', CACHE), ('lfu', '1', '200K'),
                                                        ('routing', '1', CACHE), ('routing', '0', '2G'),
                                                        ('routing', '2', '200K'), ('adaptive', '1', CACHE),
                                                        ('adaptive', '2', '200K')]):
            logits = os.path.join(self.dir, f'run{i}.npy')
            got = testlib.cli_run(self.model, PROMPT, 16, logits,
                                  extra=['--prefetch-layers', prefetch, '--cache-policy', policy,
                                         '--expert-cache-size', cache, *self.heat(f'h{i + 1}.json')])
            self.assertEqual(got, ref, (policy, prefetch, cache))
            self.assertTrue(np.array_equal(np.load(logits), expected), (policy, prefetch, cache))

    def test_server_stats_clear_and_metrics(self):
        pins = os.path.join(self.dir, 'pins.json')
        with open(pins, 'w') as f:
            json.dump([[0, 1], {'layer': 1, 'expert': 2}], f)
        server = self.start('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                               '--expert-cache-size', '600K', '--threads', '2', '--api-key', 'k',
                                               '--pinned-experts', pins, '--prefetch-layers', '1',
                                               '--learned-pins', '0', *self.heat('server-heat.json')])
        url = f'http://127.0.0.1:{server.port()}'
        auth = {'Authorization': 'Bearer k'}
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'model': 'demo', 'prompt': PROMPT, 'max_tokens': 12, 'temperature': 0},
                                    headers=auth)
        self.assertEqual(status, 200, body)

        stats = json.loads(self.cli('stats', '--server', url, '--api-key', 'k', '--json').stdout)
        self.assertEqual(stats['model'], 'demo')
        self.assertEqual(stats['policy'], 'adaptive')
        ram = stats['tiers'][0]
        self.assertEqual(ram['tier'], 'ram')
        self.assertEqual(ram['capacity_bytes'], 600 * 1024)
        self.assertLessEqual(ram['bytes_cached'], ram['capacity_bytes'])
        self.assertEqual(ram['lookups'], ram['hits'] + ram['in_flight_hits'] + ram['misses'])
        self.assertGreater(ram['lookups'], 0)
        self.assertEqual(stats['tokens'], len(PROMPT) + 11)
        self.assertEqual(stats['prefetch']['layers'], 1)
        self.assertGreater(stats['prefetch']['predicted'], 0)
        self.assertEqual(stats['pins']['fixed'], 2)
        self.assertEqual(stats['memory']['dense_bytes'], 365824)
        self.assertGreater(stats['expert_bytes_per_token'], 0)
        # Pinned blocks stay resident through the run.
        self.assertEqual(ram['blocks_pinned'], 2)
        table = self.cli('stats', '--server', url, '--api-key', 'k').stdout
        self.assertIn('| ram |', table)
        self.assertIn('prefetch: 1 layers', table)

        # /metrics carries the same numbers (behind the API key, like every route but /health).
        status, text = testlib.http('GET', url + '/metrics', headers={'Authorization': 'Bearer k'})
        self.assertEqual(status, 200)
        stats = json.loads(self.cli('stats', '--server', url, '--api-key', 'k', '--json').stdout)
        ram = stats['tiers'][0]
        self.assertEqual(metric(text, 'colibri_compute_expert_cache_lookups_total', 'result="hit"'), ram['hits'])
        self.assertEqual(metric(text, 'colibri_compute_expert_cache_lookups_total', 'result="miss"'), ram['misses'])
        self.assertAlmostEqual(metric(text, 'colibri_compute_expert_cache_hit_ratio'), ram['hit_rate'], places=6)
        self.assertEqual(metric(text, 'colibri_compute_forward_tokens_total'), stats['tokens'])
        self.assertEqual(metric(text, 'colibri_compute_expert_prefetch_blocks_total', 'result="read"'),
                         stats['prefetch']['reads'])
        self.assertEqual(metric(text, 'colibri_compute_expert_predictions_total', 'result="predicted"'),
                         stats['prefetch']['predicted'])
        self.assertEqual(metric(text, 'colibri_compute_dense_bytes'), 365824)
        self.assertIn('colibri_compute_expert_stall_seconds_total', text)

        # cache clear: the right model only; everything unleased goes, pins come back on use.
        wrong = self.cli('cache', 'clear', '--server', url, '--model', 'other', '--api-key', 'k', check=False)
        self.assertEqual(wrong.returncode, 1)
        self.assertIn('404', wrong.stderr)
        cleared = json.loads(self.cli('cache', 'clear', '--server', url, '--model', 'demo', '--api-key', 'k').stdout)
        self.assertEqual(cleared['model'], 'demo')
        self.assertEqual(cleared['cleared_bytes'], cleared['cleared_blocks'] * BLOCK)
        self.assertGreaterEqual(cleared['cleared_blocks'], 2)
        after = json.loads(self.cli('stats', '--server', url, '--api-key', 'k', '--json').stdout)['tiers'][0]
        self.assertEqual(after['bytes_cached'], 0)
        # Without the key: refused.
        self.assertEqual(self.cli('stats', '--server', url, check=False).returncode, 1)
        # The node still serves, reading its experts again.
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'model': 'demo', 'prompt': PROMPT, 'max_tokens': 4, 'temperature': 0},
                                    headers=auth)
        self.assertEqual(status, 200, body)

    def test_warm_start_reads_a_fitting_model_before_the_first_request(self):
        """The whole model fits: it is read in the background at start-up, /health says how much is
        resident, and the first request finds every expert resident (no miss). Off: the first
        request reads its experts."""
        server = self.start('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                               '--expert-cache-size', '4M', '--threads', '2',
                                               '--routing-heat', 'none'])
        url = f'http://127.0.0.1:{server.port()}'

        def health():
            status, body = testlib.http('GET', url + '/health')
            self.assertEqual(status, 200, body)
            return json.loads(body)

        h = wait_for(lambda: (lambda j: j if not j['experts']['warming'] else None)(health()))
        self.assertEqual(h['status'], 'ok')
        self.assertEqual(h['experts']['expert_blocks'], 16)
        self.assertEqual(h['experts']['resident_blocks'], 16)
        self.assertEqual(h['experts']['resident_bytes'], 16 * BLOCK)
        self.assertEqual(h['experts']['resident_ratio'], 1.0)
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'model': 'demo', 'prompt': PROMPT, 'max_tokens': 8, 'temperature': 0})
        self.assertEqual(status, 200, body)
        warm_text = json.loads(body)['choices'][0]['text']
        stats = json.loads(self.cli('stats', '--server', url, '--json').stdout)
        ram = stats['tiers'][0]
        self.assertGreater(ram['lookups'], 0)
        self.assertEqual(ram['misses'], 0)
        self.assertEqual(ram['hits'], ram['lookups'])
        self.assertEqual(ram['warm']['reads'], 16)
        self.assertEqual(ram['warm']['bytes'], 16 * BLOCK)
        self.assertEqual(stats['residency']['resident_ratio'], 1.0)
        status, text = testlib.http('GET', url + '/metrics')
        self.assertEqual(metric(text, 'colibri_compute_expert_warm_blocks_total', 'result="read"'), 16)
        self.assertEqual(metric(text, 'colibri_compute_expert_resident_ratio'), 1.0)
        self.assertEqual(metric(text, 'colibri_compute_expert_warm_queued_blocks'), 0)
        server.stop()

        cold = self.start('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                             '--expert-cache-size', '4M', '--threads', '2',
                                             '--routing-heat', 'none', '--warm-start', 'off'])
        url = f'http://127.0.0.1:{cold.port()}'
        status, body = testlib.http('POST', url + '/v1/completions',
                                    {'model': 'demo', 'prompt': PROMPT, 'max_tokens': 8, 'temperature': 0})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)['choices'][0]['text'], warm_text)  # placement never changes tokens
        ram = json.loads(self.cli('stats', '--server', url, '--json').stdout)['tiers'][0]
        self.assertGreater(ram['misses'], 0)
        self.assertEqual(ram['warm']['reads'], 0)
        cold.stop()

    def test_warm_start_without_room_or_heat_reads_nothing(self):
        server = self.start('colibri-server', ['--model', self.model, '--port', '0', '--host', '127.0.0.1',
                                               '--expert-cache-size', CACHE, '--threads', '2',
                                               '--routing-heat', 'none'])
        url = f'http://127.0.0.1:{server.port()}'
        status, body = testlib.http('GET', url + '/health')
        self.assertEqual(status, 200)
        h = json.loads(body)['experts']
        self.assertFalse(h['warming'])
        self.assertEqual(h['resident_blocks'], 0)
        self.assertEqual(h['capacity_bytes'], 400 * 1024)
        server.stop()

    def test_compute_admin_on_its_metrics_port(self):
        compute = self.start('colibri-compute', ['--model', self.model, '--listen', '127.0.0.1:0',
                                                 '--metrics-port', '0', '--threads', '2', '--expert-cache-size', CACHE,
                                                 '--cache-policy', 'lfu', *self.heat('compute-heat.json')],
                             ('--port-file', '--metrics-port-file'))
        url = f'http://127.0.0.1:{compute.port("--metrics-port-file")}'
        stats = json.loads(self.cli('stats', '--server', url, '--json').stdout)
        self.assertEqual(stats['policy'], 'lfu')
        self.assertEqual(stats['tiers'][0]['capacity_bytes'], 400 * 1024)
        disk = stats['disk']
        # O_DIRECT exactly where the model's filesystem takes it (tmpfs refuses it).
        self.assertEqual(disk['direct_io'], takes_direct_io(self.model))
        self.assertIsInstance(disk['io_uring'], bool)
        self.assertEqual(disk['errors'], 0)
        cleared = json.loads(self.cli('cache', 'clear', '--server', url, '--model', 'demo').stdout)
        self.assertEqual(cleared['model'], 'demo')

    def test_vram_budget_says_it_has_no_effect_on_the_cpu_backend(self):
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', self.model, '--prompt-tokens', '1,2,3',
                         '--max-tokens', '2', '--threads', '2', '--vram-budget', '1G', *self.heat('vram-heat.json')])
        self.assertIn('--vram-budget 1.00 GiB has no effect', p.stderr)
        bad = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', self.model, '--prompt-tokens', '1',
                           '--vram-budget', 'lots'], check=False)
        self.assertEqual(bad.returncode, 2)
        self.assertIn('--vram-budget', bad.stderr)

    def test_bad_pinned_experts_file_is_named(self):
        pins = os.path.join(self.dir, 'bad-pins.json')
        with open(pins, 'w') as f:
            json.dump([[0, 1], [5, 0]], f)
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', self.model, '--prompt-tokens', '1',
                         '--pinned-experts', pins], check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn('entry 1', p.stderr)
        self.assertIn('bad-pins.json', p.stderr)

    def test_routing_heat_survives_a_restart(self):
        heat = os.path.join(self.dir, 'persist-heat.json')
        testlib.cli_run(self.model, PROMPT, 8, extra=['--routing-heat', heat])
        with open(heat) as f:
            saved = json.load(f)
        self.assertEqual(saved['format'], 'colibri-routing-heat')
        self.assertEqual(saved['model'], 'demo')
        self.assertEqual(saved['tokens'], len(PROMPT) + 7)
        # Each fed token picked top-2 at both layers.
        self.assertAlmostEqual(sum(sum(row) for row in saved['heat']), 2 * 2 * (len(PROMPT) + 7), delta=0.5)
        p = testlib.run([testlib.binary('colibri-cli'), 'run', '--model', self.model, '--prompt-tokens', '1,2',
                         '--max-tokens', '2', '--threads', '2', '--routing-heat', heat])
        self.assertIn('routing heat of 17 tokens loaded', p.stderr)


if __name__ == '__main__':
    unittest.main()
