"""colibri-cli bench on the micro model: the markdown table and the JSON carry every test in
both modes with plausible numbers (cold runs read experts from disk, warm runs with a cache
holding the whole model read nothing and hit every lookup); bad arguments are refused. And
colibri-cli --config: a TOML file of the subcommand's flags, the command line winning."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402


class CliBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = testlib.tempdir('colibri-bench-')
        cls.model = testlib.micro_model(cls.dir)

    @classmethod
    def tearDownClass(cls):
        testlib.rmtree(cls.dir)

    def bench(self, *args, check=True):
        return testlib.run([testlib.binary('colibri-cli'), 'bench', '--model', self.model, '--threads', '2',
                            '-p', '16,32', '-n', '8', '-r', '3', *args], check=check)

    def test_json(self):
        out = json.loads(self.bench('-o', 'json').stdout)
        self.assertEqual(out['model'], 'demo')
        rows = {(r['mode'], r['test']): r for r in out['results']}
        self.assertEqual(set(rows), {(m, t) for m in ('cold', 'warm') for t in ('pp16', 'pp32', 'tg8')})
        for r in rows.values():
            self.assertEqual(r['repetitions'], 3)
            self.assertEqual(len(r['samples_tokens_per_second']), 3)
            self.assertGreater(r['tokens_per_second'], 0)
            mean = sum(r['samples_tokens_per_second']) / 3
            self.assertAlmostEqual(r['tokens_per_second'], mean, places=6)
            self.assertGreaterEqual(r['tokens_per_second_sd'], 0)
            self.assertTrue(0 <= r['expert_hit_rate'] <= 1)
        # Cold: the cache starts empty, so experts come from disk; warm: the 2G cache holds the
        # micro model after the warm-up, so nothing is read and every lookup hits.
        for t in ('pp16', 'tg8'):
            self.assertGreater(rows[('cold', t)]['expert_bytes_per_token'], 0)
            self.assertGreater(rows[('cold', t)]['disk_bytes_per_second'], 0)
            self.assertLess(rows[('cold', t)]['expert_hit_rate'], 1)
        self.assertEqual(rows[('warm', 'tg8')]['expert_bytes_per_token'], 0)
        self.assertEqual(rows[('warm', 'tg8')]['expert_hit_rate'], 1)

    def test_markdown(self):
        out = self.bench('--mode', 'warm').stdout
        lines = [l for l in out.splitlines() if l.startswith('| warm')]
        self.assertEqual([l.split('|')[2].strip() for l in lines], ['pp16', 'pp32', 'tg8'])
        for l in lines:
            self.assertRegex(l.split('|')[3], r'^ [\d.]+ ± [\d.]+ $')
        self.assertIn('| mode | test | t/s |', out)

    def test_bad_arguments(self):
        for args, what in ((['--mode', 'hot'], '--mode'), (['-o', 'xml'], '-o'), (['-p', '100000'], '-p 100000')):
            p = self.bench(*args, check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(what, p.stderr)

    def test_config_file_gives_the_subcommands_flags(self):
        cfg = os.path.join(self.dir, 'cli.toml')
        with open(cfg, 'w') as f:
            f.write(f'model = "{self.model}"\nthreads = 2\n[run]\nmax-tokens = 2\ntemperature = 0\n')
        cli = testlib.binary('colibri-cli')

        def run(*args):
            return json.loads(testlib.run([cli, 'run', '--config', cfg, '--prompt-tokens', '1,2,3', *args]).stdout)
        self.assertEqual(len(run()), 2)
        four = run('--max-tokens', '4')  # the command line wins
        self.assertEqual(len(four), 4)
        self.assertEqual(run()[:2], four[:2])  # greedy from the file's temperature
        # The file's top-level model reaches another subcommand; [run] stays with run.
        inspect = json.loads(testlib.run([cli, 'inspect', '--config', cfg]).stdout)
        self.assertEqual(inspect['name'], 'demo')
        with open(cfg, 'a') as f:
            f.write('max-token = 3\n')
        p = testlib.run([cli, 'run', '--config', cfg, '--prompt-tokens', '1'], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("'max-token' is not a flag of 'run'", p.stderr)


if __name__ == '__main__':
    unittest.main()
