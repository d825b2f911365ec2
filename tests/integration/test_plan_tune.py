"""colibri-cli plan, doctor and tune on a real converted micro model, and colibri-server picking
up the auto settings and the tune profile (applied when its fingerprint matches, ignored with a
log line when not)."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402


def cli(*args, check=True):
    return testlib.run([testlib.binary('colibri-cli'), *args], check=check)


class PlanDoctorTune(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix='colibri-plan-')
        cls.model = testlib.micro_model(cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def copy_model(self, name):
        dst = os.path.join(self.dir, name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(self.model, dst)
        return dst

    def test_plan_caches_the_whole_micro_model_and_measures_the_disk(self):
        p = json.loads(cli('plan', '--model', self.model, '--json', '--measure-seconds', '0.2').stdout)
        model = p['model']
        self.assertEqual(p['settings']['expert_cache_size']['value'], model['expert_bytes'])
        self.assertIn('fit in 3/4 of the free budget', p['settings']['expert_cache_size']['reason'])
        # The budget and its split: every part inside it.
        mem = p['memory']
        self.assertEqual(p['settings']['memory_limit']['value'], mem['budget'])
        self.assertEqual(mem['expert_cache'], model['expert_bytes'])
        self.assertEqual(mem['dense'], model['dense_bytes'])
        self.assertLessEqual(mem['total'], mem['budget'])
        self.assertEqual(mem['total'], sum(mem[k] for k in ('dense', 'expert_cache', 'io', 'kv', 'kv_offload',
                                                          'scratch', 'drafter', 'runtime')))
        fixed = json.loads(cli('plan', '--model', self.model, '--json', '--measure-seconds', '0',
                               '--memory-limit', '1G').stdout)
        self.assertEqual(fixed['memory']['budget'], 1 << 30)
        self.assertTrue(fixed['settings']['memory_limit']['fixed'])
        small = cli('plan', '--model', self.model, '--measure-seconds', '0', '--memory-limit', '100M',
                    check=False)
        self.assertNotEqual(small.returncode, 0)
        self.assertIn('does not fit the memory budget', small.stdout + small.stderr)
        self.assertEqual(p['settings']['vram_budget']['value'], 0)
        self.assertGreater(p['settings']['kv_cache_limit']['value'], 0)
        self.assertIn(p['settings']['prefetch_layers']['value'], (1, 2))
        self.assertIn(p['settings']['io_threads']['value'], (2, 4, 8))
        self.assertGreater(p['machine']['disks'][0]['read_bytes_per_second'], 0)
        self.assertGreater(p['machine']['memory_bandwidth_bps'], 0)
        self.assertEqual(p['estimate']['hit_rate'], 1.0)
        self.assertIn(p['estimate']['bottleneck'], ('memory bandwidth', 'compute'))
        self.assertGreater(p['estimate']['decode_tokens_per_second'], 0)
        text = cli('plan', '--model', self.model, '--measure-seconds', '0').stdout
        for flag in ('--memory-limit', '--expert-cache-size', '--vram-budget', '--kv-cache-limit', '--prefetch-layers',
                     '--io-threads', 'memory split:', 'expected decode:', 'bottleneck:'):
            self.assertIn(flag, text)

    def test_doctor_passes_a_whole_model_and_names_a_truncated_one(self):
        ok = cli('doctor', '--model', self.model, '--deep')
        self.assertIn('[ ok ] model  \'demo\'', ok.stdout)
        self.assertIn('every checksum verified', ok.stdout)
        self.assertIn(' 0 error(s)', ' ' + ok.stdout.splitlines()[-1])
        cut = self.copy_model('cut')
        experts = os.path.join(cut, 'experts.bin')
        os.truncate(experts, os.path.getsize(experts) // 3)
        bad = cli('doctor', '--model', cut, check=False)
        self.assertEqual(bad.returncode, 1, bad.stdout)
        self.assertIn('[FAIL] model', bad.stdout)
        self.assertIn('expert blocks missing or truncated', bad.stdout)
        self.assertIn('fix:', bad.stdout)
        j = json.loads(cli('doctor', '--model', cut, '--json', check=False).stdout)
        self.assertFalse(j['ok'])
        self.assertTrue(any(f['severity'] == 'error' and f['check'] == 'model' for f in j['findings']))

    def test_doctor_names_an_interrupted_conversion(self):
        # What a killed colibri-convert leaves: <out>.partial, data written, manifest.json not yet.
        out = os.path.join(self.dir, 'killed')
        partial = out + '.partial'
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(self.model, partial)
        os.remove(os.path.join(partial, 'manifest.json'))
        p = cli('doctor', '--model', out, check=False)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn('a conversion into it was interrupted', p.stdout)
        self.assertIn('--overwrite', p.stdout)

    def server_stats(self, args, tag):
        s = testlib.Service('colibri-server', ['--model', args[0], '--port', '0', '--threads', '2', *args[1:]],
                            self.dir, tag=tag)
        try:
            port = s.port()
            status, body = testlib.http('GET', f'http://127.0.0.1:{port}/admin/stats')
            self.assertEqual(status, 200, body)
            return json.loads(body), s.read_log()
        finally:
            s.stop()

    def test_tune_writes_a_profile_the_server_applies_or_ignores(self):
        model = self.copy_model('tuned')
        heat = ['--routing-heat', 'none']
        p = cli('tune', '--model', model, '--repeats', '2', '--max-tokens', '4', '--threads', '2', *heat)
        path = os.path.join(model, 'tune_profile.json')
        self.assertIn('profile written to ' + path, p.stdout)
        with open(path) as f:
            profile = json.load(f)
        self.assertEqual(profile['version'], 1)
        for k in ('binary', 'model', 'machine'):
            self.assertRegex(profile['fingerprint'][k], r'^[0-9a-f]{16}$')
        s = profile['settings']
        self.assertIn(s['prefetch_layers'], (0, 1, 2, 3))
        self.assertIn(s['io_threads'], (1, 2, 4, 8, 16))
        self.assertIn(s['cache_policy'], ('adaptive', 'lru', 'lfu', 'routing'))
        self.assertIn(s['learned_pins'], (0.0, 0.25, 0.5))
        m = profile['measurements']
        self.assertEqual(m[0]['note'], 'baseline (plan)')
        # Baseline plus 3 + 4 + 3 + 2 candidates (the value in use is not tried again); a knob kept
        # along the way makes the earlier value a candidate of the later knobs' runs once more.
        self.assertGreaterEqual(len(m), 13, m)
        self.assertLessEqual(len(m), 13 + 4, m)
        settings = [e['setting'] for e in m]
        for knob, values in (('prefetch_layers', (0, 1, 2, 3)), ('io_threads', (1, 2, 4, 8, 16)),
                             ('cache_policy', ('adaptive', 'lru', 'lfu', 'routing')), ('learned_pins', (0, 0.25, 0.5))):
            for v in values:
                self.assertTrue(any(f'{knob}={v:g}' in t if isinstance(v, float) else f'{knob}={v}' in t
                                    for t in settings), (knob, v, settings))
        for entry in m:
            self.assertNotIn('error', entry)
            self.assertTrue(entry['tokens_identical'], entry)
            self.assertGreater(entry['tokens_per_second'], 0)
        kept = [e for e in m if e['kept']]
        self.assertEqual(kept[-1]['setting'], f"prefetch_layers={s['prefetch_layers']} io_threads={s['io_threads']} "
                                              f"cache_policy={s['cache_policy']} learned_pins={s['learned_pins']:g}")

        stats, log = self.server_stats([model, *heat], 'tuned')
        self.assertIn('tune profile ' + path + ' applied:', log)
        self.assertTrue(stats['settings']['tune_profile_applied'])
        self.assertEqual(stats['prefetch']['layers'], s['prefetch_layers'])
        self.assertEqual(stats['settings']['io_threads'], s['io_threads'])
        self.assertEqual(stats['policy'], s['cache_policy'])
        self.assertEqual(stats['settings']['learned_pins'], s['learned_pins'])
        self.assertIn('--expert-cache-size', log)
        self.assertIn('(auto: ', log)

        # An explicit flag wins over the profile.
        other = 0 if s['prefetch_layers'] != 0 else 1
        stats, log = self.server_stats([model, *heat, '--prefetch-layers', str(other)], 'explicit')
        self.assertEqual(stats['prefetch']['layers'], other)
        self.assertEqual(stats['settings']['io_threads'], s['io_threads'])
        self.assertNotIn('--prefetch-layers', stats['settings']['tune_profile_note'])

        # Another machine's profile is ignored, saying why.
        profile['fingerprint']['machine'] = '0123456789abcdef'
        with open(path, 'w') as f:
            json.dump(profile, f)
        stats, log = self.server_stats([model, *heat], 'moved')
        self.assertFalse(stats['settings']['tune_profile_applied'])
        self.assertIn('ignored: machine differs (profile 0123456789abcdef', log)

    def test_tune_keeps_auto_speculations_costs_for_the_server(self):
        # With --speculative auto, tune saves what the engine measured (pass, drafting and catch-up
        # costs, acceptance) under the drafter's key; a server with the same drafter starts from them.
        model = self.copy_model('tuned-speculative')
        flags = ['--routing-heat', 'none', '--speculative', 'auto', '--draft-experts', 'q8_0']
        cli('tune', '--model', model, '--repeats', '2', '--max-tokens', '8', '--threads', '2', *flags)
        with open(os.path.join(model, 'tune_profile.json')) as f:
            profile = json.load(f)
        key = 'auto draft-max=4 draft-experts=q8_0 draft-model='
        self.assertEqual(list(profile['speculation']), [key])
        costs = profile['speculation'][key]
        self.assertEqual(len(costs['pass_seconds']), 5)
        self.assertGreater(costs['pass_seconds'][0], 0)  # a plain step was measured
        self.assertGreater(costs['accepted'] + costs['rejected'], 0)
        _, log = self.server_stats([model, *flags], 'speculative')
        self.assertIn(f'speculation costs ({key})', log)
        # Another drafter finds no costs of its own: it measures from scratch.
        _, log = self.server_stats([model, '--routing-heat', 'none', '--speculative', 'auto'], 'ngram')
        self.assertIn('applied:', log)
        self.assertNotIn('speculation costs', log)


if __name__ == '__main__':
    unittest.main()
